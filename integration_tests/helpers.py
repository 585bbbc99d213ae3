"""Black-box helpers of the end-to-end suite: independent clients (confluent-kafka) around Spark jobs."""

from __future__ import annotations

import threading
import time
import uuid

WAIT_S = 60.0
QUERY_TIMEOUT_S = 180


def produce(bootstrap: str, topic: str, records: list[dict], **conf) -> list[tuple]:
    """Produce ``records`` (kwargs of confluent's ``Producer.produce``) in order; return the
    delivery reports ``(key, value, partition, offset, timestamp_ms)`` in delivery order.
    Raises AssertionError unless every record is acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    delivered, errors = [], []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.key(), msg.value(), msg.partition(), msg.offset(), msg.timestamp()[1]))

    for r in records:
        producer.produce(topic, on_delivery=report, **r)
    assert producer.flush(WAIT_S) == 0 and errors == [], f"produce to {topic} failed: {errors}"
    return delivered


def transactions(bootstrap: str, topic: str, steps: list[tuple[list[bytes], bool]]) -> None:
    """One transaction per step (values to partition 0, then commit if True else abort)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"it-{uuid.uuid4()}"})
    producer.init_transactions(WAIT_S)
    for values, commit in steps:
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, value=v, partition=0)
        assert producer.flush(WAIT_S) == 0
        producer.commit_transaction(WAIT_S) if commit else producer.abort_transaction(WAIT_S)


def consume_all(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> list:
    """Every record of ``topic`` from the log start to the end of each partition, as
    confluent-kafka Messages (independent of the connector)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation, "auto.offset.reset": "earliest"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, -2) for p in partitions])  # -2: beginning
        out, at_end = [], set()
        deadline = time.monotonic() + WAIT_S
        while len(at_end) < len(partitions):
            assert time.monotonic() < deadline, f"reading {topic} back did not reach the end in {WAIT_S:g} s"
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                at_end.add(m.partition())
                continue
            at_end.discard(m.partition())
            out.append(m)
        return out
    finally:
        consumer.close()


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """``(log start offset, high watermark)`` of one partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4().hex}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """``{partition: committed offset}`` of ``group`` (partitions without a commit are left out)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = admin.list_consumer_group_offsets([request], request_timeout=15)[group].result(WAIT_S)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def read(spark, bootstrap: str, **options):
    """``spark.read.format("pykafka")`` with ``kafka.bootstrap.servers`` and ``options``."""
    reader = spark.read.format("pykafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def read_stream(spark, bootstrap: str, **options):
    """``spark.readStream.format("pykafka")`` with ``kafka.bootstrap.servers`` and ``options``."""
    reader = spark.readStream.format("pykafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def run_available_now(writer) -> None:
    """Start a ``writeStream`` builder with Trigger.AvailableNow and wait (bounded) until it
    stops by itself; re-raise the query's error; always stop it."""
    query = writer.trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), f"query did not finish in {QUERY_TIMEOUT_S} s"
    finally:
        query.stop()


class Collector:
    """``foreachBatch`` function keeping each micro-batch's rows ``(partition, offset, value)``."""

    def __init__(self):
        self.batches: list[list[tuple]] = []
        self._lock = threading.Lock()

    def __call__(self, df, batch_id):
        rows = [(r.partition, r.offset, r.value) for r in df.select("partition", "offset", "value").collect()]
        with self._lock:
            self.batches.append(rows)

    @property
    def rows(self) -> list[tuple]:
        with self._lock:
            return [r for b in self.batches for r in b]
