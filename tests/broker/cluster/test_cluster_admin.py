"""Admin APIs of the replicated embedded cluster (issue 17): CreatePartitions and DeleteTopics forwarded to the
controller, ElectLeaders (KIP-460), AlterPartitionReassignments / ListPartitionReassignments (KIP-455).

Driven by Apache Kafka's own tools (4.3.1 jars: ``kafka-topics``, ``kafka-leader-election``,
``kafka-reassign-partitions``), confluent-kafka's AdminClient and raw kio requests. The answers' error codes are
pinned from Apache Kafka 4.3.1's three-node cluster (:func:`observe_admin_errors`); the slow test runs the same
observation there and compares. Every process is stopped by pid also when a test fails (``with`` blocks); waits are
bounded polls.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest, ReassignablePartition, ReassignableTopic,
)
from kio.schema.alter_partition_reassignments.v0.response import AlterPartitionReassignmentsResponse
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.list_partition_reassignments.v0.response import ListPartitionReassignmentsResponse
from kio.static.primitive import i32

from pyspark_kafka.broker.cluster import EmbeddedCluster
from pyspark_kafka.broker.cluster.embedded_cluster import metadata
from pyspark_kafka.testing import maven
from pyspark_kafka.testing.clusters import send_request
from support.kafka_tools import ToolServer, tool_server_for_module

FAST = {"broker.session.timeout.ms": "1000", "broker.heartbeat.interval.ms": "200",
        "replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "100", "default.replication.factor": "2",
        "auto.leader.rebalance.enable": "false"}
TOPICS = "org.apache.kafka.tools.TopicCommand"
ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"

#: Apache Kafka 4.3.1's answers (three-node KRaft cluster) to :func:`observe_admin_errors`.
KAFKA_ANSWERS = {
    "create_partitions 3": "NO_ERROR",
    "create_partitions 2 (a decrease)": "INVALID_PARTITIONS",
    "create_partitions 3 (no change)": "INVALID_PARTITIONS",
    "create_partitions unknown topic": "UNKNOWN_TOPIC_OR_PART",
    "create_partitions assignment of another size": "INVALID_REPLICA_ASSIGNMENT",
    "create_partitions assignment naming no broker": "INVALID_REPLICA_ASSIGNMENT",
    "elect PREFERRED on the preferred leader": "ELECTION_NOT_NEEDED",
    "elect UNCLEAN on a led partition": "ELECTION_NOT_NEEDED",
    "elect PREFERRED unknown partition": "UNKNOWN_TOPIC_OR_PART",
    "reassign unknown topic": "UNKNOWN_TOPIC_OR_PARTITION",
    "reassign cancel without one": "NO_REASSIGNMENT_IN_PROGRESS",
    "reassign empty target": "INVALID_REPLICA_ASSIGNMENT",
    "reassign a broker twice": "INVALID_REPLICA_ASSIGNMENT",
    "reassign to no broker": "INVALID_REPLICA_ASSIGNMENT",
    "reassign to the current replicas": "NONE",
    "list reassignments": "[]",
    "delete_topics": "NO_ERROR",
    "delete_topics again": "UNKNOWN_TOPIC_OR_PART",
}


def _code(future) -> str:
    try:
        future.result(30)
        return "NO_ERROR"
    except KafkaException as exc:
        return exc.args[0].name()


def _reassign(bootstrap: str, topic: str, partition: int, replicas) -> str:
    request = AlterPartitionReassignmentsRequest(topics=(ReassignableTopic(name=topic, partitions=(
        ReassignablePartition(partition_index=i32(partition),
                              replicas=None if replicas is None else tuple(i32(r) for r in replicas)),)),))
    response = send_request(bootstrap, request, AlterPartitionReassignmentsResponse, 30)
    assert response.error_code == 0, response
    return response.responses[0].partitions[0].error_code.name.upper()


def list_reassignments(bootstrap: str) -> list[tuple[str, int, list[int], list[int], list[int]]]:
    """Ongoing reassignments as ``(topic, partition, replicas, adding, removing)``."""
    response = send_request(bootstrap, ListPartitionReassignmentsRequest(topics=None),
                            ListPartitionReassignmentsResponse, 30)
    assert response.error_code == 0, response
    return [(t.name, int(p.partition_index), list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in response.topics for p in t.partitions]


def observe_admin_errors(bootstrap: str, wait_for_topic) -> dict[str, str]:
    """Run the same admin calls against any cluster of three brokers; ``{call: error name}``.

    ``wait_for_topic(name, partitions)`` returns once every partition of ``name`` has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    brokers = sorted(admin.list_topics(timeout=10).brokers)
    assert len(brokers) == 3
    topic = f"admin-{time.monotonic_ns()}"
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[brokers[0], brokers[1]]])])[topic].result(30)
    wait_for_topic(topic, 1)
    out = {"create_partitions 3": _code(admin.create_partitions([NewPartitions(topic, 3)])[topic])}
    wait_for_topic(topic, 3)
    out["create_partitions 2 (a decrease)"] = _code(admin.create_partitions([NewPartitions(topic, 2)])[topic])
    out["create_partitions 3 (no change)"] = _code(admin.create_partitions([NewPartitions(topic, 3)])[topic])
    out["create_partitions unknown topic"] = _code(admin.create_partitions([NewPartitions("no-such", 3)])["no-such"])
    out["create_partitions assignment of another size"] = _code(admin.create_partitions(
        [NewPartitions(topic, 4, replica_assignment=[[brokers[0]]])])[topic])
    out["create_partitions assignment naming no broker"] = _code(admin.create_partitions(
        [NewPartitions(topic, 4, replica_assignment=[[brokers[0], 99]])])[topic])

    def elect(kind, partition):
        results = admin.elect_leaders(kind, [TopicPartition(topic, partition)]).result(30)
        err = next(iter(results.values()))
        return "NO_ERROR" if err is None else err.name()

    out["elect PREFERRED on the preferred leader"] = elect(ElectionType.PREFERRED, 0)
    out["elect UNCLEAN on a led partition"] = elect(ElectionType.UNCLEAN, 0)
    out["elect PREFERRED unknown partition"] = elect(ElectionType.PREFERRED, 9)
    out["reassign unknown topic"] = _reassign(bootstrap, "no-such", 0, [brokers[0]])
    out["reassign cancel without one"] = _reassign(bootstrap, topic, 0, None)
    out["reassign empty target"] = _reassign(bootstrap, topic, 0, [])
    out["reassign a broker twice"] = _reassign(bootstrap, topic, 0, [brokers[0], brokers[0]])
    out["reassign to no broker"] = _reassign(bootstrap, topic, 0, [brokers[0], 99])
    out["reassign to the current replicas"] = _reassign(bootstrap, topic, 0, [brokers[0], brokers[1]])
    out["list reassignments"] = str([r for r in list_reassignments(bootstrap) if r[0] == topic])
    out["delete_topics"] = _code(admin.delete_topics([topic])[topic])
    out["delete_topics again"] = _code(admin.delete_topics([topic])[topic])
    return out


