"""Apache Kafka's three nodes answer Fetch, Produce and ListOffsets on a broker with no replica of the partition as
``support/not_hosted.py`` expects (the embedded cluster's half is in
``tests/broker/cluster/test_cluster_client_fixes.py``): NOT_LEADER_OR_FOLLOWER for a partition the cluster has,
UNKNOWN_TOPIC_OR_PARTITION for one it does not have, UNKNOWN_TOPIC_ID for an unknown topic id, per partition.
Uses the session's ``apache-kafka-cluster`` backend (started once per pytest process; skipped without Java and
Maven); the requests take well under a second.
"""

from __future__ import annotations

import pytest

from integration_tests import clusters
from support.not_hosted import EXPECTED, probe

pytestmark = pytest.mark.slow


def test_apache_kafka_answers_fetch_and_produce_without_the_replica_as_pinned(_backend_pool):
    try:
        cluster = _backend_pool("apache-kafka-cluster")
    except clusters.BackendUnavailable as e:
        pytest.skip(f"backend apache-kafka-cluster unavailable: {e}")
    kafka = cluster.kafka
    assert probe(cluster.bootstrap, {n: kafka.address(n) for n in kafka.node_ids}) == EXPECTED  # Produce v13 too
