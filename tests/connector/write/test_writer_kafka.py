"""The pykafka sink against the real embedded broker, checked with independent clients
(a confluent-kafka Consumer reading the topics back, kcat for one test).

Spark-level tests go through ``df.write`` / ``df.writeStream``; tests of task-level
behaviour that Spark cannot reach (a user partitioner class that workers could not
import, a record refused by the client) call :func:`pyspark_kafka.write.write_batches`
directly, which is exactly what each Spark task runs.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import uuid
from collections import Counter
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from pyspark.sql.types import IntegerType, StringType, StructField, StructType, TimestampType

from support.topics import consume_all
from pyspark_kafka.errors import DeliveryError, RecordError
from pyspark_kafka.write.routing import partition_for, to_positive
from pyspark_kafka.write import WriteSpec, write_batches

# Kafka's UtilsTest.testMurmur2 vectors: (key, published murmur2).
PUBLISHED = [(b"21", -973932308), (b"foobar", -790332482), (b"abc", 479470107),
             (b"a-little-bit-long-string", -985981536), (b"a-little-bit-longer-string", -1486304829)]


def opts(bootstrap: str, **extra) -> dict:
    """Writer options with the defaults under test (acks=all, idempotent producer)."""
    return {"kafka.bootstrap.servers": bootstrap, **extra}


def spark_error(excinfo) -> str:
    return str(excinfo.value)


# -- routing ------------------------------------------------------------------------


def test_keyed_rows_land_where_the_java_partitioner_puts_them(spark, bootstrap, make_topic):
    topic = make_topic(partitions=5)
    keys = [k.decode() for k, _ in PUBLISHED] + [f"user-{i}" for i in range(300)]
    df = spark.createDataFrame([(k, f"v-{k}") for k in keys], "key string, value string").repartition(2)
    df.write.format("pykafka").options(**opts(bootstrap, topic=topic)).mode("append").save()

    records = consume_all(bootstrap, topic)
    assert sorted(m.key().decode() for m in records) == sorted(keys)
    landed = {m.key(): m.partition() for m in records}
    for key, published_hash in PUBLISHED:  # Kafka's own numbers, not our murmur2
        assert landed[key] == to_positive(published_hash) % 5
    assert all(landed[k.encode()] == partition_for(k.encode(), 5) for k in keys)
    assert all(m.value() == b"v-" + m.key() for m in records)


def test_explicit_partition_wins_over_key(spark, bootstrap, make_topic):
    topic = make_topic(partitions=4)
    rows = [(f"k{i}", f"v{i}", i % 4 if i % 3 else None) for i in range(60)]
    df = spark.createDataFrame(rows, "key string, value string, partition int")
    df.write.format("pykafka").options(**opts(bootstrap, topic=topic)).mode("append").save()

    got = {m.value().decode(): m.partition() for m in consume_all(bootstrap, topic)}
    for k, v, p in rows:
        assert got[v] == (p if p is not None else partition_for(k.encode(), 4))


def test_out_of_range_partition_fails_naming_topic_partition_and_count(spark, bootstrap, make_topic):
    topic = make_topic(partitions=3)
    df = spark.createDataFrame([("a", 1), ("b", 7)], "value string, partition int").coalesce(1)
    with pytest.raises(Exception) as e:
        df.write.format("pykafka").options(**opts(bootstrap, topic=topic)).mode("append").save()
    assert f"partition 7 is out of range for topic '{topic}', which has 3 partitions" in spark_error(e)
    assert consume_all(bootstrap, topic) == []  # checked before any row of the batch was sent


def test_null_keys_spread_evenly_over_partitions(spark, bootstrap, make_topic):
    topic = make_topic(partitions=4)
    spark.range(10_000).selectExpr("CAST(id AS STRING) AS value").repartition(2).write.format(
        "pykafka").options(**opts(bootstrap, topic=topic)).mode("append").save()

    counts = Counter(m.partition() for m in consume_all(bootstrap, topic))
    assert sum(counts.values()) == 10_000
    assert len(counts) == 4
    assert max(counts.values()) / min(counts.values()) <= 1.1


# -- record contents ----------------------------------------------------------------


def test_headers_and_timestamps_round_trip(spark, bootstrap, make_topic):
    from confluent_kafka import TIMESTAMP_CREATE_TIME

    topic = make_topic(partitions=2)
    ts = datetime(2024, 5, 17, 12, 30, 45, 123000, tzinfo=timezone.utc)
    df = spark.createDataFrame(
        [("a", [("trace", b"\x00\x01"), ("trace", None), ("k2", b"v2")], ts), ("b", None, None)],
        "value string, headers array<struct<key:string,value:binary>>, timestamp timestamp",
    )
    before_ms = int(time.time() * 1000)
    df.write.format("pykafka").options(**opts(bootstrap, topic=topic)).mode("append").save()

    records = {m.value(): m for m in consume_all(bootstrap, topic)}
    a, b = records[b"a"], records[b"b"]
    assert a.headers() == [("trace", b"\x00\x01"), ("trace", None), ("k2", b"v2")]
    assert a.timestamp() == (TIMESTAMP_CREATE_TIME, int(ts.timestamp() * 1000))
    assert b.headers() is None
    kind, b_ms = b.timestamp()  # null timestamp: the producer's current time
    assert kind == TIMESTAMP_CREATE_TIME and b_ms >= before_ms


def test_string_and_binary_keys_and_values(spark, bootstrap, make_topic):
    topic_s, topic_b = make_topic(partitions=3), make_topic(partitions=3)
    text = [("schlüssel-1", "wert ✓"), ("", ""), ("k", None)]
    spark.createDataFrame(text, "key string, value string").write.format("pykafka").options(
        **opts(bootstrap, topic=topic_s)).mode("append").save()
    raw = [(b"\xff\x00k", b"\x80\x81\x00"), (None, b"v")]
    spark.createDataFrame(raw, "key binary, value binary").write.format("pykafka").options(
        **opts(bootstrap, topic=topic_b)).mode("append").save()

    got_s = sorted((m.key(), m.value()) for m in consume_all(bootstrap, topic_s))
    assert got_s == sorted((k.encode(), v.encode() if v is not None else None) for k, v in text)
    got_b = {(m.key(), m.value()) for m in consume_all(bootstrap, topic_b)}
    assert got_b == set(raw)


def test_null_value_is_written_as_a_tombstone(spark, bootstrap, make_topic):
    topic = make_topic(partitions=1)
    spark.createDataFrame([("gone", None)], "key string, value binary").write.format("pykafka").options(
        **opts(bootstrap, topic=topic)).mode("append").save()
    [m] = consume_all(bootstrap, topic)
    assert (m.key(), m.value()) == (b"gone", None)


def test_topic_option_wins_over_topic_column(spark, bootstrap, make_topic):
    in_column, in_option = make_topic(partitions=1), make_topic(partitions=1)
    df = spark.createDataFrame([(in_column, "x"), (in_column, "y")], "topic string, value string")
    df.write.format("pykafka").options(**opts(bootstrap, topic=in_option)).mode("append").save()
    assert sorted(m.value() for m in consume_all(bootstrap, in_option)) == [b"x", b"y"]
    assert consume_all(bootstrap, in_column) == []


def test_topic_column_routes_rows_to_several_topics(spark, bootstrap, make_topic):
    t1, t2 = make_topic(partitions=2), make_topic(partitions=3)
    rows = [(t1 if i % 3 else t2, f"k{i}", f"v{i}") for i in range(90)]
    spark.createDataFrame(rows, "topic string, key string, value string").write.format("pykafka").options(
        **opts(bootstrap)).mode("append").save()
    for topic, n in ((t1, 2), (t2, 3)):
        records = consume_all(bootstrap, topic)
        assert sorted(m.value().decode() for m in records) == sorted(v for t, _, v in rows if t == topic)
        assert all(m.partition() == partition_for(m.key(), n) for m in records)


def test_kcat_reads_what_spark_wrote(spark, bootstrap, make_topic):
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    topic = make_topic(partitions=2)
    spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(20)], "key string, value string").write.format(
        "pykafka").options(**opts(bootstrap, topic=topic)).mode("append").save()
    out = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-e", "-q", "-f", "%k=%s %p\n"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split("\n")
    pairs = sorted(line for line in out if line)
    assert pairs == sorted(f"k{i}=v{i} {partition_for(f'k{i}'.encode(), 2)}" for i in range(20))


# -- bad input and failures -----------------------------------------------------------


def test_default_save_mode_is_refused_by_pyspark_saying_append(spark, bootstrap, make_topic):
    """pyspark refuses ErrorIfExists for every Python data source before the writer runs (Spark's
    own sink accepts it: a pinned difference, migration.md's first point); its message names Append."""
    from pyspark.errors import AnalysisException

    topic = make_topic(partitions=1)
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(AnalysisException, match=r"UNSUPPORTED_DATA_SOURCE_SAVE_MODE.*ErrorIfExists.*\"Append\""):
        df.write.format("pykafka").options(**opts(bootstrap, topic=topic)).save()
    assert consume_all(bootstrap, topic) == []


def test_extra_columns_are_not_written_as_in_spark(spark, bootstrap, make_topic):
    topic = make_topic(partitions=1)
    df = spark.createDataFrame([("v", "x", 7)], "value string, valeu string, n int")
    df.write.format("pykafka").options(**opts(bootstrap, topic=topic)).mode("append").save()
    (record,) = consume_all(bootstrap, topic)
    assert (record.key(), record.value(), record.headers()) == (None, b"v", None)


def test_mistyped_value_column_names_the_expected_type(spark, bootstrap, make_topic):
    topic = make_topic(partitions=1)
    with pytest.raises(Exception) as e:
        spark.range(3).selectExpr("id AS value").write.format("pykafka").options(
            **opts(bootstrap, topic=topic)).mode("append").save()
    assert "column 'value' has type bigint; the Kafka sink expects binary or string" in spark_error(e)


def test_missing_topic_fails(spark, bootstrap):
    with pytest.raises(Exception) as e:
        spark.createDataFrame([("v",)], "value string").write.format("pykafka").options(
            **opts(bootstrap)).mode("append").save()
    assert "no topic: set option 'topic'" in spark_error(e)


def test_null_topic_in_a_row_fails_naming_the_fix(spark, bootstrap, make_topic):
    topic = make_topic(partitions=1)
    df = spark.createDataFrame([(topic, "a"), (None, "b")], "topic string, value string").coalesce(1)
    with pytest.raises(Exception) as e:
        df.write.format("pykafka").options(**opts(bootstrap)).mode("append").save()
    assert "has a null 'topic'; fill the column or set option 'topic'" in spark_error(e)
    assert consume_all(bootstrap, topic) == []


def test_unknown_partitioner_fails(spark, bootstrap, make_topic):
    topic = make_topic(partitions=1)
    with pytest.raises(Exception) as e:
        spark.createDataFrame([("v",)], "value string").write.format("pykafka").options(
            **opts(bootstrap, topic=topic, partitioner="hash")).mode("append").save()
    assert "option 'partitioner' must be 'murmur2', 'roundrobin' or 'module.Class', got 'hash'" in spark_error(e)


def test_missing_topic_on_the_cluster_is_a_clear_error(spark, bootstrap):
    missing = f"no-such-topic-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception) as e:
        spark.createDataFrame([("v",)], "value string").write.format("pykafka").options(
            **opts(bootstrap, topic=missing, **{"kafka.allow.auto.create.topics": "false"})).mode("append").save()
    assert f"topic '{missing}' does not exist" in spark_error(e)


def free_closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_broker_fails_the_task_within_the_delivery_timeout():
    """A cluster lost after the driver's first contact: the task gives up after kafka.delivery.timeout.ms.
    (Through Spark, a cluster unreachable from the start fails on the driver first, in about 1.5 s:
    tests/connector/test_first_contact.py.)"""
    bootstrap = f"127.0.0.1:{free_closed_port()}"
    spec = WriteSpec.from_options(opts(bootstrap, topic="t", **{"kafka.delivery.timeout.ms": "2000"}),
                                  StructType([StructField("value", StringType())]))
    with pytest.raises(DeliveryError) as e:
        write_batches(spec, [pa.record_batch({"value": pa.array(["v"])})])
    msg = str(e.value)
    assert f"cannot fetch metadata of topic 't' from {bootstrap} within 2000 ms (kafka.delivery.timeout.ms)" in msg
    assert "Check kafka.bootstrap.servers" in msg


def test_user_partitioner_shipped_with_add_py_file(spark, bootstrap, make_topic, tmp_path):
    """A partitioner class in a module shipped to the workers (SparkContext.addPyFile)."""
    module = f"user_partitioner_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{module}.py"
    path.write_text(
        "class ByLength:\n"
        "    def partition(self, topic, key, num_partitions):\n"
        "        return 0 if key is None else len(key) % num_partitions\n"
    )
    spark.sparkContext.addPyFile(str(path))
    topic = make_topic(partitions=3)
    rows = [("a", "1"), ("bb", "2"), ("ccc", "3"), (None, "4")]
    spark.createDataFrame(rows, "key string, value string").write.format("pykafka").options(
        **opts(bootstrap, topic=topic, partitioner=f"{module}.ByLength")).mode("append").save()
    got = {m.value(): m.partition() for m in consume_all(bootstrap, topic)}
    assert got == {b"1": 1, b"2": 2, b"3": 0, b"4": 0}


# -- task-level behaviour (what each Spark task runs) -----------------------------------

VALUE_ONLY = StructType([StructField("value", StringType())])


class EvenOddPartitioner:
    """A user partitioner: keys ending in an even digit go to partition 0, others to 1."""

    def partition(self, topic, key, num_partitions):
        return 1 if key is None else int(key[-1:]) % 2


def test_user_partitioner_class_routes_records(bootstrap, make_topic):
    topic = make_topic(partitions=2)
    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    spec = WriteSpec.from_options(opts(bootstrap, topic=topic, partitioner=f"{__name__}.EvenOddPartitioner"), schema)
    batch = pa.record_batch([pa.array(["k1", "k2", "k3", None]), pa.array(["a", "b", "c", "d"])], ["key", "value"])
    message = write_batches(spec, [batch])
    assert message.counts == {(topic, 0): 1, (topic, 1): 3}
    got = {m.value(): m.partition() for m in consume_all(bootstrap, topic)}
    assert got == {b"a": 1, b"b": 0, b"c": 1, b"d": 1}


def test_commit_message_counts_acknowledged_records_per_partition(bootstrap, make_topic):
    topic = make_topic(partitions=3)
    spec = WriteSpec.from_options(opts(bootstrap, topic=topic), VALUE_ONLY)
    batches = [pa.record_batch([pa.array([f"v{i}" for i in range(n)])], ["value"]) for n in (5, 0, 7)]
    message = write_batches(spec, batches)
    on_broker = Counter((topic, m.partition()) for m in consume_all(bootstrap, topic))
    assert message.counts == dict(on_broker)
    assert message.records == 12


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", "snappy"])
def test_kafka_settings_pass_through_to_the_producer(bootstrap, make_topic, codec):
    topic = make_topic(partitions=2)
    spec = WriteSpec.from_options(
        opts(bootstrap, topic=topic, **{"kafka.compression.type": codec, "kafka.linger.ms": "20",
                                        "kafka.batch.size": "2000"}), VALUE_ONLY)
    assert spec.producer["compression.type"] == codec
    values = [f"value-{i:04d}-" + "z" * 50 for i in range(500)]
    message = write_batches(spec, [pa.record_batch([pa.array(values)], ["value"])])
    assert message.records == 500
    assert sorted(m.value().decode() for m in consume_all(bootstrap, topic)) == values


def test_full_producer_queue_is_waited_out_not_dropped(bootstrap, make_topic):
    """A local queue of 5 records forces BufferError on almost every produce call."""
    topic = make_topic(partitions=2)
    spec = WriteSpec.from_options(
        opts(bootstrap, topic=topic, **{"kafka.queue.buffering.max.messages": "5"}), VALUE_ONLY)
    values = [f"v{i}" for i in range(300)]
    assert write_batches(spec, [pa.record_batch([pa.array(values)], ["value"])]).records == 300
    assert sorted(m.value().decode() for m in consume_all(bootstrap, topic)) == sorted(values)


@pytest.mark.parametrize("with_timestamp", [False, True], ids=["plain", "timestamp"])
def test_full_producer_queue_keeps_row_order_keys_and_topics(bootstrap, make_topic, with_timestamp):
    """Under BufferError on almost every row, each partition holds its rows in row order, each
    with its own key and topic (both produce paths: rows handed over from C, and with timestamps)."""
    topics = [make_topic(partitions=3), make_topic(partitions=2)]
    fields = [StructField(n, StringType()) for n in ("value", "key", "topic")]
    columns = {"value": [f"v{i:03d}" for i in range(240)], "key": [None if i % 9 == 0 else f"k{i % 13}"
                                                                   for i in range(240)],
               "topic": [topics[(i // 7) % 2] for i in range(240)]}
    if with_timestamp:
        fields.append(StructField("timestamp", TimestampType()))
        # recent timestamps: records older than retention.ms (7 days) are deleted by retention once their segment
        # rolls, and a segment rolls when its first record is older than segment.ms (Kafka's rules, ours too)
        base_s = int(time.time()) - 3600
        columns["timestamp"] = [datetime.fromtimestamp(base_s + i, timezone.utc) for i in range(240)]
    spec = WriteSpec.from_options(opts(bootstrap, **{"kafka.queue.buffering.max.messages": "5"}),
                                  StructType(fields))
    batch = pa.RecordBatch.from_pydict(columns, schema=pa.schema(
        [(f.name, pa.timestamp("us", tz="UTC") if f.name == "timestamp" else pa.string()) for f in fields]))
    message = write_batches(spec, [batch.slice(0, 100), batch.slice(100)])
    assert message.records == 240

    rows = {v: (k, t) for v, k, t in zip(columns["value"], columns["key"], columns["topic"])}
    for topic in topics:
        records = consume_all(bootstrap, topic)
        assert len(records) == sum(1 for t in columns["topic"] if t == topic)
        by_partition: dict[int, list] = {}
        for m in sorted(records, key=lambda m: (m.partition(), m.offset())):
            value = m.value().decode()
            assert rows[value] == (None if m.key() is None else m.key().decode(), topic)
            if with_timestamp:
                assert m.timestamp()[1] == (base_s + int(value[1:])) * 1000
            by_partition.setdefault(m.partition(), []).append(value)
        for values in by_partition.values():
            assert values == sorted(values)  # row order within every partition
        keyed = [m for m in records if m.key() is not None]
        assert all(m.partition() == partition_for(m.key(), 3 if topic == topics[0] else 2) for m in keyed)


def test_refused_record_is_named_by_its_own_topic_and_partition(bootstrap, make_topic):
    small_topic, big_topic = make_topic(partitions=1), make_topic(partitions=2)
    schema = StructType([StructField("value", StringType()), StructField("topic", StringType()),
                         StructField("partition", IntegerType())])
    spec = WriteSpec.from_options(opts(bootstrap, **{"kafka.message.max.bytes": "2000"}), schema)
    batch = pa.record_batch([pa.array(["a", "b", "x" * 5000, "c"]), pa.array([small_topic] * 2 + [big_topic] * 2),
                             pa.array([0, 0, 1, 0], pa.int32())], ["value", "topic", "partition"])
    with pytest.raises(DeliveryError, match=rf"refused a record for topic '{big_topic}' partition 1: .*MSG_SIZE_TOO"):
        write_batches(spec, [batch])


def test_partition_added_during_a_task_is_found_by_refreshing_metadata(bootstrap, make_topic):
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = make_topic(partitions=2)
    schema = StructType([StructField("value", StringType()), StructField("partition", IntegerType())])
    spec = WriteSpec.from_options(opts(bootstrap, topic=topic), schema)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def batches():
        yield pa.record_batch([pa.array(["a"]), pa.array([1], pa.int32())], ["value", "partition"])
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=20)
        yield pa.record_batch([pa.array(["b"]), pa.array([3], pa.int32())], ["value", "partition"])

    assert write_batches(spec, batches()).counts == {(topic, 1): 1, (topic, 3): 1}
    assert {m.value(): m.partition() for m in consume_all(bootstrap, topic)} == {b"a": 1, b"b": 3}


def _idle_producers(client_id: str) -> list:
    from pyspark_kafka.write import producer_pool

    return [p.producer for key, p in producer_pool.PRODUCERS.idle() if dict(key).get("client.id") == client_id]


def test_producer_is_reused_by_the_next_task_and_dropped_after_a_failure(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    client_id = f"reuse-{uuid.uuid4().hex[:6]}"
    spec = WriteSpec.from_options(opts(bootstrap, topic=topic, **{"kafka.client.id": client_id}), VALUE_ONLY)
    one = [pa.record_batch([pa.array(["v"])], ["value"])]
    write_batches(spec, one)
    [first] = _idle_producers(client_id)
    write_batches(spec, one)
    assert _idle_producers(client_id) == [first]  # the same producer served the second task

    broken = [pa.record_batch([pa.array(["v", "x" * 5000])], ["value"])]
    with pytest.raises(DeliveryError):
        write_batches(WriteSpec.from_options(
            opts(bootstrap, topic=topic, **{"kafka.client.id": client_id, "kafka.message.max.bytes": "2000"}),
            VALUE_ONLY), broken)
    assert _idle_producers(client_id) == [first]  # the failed task's producer was closed, not pooled
    assert len(consume_all(bootstrap, topic)) == 2


def test_record_refused_by_the_client_fails_the_task(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    spec = WriteSpec.from_options(opts(bootstrap, topic=topic, **{"kafka.message.max.bytes": "2000"}), VALUE_ONLY)
    batch = pa.record_batch([pa.array(["small", "x" * 5000])], ["value"])
    with pytest.raises(DeliveryError, match=rf"refused a record for topic '{topic}' partition 0: .*MSG_SIZE_TOO_LARGE.*message.max.bytes"):
        write_batches(spec, [batch])


def test_negative_timestamp_and_null_header_key_are_record_errors(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    schema = StructType.fromJson(json.loads(
        '{"type":"struct","fields":[{"name":"value","type":"string","nullable":true,"metadata":{}},'
        '{"name":"timestamp","type":"timestamp","nullable":true,"metadata":{}},'
        '{"name":"headers","type":{"type":"array","elementType":{"type":"struct","fields":['
        '{"name":"key","type":"string","nullable":true,"metadata":{}},'
        '{"name":"value","type":"binary","nullable":true,"metadata":{}}]},"containsNull":true},'
        '"nullable":true,"metadata":{}}]}'))
    spec = WriteSpec.from_options(opts(bootstrap, topic=topic), schema)
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

    def batch(ts_us, header_key):
        return pa.record_batch([
            pa.array(["v"]), pa.array([ts_us], pa.timestamp("us", tz="UTC")),
            pa.array([[{"key": header_key, "value": b"x"}]], headers_type),
        ], ["value", "timestamp", "headers"])

    with pytest.raises(RecordError, match="before 1970-01-01"):
        write_batches(spec, [batch(-5_000, "h")])
    with pytest.raises(RecordError, match="a header has a null 'key'"):
        write_batches(spec, [batch(5_000, None)])
    assert consume_all(bootstrap, topic) == []


# -- streaming ------------------------------------------------------------------------


def test_streaming_query_writes_every_micro_batch(spark, bootstrap, make_topic, tmp_path, checkpoint_dir):
    topic = make_topic(partitions=3)
    source = tmp_path / "in"
    source.mkdir()
    for f in range(3):
        (source / f"part-{f}.json").write_text(
            "\n".join(json.dumps({"key": f"k{f}-{i}", "value": f"v{f}-{i}"}) for i in range(50)))
    stream = (spark.readStream.schema("key string, value string").option("maxFilesPerTrigger", 1)
              .json(str(source)))
    query = (stream.writeStream.format("pykafka").options(**opts(bootstrap, topic=topic))
             .option("checkpointLocation", checkpoint_dir).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(180)
        assert query.exception() is None
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    assert len(batches) == 3
    records = consume_all(bootstrap, topic)
    assert sorted(m.value().decode() for m in records) == sorted(f"v{f}-{i}" for f in range(3) for i in range(50))
    assert all(m.partition() == partition_for(m.key(), 3) for m in records)


def test_streaming_exactly_once_with_a_fixed_transactional_id_is_refused_at_start(spark, bootstrap, make_topic,
                                                                                   checkpoint_dir):
    topic = make_topic(partitions=1)
    stream = spark.readStream.format("rate").option("rowsPerSecond", 1).load().selectExpr("CAST(value AS STRING) AS value")
    with pytest.raises(Exception) as e:
        query = (stream.writeStream.format("pykafka")
                 .options(**opts(bootstrap, topic=topic, deliveryGuarantee="exactly-once",
                                 **{"kafka.transactional.id": "fixed"}))
                 .option("checkpointLocation", checkpoint_dir).start())
        try:
            query.awaitTermination(60)
            raise AssertionError(f"query ran: {query.exception()}")
        finally:
            query.stop()
    assert "'kafka.transactional.id' cannot be set with deliveryGuarantee=exactly-once" in spark_error(e)


def test_broker_gone_mid_write_fails_the_task_with_the_delivery_error(tmp_path):
    """Records the broker never acknowledges come back as failed delivery reports."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from pyspark_kafka.broker import EmbeddedBroker

    with EmbeddedBroker(data_dir=tmp_path / "gone") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("t", num_partitions=1, replication_factor=1)])["t"].result(timeout=20)
        spec = WriteSpec.from_options(
            opts(broker.bootstrap_servers, topic="t", **{"kafka.delivery.timeout.ms": "3000"}), VALUE_ONLY)

        def batches():
            yield pa.record_batch([pa.array(["first"])], ["value"])
            broker.stop()  # metadata is cached by now; the next records cannot be delivered
            yield pa.record_batch([pa.array(["second", "third"])], ["value"])

        with pytest.raises(DeliveryError, match=r"Kafka did not acknowledge \d record\(s\) of this task: "
                                                r"topic 't' partition 0: .*\(_MSG_TIMED_OUT\)"):
            write_batches(spec, batches())