#: Apache Kafka 4.3.1's answers to :func:`observe_cancelled_reassignment` (broker ids as indexes 0..2).
KAFKA_CANCEL = {
    "reassign [2,1] with broker 2 down": "NONE",
    "listed": [(0, [2, 1, 0], [2], [0])],
    "the same target again": "NONE",
    "cancel": "NONE",
    "listed after the cancel": [],
    "replicas after the cancel": [1, 0],
    "cancel again": "NO_REASSIGNMENT_IN_PROGRESS",
}


def observe_cancelled_reassignment(bootstrap: str, wait_for_topic, kill) -> dict:
    """A reassignment to a dead broker stays in progress; list it, cancel it. ``kill(broker id)`` stops a broker
    for good (do this last). Broker ids are reported as indexes into the sorted broker list."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    brokers = sorted(admin.list_topics(timeout=10).brokers)
    topic = f"cancel-{time.monotonic_ns()}"
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[brokers[0], brokers[1]]])])[topic].result(30)
    wait_for_topic(topic, 1)
    kill(brokers[2])
    index = brokers.index
    out = {"reassign [2,1] with broker 2 down": _reassign(bootstrap, topic, 0, [brokers[2], brokers[1]])}
    out["listed"] = [(p, [index(r) for r in rs], [index(r) for r in a], [index(r) for r in rm])
                     for t, p, rs, a, rm in list_reassignments(bootstrap) if t == topic]
    out["the same target again"] = _reassign(bootstrap, topic, 0, [brokers[2], brokers[1]])
    out["cancel"] = _reassign(bootstrap, topic, 0, None)
    out["listed after the cancel"] = [r for r in list_reassignments(bootstrap) if r[0] == topic]
    deadline = time.monotonic() + 15
    while True:
        replicas = list(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].replicas)
        if brokers[2] not in replicas or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    out["replicas after the cancel"] = [index(r) for r in replicas]
    out["cancel again"] = _reassign(bootstrap, topic, 0, None)
    return out


@pytest.fixture(scope="module")
def classpath():
    """Apache Kafka 4's tools in one JVM for the module (support.kafka_tools.ToolServer); skips when the jars
    cannot be had."""
    yield from tool_server_for_module()


def run_tool(tools: ToolServer, bootstrap: str, main: str, *args: str, ok: bool = True) -> str:
    """Run one of Kafka's tools (its main class) against ``bootstrap``; stdout + stderr."""
    code, out = tools.run(main, "--bootstrap-server", bootstrap, *args, timeout_s=120)
    assert (code == 0) == ok, f"{main.rsplit('.', 1)[-1]} {' '.join(args)} exited {code}:\n{out[-3000:]}"
    return out


