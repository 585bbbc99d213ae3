"""Independent checks for the exactly-once writer tests: confluent-kafka clients only, no pykafka code."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed", timeout_s: float = 30.0,
               partitions=None) -> list:
    """``(partition, offset, key, value)`` of every record of ``topic`` visible under ``isolation``.

    Reads each partition from its start until librdkafka reports the partition's end (the last
    stable offset under read_committed, the high watermark under read_uncommitted). ``partitions``:
    the partition numbers to read (default: all of the topic's).
    """
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-check-{uuid.uuid4().hex}",
                  "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        if partitions is None:
            partitions = c.list_topics(topic, timeout=10).topics[topic].partitions
        partitions = sorted(partitions)
        c.assign([TopicPartition(topic, p, 0) for p in partitions])  # offset 0: beginning (no retention here)
        at_end, records = set(), []
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(partitions):
            assert time.monotonic() < deadline, f"{topic}: end not reached on partitions {set(partitions) - at_end}"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                at_end.add(m.partition())
                continue
            records.append((m.partition(), m.offset(), m.key(), m.value()))
        return records
    finally:
        c.close()


def values(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    """Sorted values of ``topic`` under ``isolation``."""
    return sorted(v for _, _, _, v in read_topic(bootstrap, topic, isolation))


def end_offsets(bootstrap: str, topic: str, isolation: str) -> dict[int, int]:
    """Per partition: the high watermark (read_uncommitted) or last stable offset (read_committed)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-check-{uuid.uuid4().hex}",
                  "isolation.level": isolation})
    try:
        partitions = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in partitions}
    finally:
        c.close()


def committed_marker(bootstrap: str, group: str) -> list:
    """``(topic, partition, offset, metadata)`` committed by consumer group ``group`` (AdminClient OffsetFetch)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=20)
    return [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in result.topic_partitions]
