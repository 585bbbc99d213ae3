"""Exactly-once sinks, consumer-group options and transactions as black-box Spark jobs on every backend.

- ``pykafka-sql``: a streaming query, then a second one that lost its checkpoint and starts
  from earliest again: every record is stored once, and the stored offsets are the high
  watermarks. ``pykafka-parquet``: a batch backfill rerun adds nothing.
- consumer groups: ``kafka.group.id`` alone never gets commits (Spark's semantics: offsets live
  in the checkpoint); with ``commitOffsets=true`` the group follows the query, and a new query
  with ``startingOffsets=group`` starts where the group is.
- transactions: ``kafka.isolation.level=read_committed`` skips aborted records and stops at
  an open transaction (last stable offset); ``deliveryGuarantee=exactly-once`` makes each row
  visible once to read_committed consumers, in a batch write and in a streaming copy that is
  restarted from its checkpoint (skipped while the writer refuses the option).
"""

from __future__ import annotations

import json
import uuid

import pytest

from integration_tests import clusters as C
from integration_tests.helpers import (
    Collector,
    committed_offsets,
    consume_all,
    produce,
    read,
    read_stream,
    run_available_now,
    transactions,
    watermarks,
)

pytestmark = pytest.mark.slow  # Spark jobs; still run in CI


def _to_sql(spark, kafka_cluster, topic, url, checkpoint) -> None:
    stream = read_stream(spark, kafka_cluster.bootstrap, subscribe=topic, startingOffsets="earliest")
    run_available_now(stream.selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS v")
                      .writeStream.format("pykafka-sql").option("url", url).option("table", "events")
                      .option("checkpointLocation", checkpoint))


def test_sql_sink_stores_each_record_once_even_without_its_checkpoint(spark, kafka_cluster, tmp_path):
    import sqlalchemy as sa

    from pyspark_kafka.sinks import starting_offsets

    topic = kafka_cluster.create_topic(3)
    url = f"sqlite:///{tmp_path}/sink.db"
    produce(kafka_cluster.bootstrap, topic, [{"value": b"a%d" % i, "partition": i % 3} for i in range(30)])
    _to_sql(spark, kafka_cluster, topic, url, str(tmp_path / "chk-1"))
    produce(kafka_cluster.bootstrap, topic, [{"value": b"b%d" % i, "partition": i % 3} for i in range(9)])
    _to_sql(spark, kafka_cluster, topic, url, str(tmp_path / "chk-2"))  # checkpoint lost: from earliest again

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql('SELECT "partition", "offset", v FROM events').fetchall()
    finally:
        engine.dispose()
    assert len(rows) == len(set(rows)) == 39
    assert sorted(v for _, _, v in rows) == sorted([f"a{i}" for i in range(30)] + [f"b{i}" for i in range(9)])
    ends = {str(p): watermarks(kafka_cluster.bootstrap, topic, p)[1] for p in range(3)}
    assert json.loads(starting_offsets(url=url, table="events")) == {topic: ends}


def test_parquet_sink_backfill_rerun_adds_nothing(spark, kafka_cluster, tmp_path):
    from pyspark_kafka.sinks.files import read_committed

    topic = kafka_cluster.create_topic(2)
    produce(kafka_cluster.bootstrap, topic, [{"value": b"v%d" % i, "partition": i % 2} for i in range(40)])
    path = str(tmp_path / "parquet")
    for _ in range(2):
        (read(spark, kafka_cluster.bootstrap, subscribe=topic)
         .selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS v")
         .write.format("pykafka-parquet").mode("append").save(path))
    table = read_committed(path)
    assert sorted(table.column("v").to_pylist()) == sorted(f"v{i}" for i in range(40))


def test_kafka_group_id_is_used_to_read_and_never_committed_by_default(spark, kafka_cluster, checkpoint_dir):
    kafka_cluster.require(C.GROUP_APIS, "checking a group's committed offsets")
    topic, group = kafka_cluster.create_topic(2), f"it-group-{uuid.uuid4().hex[:8]}"
    produce(kafka_cluster.bootstrap, topic, [{"value": b"v%d" % i, "partition": i % 2} for i in range(10)])
    assert read(spark, kafka_cluster.bootstrap, subscribe=topic, **{"kafka.group.id": group}).count() == 10
    stream = read_stream(spark, kafka_cluster.bootstrap, subscribe=topic, startingOffsets="earliest",
                         groupIdPrefix="it-prefix", **{"kafka.group.id": group})
    run_available_now(stream.writeStream.format("noop").option("checkpointLocation", checkpoint_dir))
    assert committed_offsets(kafka_cluster.bootstrap, group, topic, 2) == {}


