"""KIP-848 groups with librdkafka (confluent-kafka 2.16, ``group.protocol=consumer``) on the embedded broker:
join, rebalance when a member comes and goes, every record consumed exactly once across the
rebalances (each record's offset committed before the next poll), resume from the committed offsets,
and a regex subscription."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

import pytest

from pyspark_kafka.broker import EmbeddedBroker
from support.groups import PARTITIONS, assigned, group_offsets, new_group, produce
from support.topics import create_topic
from support.waiting import wait_until

CONFIG = {"group.consumer.heartbeat.interval.ms": "300"}


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory):
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("kip848-confluent"), config=CONFIG) as b:
        yield b


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False, "enable.partition.eof": False}
    config.update(extra)
    return Consumer(config)


def poll_into(consumers, seen: list, until, what: str, timeout_s: float = 45.0) -> None:
    """Poll every consumer in turn, committing each record before the next poll, until ``until()`` holds."""
    def step():
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None:
                assert msg.error() is None, msg.error()
                seen.append((msg.partition(), msg.offset(), msg.value().decode()))
                c.commit(message=msg, asynchronous=False)
        return until()
    wait_until(step, what, timeout_s, interval_s=0)


@pytest.mark.slow
def test_rebalance_add_remove_exactly_once_and_resume(kbroker):
    bs = kbroker.bootstrap_servers
    topic = create_topic(bs, f"k848-{uuid.uuid4().hex[:8]}", PARTITIONS)
    group = new_group()
    produce(bs, topic, [f"v{i}" for i in range(600)])
    seen: list = []
    c1 = consumer(bs, group)
    c1.subscribe([topic])
    poll_into([c1], seen, lambda: len(seen) >= 100, "c1 consumed 100 records")
    assert assigned(c1) == set(range(PARTITIONS))
    c2 = consumer(bs, group)
    c2.subscribe([topic])
    poll_into([c1, c2], seen, lambda: len(assigned(c2)) == PARTITIONS // 2 and len(assigned(c1)) == PARTITIONS // 2,
              "the two members split the partitions")
    assert assigned(c1).isdisjoint(assigned(c2))
    poll_into([c1, c2], seen, lambda: len({(p, o) for p, o, _ in seen}) >= 600, "all 600 records")
    for c in (c1, c2):
        c.poll(0.2)
    assert sorted(v for _, _, v in seen) == sorted(f"v{i}" for i in range(600)), "a record was lost or duplicated"
    # c2 leaves: c1 gets every partition back, and consumes new records once
    c2.close()
    poll_into([c1], seen, lambda: assigned(c1) == set(range(PARTITIONS)), "c1 owns every partition again")
    produce(bs, topic, [f"w{i}" for i in range(60)])
    poll_into([c1], seen, lambda: len(seen) >= 660, "the 60 new records")
    c1.close()
    assert len(seen) == 660 and len(set(v for _, _, v in seen)) == 660
    assert sum(group_offsets(bs, group).values()) == 660
    # a new member resumes from the committed offsets: it sees only what comes next
    produce(bs, topic, [f"x{i}" for i in range(6)])
    fresh: list = []
    c3 = consumer(bs, group)
    c3.subscribe([topic])
    try:
        poll_into([c3], fresh, lambda: len(fresh) >= 6, "the 6 records after the commits")
        for _ in range(5):
            assert c3.poll(0.1) is None
        assert sorted(v for _, _, v in fresh) == sorted(f"x{i}" for i in range(6))
    finally:
        c3.close()
    admin = AdminClient({"bootstrap.servers": bs})
    desc = admin.describe_consumer_groups([group])[group].result(20)
    assert str(desc.state).endswith("EMPTY") and str(desc.type).endswith("CONSUMER")


def test_regex_subscription_picks_up_a_new_topic(kbroker):
    bs = kbroker.bootstrap_servers
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    first = create_topic(bs, f"{prefix}-1", 2)
    c = consumer(bs, new_group(), **{"topic.metadata.refresh.interval.ms": 500})
    c.subscribe([f"^{prefix}-.*"])
    seen: list = []
    try:
        poll_into([c], seen, lambda: {tp.topic for tp in c.assignment()} == {first}, "the first topic assigned")
        second = create_topic(bs, f"{prefix}-2", 1)
        poll_into([c], seen, lambda: {tp.topic for tp in c.assignment()} == {first, second}, "the new topic assigned")
    finally:
        c.close()


def test_member_survives_a_broker_sigkill(tmp_path):
    """The group's state is in __consumer_offsets: after a SIGKILL (no snapshot: the log is replayed) and a
    restart on the same port, a group is back with its members and epochs (a raw member that sends
    nothing shows it), a live librdkafka member goes on with its partitions (nothing re-read), and the
    commits are kept."""
    import socket
    import time

    from confluent_kafka import TopicPartition

    from support.broker_process import BrokerProcess
    from support.consumer_groups import Member, describe
    from support.wire import WireClient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {"group.consumer.heartbeat.interval.ms": "300"}
    first = BrokerProcess(tmp_path / "data", port=port, config=config)
    c = None
    try:
        bs = first.bootstrap
        topic = create_topic(bs, "kip848-restart", PARTITIONS)
        produce(bs, topic, [f"a{i}" for i in range(60)])
        c = consumer(bs, "kip848-restart", **{"reconnect.backoff.max.ms": 500})
        c.subscribe([topic])
        seen: list = []
        poll_into([c], seen, lambda: len(seen) >= 60, "the first 60 records")
        admin = AdminClient({"bootstrap.servers": bs})
        before = admin.describe_consumer_groups(["kip848-restart"])["kip848-restart"].result(20)
        with WireClient(bs) as w:
            silent = Member(w, "kip848-silent", (topic,))
            silent.join()
        first.kill()
        second = BrokerProcess(tmp_path / "data", port=port, config=config)
        try:
            with WireClient(bs) as w:
                # the restart after the kill elects the node again (new leader epochs, as Kafka after an unclean
                # shutdown): the coordinator answers a retriable error until it has loaded its partition
                deadline = time.monotonic() + 20
                while True:
                    (g,) = describe(w, "kip848-silent")
                    if int(g.error_code) not in (14, 15, 16) or time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
                assert int(g.error_code) == 0, g
                assert (g.group_state, [(m.member_id, m.member_epoch) for m in g.members]) == (
                    "Stable", [(silent.member_id, silent.epoch)])
            produce(bs, topic, [f"b{i}" for i in range(12)])
            poll_into([c], seen, lambda: len(seen) >= 72, "the 12 records written after the restart")
            for _ in range(3):
                assert c.poll(0.2) is None
            assert sorted(v for _, _, v in seen) == sorted([f"a{i}" for i in range(60)] + [f"b{i}" for i in range(12)])
            admin = AdminClient({"bootstrap.servers": bs})  # referenced until the future resolves
            after = admin.describe_consumer_groups(["kip848-restart"])["kip848-restart"].result(20)
            assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
            committed = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20)
            assert sum(tp.offset for tp in committed) == 72
            c.close()
            c = None
        finally:
            second.kill()
    finally:
        if c is not None:
            c.close()
        first.kill()
