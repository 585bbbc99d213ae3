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
from pyspark_kafka.broker.log.manager import LogManager

COMMITS = 2_500
GROUPS = 5


def _store(data_dir: Path) -> O.OffsetStore:
    logs = LogManager(data_dir, BrokerConfig())
    logs.load()
    store = O.OffsetStore(logs, BrokerConfig())
    store.load()
    return store


def _history(store: O.OffsetStore) -> None:
    member = O.MemberRecord("m-1", None, "client", "/127.0.0.1", 30000, 10000, b"sub", b"asg")
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
    store.logs.close()
    (snapshot,) = _snapshots(data_dir)  # older ones removed
    reloaded = _store(data_dir)
    assert _state(reloaded) == expected
    assert reloaded.replayed_records == 0


def test_after_a_crash_only_the_tail_after_the_periodic_snapshot_is_replayed(history):
    data_dir, store, expected = history
    store.logs.close()  # no final snapshot: as after kill -9
    assert _snapshots(data_dir), "periodic snapshots were written"
    reloaded = _store(data_dir)
    assert _state(reloaded) == expected
    assert 0 < reloaded.replayed_records <= O.SNAPSHOT_EVERY_RECORDS + 10


@pytest.mark.parametrize("damage", ["garbage", "ahead-of-the-log"])
def test_unusable_snapshots_fall_back_to_a_full_replay(history, damage):
    data_dir, store, expected = history
    store.write_snapshots()
    store.logs.close()
    (snapshot,) = _snapshots(data_dir)
    if damage == "garbage":
        snapshot.write_bytes(b"\x00not a record batch")
    else:
        snapshot.rename(snapshot.with_name(f"{10**9:020d}{O.SNAPSHOT_SUFFIX}"))
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
    plog = store.logs.get_log(O.OFFSETS_TOPIC, store.partition_of("kip848-c"))
    plog.append(O.encode_batch([(O.consumer_group_key("kip848-bad"), b"\x00\x00\x00\x00\x00\x03{x}")], 5), now_ms=5)
    replayed = _store(tmp_path / "data")  # no snapshot was written: a full replay
    assert replayed.consumer_groups == {"kip848-a": state, "kip848-c": state}
    replayed.write_snapshots()
    from_snapshot = _store(tmp_path / "data")
    assert from_snapshot.replayed_records == 0 and from_snapshot.consumer_groups == replayed.consumer_groups
