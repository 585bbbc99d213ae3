"""Consumer groups on the embedded broker, seen through confluent-kafka (librdkafka) consumers.

Unicast within a group (each partition to exactly one member), broadcast across groups,
rebalances when members come, leave or die (session timeout), with the range, round-robin and
cooperative-sticky assignors (which run in the clients), and auto/manual offset commits.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from support.groups import PARTITIONS, ChildConsumer, assigned, make_consumer, new_group, poll_until, produce


def split_between(consumers: list[Consumer]):
    """Condition: every consumer owns partitions, none shared, all 6 covered."""
    def done(_received) -> bool:
        sets = [assigned(c) for c in consumers]
        return all(sets) and sum(map(len, sets)) == PARTITIONS and set().union(*sets) == set(range(PARTITIONS))
    return done


def close_all(*consumers: Consumer) -> None:
    for c in consumers:
        c.close()


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_two_members_split_six_partitions_without_overlap(gbroker, topic, strategy):
    bootstrap = gbroker.bootstrap_servers
    group = new_group()
    c1 = make_consumer(bootstrap, group, **{"partition.assignment.strategy": strategy})
    c2 = make_consumer(bootstrap, group, **{"partition.assignment.strategy": strategy})
    try:
        c1.subscribe([topic])
        c2.subscribe([topic])
        poll_until([c1, c2], split_between([c1, c2]))
        values = [f"v{i}" for i in range(120)]
        produce(bootstrap, topic, values)
        got = poll_until([c1, c2], lambda r: len(r[0]) + len(r[1]) >= len(values))
        all_values = [v for r in got for _, _, v in r]
        assert sorted(all_values) == sorted(values)  # nothing missed, nothing twice
        for consumer, records in zip([c1, c2], got):
            assert {p for p, _, _ in records} <= assigned(consumer)
    finally:
        close_all(c1, c2)


def test_member_leaving_moves_its_partitions_to_the_survivor(gbroker, topic):
    bootstrap = gbroker.bootstrap_servers
    group = new_group()
    c1, c2 = make_consumer(bootstrap, group), make_consumer(bootstrap, group)
    try:
        c1.subscribe([topic])
        c2.subscribe([topic])
        poll_until([c1, c2], split_between([c1, c2]))
        c1.close()  # LeaveGroup
        poll_until([c2], lambda _: assigned(c2) == set(range(PARTITIONS)))
        values = [f"after-{i}" for i in range(60)]
        produce(bootstrap, topic, values)
        got = poll_until([c2], lambda r: set(values) <= {v for _, _, v in r[0]})
        assert {p for p, _, _ in got[0]} == set(range(PARTITIONS))
    finally:
        c2.close()


def test_member_dying_loses_its_partitions_after_the_session_timeout(gbroker, topic):
    bootstrap = gbroker.bootstrap_servers
    group = new_group()
    child = ChildConsumer(bootstrap, group, topic)
    survivor = make_consumer(bootstrap, group)
    try:
        survivor.subscribe([topic])

        def split(_):
            child.read()
            mine = assigned(survivor)
            return mine and child.assignment and not (mine & child.assignment) and \
                len(mine | child.assignment) == PARTITIONS

        poll_until([survivor], split)
        child.kill()  # no LeaveGroup: only the session timeout (2 s) tells the coordinator
        poll_until([survivor], lambda _: assigned(survivor) == set(range(PARTITIONS)))
    finally:
        child.kill()
        survivor.close()


def test_two_groups_each_read_every_message(gbroker, topic):
    bootstrap = gbroker.bootstrap_servers
    values = [f"b{i}" for i in range(60)]
    produce(bootstrap, topic, values)
    consumers = [make_consumer(bootstrap, new_group()), make_consumer(bootstrap, new_group())]
    try:
        for c in consumers:
            c.subscribe([topic])
        got = poll_until(consumers, lambda r: all(len(x) >= len(values) for x in r))
        for records in got:
            assert sorted(v for _, _, v in records) == sorted(values)
    finally:
        close_all(*consumers)


def committed(consumer: Consumer, topic: str) -> dict[int, int]:
    return {tp.partition: tp.offset for tp in consumer.committed(
        [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}


def test_auto_commit_lets_the_next_member_resume_after_the_last_record(gbroker, topic):
    bootstrap = gbroker.bootstrap_servers
    group = new_group()
    produce(bootstrap, topic, [f"a{i}" for i in range(60)])
    c1 = make_consumer(bootstrap, group, **{"enable.auto.commit": True, "auto.commit.interval.ms": 100})
    try:
        c1.subscribe([topic])
        poll_until([c1], lambda r: len(r[0]) >= 60)
        poll_until([c1], lambda _: committed(c1, topic) == {p: 10 for p in range(PARTITIONS)})
    finally:
        c1.close()
    produce(bootstrap, topic, [f"later{i}" for i in range(12)])
    c2 = make_consumer(bootstrap, group)
    try:
        c2.subscribe([topic])
        got = poll_until([c2], lambda r: len(r[0]) >= 12)
        extra = poll_until([c2], lambda r: True)  # one more pass: nothing old comes back
        assert sorted(v for _, _, v in got[0] + extra[0]) == sorted(f"later{i}" for i in range(12))
    finally:
        c2.close()


def test_manual_sync_and_async_commits_keep_offsets_and_metadata(gbroker, topic):
    bootstrap = gbroker.bootstrap_servers
    group = new_group()
    results = []
    c = make_consumer(bootstrap, group, **{"enable.auto.commit": False,
                                          "on_commit": lambda err, parts: results.append((err, parts))})
    try:
        c.subscribe([topic])
        poll_until([c], lambda _: len(assigned(c)) == PARTITIONS)
        c.commit(offsets=[TopicPartition(topic, 0, 5, metadata="checkpoint-a")], asynchronous=False)
        got = c.committed([TopicPartition(topic, 0)], timeout=10)[0]
        assert (got.offset, got.metadata) == (5, "checkpoint-a")
        c.commit(offsets=[TopicPartition(topic, 1, 7), TopicPartition(topic, 0, 6)], asynchronous=True)
        poll_until([c], lambda _: results)
        err, parts = results[0]
        assert err is None and all(tp.error is None for tp in parts)
        assert committed(c, topic)[0] == 6 and committed(c, topic)[1] == 7
    finally:
        c.close()
    # A new member of the group starts exactly at the committed offsets.
    produce(bootstrap, topic, [f"m{i}" for i in range(60)])
    c2 = make_consumer(bootstrap, group, **{"enable.auto.commit": False})
    try:
        c2.subscribe([topic])
        got = poll_until([c2], lambda r: {0, 1} <= {p for p, _, _ in r[0]})
        first = {}
        for p, o, _ in got[0]:
            first.setdefault(p, o)
        assert first[0] == 6 and first[1] == 7
    finally:
        c2.close()


def test_commit_for_a_missing_partition_fails_and_keeps_the_others(gbroker, topic):
    bootstrap = gbroker.bootstrap_servers
    c = make_consumer(bootstrap, new_group(), **{"enable.auto.commit": False})
    try:
        c.subscribe([topic])
        poll_until([c], lambda _: len(assigned(c)) == PARTITIONS)
        c.commit(offsets=[TopicPartition(topic, 2, 3)], asynchronous=False)
        with pytest.raises(Exception) as info:
            c.commit(offsets=[TopicPartition(topic, 99, 1)], asynchronous=False)
        assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        assert committed(c, topic)[2] == 3
    finally:
        c.close()
