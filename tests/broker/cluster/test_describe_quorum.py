"""DescribeQuorum (55) on a broker of a split cluster with a Raft controller quorum (KIP-595, KIP-836).

The broker forwards the request to the active controller, which answers from its Raft leader state (Kafka's
``KafkaRaftClient.handleDescribeQuorumRequest``): leader id and epoch, high watermark, every voter and observer
with its log end offset and last fetch and last caught-up timestamps. Kafka's ``kafka-metadata-quorum
--bootstrap-server ... describe --status`` and ``--replication`` (run in one JVM, ``support.kafka_tools``) read it.

Apache Kafka 4.4.0's answer, one broker and three dedicated controllers (``ApacheKafka(nodes=1, controllers=3)``,
measured 2026-11-29; the slow test below checks it live with the same checker)::

    LeaderId:               3000
    LeaderEpoch:            1
    HighWatermark:          24
    MaxFollowerLag:         0
    MaxFollowerLagTimeMs:   0
    CurrentVoters:          [{"id": 3000, "endpoints": ["CONTROLLER://127.0.0.1:32771"]}, {"id": 3001, ...}, ...]
    CurrentObservers:       [{"id": 1, "directoryId": "D7xOmcUfu6pf7YfSvpUMrA"}]

    NodeId  DirectoryId             LogEndOffset  Lag  LastFetchTimestamp  LastCaughtUpTimestamp  Status
    3000    AAAAAAAAAAAAAAAAAAAAAA  24            0    1795938460790       1795938460790          Leader
    3001    AAAAAAAAAAAAAAAAAAAAAA  24            0    1795938460329       1795938460329          Follower
    3002    AAAAAAAAAAAAAAAAAAAAAA  24            0    1795938460328       1795938460328          Follower
    1       D7xOmcUfu6pf7YfSvpUMrA  24            0    1795938460328       1795938460328          Observer

Ours prints the same fields. Differences: the high watermark (Kafka writes more records at bootstrap), and no
directory id for observers (no KIP-853 directory ids here: the observer line has no ``directoryId``, the column
is zeros).

Apache Kafka 4.4.0's one node in combined mode (``ApacheKafka(nodes=1)``, measured 2026-11-29)::

    LeaderId:               1
    LeaderEpoch:            1
    HighWatermark:          15
    MaxFollowerLag:         0
    MaxFollowerLagTimeMs:   0
    CurrentVoters:          [{"id": 1, "endpoints": ["CONTROLLER://127.0.0.1:37697"]}]
    CurrentObservers:       []

    NodeId  DirectoryId             LogEndOffset  Lag  LastFetchTimestamp  LastCaughtUpTimestamp  Status
    1       AAAAAAAAAAAAAAAAAAAAAA  15            0    1795950028928       1795950028928          Leader

Our one-node cluster (``EmbeddedBroker()``, node 0) prints the same, its voter endpoint being its client listener
under the name ``CONTROLLER`` (it has no controller listener of its own; it answers the controller's APIs there,
so ``--bootstrap-controller`` on that endpoint works too).
"""

from __future__ import annotations

import json
import time

import pytest

from pyspark_kafka.broker.cluster import EmbeddedCluster

QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"  # kafka-metadata-quorum.sh



def describe(tools, bootstrap: str) -> tuple[dict[str, str], dict[int, list[str]]]:
    """``describe --status`` as {field: value} and ``--replication`` as {node id: row fields}."""
    code, out = tools.run(QUORUM, "--bootstrap-server", bootstrap, "describe", "--status", timeout_s=120)
    assert code == 0, out
    status = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in out.splitlines() if ":" in line)}
    code, out = tools.run(QUORUM, "--bootstrap-server", bootstrap, "describe", "--replication", timeout_s=120)
    assert code == 0, out
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert lines[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                        "LastCaughtUpTimestamp", "Status"], out
    return status, {int(r[0]): r for r in lines[1:]}


def check_quorum(status: dict[str, str], rows: dict[int, list[str]], leader: int, epoch: int,
                 controllers: dict[int, int], brokers: list[int]) -> None:
    """What both Apache Kafka 4.4.0 and the embedded cluster print for a caught-up quorum: ``controllers`` is
    {voter id: controller port}."""
    assert (int(status["LeaderId"]), int(status["LeaderEpoch"])) == (leader, epoch)
    hw = int(status["HighWatermark"])
    assert hw > 0
    assert int(status["MaxFollowerLag"]) == 0 and int(status["MaxFollowerLagTimeMs"]) >= 0
    voters = json.loads(status["CurrentVoters"])
    assert sorted((v["id"], tuple(v["endpoints"])) for v in voters) == \
        [(c, (f"CONTROLLER://127.0.0.1:{port}",)) for c, port in sorted(controllers.items())]
    assert sorted(o["id"] for o in json.loads(status["CurrentObservers"])) == brokers
    assert sorted(rows) == sorted([*controllers, *brokers])
    now = time.time() * 1000
    for node, (_, _, end, lag, fetched, caught_up, role) in rows.items():
        assert role == ("Leader" if node == leader else "Follower" if node in controllers else "Observer")
        assert int(end) == hw and int(lag) == 0  # every replica caught up
        assert now - 60_000 < int(caught_up) <= int(fetched) <= now + 1_000  # KIP-836 times, ms since the epoch


