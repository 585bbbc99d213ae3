"""Committed offsets on an in-memory partition writer (no broker, no socket): commit and fetch, the checks of
OffsetCommit, a failed write that changes nothing, expiry of an Empty group's offsets (KIP-211), transactional
offsets (KIP-98/447), and what a restart loads back, also from a snapshot."""

from __future__ import annotations

import asyncio

from pyspark_kafka.broker.coordinator import offsets as O
from pyspark_kafka.broker.coordinator.offsets import OffsetAndMetadata
from pyspark_kafka.broker.coordinator.partition_writer import InMemoryPartitionWriter
from pyspark_kafka.broker.errors import CoordinatorNotAvailableError, ErrorCode
from support.coordinators import groups, replayed_by_load

T0 = 1_700_000_000_000


def committed(coordinator, group_id):
    return {tp: (v.offset, v.metadata) for tp, v, e in coordinator.fetch_offsets(group_id, None, False)}


def test_commit_fetch_and_load_after_restart():
    async def scenario():
        writer = InMemoryPartitionWriter()
        coordinator = groups(writer)
        errors = coordinator.commit_offsets("g", -1, "", None, {("t", 0): OffsetAndMetadata(5, metadata="m"),
                                                                ("t", 1): OffsetAndMetadata(7),
                                                                ("t", 9): OffsetAndMetadata(1)})
        assert errors == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none,
                          ("t", 9): ErrorCode.unknown_topic_or_partition}
        assert coordinator.commit_offsets("g2", 3, "m", None, {("t", 0): OffsetAndMetadata(1)}) == \
            {("t", 0): ErrorCode.illegal_generation}  # an unknown group with a generation
        assert coordinator.commit_offsets("", -1, "", None, {("t", 0): OffsetAndMetadata(1)}) == \
            {("t", 0): ErrorCode.invalid_group_id}
        assert committed(coordinator, "g") == {("t", 0): (5, "m"), ("t", 1): (7, "")}
        assert coordinator.fetch_offsets("g", [("t", 2)], False) == [(("t", 2), None, ErrorCode.none)]
        restarted = groups(writer)
        assert committed(restarted, "g") == {("t", 0): (5, "m"), ("t", 1): (7, "")}
        assert restarted.list_groups() == [("g", "", "Empty", "classic")]

    asyncio.run(scenario())


def test_a_failed_write_leaves_the_committed_offsets_as_they_were():
    async def scenario():
        writer = InMemoryPartitionWriter()
        coordinator = groups(writer)
        coordinator.commit_offsets("g", -1, "", None, {("t", 0): OffsetAndMetadata(5)})
        writer.fail_appends = CoordinatorNotAvailableError("no leader")
        errors = coordinator.commit_offsets("g", -1, "", None, {("t", 0): OffsetAndMetadata(9)})
        assert errors == {("t", 0): ErrorCode.coordinator_not_available}
        assert committed(coordinator, "g") == {("t", 0): (5, "")}

    asyncio.run(scenario())


def test_offsets_of_an_empty_group_expire_and_stay_gone_after_restart():
    async def scenario():
        writer = InMemoryPartitionWriter()
        coordinator = groups(writer)
        coordinator.commit_offsets("old", -1, "", None, {("t", 0): OffsetAndMetadata(1, commit_timestamp_ms=T0)})
        coordinator.commit_offsets("new", -1, "", None, {("t", 0): OffsetAndMetadata(2, commit_timestamp_ms=T0 + 10)})
        retention = coordinator.config.get_int("offsets.retention.minutes") * 60_000
        for group_id in ("old", "new"):
            coordinator.groups[group_id].state_timestamp_ms = T0
        assert coordinator.expire_offsets(T0 + retention - 1) == 0
        assert coordinator.expire_offsets(T0 + retention + 5) == 1
        assert "old" not in coordinator.groups and committed(coordinator, "new") == {("t", 0): (2, "")}
        restarted = groups(writer)
        assert committed(restarted, "old") == {} and committed(restarted, "new") == {("t", 0): (2, "")}

    asyncio.run(scenario())


def test_transactional_offsets_are_pending_until_the_marker_also_after_restart():
    async def scenario():
        writer = InMemoryPartitionWriter()
        coordinator = groups(writer)
        coordinator.offsets.stage_txn_offsets(1000, 0, "g", {("t", 0): OffsetAndMetadata(42)}, T0)
        assert coordinator.fetch_offsets("g", [("t", 0)], True) == [(("t", 0), None, ErrorCode.unstable_offset_commit)]
        assert coordinator.fetch_offsets("g", [("t", 0)], False) == [(("t", 0), None, ErrorCode.none)]
        restarted = groups(writer)  # the staged batch has no marker yet: still pending after a restart
        assert restarted.offsets.has_pending("g", ("t", 0))
        assert restarted.offsets.complete_txn(1000, True, T0 + 1) is True
        assert committed(restarted, "g") == {("t", 0): (42, "")}
        assert committed(groups(writer), "g") == {("t", 0): (42, "")}  # the COMMIT marker is in the log
        restarted.offsets.stage_txn_offsets(1001, 0, "g", {("t", 0): OffsetAndMetadata(99)}, T0 + 2)
        restarted.offsets.complete_txn(1001, False, T0 + 3)
        assert committed(groups(writer), "g") == {("t", 0): (42, "")}  # aborted

    asyncio.run(scenario())


def test_a_restart_from_a_snapshot_replays_nothing_and_loads_the_same_state():
    async def scenario():
        writer = InMemoryPartitionWriter()
        coordinator = groups(writer)
        for i in range(30):
            coordinator.commit_offsets(f"g-{i % 4}", -1, "", None, {("t", i % 3): OffsetAndMetadata(i)})
        full = groups(writer)
        assert replayed_by_load(writer) == 30
        coordinator.offsets.write_snapshots()
        names = writer.snapshot_names(O.OFFSETS_TOPIC, 0, O.SNAPSHOT_SUFFIX)
        assert names and all(n.endswith(O.SNAPSHOT_SUFFIX) for n in names)
        from_snapshot = groups(writer)
        assert replayed_by_load(writer) == 0
        assert {g: committed(from_snapshot, g) for g in ("g-0", "g-1", "g-2", "g-3")} == \
            {g: committed(full, g) for g in ("g-0", "g-1", "g-2", "g-3")}

    asyncio.run(scenario())
