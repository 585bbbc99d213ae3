"""The classic group protocol's state machine on an in-memory partition writer (no broker, no socket):
join and sync of a generation, heartbeats during a rebalance, session expiry, a restart that restores the
Stable generation, and a metadata write that fails. The broker-backed tests (test_groups_*.py) prove the
same rules through real clients."""

from __future__ import annotations

import asyncio

from pyspark_kafka.broker.coordinator.classic_group import ClassicGroupState
from pyspark_kafka.broker.coordinator.partition_writer import InMemoryPartitionWriter
from pyspark_kafka.broker.errors import CoordinatorNotAvailableError, ErrorCode
from support.coordinators import CONSUMER, groups, settle

PROTOCOLS = [("range", b"sub-range"), ("roundrobin", b"sub-rr")]
DELAY = {"group_initial_rebalance_delay_ms": "30"}  # both members of a new group join one generation


def join(coordinator, group_id, member_id="", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
         protocols=PROTOCOLS, instance_id=None, require_known_member_id=False):
    return coordinator.join_group(group_id, member_id, instance_id, "client", "/127.0.0.1", session_timeout_ms,
                                  rebalance_timeout_ms, CONSUMER, protocols, require_known_member_id)


async def stable_pair(coordinator, group_id="g"):
    """Two members joined (within the initial rebalance delay) and synced: ``(leader JoinResult, follower
    JoinResult)``."""
    first = await settle(join(coordinator, group_id, require_known_member_id=True))
    assert first[0].error_code == ErrorCode.member_id_required and first[0].member_id
    one = asyncio.ensure_future(join(coordinator, group_id, first[0].member_id))
    await asyncio.sleep(0)
    two = asyncio.ensure_future(join(coordinator, group_id))
    a, b = await settle(one, two)
    leader, follower = (a, b) if a.leader == a.member_id else (b, a)
    assignments = {leader.member_id: b"to-leader", follower.member_id: b"to-follower"}
    synced = await settle(
        coordinator.sync_group(group_id, leader.generation_id, leader.member_id, None, CONSUMER, "range", assignments),
        coordinator.sync_group(group_id, follower.generation_id, follower.member_id, None, None, None, {}))
    assert [s.assignment for s in synced] == [b"to-leader", b"to-follower"]
    return leader, follower


def test_join_and_sync_make_a_stable_generation():
    async def scenario():
        coordinator = groups(**DELAY)
        leader, follower = await stable_pair(coordinator)
        assert leader.generation_id == follower.generation_id == 1
        assert leader.protocol_name == "range"  # both prefer range
        assert {m[0] for m in leader.members} == {leader.member_id, follower.member_id} and follower.members == ()
        group = coordinator.groups["g"]
        assert group.state is ClassicGroupState.STABLE and coordinator.list_groups() == [("g", CONSUMER, "Stable", "classic")]
        assert coordinator.heartbeat("g", 1, follower.member_id, None) == ErrorCode.none
        assert coordinator.heartbeat("g", 0, follower.member_id, None) == ErrorCode.illegal_generation
        assert coordinator.heartbeat("g", 1, "stranger", None) == ErrorCode.unknown_member_id

    asyncio.run(scenario())


def test_a_new_member_makes_the_others_rejoin_and_a_leave_rebalances():
    async def scenario():
        coordinator = groups(**DELAY)
        leader, follower = await stable_pair(coordinator)
        third = asyncio.ensure_future(join(coordinator, "g"))
        await asyncio.sleep(0)
        assert coordinator.groups["g"].state is ClassicGroupState.PREPARING_REBALANCE
        assert coordinator.heartbeat("g", 1, leader.member_id, None) == ErrorCode.rebalance_in_progress
        rejoined = await settle(join(coordinator, "g", leader.member_id), join(coordinator, "g", follower.member_id),
                                third)
        assert {r.generation_id for r in rejoined} == {2} and len(rejoined[0].members) == 3
        assert coordinator.groups["g"].state is ClassicGroupState.COMPLETING_REBALANCE
        assert coordinator.leave_group("g", [(rejoined[2].member_id, None)]) == (ErrorCode.none, [ErrorCode.none])
        assert coordinator.groups["g"].state is ClassicGroupState.PREPARING_REBALANCE

    asyncio.run(scenario())


def test_a_silent_member_expires_after_its_session_timeout():
    async def scenario():
        coordinator = groups()
        (joined,) = await settle(join(coordinator, "g", session_timeout_ms=50))
        await settle(coordinator.sync_group("g", 1, joined.member_id, None, None, None, {joined.member_id: b"a"}))
        assert coordinator.groups["g"].state is ClassicGroupState.STABLE
        deadline = asyncio.get_running_loop().time() + 5
        while coordinator.groups["g"].members and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        group = coordinator.groups["g"]
        assert group.members == {} and group.state is ClassicGroupState.EMPTY and group.generation == 2

    asyncio.run(scenario())


