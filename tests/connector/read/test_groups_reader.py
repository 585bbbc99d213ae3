"""Consumer-group options of the pykafka reader against the embedded broker, without Spark.

The stream reader's methods are called the way Spark's micro-batch engine calls them
(initialOffset, latestOffset(start), partitions, read, commit); the group's offsets are
checked with independent confluent-kafka clients.
"""

from __future__ import annotations

import logging
import pickle
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable

from pyspark_kafka.groups import GroupBatch, GroupCommitError
from pyspark_kafka.read import KafkaBatchReader, kafka_schema
from support.groups import group_offsets
from support.streams import produce, stream_reader

DEADLINE_S = 60.0


def commit_outside(bootstrap: str, group: str, topic: str, offsets: dict) -> None:
    """Commit ``{partition: offset}`` as a non-member (as another tool would)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def values(reader, parts) -> list:
    return [v for p in parts for b in reader.read(p) for v in b.column("value").to_pylist()]


def test_commit_offsets_commits_what_spark_finished_and_never_moves_backwards(bootstrap, make_topic):
    topic, group = make_topic(partitions=2), f"g-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, 6, partition=0)
    produce(bootstrap, topic, 4, partition=1)
    reader = stream_reader(bootstrap, subscribe=topic, startingOffsets="earliest", commitOffsets="true",
                           **{"kafka.group.id": group})
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {topic: {"0": 6, "1": 4}}
        assert group_offsets(bootstrap, group) == {}  # the initial offsets are a start, not progress
        assert len(values(reader, reader.partitions(start, end))) == 10
        reader.latestOffset(end, ReadAllAvailable())  # Spark asks for the next batch: the first one is done
        assert group_offsets(bootstrap, group) == {0: 6, 1: 4}
        assert pickle.loads(pickle.dumps(reader))._group.owned == set()  # shipped to executors without its consumer

        produce(bootstrap, topic, 4, partition=0)  # partition 0 ends at 10 now
        commit_outside(bootstrap, group, topic, {0: 9})  # someone else is ahead on partition 0
        reader.commit({topic: {"0": 8, "1": 4}})  # e.g. a replayed micro-batch: behind the group on partition 0
        assert group_offsets(bootstrap, group) == {0: 9, 1: 4}
        reader.commit({topic: {"0": 10, "1": 4}})
        assert group_offsets(bootstrap, group) == {0: 10, 1: 4}
    finally:
        reader.stop()


def test_a_failed_commit_is_reported_not_fatal(bootstrap, make_topic, caplog):
    topic, group = make_topic(partitions=1), f"g-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, 5, partition=0)
    commit_outside(bootstrap, group, topic, {0: 1})
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    reader = stream_reader(bootstrap, subscribe=topic, startingOffsets="earliest", commitOffsets="true",
                           **{"kafka.group.id": group})
    try:
        member.subscribe([topic])  # an active member: Kafka refuses commits from outside the group
        deadline = time.monotonic() + DEADLINE_S
        while not member.assignment():
            assert time.monotonic() < deadline, "the member was never assigned the partition"
            member.poll(0.2)
        with caplog.at_level(logging.WARNING, logger="pyspark_kafka.read.consumer_group"):
            end = reader.latestOffset({topic: {"0": 5}}, ReadAllAvailable())  # commits 5: rejected, no exception
        assert end == {topic: {"0": 5}}
        assert "the group has active members" in caplog.text and f"consumer group '{group}'" in caplog.text
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pyspark_kafka.read.consumer_group"):
            reader.latestOffset({topic: {"0": 5}}, ReadAllAvailable())  # an idle trigger right after: no retry
        assert "could not commit" not in caplog.text
        assert group_offsets(bootstrap, group) == {0: 1}  # nothing changed
    finally:
        reader.stop()
        member.close()


def test_batch_commit_failure_raises_naming_the_group_and_keeps_its_offsets(bootstrap, make_topic):
    topic, group = make_topic(partitions=1), f"g-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, 5, partition=0)
    commit_outside(bootstrap, group, topic, {0: 2})
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    batch = GroupBatch(None, {(topic, 0): 2}, {(topic, 0): 5}, group, {"kafka.bootstrap.servers": bootstrap}, 10_000)
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while not member.assignment():
            assert time.monotonic() < deadline, "the member was never assigned the partition"
            member.poll(0.2)
        with pytest.raises(GroupCommitError, match=f"group '{group}'.*the group has active members"):
            batch.commit()
        assert group_offsets(bootstrap, group) == {0: 2}
    finally:
        member.close()
    assert batch.commit() == {(topic, 0): 5}  # the group is empty again: the retried commit goes through
    assert batch.commit() == {}  # already there: nothing written
    assert group_offsets(bootstrap, group) == {0: 5}


def test_starting_offsets_group_uses_committed_offsets_then_auto_offset_reset(bootstrap, make_topic):
    topic, group = make_topic(partitions=2), f"g-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, 6, partition=0)
    produce(bootstrap, topic, 4, partition=1)
    commit_outside(bootstrap, group, topic, {0: 3})
    common = {"subscribe": topic, "startingOffsets": "group", "kafka.group.id": group}
    latest = stream_reader(bootstrap, **common)
    earliest = stream_reader(bootstrap, **common, **{"kafka.auto.offset.reset": "earliest"})
    try:
        assert latest.initialOffset() == {topic: {"0": 3, "1": 4}}  # partition 1 has no commit: latest
        assert earliest.initialOffset() == {topic: {"0": 3, "1": 0}}
    finally:
        latest.stop()
        earliest.stop()
    batch = KafkaBatchReader({"kafka.bootstrap.servers": bootstrap, **common, "kafka.auto.offset.reset": "earliest"},
                             kafka_schema(False))
    parts = batch.partitions()
    assert [(p.range.partition, p.range.from_offset, p.range.until_offset) for p in parts] == [(0, 3, 6), (1, 0, 4)]


class Member:
    """Drives one stream reader with groupMembership like Spark's engine; keeps what it read."""

    def __init__(self, bootstrap: str, topic: str, group: str, strategy: str):
        self.reader = stream_reader(
            bootstrap, subscribe=topic, groupMembership="true",
            **{"kafka.group.id": group, "kafka.auto.offset.reset": "earliest", "kafka.heartbeat.interval.ms": "200",
               "kafka.session.timeout.ms": "6000", "kafka.partition.assignment.strategy": strategy},
        )
        self.start = self.reader.initialOffset()
        self.rows: list = []  # (partition, offset, value)

    def step(self) -> None:
        end = self.reader.latestOffset(self.start, ReadAllAvailable())
        if end == self.start:
            return
        for p in self.reader.partitions(self.start, end):
            for b in self.reader.read(p):
                self.rows += zip(b.column("partition").to_pylist(), b.column("offset").to_pylist(),
                                 b.column("value").to_pylist())
        self.reader.commit(self.start)  # Spark commits the previous batch's end after planning this one
        self.start = end

    @property
    def owned(self) -> set:
        return {p for _, p in self.reader._group.owned}