def test_committed_offsets_let_a_new_query_start_where_the_group_is(spark, kafka_cluster, tmp_path):
    kafka_cluster.require(C.GROUP_APIS, "commitOffsets and startingOffsets=group")
    topic, group = kafka_cluster.create_topic(2), f"it-group-{uuid.uuid4().hex[:8]}"
    bootstrap = kafka_cluster.bootstrap
    produce(bootstrap, topic, [{"value": b"a%d" % i, "partition": i % 2} for i in range(10)])
    options = {"subscribe": topic, "kafka.group.id": group, "commitOffsets": "true"}

    def run(checkpoint: str, **extra) -> Collector:
        collector = Collector()
        stream = read_stream(spark, bootstrap, **options, **extra)
        run_available_now(stream.writeStream.foreachBatch(collector).option("checkpointLocation", checkpoint))
        return collector

    first = run(str(tmp_path / "chk-1"), startingOffsets="earliest")
    assert sorted(v for *_, v in first.rows) == sorted(b"a%d" % i for i in range(10))
    assert committed_offsets(bootstrap, group, topic, 2) == {0: 5, 1: 5}  # lag tools see the progress

    produce(bootstrap, topic, [{"value": b"b%d" % i, "partition": i % 2} for i in range(4)])
    second = run(str(tmp_path / "chk-2"), startingOffsets="group")  # a new query: no checkpoint
    assert sorted(v for *_, v in second.rows) == sorted(b"b%d" % i for i in range(4))
    assert committed_offsets(bootstrap, group, topic, 2) == {0: 7, 1: 7}


def test_read_committed_skips_aborted_records_and_stops_at_an_open_transaction(spark, kafka_cluster):
    from confluent_kafka import Producer

    kafka_cluster.require(C.TRANSACTION_APIS, "transactional test data")
    topic, bootstrap = kafka_cluster.create_topic(1), kafka_cluster.bootstrap
    transactions(bootstrap, topic, [([b"a1", b"a2"], True), ([b"b1"], False), ([b"c1"], True)])
    open_txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"it-open-{uuid.uuid4()}"})
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    open_txn.produce(topic, value=b"d1", partition=0)
    assert open_txn.flush(30) == 0

    def values(isolation: str) -> list[bytes]:
        df = read(spark, bootstrap, subscribe=topic, **{"kafka.isolation.level": isolation})
        return [r.value for r in df.orderBy("offset").collect()]

    assert values("read_committed") == [b"a1", b"a2", b"c1"]  # d1 is past the last stable offset
    assert values("read_uncommitted") == [b"a1", b"a2", b"b1", b"c1", b"d1"]
    open_txn.commit_transaction(30)
    assert values("read_committed") == [b"a1", b"a2", b"c1", b"d1"]


def _exactly_once_or_skip(write) -> None:
    """Run ``write()``; skip while the writer refuses deliveryGuarantee=exactly-once."""
    try:
        write()
    except Exception as e:
        if "'exactly-once' is not available yet" in str(e):
            pytest.skip("the pykafka writer refuses deliveryGuarantee=exactly-once for now (docs/writer.md)")
        raise


def test_exactly_once_write_makes_each_row_visible_once(spark, kafka_cluster):
    kafka_cluster.require(C.TRANSACTIONAL_OFFSETS_APIS, "deliveryGuarantee=exactly-once (transactions with a marker offset)")
    topic = kafka_cluster.create_topic(2)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(50)], "key string, value string").repartition(2)
    _exactly_once_or_skip(lambda: df.write.format("pykafka").option("kafka.bootstrap.servers", kafka_cluster.bootstrap)
                          .option("topic", topic).option("deliveryGuarantee", "exactly-once").mode("append").save())
    values = sorted(m.value().decode() for m in consume_all(kafka_cluster.bootstrap, topic, "read_committed"))
    assert values == sorted(f"v{i}" for i in range(50))


def test_exactly_once_streaming_copy_survives_a_restart(spark, kafka_cluster, tmp_path):
    kafka_cluster.require(C.TRANSACTIONAL_OFFSETS_APIS, "deliveryGuarantee=exactly-once (transactions with a marker offset)")
    source, sink = kafka_cluster.create_topic(2), kafka_cluster.create_topic(2)
    bootstrap, checkpoint = kafka_cluster.bootstrap, str(tmp_path / "chk")

    def copy() -> None:
        stream = read_stream(spark, bootstrap, subscribe=source, startingOffsets="earliest", maxOffsetsPerTrigger="10")
        run_available_now(stream.select("key", "value").writeStream.format("pykafka")
                          .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
                          .option("deliveryGuarantee", "exactly-once").option("checkpointLocation", checkpoint))

    produce(bootstrap, source, [{"key": b"k%d" % i, "value": b"a%d" % i} for i in range(20)])
    _exactly_once_or_skip(copy)
    produce(bootstrap, source, [{"key": b"k%d" % i, "value": b"b%d" % i} for i in range(6)])
    copy()  # restarts from the checkpoint
    values = sorted(m.value() for m in consume_all(bootstrap, sink, "read_committed"))
    assert values == sorted([b"a%d" % i for i in range(20)] + [b"b%d" % i for i in range(6)])
