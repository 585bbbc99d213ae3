"""A restarted cluster broker answers no request before its metadata caught up with its registration.

Kafka's broker enables request processing only after ``BrokerLifecycleManager.initialCatchUpFuture`` (its metadata
image reached the log's end at registration); ours read requests as soon as the listener was bound, so a client
reconnecting to a restarted node during its metadata replay was told an existing topic did not exist
(UNKNOWN_TOPIC_OR_PARTITION) or got NOT_LEADER_OR_FOLLOWER for a stale epoch. Found comparing the clients' retries
in the failover scenarios on Apache Kafka's and our three-node cluster (integration_tests/test_failover.py).

The test restarts a killed broker in a thread and, from the moment its port accepts connections until ``restart``
returns, asks it for the topic's metadata every 10 ms (bounded by the restart's own timeout): every answer names the
topic with the new leader and its leader epoch, never an older state.
"""

from __future__ import annotations

import pytest

import threading
import time

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse

from pyspark_kafka.broker.cluster import EmbeddedCluster
from pyspark_kafka.testing.clusters import send_request

TOPICS = 30
"""Topics created first: their records make the restarted broker's metadata replay long enough to be seen."""


def _metadata(address: str, topic: str) -> tuple[int, tuple[tuple[int, int], ...]]:
    """(topic error code, ((leader, leader epoch) per partition)) from the broker at ``address``."""
    response = send_request(address, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=topic),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), MetadataResponse, timeout_s=5)
    t = response.topics[0]
    return int(t.error_code), tuple((int(p.leader_id), int(p.leader_epoch)) for p in t.partitions)


@pytest.mark.slow
def test_a_restarted_broker_answers_only_once_its_metadata_caught_up(tmp_path):
    config = {"min.insync.replicas": "2", "default.replication.factor": "3"}
    with EmbeddedCluster(3, data_dir=tmp_path / "cluster", config=config) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        names = [f"t{i}" for i in range(TOPICS)]
        for name, future in admin.create_topics([NewTopic(n, 1, 3) for n in names]).items():
            future.result(30)
        topic = names[-1]
        cluster.wait_for(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR")
        old = cluster.leader(topic, 0)
        cluster.kill(old)
        cluster.wait_for(lambda: cluster.leader(topic, 0) not in (-1, old), 30, "a new leader")
        expected = _metadata(cluster.address(cluster.leader(topic, 0)), topic)
        assert expected[0] == 0 and expected[1][0][1] >= 1, expected

        restarted = threading.Event()
        failure: list[BaseException] = []

        def restart():
            try:
                cluster.restart(old)
            except BaseException as e:  # reported below
                failure.append(e)
            finally:
                restarted.set()

        thread = threading.Thread(target=restart, daemon=True)
        thread.start()
        answers = []
        while not restarted.is_set():
            try:
                answers.append(_metadata(cluster.address(old), topic))
            except OSError:
                pass  # not listening yet
            restarted.wait(0.01)
        thread.join(60)
        assert failure == []
        answers.append(_metadata(cluster.address(old), topic))
        assert set(answers) == {expected}, sorted(set(answers))
