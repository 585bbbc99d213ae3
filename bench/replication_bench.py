"""Replication cost: produce throughput to a replicated partition against RF 1, on our cluster and Apache Kafka's.

On one :class:`~pyspark_kafka.broker.cluster.EmbeddedCluster` (a controller and three broker processes), a topic
with replication factor 3 (``min.insync.replicas=2``) and one with replication factor 1; librdkafka sends
``COUNT`` records of 100 bytes with ``acks=all`` (idempotent) to partition 0 of each. Then the same two topics and
the same runs on Apache Kafka's three-node KRaft cluster (4.4.0 by default, ``KAFKA_VERSION``, from the cached Maven Central jars,
:class:`pyspark_kafka.testing.apache_kafka.ApacheKafka` with the JVM options and request threads of Kafka's own
start script, as ``broker_bench``), one cluster at a time so the two never share the cores.

Rows (ratio = ours / anchor, higher is better):

- ours RF 3 over ours RF 1 on the same cluster: the price of waiting for two followers' fetches;
- Apache Kafka RF 3 over Apache Kafka RF 1: the same price on the reference;
- ours RF 3 over Apache Kafka RF 3, and ours RF 1 over Apache Kafka RF 1: where we stand.

Without java or the jars the Apache Kafka rows are left out and :data:`SKIPPED` says why. Every run is
checked by ``broker_bench._produce`` (the end offset advances by exactly ``COUNT``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "connector"))

from common import metric, rate, repeat  # noqa: E402

SKIPPED: dict[str, str] = {}
"""Parts left out of the last :func:`run` and why (``bench/run.py`` records them)."""
WARMUP = 20_000
"""Records produced to each topic before timing (connections, metadata, the JVM's JIT)."""


def _produce(bootstrap: str, topic: str, count: int) -> float:
    """records/s of ``count`` idempotent acks=all 100-byte records to partition 0 (broker_bench's loop)."""
    from broker_bench import _produce as produce_seconds

    return rate(count, produce_seconds(bootstrap, topic, count, 100, "all", **{"enable.idempotence": True}))


def _measure(bootstrap: str, count: int, ready) -> tuple[list[float], list[float]]:
    """Create ``rf3`` (min.insync.replicas=2) and ``rf1`` on the cluster at ``bootstrap``, wait for
    ``ready()`` (every replica of rf3 in sync), warm up, then alternate the timed runs; (rf3, rf1) records/s."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, rf, configs in (("rf3", 3, {"min.insync.replicas": "2"}), ("rf1", 1, {})):
        admin.create_topics([NewTopic(name, 1, rf, config=configs)])[name].result(30)
    ready()
    for name in ("rf3", "rf1"):
        _produce(bootstrap, name, WARMUP)
    rf3, rf1 = [], []
    for _ in repeat(lambda: 0.0):
        rf3.append(_produce(bootstrap, "rf3", count))
        rf1.append(_produce(bootstrap, "rf1", count))
    return rf3, rf1


def _isr_full(bootstrap: str, topic: str, timeout_s: float = 60.0) -> None:
    """Wait (bounded) until partition 0 of ``topic`` has a leader and all its replicas in the ISR."""
    import time

    from confluent_kafka.admin import AdminClient

    admin, deadline = AdminClient({"bootstrap.servers": bootstrap}), time.monotonic() + timeout_s
    while True:
        p = admin.list_topics(topic, timeout=10).topics[topic].partitions.get(0)
        if p is not None and p.leader >= 0 and len(p.isrs) == len(p.replicas) == 3:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}-0 not fully in sync after {timeout_s:g} s")
        time.sleep(0.2)


def _apache_kafka(count: int) -> tuple[str, list[float], list[float]] | None:
    """(label, rf3, rf1) on Apache Kafka's three-node cluster, or None with the reason in SKIPPED."""
    from broker_bench import APACHE_KAFKA_CONFIG, APACHE_KAFKA_JVM

    from pyspark_kafka.testing.apache_kafka import ApacheKafka, KafkaStartError
    from pyspark_kafka.testing.maven import MavenUnavailable

    kafka = ApacheKafka(nodes=3, config=APACHE_KAFKA_CONFIG, java_options=APACHE_KAFKA_JVM)
    try:
        kafka.start()
    except (MavenUnavailable, KafkaStartError) as e:
        SKIPPED["apache-kafka-cluster anchor"] = f"Apache Kafka cannot run here: {str(e).splitlines()[0]}"
        kafka.stop()
        return None
    try:
        bootstrap = kafka.bootstrap_servers
        rf3, rf1 = _measure(bootstrap, count, lambda: _isr_full(bootstrap, "rf3"))
        return f"Apache Kafka {kafka.version} (KRaft, 3 nodes)", rf3, rf1
    finally:
        kafka.stop()


def run(quick: bool) -> list[dict]:
    from pyspark_kafka.broker.cluster import EmbeddedCluster

    SKIPPED.clear()
    count = 20_000 if quick else 200_000
    note = f"{count} records of 100 B, idempotent librdkafka, acks=all, partition 0"
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster(3, data_dir=Path(tmp) / "c") as cluster:
        bootstrap = cluster.bootstrap_servers
        rf3, rf1 = _measure(bootstrap, count, lambda: cluster.wait_for(
            lambda: len(cluster.isr("rf3", 0)) == 3 and cluster.leader("rf1", 0) >= 0, 30, "leaders"))
    rows = [metric("produce acks=all, RF 3 (min.insync.replicas=2) vs RF 1", "records/s", rf3, rf1,
                   "RF 1 acks=all on the same embedded cluster", note=note)]
    apache = _apache_kafka(count)
    if apache is not None:
        label, a_rf3, a_rf1 = apache
        rows += [
            metric("Apache Kafka: produce acks=all, RF 3 vs RF 1", "records/s", a_rf3, a_rf1,
                   f"RF 1 acks=all on {label}", note=note + " (the reference's own replication cost)"),
            metric("produce acks=all RF 3: embedded cluster vs Apache Kafka", "records/s", rf3, a_rf3,
                   f"RF 3 acks=all on {label}", note=note),
            metric("produce acks=all RF 1: embedded cluster vs Apache Kafka", "records/s", rf1, a_rf1,
                   f"RF 1 acks=all on {label}", note=note),
        ]
    return rows


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(row)
    for part, reason in SKIPPED.items():
        print(f"skipped {part}: {reason}")
