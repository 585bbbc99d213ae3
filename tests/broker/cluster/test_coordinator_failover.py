"""The group and transaction coordinators move with the leadership of ``__consumer_offsets`` /
``__transaction_state`` in the replicated embedded cluster (docs/replication.md, "Coordinators"), driven by
librdkafka (confluent-kafka). Three brokers and a controller as processes, stopped by pid also when a test fails
(the ``with`` block); waits are bounded polls.

- Committed group offsets survive SIGKILL of the coordinator's broker: FindCoordinator then names another broker
  (the new leader of the group's ``__consumer_offsets`` partition), which serves the offsets it loaded.
- A transaction over partitions led by three different brokers commits (markers through WriteTxnMarkers), an
  aborted one is invisible to read_committed; the producer carries on after SIGKILL of its transaction
  coordinator, between transactions and in the middle of one (Kafka's behaviour: NOT_COORDINATOR, the client
  finds the new coordinator; no error reaches the application).
- An open transaction whose coordinator died and whose producer went silent is aborted by the new coordinator
  after ``transaction.timeout.ms`` (markers to every partition, so read_committed readers move past it), and the
  producer's late commit fails fatally. Apache Kafka 4.3.1's three-node cluster gives the same outcomes
  (``integration_tests/kafka_txn_failover_reference.py``, run by hand).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse
from kio.static.primitive import i8

from pyspark_kafka.broker.cluster import EmbeddedCluster
from pyspark_kafka.broker.coordinator.internal_topics import partition_for
from pyspark_kafka.testing.clusters import send_request

FAST = {"broker.session.timeout.ms": "1000", "broker.heartbeat.interval.ms": "200",
        "replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "100", "min.insync.replicas": "2",
        "default.replication.factor": "3", "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "3",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


@pytest.fixture
def cluster(tmp_path):
    with EmbeddedCluster(3, data_dir=tmp_path / "cluster", config=FAST) as c:
        yield c


def create(cluster, name, partitions):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, 3)])[name].result(30)
    cluster.wait_for(lambda: all(len(cluster.isr(name, p)) == 3 for p in range(partitions)), 30, "full ISR")


def find_coordinator(cluster, key: str, key_type: int, timeout_s: float = 20.0) -> int:
    """The coordinator node every live broker names for ``key`` (they must agree), polled until one is named."""
    deadline = time.monotonic() + timeout_s
    while True:
        named = set()
        for node in cluster.broker_ids:
            if node in cluster.procs and cluster.procs[node].poll() is None:
                answer = send_request(cluster.address(node), FindCoordinatorRequest(
                    key_type=i8(key_type), coordinator_keys=(key,)), FindCoordinatorResponse)
                named.add(int(answer.coordinators[0].node_id) if answer.coordinators[0].error_code == 0 else -1)
        if len(named) == 1 and -1 not in named:
            return named.pop()
        assert time.monotonic() < deadline, f"no agreed coordinator for {key!r}: {named}"
        time.sleep(0.1)


def read(cluster, topic, partitions, isolation, expected, timeout_s=30):
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "reader",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                out.append(m.value().decode())
        end = time.monotonic() + 1.0  # nothing more than expected arrives
        while time.monotonic() < end:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                out.append(m.value().decode())
    finally:
        consumer.close()
    return sorted(out)


@pytest.mark.slow
def test_committed_offsets_survive_sigkill_of_the_group_coordinator(cluster):
    create(cluster, "orders", 2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(10):
        producer.produce("orders", f"r{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    group = "billing"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    assert len(got) == 10
    consumer.commit(asynchronous=False)
    consumer.close()

    coordinator = find_coordinator(cluster, group, 0)
    partition = partition_for(group, 3)
    assert coordinator == cluster.leader("__consumer_offsets", partition)
    assert sorted(cluster.isr("__consumer_offsets", partition)) == [0, 1, 2]  # offsets.topic.replication.factor
    cluster.kill(coordinator)
    cluster.wait_for(lambda: cluster.leader("__consumer_offsets", partition) not in (-1, coordinator), 20,
                     "a new leader of the group's __consumer_offsets partition")
    moved = find_coordinator(cluster, group, 0)
    assert moved != coordinator and moved == cluster.leader("__consumer_offsets", partition)

    again = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                      "enable.auto.commit": False})
    try:
        committed = again.committed([TopicPartition("orders", 0), TopicPartition("orders", 1)], timeout=30)
    finally:
        again.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 5), (1, 5)]
    kafka = pytest.importorskip("kafka")  # a second, independent client reads the same offsets
    other = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers.split(","), group_id=group,
                                enable_auto_commit=False, request_timeout_ms=30000)
    try:
        assert [other.committed(kafka.TopicPartition("orders", p)) for p in (0, 1)] == [5, 5]
    finally:
        other.close()


@pytest.mark.slow
def test_a_transaction_across_brokers_commits_an_aborted_one_is_invisible_and_coordinator_failover(cluster):
    create(cluster, "tx", 3)
    assert {cluster.leader("tx", p) for p in range(3)} == {0, 1, 2}  # each partition on another leader
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "payments",
                         "transaction.timeout.ms": "60000"})
    producer.init_transactions(30)

    def transaction(tag, commit=True):
        producer.begin_transaction()
        for p in range(3):
            producer.produce("tx", f"{tag}-{p}".encode(), partition=p)
        assert producer.flush(30) == 0  # sent and acknowledged (abort would otherwise purge them unsent)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)

    transaction("one")
    transaction("aborted", commit=False)
    committed = [f"{t}-{p}" for t in ("one",) for p in range(3)]
    assert read(cluster, "tx", 3, "read_committed", 3) == sorted(committed)
    assert len(read(cluster, "tx", 3, "read_uncommitted", 6)) == 6  # the aborted records are in the logs

    # SIGKILL the transaction coordinator between transactions: the producer carries on with the new one
    coordinator = find_coordinator(cluster, "payments", 1)
    partition = partition_for("payments", 3)
    assert coordinator == cluster.leader("__transaction_state", partition)
    cluster.kill(coordinator)
    cluster.wait_for(lambda: cluster.leader("__transaction_state", partition) not in (-1, coordinator), 20,
                     "a new leader of the id's __transaction_state partition")
    transaction("two")
    # and in the middle of one: its records are acknowledged, then the coordinator dies before the commit
    cluster.restart(coordinator)
    cluster.wait_for(lambda: all(len(cluster.isr("tx", p)) == 3 for p in range(3)), 30, "full ISR again")
    second = find_coordinator(cluster, "payments", 1)
    producer.begin_transaction()
    for p in range(3):
        producer.produce("tx", f"three-{p}".encode(), partition=p)
    assert producer.flush(30) == 0
    cluster.kill(second)
    cluster.wait_for(lambda: cluster.leader("__transaction_state", partition) not in (-1, second), 20,
                     "another new transaction coordinator")
    producer.commit_transaction(60)
    committed += [f"{t}-{p}" for t in ("two", "three") for p in range(3)]
    assert read(cluster, "tx", 3, "read_committed", 9) == sorted(committed)


@pytest.mark.slow
def test_the_new_coordinator_aborts_an_open_transaction_after_its_timeout(cluster):
    from confluent_kafka import KafkaException

    create(cluster, "late", 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "late-payer",
                         "transaction.timeout.ms": "2000"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in range(3):
        producer.produce("late", f"open-{p}".encode(), partition=p)
    assert producer.flush(30) == 0
    partition = partition_for("late-payer", 3)
    coordinator = find_coordinator(cluster, "late-payer", 1)
    cluster.kill(coordinator)
    cluster.wait_for(lambda: cluster.leader("__transaction_state", partition) not in (-1, coordinator), 20,
                     "a new transaction coordinator")
    # the new coordinator loaded the Ongoing transaction and aborts it once transaction.timeout.ms passed: the
    # ABORT markers let the last stable offset of every partition reach its end (1 record + 1 marker)
    reader = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "lso",
                       "isolation.level": "read_committed"})
    try:
        def settled():  # a read_committed ListOffsets LATEST answers the last stable offset
            try:
                return all(reader.get_watermark_offsets(TopicPartition("late", p), timeout=5)[1] == 2
                           for p in range(3))
            except KafkaException as exc:  # a partition moved with the killed broker: its new leader answers
                # OFFSET_NOT_AVAILABLE until its high watermark caught up (KIP-207; retriable in Kafka's Java client)
                if exc.args[0].code() == KafkaError.OFFSET_NOT_AVAILABLE or exc.args[0].retriable():
                    return False
                raise

        cluster.wait_for(settled, 30, "the timed-out transaction's markers")
    finally:
        reader.close()
    assert read(cluster, "late", 3, "read_committed", 0, timeout_s=2) == []
    assert len(read(cluster, "late", 3, "read_uncommitted", 3)) == 3
    with pytest.raises(KafkaException) as failed:  # the coordinator bumped the epoch when it aborted
        producer.commit_transaction(30)
    assert failed.value.args[0].fatal()  # librdkafka's _FENCED, as with Apache Kafka 4.3.1 (kafka_txn_failover_reference)


def test_too_few_brokers_for_the_internal_topics_replication_factor_answer_coordinator_not_available(tmp_path):
    # Apache Kafka 4.3.1, one node with offsets.topic.replication.factor=3 (checked by hand): FindCoordinator
    # answers COORDINATOR_NOT_AVAILABLE (15) for groups and transactional ids, every time; the factor is not capped
    config = {"offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3"}
    with EmbeddedCluster(1, data_dir=tmp_path / "cluster", config=config) as cluster:
        for key_type in (0, 1):
            for _ in range(2):
                answer = send_request(cluster.address(0), FindCoordinatorRequest(
                    key_type=i8(key_type), coordinator_keys=("g",)), FindCoordinatorResponse).coordinators[0]
                assert (int(answer.error_code), int(answer.node_id)) == (15, -1)
                assert "does not meet the required replication factor '3'" in answer.error_message
        assert cluster.leader("__consumer_offsets", 0) == -1  # not created


def test_a_kip848_group_gets_a_topic_with_no_replica_on_its_coordinator(cluster):
    # Kafka's group coordinator resolves subscriptions and topic ids from the cluster's metadata image, not from
    # the replicas its broker hosts: a topic whose only replica is on another broker is assigned and described
    group = "far-readers"
    coordinator = find_coordinator(cluster, group, 0)
    elsewhere = next(n for n in cluster.broker_ids if n != coordinator)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("far", 2, replica_assignment=[[elsewhere], [elsewhere]])])["far"].result(30)
    cluster.wait_for(lambda: all(cluster.leader("far", p) == elsewhere for p in range(2)), 30, "far's leaders")
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "1"})  # one replica: min ISR 2
    for i in range(4):
        producer.produce("far", f"f{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["far"])
    got = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value().decode())
        assert sorted(got) == ["f0", "f1", "f2", "f3"]
        described = admin.describe_consumer_groups([group])[group].result(30)
        [member] = described.members
        assert sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) == [("far", 0), ("far", 1)]
    finally:
        consumer.close()
