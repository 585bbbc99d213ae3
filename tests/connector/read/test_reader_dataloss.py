"""failOnDataLoss: offsets deleted by retention are reported (true) or skipped with a warning (false).

Uses its own EmbeddedBroker with a 100 ms retention check (the session broker checks every 5 minutes).
Records produced with 1970 timestamps into 1 KiB segments are deleted by time retention once newer
records close their segments; the log start offset then moves past them, as in Kafka.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

OLD, NEW = 50, 10


@pytest.fixture(scope="module")
def retention_bootstrap(tmp_path_factory):
    from pyspark_kafka.broker import EmbeddedBroker

    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("retention-broker"), config={"log.retention.check.interval.ms": "100"}) as b:
        yield b.bootstrap_servers


@pytest.fixture
def trimmed_topic(retention_bootstrap):
    """A 1-partition topic whose offsets [0, 50) were deleted by retention; offsets [50, 60) remain."""
    topic = f"trimmed-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": retention_bootstrap})
    config = {"segment.bytes": "1024", "retention.ms": "60000"}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(20)
    producer = Producer({"bootstrap.servers": retention_bootstrap, "linger.ms": 0})
    for i in range(OLD):
        producer.produce(topic, value=b"old-%03d" % i + b"." * 100, timestamp=1000 + i)
        producer.flush(10)
    for i in range(NEW):
        producer.produce(topic, value=b"new-%03d" % i)
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": retention_bootstrap, "group.id": "probe"})
    try:
        deadline = time.monotonic() + 30
        while consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0] < OLD:
            assert time.monotonic() < deadline, "retention did not delete the old segments within 30 s"
            time.sleep(0.1)
    finally:
        consumer.close()
    return topic


def read(spark, bootstrap, topic, **options):
    reader = (
        spark.read.format("pykafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {"0": 0}}))  # before the log start offset
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_fail_on_data_loss_true_names_topic_partition_and_missing_range(spark, retention_bootstrap, trimmed_topic, read_path):
    with pytest.raises(Exception) as exc:
        read(spark, retention_bootstrap, trimmed_topic).collect()
    message = str(exc.value)
    assert "DataLossError" in message
    assert f"offsets [0, {OLD}) of {trimmed_topic}-0 are no longer available" in message
    assert "failOnDataLoss=false" in message


def test_fail_on_data_loss_false_skips_missing_offsets(spark, retention_bootstrap, trimmed_topic, read_path):
    df = read(spark, retention_bootstrap, trimmed_topic, failOnDataLoss="false")
    got = sorted((r.offset, r.value) for r in df.collect())
    assert got == [(OLD + i, b"new-%03d" % i) for i in range(NEW)]


def test_streaming_query_fails_on_data_loss(spark, retention_bootstrap, trimmed_topic, checkpoint_dir):
    query = (
        spark.readStream.format("pykafka")
        .option("kafka.bootstrap.servers", retention_bootstrap)
        .option("subscribe", trimmed_topic)
        .option("startingOffsets", json.dumps({trimmed_topic: {"0": 0}}))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint_dir)
        .trigger(availableNow=True)
        .start()
    )
    try:
        with pytest.raises(Exception, match=rf"offsets \[0, {OLD}\) of {trimmed_topic}-0 are no longer available"):
            query.awaitTermination(120)
    finally:
        query.stop()


def test_streaming_query_skips_lost_offsets_without_fail_on_data_loss(spark, retention_bootstrap, trimmed_topic, checkpoint_dir):
    values = []
    query = (
        spark.readStream.format("pykafka")
        .option("kafka.bootstrap.servers", retention_bootstrap)
        .option("subscribe", trimmed_topic)
        .option("startingOffsets", json.dumps({trimmed_topic: {"0": 0}}))
        .option("failOnDataLoss", "false")
        .load()
        .writeStream.foreachBatch(lambda df, _: values.extend(r.value for r in df.select("value").collect()))
        .option("checkpointLocation", checkpoint_dir)
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120)
        assert query.exception() is None
    finally:
        query.stop()
    assert sorted(values) == [b"new-%03d" % i for i in range(NEW)]


def test_read_fails_with_the_range_when_the_broker_stops_answering(tmp_path, read_path):
    from pyspark_kafka.broker import EmbeddedBroker
    from pyspark_kafka.read import KafkaBatchReader, ReadTimeoutError, kafka_schema

    with EmbeddedBroker(data_dir=tmp_path / "doomed") as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("doomed", 1, 1)])["doomed"].result(20)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce("doomed", value=b"x")
        assert producer.flush(10) == 0
        reader = KafkaBatchReader(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": "doomed", "kafkaConsumer.pollTimeoutMs": "1500"},
            kafka_schema(False),
        )
        (part,) = reader.partitions()
    # the broker is stopped: the planned range [0, 1) can no longer be read
    with pytest.raises(ReadTimeoutError, match=r"no record of doomed-0 \[0, 1\) arrived for 1500 ms"):
        list(reader.read(part))
