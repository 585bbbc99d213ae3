"""``__consumer_offsets`` snapshots keep restarts flat and never change what is loaded.

The store (real LogManager on a temporary directory, no server) is loaded three ways after the
same history: from a clean-shutdown snapshot, from a periodic snapshot after a crash (no final
snapshot), and with every snapshot damaged or ahead of the log (full replay). All three must
give the same offsets and group metadata; only the number of replayed records differs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.coordinator import offsets as O
from pyspark_kafka.broker.coordinator.partition_writer import LogPartitionWriter
from pyspark_kafka.broker.log.manager import LogManager

COMMITS = 2_500
GROUPS = 5


def _store(data_dir: Path) -> O.OffsetStore:
    logs = LogManager(data_dir, BrokerConfig())
    logs.load()
    store = O.OffsetStore(LogPartitionWriter(logs), BrokerConfig())
    _create_offsets_topic(store)
    store.on_append = lambda p: _leader_hw(logs, p)  # the partition's leader with an ISR of one
    store.load(range(store.partition_count()))  # every partition, as their leader
    return store


def _create_offsets_topic(store: O.OffsetStore) -> None:
    """``__consumer_offsets`` with the configured partitions, as the controller creates it (kept when it exists)."""
    store.writer.create_topic(O.OFFSETS_TOPIC, store.config.get_int("offsets.topic.num.partitions"),
                              store.config.get_int("offsets.topic.segment.bytes"))


def _leader_hw(logs: LogManager, partition: int) -> None:
    plog = logs.get_log(O.OFFSETS_TOPIC, partition)
    plog.update_high_watermark(plog.log_end_offset)


def _history(store: O.OffsetStore) -> None:
    member = O.Member("m-1", None, "client", "/127.0.0.1", 30000, 10000, [("range", b"sub")], b"asg")
    for i in range(COMMITS):
        group = f"g-{i % GROUPS}"
        store.commit(group, {("t", i % 3): O.OffsetAndMetadata(i, -1, "", 1_700_000_000_000 + i)}, 1_700_000_000_000)
        if i % 500 == 0:
            store.store_group(group, O.GroupRecord("consumer", i, "range", "m-1", i, (member,)), i)
    store.delete_group("g-4", 1)


def _state(store: O.OffsetStore) -> tuple:
    return ({g: store.committed(g) for g in sorted(store.group_ids())}, dict(sorted(store.loaded_groups.items())))


@pytest.fixture
def history(tmp_path, monkeypatch):
    monkeypatch.setattr(O, "SNAPSHOT_EVERY_RECORDS", 1_000)
    store = _store(tmp_path / "data")
    _history(store)
    expected = _state(store)
    return tmp_path / "data", store, expected


def _snapshots(data_dir: Path) -> list[Path]:
    return sorted((data_dir / f"{O.OFFSETS_TOPIC}-0").glob(f"*{O.SNAPSHOT_SUFFIX}"))


def test_clean_shutdown_snapshot_means_nothing_is_replayed(history):
    data_dir, store, expected = history
    store.write_snapshots()
    store.writer.logs.close()
    assert len(_snapshots(data_dir)) == O.SNAPSHOTS_KEPT  # older ones removed
    reloaded = _store(data_dir)
    assert _state(reloaded) == expected
    assert reloaded.replayed_records == 0


def test_after_a_crash_only_the_tail_after_the_periodic_snapshot_is_replayed(history):
    data_dir, store, expected = history
    store.writer.logs.close()  # no final snapshot: as after kill -9
    assert _snapshots(data_dir), "periodic snapshots were written"
    reloaded = _store(data_dir)
    assert _state(reloaded) == expected
    assert 0 < reloaded.replayed_records <= O.SNAPSHOT_EVERY_RECORDS + 10


@pytest.mark.parametrize("damage", ["garbage", "ahead-of-the-log"])
def test_unusable_snapshots_fall_back_to_a_full_replay(history, damage):
    data_dir, store, expected = history
    store.write_snapshots()
    store.writer.logs.close()
    for i, snapshot in enumerate(_snapshots(data_dir)):  # every kept one
        if damage == "garbage":
            snapshot.write_bytes(b"\x00not a record batch")
        else:
            snapshot.rename(snapshot.with_name(f"{10**9 + i:020d}{O.SNAPSHOT_SUFFIX}"))
    reloaded = _store(data_dir)
    assert _state(reloaded) == expected
    assert reloaded.replayed_records >= COMMITS


def test_consumer_group_records_replay_with_and_without_snapshots(tmp_path):
    """KIP-848 group state (key version 3) comes back from a full replay (a crash: no snapshot), from a
    snapshot, and a tombstone removes it; an unreadable value is skipped, the rest still loads."""
    store = _store(tmp_path / "data")
    state = {"group_epoch": 3, "assignment_epoch": 3, "members": [], "target": {}}
    store.store_consumer_group("kip848-a", state, 1)
    store.store_consumer_group("kip848-b", {**state, "group_epoch": 4}, 2)
    store.store_consumer_group("kip848-b", None, 3)
    store.store_consumer_group("kip848-c", state, 4)
    plog = store.writer.logs.get_log(O.OFFSETS_TOPIC, store.partition_of("kip848-c"))
    plog.append(O.encode_batch([(O.consumer_group_key("kip848-bad"), b"\x00\x00\x00\x00\x00\x03{x}")], 5), now_ms=5)
    replayed = _store(tmp_path / "data")  # no snapshot was written: a full replay
    assert replayed.consumer_groups == {"kip848-a": state, "kip848-c": state}
    replayed.write_snapshots()
    from_snapshot = _store(tmp_path / "data")
    assert from_snapshot.replayed_records == 0 and from_snapshot.consumer_groups == replayed.consumer_groups


# -- many partitions, transactions, tombstones, divergent logs (the replicated cluster's case) ------------------

MANY = BrokerConfig({"offsets.topic.num.partitions": "10"})


def _store_many(data_dir: Path, partitions=None) -> O.OffsetStore:
    logs = LogManager(data_dir, MANY)
    logs.load()
    store = O.OffsetStore(LogPartitionWriter(logs), MANY)
    _create_offsets_topic(store)
    store.on_append = lambda p: _leader_hw(logs, p)
    store.load(range(store.partition_count()) if partitions is None else partitions)
    return store


def _full_state(store: O.OffsetStore) -> tuple:
    pending = {pid: (p.producer_epoch, dict(p.offsets)) for pid, p in sorted(store._pending.items())}
    return _state(store) + (dict(store.consumer_groups), pending)


def _busy_history(store: O.OffsetStore) -> None:
    """Commits spread over 40 groups (all 10 partitions), transactional offsets committed, aborted and one
    left open, offsets deleted, a group deleted."""
    member = O.Member("m-1", None, "client", "/127.0.0.1", 30000, 10000, [("range", b"sub")], b"asg")
    for i in range(4_000):
        group = f"g-{i % 40}"
        store.commit(group, {("t", i % 3): O.OffsetAndMetadata(i, -1, "m", 1_700_000_000_000 + i)}, 1_700_000_000_000)
        if i % 700 == 0:
            store.store_group(group, O.GroupRecord("consumer", i, "range", "m-1", i, (member,)), i)
        if i % 900 == 0:
            pid = 1000 + i
            store.stage_txn_offsets(pid, 0, f"g-{(i + 1) % 40}", {("out", 0): O.OffsetAndMetadata(i + 7)}, i)
            store.complete_txn(pid, commit=(i % 1800 == 0), now_ms=i)
    store.delete_offsets("g-5", [("t", 0), ("t", 1)], 1)
    store.delete_group("g-6", 1)
    store.store_consumer_group("kip848", {"group_epoch": 1, "members": []}, 1)
    store.stage_txn_offsets(7, 3, "g-7", {("out", 0): O.OffsetAndMetadata(42)}, 2)  # still open at the crash


def test_a_crash_replays_a_bounded_tail_however_commits_spread_over_partitions(tmp_path, monkeypatch):
    monkeypatch.setattr(O, "SNAPSHOT_EVERY_RECORDS", 500)
    store = _store_many(tmp_path / "data")
    _busy_history(store)
    expected = _full_state(store)
    assert expected[0]["g-1"] and "g-6" not in expected[0] and set(expected[0]["g-5"]) == {("t", 2)}
    assert store.has_pending("g-7", ("out", 0))
    store.writer.logs.close()  # no final snapshot: as after kill -9
    reloaded = _store_many(tmp_path / "data")
    assert _full_state(reloaded) == expected
    # every partition appended to got a snapshot at each 500-record round: the tail is bounded over all ten
    # (plus the records after the open transaction's partition's last snapshot, kept back by it)
    assert reloaded.replayed_records <= 2 * O.SNAPSHOT_EVERY_RECORDS
    full = _store_many(tmp_path / "data")
    full.snapshots = False
    full.load(range(full.partition_count()))
    assert _full_state(full) == expected and full.replayed_records > 4_000


def test_a_snapshot_whose_log_diverged_is_not_used(tmp_path):
    """A replica's log truncated and rewritten past a snapshot (an unclean leader election) no longer matches
    the snapshot's batch identity: the store loads from the log, not from the stale snapshot."""
    store = _store(tmp_path / "data")
    for i in range(20):
        store.commit("g", {("t", 0): O.OffsetAndMetadata(i)}, 1_700_000_000_000)
    store.write_snapshots()
    plog = store.writer.logs.get_log(O.OFFSETS_TOPIC, 0)
    end = plog.log_end_offset
    plog.truncate_to(end - 5)
    for i in range(5):  # another history with the same length: the snapshot's offset is still inside the log
        plog.append(O.encode_batch([(O.offset_key("g", "t", 0), O.offset_value(O.OffsetAndMetadata(900 + i)))],
                                   1_700_000_000_001), now_ms=1_700_000_000_001)
    assert plog.log_end_offset == end
    store.writer.logs.close()
    reloaded = _store(tmp_path / "data")
    assert reloaded.committed("g")[("t", 0)].offset == 904
    assert reloaded.replayed_records == 20