@pytest.fixture
def cluster(tmp_path):
    with EmbeddedCluster(3, data_dir=tmp_path / "cluster", config=FAST) as c:
        yield c


def _wait_led(cluster):
    def wait(topic, partitions):
        cluster.wait_for(lambda: all(cluster.leader(topic, p) >= 0 for p in range(partitions)), 20, "leaders")
    return wait


def _replicas(cluster, topic, partition) -> list[int]:
    p = cluster.partition_metadata(topic, partition)
    return [] if p is None else [int(r) for r in p.replica_nodes]


def _local_logs(cluster, topic) -> dict[int, list[str]]:
    return {n: sorted(d.name for d in cluster.node_dir(n).iterdir() if d.name.startswith(f"{topic}-"))
            for n in range(3)}


def _produce(cluster, topic, count, partition=0) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def _read(cluster, topic, expected, partition=0, timeout_s=30) -> list[str]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out, deadline = [], time.monotonic() + timeout_s
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                out.append(m.value().decode())
    finally:
        consumer.close()
    return out


def test_admin_errors_are_kafkas(cluster):
    assert observe_admin_errors(cluster.bootstrap_servers, _wait_led(cluster)) == KAFKA_ANSWERS
    assert observe_cancelled_reassignment(cluster.address(0), _wait_led(cluster), cluster.kill) == KAFKA_CANCEL


@pytest.mark.slow
def test_admin_requests_reach_the_raft_leader_among_three_controllers(tmp_path):
    with EmbeddedCluster(3, data_dir=tmp_path / "c", config=FAST, controllers=3) as cluster:
        assert observe_admin_errors(cluster.bootstrap_servers, _wait_led(cluster)) == KAFKA_ANSWERS
        assert observe_cancelled_reassignment(cluster.address(0), _wait_led(cluster), cluster.kill) == KAFKA_CANCEL