def step_until(members, condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for m in members:
            m.step()


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])  # eager and incremental rebalances
def test_two_members_split_partitions_and_hand_over_without_loss_or_duplicates(bootstrap, make_topic, strategy):
    topic, group = make_topic(partitions=6), f"g-{uuid.uuid4().hex[:8]}"
    sent = [v for p in range(6) for v in produce(bootstrap, topic, 5, partition=p, prefix=f"a{p}")]
    a = Member(bootstrap, topic, group, strategy)
    b = Member(bootstrap, topic, group, strategy)
    try:
        step_until([a], lambda: len(a.rows) == 30, "member a alone to read every partition")
        step_until([a, b], lambda: len(a.owned) == 3 and len(b.owned) == 3, "the group to split the partitions")
        assert a.owned.isdisjoint(b.owned)
        a_before, b_before = len(a.rows), len(b.rows)
        sent += [v for p in range(6) for v in produce(bootstrap, topic, 5, partition=p, prefix=f"b{p}")]
        step_until([a, b], lambda: len(a.rows) + len(b.rows) == 60, "both members to read the second round")
        a_parts = {p for p, _, _ in a.rows[a_before:]}
        b_parts = {p for p, _, _ in b.rows[b_before:]}
        assert a_parts == a.owned and b_parts == b.owned  # each read only its own partitions

        a_owned = set(a.owned)
        a.step()  # the engine's next trigger after a's last batch: latestOffset(start) commits it
        a.reader.stop()  # the revoke callback commits a's processed offsets, then a leaves the group
        sent += [v for p in range(6) for v in produce(bootstrap, topic, 5, partition=p, prefix=f"c{p}")]
        step_until([b], lambda: len(a.rows) + len(b.rows) == 90, "b to take over a's partitions")
        assert b.owned == set(range(6))
        assert {p for p, _, _ in b.rows[-60:]} >= a_owned
        got = [v for _, _, v in a.rows + b.rows]
        assert sorted(got) == sorted(sent)  # nothing lost, nothing read twice across the members
        b.step()  # the next trigger commits b's last batch
        assert group_offsets(bootstrap, group) == {p: 15 for p in range(6)}
    finally:
        a.reader.stop()
        b.reader.stop()