def test_a_member_that_dies_after_a_slow_generation_write_still_expires():
    """About 1 s. The generation's write takes longer than session.timeout.ms (slow ISR); a member that stops
    heartbeating right after its SyncGroup answer is expired and the group rebalances without it. A member
    waiting in SyncGroup has no session expiry, so the answer must re-arm its timer (Kafka's
    ``propagateAssignment``)."""
    async def scenario():
        coordinator = groups(**DELAY)
        gate = asyncio.Event()

        async def write_done(group_id: str) -> int:  # the ISR has the record once the gate opens
            await gate.wait()
            return ErrorCode.none

        coordinator.classic.write_done = write_done
        first = await settle(join(coordinator, "g", session_timeout_ms=100, require_known_member_id=True))
        one = asyncio.ensure_future(join(coordinator, "g", first[0].member_id, session_timeout_ms=100))
        await asyncio.sleep(0)
        two = asyncio.ensure_future(join(coordinator, "g", session_timeout_ms=100))
        a, b = await settle(one, two)
        leader, follower = (a, b) if a.leader == a.member_id else (b, a)
        syncs = [asyncio.ensure_future(coordinator.sync_group("g", 1, follower.member_id, None, None, None, {})),
                 asyncio.ensure_future(coordinator.sync_group("g", 1, leader.member_id, None, CONSUMER, "range",
                                                              {leader.member_id: b"L", follower.member_id: b"F"}))]
        await asyncio.sleep(0.3)  # three session timeouts while the write waits
        assert coordinator.groups["g"].state is ClassicGroupState.COMPLETING_REBALANCE
        gate.set()
        assert [r.error_code for r in await settle(*syncs)] == [ErrorCode.none, ErrorCode.none]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while follower.member_id in coordinator.groups["g"].members and loop.time() < deadline:
            coordinator.heartbeat("g", coordinator.groups["g"].generation, leader.member_id, None)  # the leader lives
            await asyncio.sleep(0.02)
        group = coordinator.groups["g"]
        assert follower.member_id not in group.members and leader.member_id in group.members
        assert group.state is ClassicGroupState.PREPARING_REBALANCE

    asyncio.run(scenario())


def test_a_restart_restores_the_stable_generation_from_the_partition():
    async def scenario():
        writer = InMemoryPartitionWriter()
        coordinator = groups(writer, **DELAY)
        leader, follower = await stable_pair(coordinator)
        restarted = groups(writer)
        group = restarted.groups["g"]
        assert group.state is ClassicGroupState.STABLE and group.generation == 1 and group.leader_id == leader.member_id
        assert {m: group.members[m].assignment for m in group.members} == {
            leader.member_id: b"to-leader", follower.member_id: b"to-follower"}
        assert group.members[follower.member_id].metadata("range") == b"sub-range"
        synced = await settle(restarted.sync_group("g", 1, follower.member_id, None, None, None, {}))
        assert synced[0].assignment == b"to-follower"

    asyncio.run(scenario())


def test_a_failed_metadata_write_sends_the_group_back_to_rebalance():
    async def scenario():
        writer = InMemoryPartitionWriter()
        coordinator = groups(writer)
        (joined,) = await settle(join(coordinator, "g"))
        writer.fail_appends = CoordinatorNotAvailableError("disk full")
        (synced,) = await settle(coordinator.sync_group("g", 1, joined.member_id, None, None, None,
                                                       {joined.member_id: b"a"}))
        assert synced.error_code == ErrorCode.coordinator_not_available
        assert coordinator.groups["g"].state is ClassicGroupState.PREPARING_REBALANCE
        assert "g" not in groups(writer).groups  # nothing of the failed generation was persisted

    asyncio.run(scenario())


def test_initial_rebalance_waits_for_the_timer_even_without_delay():
    """Kafka's ``prepareRebalance``: an Empty group's first join phase ends only through the initial-delay timer, also
    with ``group.initial.rebalance.delay.ms=0``, so members joining together share the first generation (librdkafka's
    0118 expects its two consumers in one generation; a first member answered at once got every partition and a
    rebalance followed)."""
    async def scenario():
        coordinator = groups(group_initial_rebalance_delay_ms="0")
        first, second = await asyncio.wait_for(asyncio.gather(join(coordinator, "together"),
                                                              join(coordinator, "together")), 5)
        assert (first.error_code, second.error_code) == (0, 0)
        assert first.generation_id == second.generation_id == 1
        assert len(first.members or second.members) == 2

    asyncio.run(scenario())