def wait_caught_up(tools, bootstrap: str, timeout_s: float = 20.0):
    """``describe`` until every replica shows lag 0 (bounded): a fetch in flight can leave one a record behind."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, rows = describe(tools, bootstrap)
        if all(r[3] == "0" for r in rows.values()) or time.monotonic() > deadline:
            return status, rows
        time.sleep(0.2)


def test_kafka_metadata_quorum_describes_a_raft_controller_quorum_through_a_broker(tools, tmp_path):
    from support.raft import describe_quorum

    with EmbeddedCluster(1, data_dir=tmp_path / "c", controllers=3) as cluster:
        leader = cluster.active_controller()
        epoch = cluster.controller_quorum(leader)["leader_epoch"]
        status, rows = wait_caught_up(tools, cluster.bootstrap_servers)
        check_quorum(status, rows, leader, epoch, cluster.raft_ports, cluster.broker_ids)
        # another voter: the controller channel answers NOT_CONTROLLER (41) naming the leader (the broker's router
        # then asks the leader); its Raft listener answers NOT_LEADER_OR_FOLLOWER (6), as Kafka's KafkaRaftClient
        follower = next(c for c in cluster.controller_ids if c != leader)
        refused = cluster.controller_call(follower, {"op": "describe_quorum"})
        assert (refused["error_code"], refused["leader_id"]) == (41, leader)
        answer = describe_quorum(cluster.host, cluster.raft_ports[follower], timeout_s=5)
        assert answer is not None and answer.error_code == 6


@pytest.mark.slow
def test_apache_kafka_describes_its_raft_quorum_as_we_do(tools):
    """The same checker against Apache Kafka 4.4.0: one broker, three dedicated controllers (about 20 s)."""
    from pyspark_kafka.testing import maven
    from pyspark_kafka.testing.apache_kafka import ApacheKafka

    try:
        kafka = ApacheKafka(nodes=1, controllers=3).start()
    except maven.MavenUnavailable as e:
        pytest.skip(f"Apache Kafka unavailable: {e}")
    try:
        status, rows = wait_caught_up(tools, kafka.bootstrap_servers)
        leader, epoch = int(status["LeaderId"]), int(status["LeaderEpoch"])
        ports = {v["id"]: int(v["endpoints"][0].rsplit(":", 1)[1]) for v in json.loads(status["CurrentVoters"])}
        assert sorted(ports) == kafka.controller_ids
        check_quorum(status, rows, leader, epoch, ports, kafka.node_ids)
    finally:
        kafka.stop()


def check_one_node(status: dict[str, str], rows: dict[int, list[str]], node: int, port: int) -> None:
    """What Apache Kafka 4.4.0's combined node and our one-node cluster print: one voter (``node``, its
    ``CONTROLLER`` endpoint on ``port``) leading at epoch 1, no observer, caught up."""
    assert (int(status["LeaderId"]), int(status["LeaderEpoch"])) == (node, 1)
    hw = int(status["HighWatermark"])
    assert hw > 0 and int(status["MaxFollowerLag"]) == 0 and int(status["MaxFollowerLagTimeMs"]) == 0
    assert json.loads(status["CurrentVoters"]) == [{"id": node, "endpoints": [f"CONTROLLER://127.0.0.1:{port}"]}]
    assert json.loads(status["CurrentObservers"]) == []
    assert list(rows) == [node]
    _, directory, end, lag, fetched, caught_up, role = rows[node]
    assert (directory, int(end), int(lag), role) == ("A" * 22, hw, 0, "Leader")
    now = time.time() * 1000
    assert now - 60_000 < int(caught_up) <= int(fetched) <= now + 1_000


def test_kafka_metadata_quorum_describes_the_one_node_cluster_as_a_combined_kafka_node(tools):
    """About 2 s. ``describe --status`` / ``--replication`` on ``EmbeddedBroker()`` print what they print for
    Apache Kafka's one combined node (module docstring); ``--bootstrap-controller`` on the voter endpoint answers
    the same leader."""
    from pyspark_kafka.broker import EmbeddedBroker

    with EmbeddedBroker() as node:
        port = int(node.bootstrap_servers.rsplit(":", 1)[1])
        status, rows = describe(tools, node.bootstrap_servers)
        check_one_node(status, rows, 0, port)
        endpoint = json.loads(status["CurrentVoters"])[0]["endpoints"][0].split("//", 1)[1]
        code, out = tools.run(QUORUM, "--bootstrap-controller", endpoint, "describe", "--status", timeout_s=120)
    assert code == 0 and "LeaderId:               0" in out, out


@pytest.mark.slow
def test_apache_kafka_describes_its_one_combined_node_as_we_do(tools):
    """The same checker against Apache Kafka 4.4.0's one combined node (about 15 s)."""
    from pyspark_kafka.testing import maven
    from pyspark_kafka.testing.apache_kafka import ApacheKafka

    try:
        kafka = ApacheKafka(nodes=1).start()
    except maven.MavenUnavailable as e:
        pytest.skip(f"Apache Kafka unavailable: {e}")
    try:
        status, rows = describe(tools, kafka.bootstrap_servers)
        voter = json.loads(status["CurrentVoters"])[0]
        check_one_node(status, rows, kafka.node_ids[0], int(voter["endpoints"][0].rsplit(":", 1)[1]))
    finally:
        kafka.stop()
