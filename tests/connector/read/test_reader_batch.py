"""Batch reads (spark.read.format("pykafka")) against the embedded broker.

Records are produced with confluent-kafka (an independent client); its delivery reports are the
reference for partitions, offsets and timestamps.
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import KafkaException, Producer

BASE_TS = 1_700_000_000_000


def produce(bootstrap: str, topic: str, records: list[dict]) -> list[tuple]:
    """Produce ``records`` (kwargs of Producer.produce) in order; return delivery reports as tuples."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    delivered, errors = [], []

    def on_delivery(err, msg, headers):
        if err is not None:
            errors.append(err)
        else:
            delivered.append(
                (msg.key(), msg.value(), msg.topic(), msg.partition(), msg.offset(), msg.timestamp()[1], headers)
            )

    for r in records:
        producer.produce(topic, on_delivery=lambda e, m, h=r.get("headers"): on_delivery(e, m, h), **r)
    assert producer.flush(30) == 0 and errors == []
    return delivered


def rows(df) -> list[tuple]:
    """Collect a pykafka DataFrame as tuples, timestamps as epoch ms."""
    cols = ["key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "timestampType"]
    if "headers" in df.columns:
        cols.append("headers")
    return [tuple(r) for r in df.selectExpr(*cols).collect()]


def load(spark, bootstrap, **options):
    reader = spark.read.format("pykafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_returns_every_record_with_spark_columns(spark, bootstrap, make_topic, read_path):
    topic = make_topic(partitions=3)
    records = [
        {
            "partition": i % 3,
            "key": None if i % 7 == 0 else f"k{i}".encode(),
            "value": None if i % 11 == 0 else f"value-{i}".encode() * (i % 5),
            "timestamp": BASE_TS + i,
            "headers": [("h", f"{i}".encode()), ("empty", None)] if i % 2 else None,
        }
        for i in range(150)
    ]
    delivered = produce(bootstrap, topic, records)

    df = load(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    got = sorted(rows(df), key=lambda r: (r[3], r[4]))
    expected = sorted(
        (
            (k, v if v is not None else None, t, p, o, ts, 0, [tuple(h) for h in hs] if hs else None)
            for k, v, t, p, o, ts, hs in delivered
        ),
        key=lambda r: (r[3], r[4]),
    )
    got = [r[:7] + ([tuple(h) for h in r[7]] if r[7] else None,) for r in got]
    assert got == expected
    assert {r[3] for r in got} == {0, 1, 2}
    # without includeHeaders there is no headers column
    assert "headers" not in load(spark, bootstrap, subscribe=topic).columns


def test_offset_json_and_timestamp_options_select_exactly_the_expected_rows(spark, bootstrap, make_topic, read_path):
    topic = make_topic(partitions=3)  # partition 2 stays empty
    produce(
        bootstrap,
        topic,
        [{"partition": p, "value": f"{p}-{i}".encode(), "timestamp": BASE_TS + i * 1000} for p in (0, 1) for i in range(10)],
    )

    def offsets(**options):
        df = load(spark, bootstrap, subscribe=topic, **options)
        return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())

    explicit = offsets(
        startingOffsets=json.dumps({topic: {"0": 2, "1": -2, "2": -2}}),
        endingOffsets=json.dumps({topic: {"0": 5, "1": -1, "2": -1}}),
    )
    assert explicit == [(0, 2), (0, 3), (0, 4)] + [(1, i) for i in range(10)]

    # first offset with timestamp >= start .. first offset with timestamp >= end (exclusive)
    # (the empty partition 2 has no match: strategy=latest makes it an empty range, as in Spark)
    by_time = offsets(
        startingTimestamp=str(BASE_TS + 3000),
        endingTimestamp=str(BASE_TS + 5500),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert by_time == [(0, 3), (0, 4), (0, 5), (1, 3), (1, 4), (1, 5)]

    # per-partition timestamps; no match falls back to latest with strategy=latest
    per_partition = offsets(
        startingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_TS + 8000, "1": BASE_TS + 99_000, "2": BASE_TS}}),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert per_partition == [(0, 8), (0, 9)]

    # startingTimestamp wins over startingOffsets, as in Spark
    later = offsets(
        startingTimestamp=str(BASE_TS + 9000),
        startingOffsets=json.dumps({topic: {"0": 0, "1": 0, "2": 0}}),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert later == [(0, 9), (1, 9)]


def test_empty_topic_reads_as_an_empty_dataframe(spark, bootstrap, make_topic):
    topic = make_topic(partitions=2)
    df = load(spark, bootstrap, subscribe=topic)
    assert df.count() == 0  # no offset range: Spark reads one placeholder partition, which yields nothing


def test_no_matching_starting_timestamp_fails_by_default(spark, bootstrap, make_topic):
    topic = make_topic(partitions=1)
    produce(bootstrap, topic, [{"value": b"x", "timestamp": BASE_TS}])
    with pytest.raises(Exception, match=f"no offset of {topic}-0 has a timestamp at or after {BASE_TS + 1}"):
        load(spark, bootstrap, subscribe=topic, startingTimestamp=str(BASE_TS + 1)).collect()


def test_min_partitions_and_max_records_split_ranges_without_changing_rows(spark, bootstrap, make_topic):
    topic = make_topic(partitions=2)
    produce(bootstrap, topic, [{"partition": i % 2, "value": b"%d" % i} for i in range(100)])
    df = load(spark, bootstrap, subscribe=topic, maxRecordsPerPartition="20")
    assert df.rdd.getNumPartitions() == 6  # ceil(50 / 20) = 3 per topic-partition
    assert sorted(r.value for r in df.collect()) == sorted(b"%d" % i for i in range(100))
    assert load(spark, bootstrap, subscribe=topic, minPartitions="5").rdd.getNumPartitions() >= 5


def _transactions_supported(bootstrap: str) -> bool:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"probe-{uuid.uuid4()}"})
    try:
        producer.init_transactions(10)
        return True
    except KafkaException:
        return False