@pytest.mark.slow
def test_kafka_topics_alters_partitions_and_deletes_through_the_controller(cluster, classpath):
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("grow", 1, 2)])["grow"].result(30)
    _wait_led(cluster)("grow", 1)
    run_tool(classpath, bootstrap, TOPICS, "--alter", "--topic", "grow", "--partitions", "3")
    cluster.wait_for(lambda: all(len(cluster.isr("grow", p)) == 2 for p in range(3)), 20, "3 replicated partitions")
    replicas = [_replicas(cluster, "grow", p) for p in range(3)]
    assert len({r[0] for r in replicas}) == 3  # the new partitions continue the rack-unaware placement
    _produce(cluster, "grow", 5, partition=2)
    assert _read(cluster, "grow", 5, partition=2) == [f"v{i}" for i in range(5)]
    out = run_tool(classpath, bootstrap, TOPICS, "--alter", "--topic", "grow", "--partitions", "2", ok=False)
    assert "InvalidPartitionsException" in out and "would not be an increase" in out
    assert sum(len(v) for v in _local_logs(cluster, "grow").values()) >= 6
    down = replicas[0][0]
    cluster.kill(down)  # a broker that is down during the deletion deletes its logs when it replays the record
    run_tool(classpath, bootstrap, TOPICS, "--delete", "--topic", "grow")
    assert cluster.partition_metadata("grow", 0) is None
    assert _local_logs(cluster, "grow")[down] != []
    cluster.restart(down)
    cluster.wait_for(lambda: not any(_local_logs(cluster, "grow").values()), 20, "every broker's logs deleted")


@pytest.mark.slow
def test_preferred_election_moves_leadership_back_to_the_first_replica(cluster, classpath):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("pref", 2, replica_assignment=[[0, 1], [1, 2]])])["pref"].result(30)
    cluster.wait_for(lambda: cluster.isr("pref", 0) == [0, 1], 20, "full ISR")
    cluster.kill(0)
    cluster.wait_for(lambda: cluster.leader("pref", 0) == 1, 20, "broker 1 leads")
    results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("pref", 0)]).result(30)
    assert next(iter(results.values())).name() == "PREFERRED_LEADER_NOT_AVAILABLE"  # broker 0 is down
    cluster.restart(0)
    cluster.wait_for(lambda: sorted(cluster.isr("pref", 0)) == [0, 1], 30, "broker 0 back in the ISR")
    assert cluster.leader("pref", 0) == 1
    out = run_tool(classpath, cluster.bootstrap_servers, ELECTION, "--election-type", "PREFERRED",
                   "--all-topic-partitions")
    assert "Successfully completed leader election (PREFERRED) for partitions pref-0" in out
    assert cluster.leader("pref", 0) == 0
    out = run_tool(classpath, cluster.bootstrap_servers, ELECTION, "--election-type", "PREFERRED",
                   "--topic", "pref", "--partition", "1")
    assert "Valid replica already elected for partitions pref-1" in out


@pytest.mark.slow
def test_unclean_election_elects_a_replica_outside_the_isr_only_when_asked(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("lost", 1, replica_assignment=[[0, 1]])])["lost"].result(30)
    cluster.wait_for(lambda: cluster.isr("lost", 0) == [0, 1], 20, "full ISR")
    cluster.kill(1)
    cluster.wait_for(lambda: cluster.isr("lost", 0) == [0], 20, "ISR = broker 0")
    cluster.kill(0)
    cluster.wait_for(lambda: cluster.leader("lost", 0) == -1, 20, "the partition offline")

    survivor = AdminClient({"bootstrap.servers": cluster.address(2)})

    def unclean():
        results = survivor.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("lost", 0)]).result(30)
        err = next(iter(results.values()))
        return "NO_ERROR" if err is None else err.name()

    assert unclean() == "ELIGIBLE_LEADERS_NOT_AVAILABLE"  # no live replica at all
    cluster.restart(1)  # not in the ISR: with unclean.leader.election.enable=false it stays a follower
    assert cluster.leader("lost", 0) == -1
    assert unclean() == "NO_ERROR"
    assert cluster.leader("lost", 0) == 1 and cluster.isr("lost", 0) == [1]
    controller_log = (cluster.node_dir(cluster.active_controller()) / "node.log").read_text()
    assert "unclean leader election (ElectLeaders UNCLEAN) for lost-0: broker 1 (not in the ISR [0])" in controller_log


