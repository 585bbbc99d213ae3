"""Consumer groups on the embedded broker through kafka-python (a second, independent client
implementation of the group protocol and its assignors)."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from support.groups import DEADLINE_S, PARTITIONS
from support.kafka_python_member import PolledMember
from support.waiting import wait_until


def make_consumer(bootstrap: str, group: str, topic: str, **extra) -> KafkaConsumer:
    config = dict(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  heartbeat_interval_ms=200, session_timeout_ms=6000, enable_auto_commit=False)
    config.update(extra)
    consumer = KafkaConsumer(**config)
    # Know the topic's partitions before joining, so the leader's assignor never sees an empty topic.
    assert consumer.partitions_for_topic(topic) == set(range(PARTITIONS))
    consumer.subscribe([topic])
    return consumer


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap)
    for i, v in enumerate(values):
        p.send(topic, value=v.encode(), partition=i % PARTITIONS)
    p.flush(30)
    p.close()


def poll_until(consumers: list[KafkaConsumer], done, deadline_s: float = DEADLINE_S) -> list[list]:
    """Poll each consumer in turn until ``done(received)``; received[i] = [(partition, offset, value)]."""
    received: list[list] = [[] for _ in consumers]
    deadline = time.monotonic() + deadline_s
    while not done(received):
        assert time.monotonic() < deadline, f"condition not reached within {deadline_s} s"
        for i, c in enumerate(consumers):
            for records in c.poll(timeout_ms=50).values():
                received[i] += [(r.partition, r.offset, r.value.decode()) for r in records]
    return received


@pytest.mark.parametrize("assignor", [RangePartitionAssignor, RoundRobinPartitionAssignor, StickyPartitionAssignor])
def test_two_kafka_python_members_split_the_partitions(gbroker, topic, assignor):
    # Each member is polled by its own thread: kafka-python drops a join that finishes between
    # two polls and joins again (support/kafka_python_member.py), on Apache Kafka too.
    bootstrap = gbroker.bootstrap_servers
    group = f"kp-{uuid.uuid4().hex[:8]}"
    m1 = PolledMember(make_consumer(bootstrap, group, topic, partition_assignment_strategy=[assignor]), "kp-m1")
    m2 = PolledMember(make_consumer(bootstrap, group, topic, partition_assignment_strategy=[assignor]), "kp-m2")
    try:
        def split():
            a, b = m1.assignment(), m2.assignment()
            return a and b and not (a & b) and len(a | b) == PARTITIONS

        wait_until(split, "a split of the partitions between the two members", DEADLINE_S, 0.05)
        values = [f"v{i}" for i in range(60)]
        produce(bootstrap, topic, values)
        wait_until(lambda: len(m1.received()) + len(m2.received()) >= len(values), "all 60 records", DEADLINE_S, 0.05)
        assert sorted(r[2].decode() for m in (m1, m2) for r in m.received()) == sorted(values)
    finally:
        m1.close()
        m2.close()


def test_kafka_python_commit_and_resume(gbroker, topic):
    bootstrap = gbroker.bootstrap_servers
    group = f"kp-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, [f"x{i}" for i in range(60)])
    c = make_consumer(bootstrap, group, topic)
    try:
        poll_until([c], lambda r: len(r[0]) >= 60)
        c.commit()  # synchronous, the consumed positions
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert {tp.partition: c.committed(tp) for tp in tps} == {p: 10 for p in range(PARTITIONS)}
    finally:
        c.close()
    produce(bootstrap, topic, [f"y{i}" for i in range(6)])
    c2 = make_consumer(bootstrap, group, topic)
    try:
        got = poll_until([c2], lambda r: len(r[0]) >= 6)
        assert sorted(v for _, _, v in got[0]) == sorted(f"y{i}" for i in range(6))
    finally:
        c2.close()
