"""Topic helpers with independent clients (confluent-kafka): create a topic, read all of it back."""

from __future__ import annotations

import time
import uuid


def create_topic(bootstrap: str, name: str, partitions: int = 3, config: dict | None = None) -> str:
    """Create ``name`` with ``partitions`` partitions via AdminClient; wait for the result."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=10,
        request_timeout=15,
    )
    futures[name].result(timeout=20)
    return name


def spread_topic(cluster, name: str) -> None:
    """On a 3-broker ``EmbeddedCluster``: ``name`` with 3 partitions of RF 1, partition ``n`` led by broker ``n``
    (so a request for each partition is answered by a different broker); waits (bounded) for the leaders."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, 3, replica_assignment=[[0], [1], [2]])])[name].result(30)
    cluster.wait_for(lambda: [cluster.leader(name, p) for p in range(3)] == [0, 1, 2], 20, "a leader per broker")


def consume_all(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list:
    """Every record of ``topic`` (all partitions, log start to high watermark), via confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        assignment, expected = [], 0
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                assignment.append(TopicPartition(topic, p, low))
                expected += high - low
        consumer.assign(assignment)
        records = []
        deadline = time.monotonic() + timeout_s
        while len(records) < expected and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            records.append(m)
        assert len(records) == expected, f"read {len(records)} of {expected} records of {topic}"
        return records
    finally:
        consumer.close()
