"""KIP-848 consumer groups on an in-memory partition writer (no broker, no socket): group, assignment and
member epochs through a join, a second member's join with revocation first, a fenced epoch, a new
partition, and a restart that restores the epochs. test_consumer_group_protocol.py proves the same over
the wire."""

from __future__ import annotations

import asyncio

from pyspark_kafka.broker.coordinator.consumer_group_model import ConsumerGroupState, MemberState
from pyspark_kafka.broker.coordinator.partition_writer import InMemoryPartitionWriter
from pyspark_kafka.broker.errors import ErrorCode
from support.coordinators import InMemoryMetadataCache, groups


def beat(coordinator, member_id, epoch, owned=None, topics=("t",)):
    """A ConsumerGroupHeartbeat v1 of group ``g``; on a join (epoch 0) with its subscription."""
    joining = epoch == 0
    return coordinator.consumer.heartbeat(1, "g", member_id, epoch, None, None, 30_000 if joining else -1,
                                          list(topics) if joining else None, None, None,
                                          [] if joining else owned, "client", "/127.0.0.1")


def test_epochs_through_a_join_a_second_member_and_its_revocation():
    async def scenario():
        coordinator = groups()
        first = beat(coordinator, "m1", 0)
        assert first.error_code == ErrorCode.none and first.member_epoch == 2  # Kafka 4.3.1: a new group's first member
        assert first.assignment == {("t", 0), ("t", 1), ("t", 2)}
        group = coordinator.consumer.groups["g"]
        assert (group.group_epoch, group.assignment_epoch, group.state) == (2, 2, ConsumerGroupState.STABLE)
        second = beat(coordinator, "m2", 0)
        assert group.group_epoch == 3 and group.assignment_epoch == 3
        assert second.member_epoch == 3 and second.assignment == frozenset()  # m1 still owns everything
        assert group.state is ConsumerGroupState.RECONCILING
        revoking = beat(coordinator, "m1", 2, owned=sorted(first.assignment))
        keep = set(group.target["m1"])
        assert revoking.member_epoch == 2 and revoking.assignment == keep  # revoke first, at the old epoch
        assert group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
        done = beat(coordinator, "m1", 2, owned=sorted(keep))
        assert done.member_epoch == 3 and group.members["m1"].state is MemberState.STABLE
        released = beat(coordinator, "m2", 3, owned=[])
        assert released.assignment == group.target["m2"] and keep.isdisjoint(released.assignment)
        assert keep | released.assignment == {("t", 0), ("t", 1), ("t", 2)}
        assert group.state is ConsumerGroupState.STABLE

    asyncio.run(scenario())


def test_a_wrong_epoch_is_fenced_and_a_new_partition_bumps_the_group_epoch():
    async def scenario():
        topics = InMemoryMetadataCache({"t": 1})
        coordinator = groups(topics=topics)
        joined = beat(coordinator, "m1", 0)
        assert beat(coordinator, "m1", joined.member_epoch + 1, owned=[]).error_code == ErrorCode.fenced_member_epoch
        assert beat(coordinator, "nobody", 5, owned=[]).error_code == ErrorCode.unknown_member_id
        topics.topics["t"] = 2
        grown = beat(coordinator, "m1", joined.member_epoch, owned=[("t", 0)])
        assert grown.member_epoch == joined.member_epoch + 1 and grown.assignment == {("t", 0), ("t", 1)}

    asyncio.run(scenario())


def test_a_restart_restores_epochs_members_and_assignments():
    async def scenario():
        writer = InMemoryPartitionWriter()
        coordinator = groups(writer)
        first = beat(coordinator, "m1", 0)
        beat(coordinator, "m2", 0)
        before = coordinator.consumer.groups["g"].as_dict()
        restarted = groups(writer)
        group = restarted.consumer.groups["g"]
        assert group.as_dict() == before and group.members["m1"].member_epoch == first.member_epoch
        assert beat(restarted, "m1", first.member_epoch, owned=sorted(first.assignment)).error_code == ErrorCode.none
        assert restarted.list_groups(types=["consumer"]) == [("g", "consumer", "Reconciling", "consumer")]

    asyncio.run(scenario())