def test_only_loaded_partitions_with_replicated_records_get_snapshots(tmp_path):
    """A cluster broker snapshots only the partitions it leads (has loaded), and only up to records the ISR
    has (high watermark = log end): a follower's empty cache or a tail that may be truncated is never saved."""
    writer = _store_many(tmp_path / "data")
    for i in range(40):
        writer.commit(f"g-{i}", {("t", 0): O.OffsetAndMetadata(i)}, 1_700_000_000_000)
    writer.writer.logs.close()
    store = _store_many(tmp_path / "data", partitions=[1, 2])
    plog2 = store.writer.logs.get_log(O.OFFSETS_TOPIC, 2)
    plog2.high_watermark = plog2.log_end_offset - 1
    store.write_snapshots()
    written = {p for p in range(10) if list((tmp_path / "data" / f"{O.OFFSETS_TOPIC}-{p}").glob(f"*{O.SNAPSHOT_SUFFIX}"))}
    assert written == {1}


def test_kill_9_restarts_before_every_snapshot_point_still_replay_a_bounded_tail(tmp_path, monkeypatch):
    # Issue #38: a single node killed (kill -9) after fewer than SNAPSHOT_EVERY_RECORDS commits each time never wrote
    # a snapshot (the count started from zero at every start) and replayed its whole log at every start: 200,000
    # commits over 10 restarts answered the committed offset 4.3-4.6 s after the last start. The records a load
    # replays now count towards the next snapshot.
    monkeypatch.setattr(O, "SNAPSHOT_EVERY_RECORDS", 1_000)
    data_dir = tmp_path / "data"
    n = 0
    replayed = []
    for _ in range(10):
        store = _store(data_dir)
        replayed.append(store.replayed_records)
        for _ in range(900):  # fewer than SNAPSHOT_EVERY_RECORDS per run
            store.commit(f"g-{n % GROUPS}", {("t", n % 3): O.OffsetAndMetadata(n, -1, "", 1_700_000_000_000)},
                         1_700_000_000_000)
            n += 1
        expected = _state(store)
        store.writer.logs.close()  # no final snapshot: as after kill -9
    reloaded = _store(data_dir)
    assert _state(reloaded) == expected
    assert max(replayed + [reloaded.replayed_records]) < 2 * O.SNAPSHOT_EVERY_RECORDS, replayed
