"""Replication cost: produce throughput to a replicated partition against the same cluster's RF 1.

On one :class:`~pyspark_kafka.broker.cluster.EmbeddedCluster` (a controller and three broker processes), a topic
with replication factor 3 (``min.insync.replicas=2``) and one with replication factor 1; librdkafka sends
``COUNT`` records of 100 bytes with ``acks=all`` to partition 0 of each. The anchor is RF 1 / acks=all on the
same cluster in the same run (the leader answers as soon as it has appended), so the ratio is the price of
waiting for two followers' fetches. Apache Kafka's three-node cluster is not measured here (see
docs/replication.md).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "connector"))

from common import metric, rate, repeat  # noqa: E402


def _produce(bootstrap: str, topic: str, count: int) -> float:
    """records/s of ``count`` idempotent acks=all 100-byte records to partition 0 (broker_bench's loop)."""
    from broker_bench import _produce as produce_seconds

    return rate(count, produce_seconds(bootstrap, topic, count, 100, "all", **{"enable.idempotence": True}))


def run(quick: bool) -> list[dict]:
    from confluent_kafka.admin import AdminClient, NewTopic

    from pyspark_kafka.broker.cluster import EmbeddedCluster

    count = 20_000 if quick else 200_000
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster(3, data_dir=Path(tmp) / "c") as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        for name, rf, configs in (("rf3", 3, {"min.insync.replicas": "2"}), ("rf1", 1, {})):
            admin.create_topics([NewTopic(name, 1, rf, config=configs)])[name].result(30)
        cluster.wait_for(lambda: len(cluster.isr("rf3", 0)) == 3 and cluster.leader("rf1", 0) >= 0, 30, "leaders")
        rf3 = repeat(lambda: _produce(cluster.bootstrap_servers, "rf3", count))
        rf1 = repeat(lambda: _produce(cluster.bootstrap_servers, "rf1", count))
    return [metric("produce 100 B acks=all, RF 3 (min.insync.replicas=2)", "records/s", rf3, rf1,
                   "RF 1 acks=all on the same embedded cluster", note=f"{count} records, idempotent librdkafka")]


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(row)
