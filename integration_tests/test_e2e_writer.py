"""The pykafka writer as black-box Spark jobs on every backend: routing, headers and
timestamps, a Spark read-back round trip, a streaming copy (``assign``, AvailableNow) and
delivery errors. What was written is read back with confluent-kafka (not the connector)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from integration_tests.helpers import consume_all, produce, read, read_stream, run_available_now

# Kafka's UtilsTest.testMurmur2 vectors (key, murmur2): the Java DefaultPartitioner puts
# a keyed record in partition (murmur2(key) & 0x7fffffff) % partitions.
PUBLISHED = [(b"21", -973932308), (b"foobar", -790332482), (b"abc", 479470107),
             (b"a-little-bit-long-string", -985981536), (b"a-little-bit-longer-string", -1486304829)]

pytestmark = pytest.mark.slow  # Spark jobs; still run in CI


def write(df, bootstrap: str, **options) -> None:
    df.write.format("pykafka").option("kafka.bootstrap.servers", bootstrap).options(**options).mode("append").save()


def test_keys_land_where_the_java_partitioner_puts_them_and_explicit_partitions_win(spark, kafka_cluster):
    topic = kafka_cluster.create_topic(5)
    rows = [(k.decode(), f"v-{k.decode()}", None) for k, _ in PUBLISHED] + [("pinned", "v-pinned", 4)]
    write(spark.createDataFrame(rows, "key string, value string, partition int"), kafka_cluster.bootstrap,
          topic=topic)

    landed = {m.key(): (m.partition(), m.value()) for m in consume_all(kafka_cluster.bootstrap, topic)}
    for key, murmur2 in PUBLISHED:  # Kafka's own numbers
        assert landed[key] == ((murmur2 & 0x7FFFFFFF) % 5, b"v-" + key)
    assert landed[b"pinned"] == (4, b"v-pinned")


def test_topic_column_headers_and_timestamps_round_trip_through_spark(spark, kafka_cluster):
    keep = {"retention.ms": "-1"}  # the 2024 timestamps are past the default retention (7 days)
    t1, t2 = kafka_cluster.create_topic(2, config=keep), kafka_cluster.create_topic(1, config=keep)
    ts = datetime(2024, 5, 17, 12, 30, 45, 123000, tzinfo=timezone.utc)
    rows = [(t1 if i % 2 else t2, f"k{i}", f"v{i}", [("trace", b"%d" % i), ("empty", None)], ts) for i in range(20)]
    df = spark.createDataFrame(
        rows, "topic string, key string, value string, headers array<struct<key:string,value:binary>>, "
              "timestamp timestamp")
    write(df, kafka_cluster.bootstrap)

    for topic in (t1, t2):
        records = consume_all(kafka_cluster.bootstrap, topic)
        expected = sorted(v for t, _, v, _, _ in rows if t == topic)
        assert sorted(m.value().decode() for m in records) == expected
        assert all(m.headers() == [("trace", m.value()[1:]), ("empty", None)] for m in records)
        assert {m.timestamp()[1] for m in records} == {int(ts.timestamp() * 1000)}
    back = read(spark, kafka_cluster.bootstrap, subscribe=f"{t1},{t2}", includeHeaders="true")
    got = sorted((r.topic, r.key.decode(), r.value.decode(), [tuple(h) for h in r.headers], r.timestamp)
                 for r in back.collect())
    assert got == sorted((t, k, v, [tuple(h) for h in hs], ts.replace(tzinfo=None)) for t, k, v, hs, _ in rows)


def test_a_record_the_broker_refuses_fails_the_job_naming_topic_and_error(spark, kafka_cluster):
    topic = kafka_cluster.create_topic(1, config={"max.message.bytes": "2000"})
    df = spark.createDataFrame([("small",), ("x" * 5000,)], "value string").coalesce(1)
    with pytest.raises(Exception) as failure:
        write(df, kafka_cluster.bootstrap, topic=topic)
    message = str(failure.value)
    assert "did not acknowledge" in message and f"topic '{topic}' partition 0" in message
    assert "MSG_SIZE_TOO_LARGE" in message
    assert all(len(m.value()) < 2000 for m in consume_all(kafka_cluster.bootstrap, topic))


def test_streaming_query_copies_a_topic_through_a_transformation(spark, kafka_cluster, checkpoint_dir):
    source, sink = kafka_cluster.create_topic(2), kafka_cluster.create_topic(3)
    produce(kafka_cluster.bootstrap, source, [{"key": b"k%d" % i, "value": b"v%d" % i} for i in range(40)])
    stream = read_stream(spark, kafka_cluster.bootstrap, assign=json.dumps({source: [0, 1]}),
                         startingOffsets="earliest", maxOffsetsPerTrigger="15")
    run_available_now(stream.selectExpr("key", "upper(CAST(value AS STRING)) AS value").writeStream
                      .format("pykafka").option("kafka.bootstrap.servers", kafka_cluster.bootstrap)
                      .option("topic", sink).option("checkpointLocation", checkpoint_dir))

    copied = consume_all(kafka_cluster.bootstrap, sink)
    assert sorted((m.key(), m.value()) for m in copied) == sorted((b"k%d" % i, b"V%d" % i) for i in range(40))