@pytest.mark.slow
def test_auto_leader_rebalance_restores_the_preferred_leader(tmp_path):
    config = {**FAST, "auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": "1"}
    with EmbeddedCluster(3, data_dir=tmp_path / "c", config=config) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic("auto", 1, replica_assignment=[[2, 0]])])["auto"].result(30)
        cluster.wait_for(lambda: cluster.isr("auto", 0) == [2, 0], 20, "full ISR")
        cluster.kill(2)
        cluster.wait_for(lambda: cluster.leader("auto", 0) == 0, 20, "broker 0 leads")
        cluster.restart(2)
        cluster.wait_for(lambda: cluster.leader("auto", 0) == 2, 30, "the preferred leader back")


def _plan(path, topic, partitions: dict[int, list[int]]) -> str:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in partitions.items()]}))
    return str(path)


@pytest.mark.slow
def test_reassignment_moves_every_record_to_the_new_replicas(cluster, classpath, tmp_path):
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("move", 1, replica_assignment=[[0, 1]])])["move"].result(30)
    cluster.wait_for(lambda: cluster.isr("move", 0) == [0, 1], 20, "full ISR")
    _produce(cluster, "move", 500)
    plan = _plan(tmp_path / "plan.json", "move", {0: [2, 1]})
    stop, written = threading.Event(), []

    def write():  # records written while the reassignment runs and the leader moves
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        i = 500
        while not stop.is_set() and i < 20000:
            producer.produce("move", f"v{i}".encode(), partition=0)
            producer.poll(0.005)  # serve delivery callbacks; paces the writes
            i += 1
        written.append((i, producer.flush(30)))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        out = run_tool(classpath, bootstrap, REASSIGN, "--reassignment-json-file", plan, "--execute")
        assert "Successfully started partition reassignment for move-0" in out
        cluster.wait_for(lambda: _replicas(cluster, "move", 0) == [2, 1], 30, "the reassignment completed")
    finally:
        stop.set()
        writer.join(60)
    (total, unsent), = written
    assert unsent == 0 and total > 500
    assert list_reassignments(bootstrap) == []
    assert cluster.leader("move", 0) == 2 and sorted(cluster.isr("move", 0)) == [1, 2]  # the first target replica
    out = run_tool(classpath, bootstrap, REASSIGN, "--reassignment-json-file", plan, "--verify")
    assert "Reassignment of partition move-0 is completed." in out
    cluster.wait_for(lambda: _local_logs(cluster, "move")[0] == [], 20, "the removed replica's log deleted")
    cluster.kill(0)  # the old leader is gone: every record comes from the new replicas
    assert _read(cluster, "move", total) == [f"v{i}" for i in range(total)]
    cluster.kill(1)  # and from the added replica alone (it is in the ISR: a clean election)
    cluster.wait_for(lambda: cluster.leader("move", 0) == 2, 20, "broker 2 leads")
    assert _read(cluster, "move", total) == [f"v{i}" for i in range(total)]
    cluster.restart(0)  # the removed replica replays the metadata log: it keeps no copy
    cluster.wait_for(lambda: _local_logs(cluster, "move")[0] == [], 20, "no log of move-0 on broker 0")
    assert _replicas(cluster, "move", 0) == [2, 1]


