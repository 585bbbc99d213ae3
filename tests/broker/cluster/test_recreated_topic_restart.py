"""A topic deleted and created again under its name keeps its records across a broker restart.

A restarted broker replays its copy of the metadata log from its latest snapshot. Replaying the old topic's
``remove_topic`` record must not delete the local log of the newer topic of the same name: Kafka tells a
deleted topic's logs from a newer one's by topic id (KIP-516), and applies the final image once its log
replay is done (``MetadataLoader``).
"""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pyspark_kafka.broker.cluster import EmbeddedCluster
from support.records import read_all, values

FAST = {"broker.session.timeout.ms": "1000", "broker.heartbeat.interval.ms": "200",
        "replica.fetch.backoff.ms": "100"}


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for v in values:
        producer.produce(topic, v.encode(), partition=0)
    assert producer.flush(30) == 0


def _wait_for_topic(admin: AdminClient, name: str, partitions: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        t = admin.list_topics(timeout=10).topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and \
                all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {name} with {partitions} partitions and leaders did not appear")


def test_a_recreated_topic_keeps_its_records_across_a_broker_restart(tmp_path):
    with EmbeddedCluster(1, data_dir=tmp_path / "cluster", config=FAST) as cluster:
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("b", 2, 1)])["b"].result(30)
        _wait_for_topic(admin, "b", 2)
        _produce(bootstrap, "b", ["old-0", "old-1"])
        admin.delete_topics(["b"])["b"].result(30)
        deadline = time.monotonic() + 30
        while "b" in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
            time.sleep(0.1)
        admin.create_topics([NewTopic("b", 1, 1)])["b"].result(30)
        _wait_for_topic(admin, "b", 1)
        _produce(bootstrap, "b", ["new-0", "new-1", "new-2"])
        assert values(read_all(bootstrap, "b")) == [b"new-0", b"new-1", b"new-2"]
        broker = cluster.broker_ids[0]
        cluster.restart(broker)
        _wait_for_topic(admin, "b", 1)
        assert values(read_all(cluster.bootstrap_servers, "b")) == [b"new-0", b"new-1", b"new-2"]
