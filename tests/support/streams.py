"""Helpers of the streaming reader tests: produce numbered values, a stream reader without Spark, a
foreachBatch collector and a query started with it."""

from __future__ import annotations

import threading

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from pyspark_kafka.read import KafkaStreamReader, kafka_schema


def produce(bootstrap: str, topic: str, n: int, partition: int | None = None, prefix: str = "v") -> list[bytes]:
    """Produce ``n`` values ``prefix-i`` (round robin over partitions unless ``partition``); return them."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [f"{prefix}-{i}".encode() for i in range(n)]
    for i, v in enumerate(values):
        kwargs = {"partition": partition} if partition is not None else {}
        producer.produce(topic, value=v, key=str(i).encode(), **kwargs)
    assert producer.flush(30) == 0
    return values


def add_partition(bootstrap: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference until the result arrives
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(20)


def stream_reader(bootstrap: str, **options) -> KafkaStreamReader:
    return KafkaStreamReader({"kafka.bootstrap.servers": bootstrap, **options}, kafka_schema(False))


class Collector:
    """foreachBatch sink that keeps (batch_id, rows) in the driver, thread-safe."""

    def __init__(self):
        self.batches: list[tuple[int, list]] = []
        self._lock = threading.Lock()

    def __call__(self, df, batch_id):
        got = [(r.partition, r.offset, r.value, r.topic) for r in df.select("partition", "offset", "value", "topic").collect()]
        with self._lock:
            self.batches.append((batch_id, got))

    @property
    def rows(self) -> list:
        with self._lock:
            return [r for _, rows in self.batches for r in rows]


def start(spark, bootstrap, collector, checkpoint, trigger, **options):
    reader = spark.readStream.format("pykafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    writer = reader.load().writeStream.foreachBatch(collector).option("checkpointLocation", checkpoint)
    return writer.trigger(**trigger).start()