@pytest.mark.slow
def test_an_ongoing_reassignment_is_listed_verified_and_cancelled(cluster, classpath, tmp_path):
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("undo", 2, replica_assignment=[[0, 1], [0, 1]])])["undo"].result(30)
    cluster.wait_for(lambda: cluster.isr("undo", 0) == cluster.isr("undo", 1) == [0, 1], 20, "full ISR")
    _produce(cluster, "undo", 3)
    cluster.pause(2)  # the new replica cannot catch up: the reassignments stay in progress
    try:
        cluster.wait_for(lambda: 2 not in {b.node_id for b in metadata(cluster.address(0)).brokers}, 20,
                         "broker 2 fenced")
        # Kafka's tool refuses --execute naming a broker missing from Metadata; the raw request does not
        assert _reassign(bootstrap, "undo", 0, [2, 1]) == "NONE"
        assert _reassign(bootstrap, "undo", 1, [2, 1]) == "NONE"
        assert list_reassignments(bootstrap) == [("undo", 0, [2, 1, 0], [2], [0]), ("undo", 1, [2, 1, 0], [2], [0])]
        assert _replicas(cluster, "undo", 0) == [2, 1, 0] and cluster.leader("undo", 0) == 0
        plan = _plan(tmp_path / "plan.json", "undo", {0: [2, 1], 1: [2, 1]})
        # the tools get a live broker only: the paused broker 2 accepts connections (the kernel does) but never
        # answers, and a Java admin client whose first Metadata went there timed out "waiting for a node
        # assignment" under load (issue 25)
        out = run_tool(classpath, cluster.address(0), REASSIGN, "--reassignment-json-file", plan, "--verify")
        assert "Reassignment of partition undo-0 is still in progress." in out
        out = run_tool(classpath, cluster.address(0), TOPICS, "--describe", "--topic", "undo")
        assert "Adding Replicas: 2" in out and "Removing Replicas: 0" in out, out
        # (kafka-reassign-partitions --cancel sends the same, then clears throttles on every broker, which waits
        # for the fenced broker 2 as it would on Apache Kafka)
        assert _reassign(bootstrap, "undo", 0, None) == _reassign(bootstrap, "undo", 1, None) == "NONE"
        assert _reassign(bootstrap, "undo", 0, None) == "NO_REASSIGNMENT_IN_PROGRESS"
        assert list_reassignments(bootstrap) == []
        # Kafka's PartitionReassignmentRevert: the replicas without the adding ones, in the reassignment's order
        assert _replicas(cluster, "undo", 0) == [1, 0] and cluster.leader("undo", 0) == 0
    finally:
        cluster.resume(2)
    _produce(cluster, "undo", 3)
    assert _read(cluster, "undo", 6) == ["v0", "v1", "v2"] * 2


@pytest.mark.slow
def test_apache_kafka_answers_the_same_admin_errors(tmp_path):
    """The pinned :data:`KAFKA_ANSWERS` and :data:`KAFKA_CANCEL` are what Apache Kafka's three-node cluster
    answers."""
    from pyspark_kafka.testing.apache_kafka import ApacheKafka, KafkaStartError

    kafka = ApacheKafka(nodes=3)
    try:
        with kafka:
            def wait(topic, partitions):
                admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    t = admin.list_topics(topic, timeout=10).topics.get(topic)
                    if t is not None and len(t.partitions) == partitions and all(
                            p.leader >= 0 for p in t.partitions.values()):
                        return
                    time.sleep(0.1)
                raise TimeoutError(f"{topic} has no leaders")
            assert observe_admin_errors(kafka.bootstrap_servers, wait) == KAFKA_ANSWERS
            first = kafka.address(min(kafka.node_ids))
            assert observe_cancelled_reassignment(first, wait, kafka.kill) == KAFKA_CANCEL
    except (KafkaStartError, maven.MavenUnavailable) as e:
        pytest.skip(f"Apache Kafka cannot run here: {e}")