def test_read_committed_skips_aborted_transactions_and_finishes_on_markers(spark, bootstrap, make_topic, read_path):
    if not _transactions_supported(bootstrap):
        pytest.skip("the embedded broker does not support transactions yet (InitProducerId fails)")
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4()}"})
    producer.init_transactions(30)
    for value, commit in ((b"committed-1", True), (b"aborted", False), (b"committed-2", True)):
        producer.begin_transaction()
        producer.produce(topic, value=value)
        producer.flush(30)  # abort_transaction would drop unsent records
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    # the committed range ends on a commit marker: the read must complete without waiting for a later record
    committed = load(spark, bootstrap, subscribe=topic, **{"kafka.isolation.level": "read_committed"})
    assert [(r.offset, r.value) for r in committed.orderBy("offset").collect()] == [(0, b"committed-1"), (4, b"committed-2")]
    # an open transaction: read_committed stops at the last stable offset, read_uncommitted reads it
    producer.begin_transaction()
    producer.produce(topic, value=b"open")
    producer.flush(30)
    try:
        assert [r.value for r in committed.orderBy("offset").collect()] == [b"committed-1", b"committed-2"]
        uncommitted = load(spark, bootstrap, subscribe=topic)  # Spark's default: read_uncommitted
        assert [r.value for r in uncommitted.orderBy("offset").collect()] == [
            b"committed-1", b"aborted", b"committed-2", b"open"
        ]
    finally:
        producer.abort_transaction(30)


def test_long_ranges_come_in_bounded_batches_from_a_reused_consumer(bootstrap, make_topic):
    from pyspark_kafka.kafka import clients
    from pyspark_kafka.read import BATCH_ROWS, KafkaBatchReader, kafka_schema

    topic = make_topic(partitions=1)
    count = 2 * BATCH_ROWS + 500
    produce(bootstrap, topic, [{"value": b"%06d" % i} for i in range(count)])
    reader = KafkaBatchReader({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "readPath": "consumer"},
                              kafka_schema(False))
    (part,) = reader.partitions()
    clients.close_pooled_consumers()

    batches = list(reader.read(part))
    assert all(b.num_rows <= BATCH_ROWS for b in batches) and len(batches) >= 3
    assert [v for b in batches for v in b.column("value").to_pylist()] == [b"%06d" % i for i in range(count)]
    assert clients.idle_consumer_count() == 1
    (pooled,) = [c for _, c in clients.CONSUMERS.idle()]

    # the next range of the same query borrows the same consumer
    assert sum(b.num_rows for b in reader.read(part)) == count
    assert [c for _, c in clients.CONSUMERS.idle()] == [pooled]

    # a read abandoned half way closes its consumer instead of pooling it in an unknown state
    it = reader.read(part)
    next(it)
    it.close()
    assert clients.idle_consumer_count() == 0


def test_the_columnar_path_yields_bounded_batches_from_a_pooled_fetch_client(bootstrap, make_topic):
    from pyspark_kafka.read import BATCH_ROWS, KafkaBatchReader, kafka_schema
    from pyspark_kafka.kafka import fetch_client

    topic = make_topic(partitions=1)
    count = 2 * BATCH_ROWS + 500
    produce(bootstrap, topic, [{"value": b"%06d" % i} for i in range(count)])
    reader = KafkaBatchReader({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "readPath": "columnar"},
                              kafka_schema(False))
    (part,) = reader.partitions()
    fetch_client.FETCH_CLIENTS.close_all()

    batches = list(reader.read(part))
    assert all(b.num_rows <= BATCH_ROWS for b in batches) and len(batches) >= 3
    assert [v for b in batches for v in b.column("value").to_pylist()] == [b"%06d" % i for i in range(count)]
    (pooled,) = [c for _, c in fetch_client.FETCH_CLIENTS.idle()]
    assert sum(b.num_rows for b in reader.read(part)) == count  # the next range reuses it
    assert [c for _, c in fetch_client.FETCH_CLIENTS.idle()] == [pooled]
    it = reader.read(part)
    next(it)
    it.close()  # abandoned half way: closed, not pooled (a Fetch may be in flight on it)
    assert len(fetch_client.FETCH_CLIENTS) == 0


def test_log_append_time_topics_report_timestamp_type_1(bootstrap, make_topic, read_path):
    from pyspark_kafka.read import KafkaBatchReader, kafka_schema

    topic = make_topic(partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    produce(bootstrap, topic, [{"value": b"a", "timestamp": BASE_TS}])
    reader = KafkaBatchReader({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, kafka_schema(False))
    (row,) = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
    assert row["timestampType"] == 1
    assert row["timestamp"].timestamp() * 1000 != BASE_TS  # the broker's append time replaced the producer's
