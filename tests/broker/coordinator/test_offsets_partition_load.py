"""``__consumer_offsets`` loaded and unloaded one partition at a time, as a broker of the replicated cluster does
when it gains or loses the leadership of a partition (Kafka's ``GroupCoordinator.onElection`` /
``onResignation``; docs/replication.md). A real LogManager on a temporary directory, no server.

- Loading partition p brings back exactly the groups whose ``abs(javaHashCode(id)) % partitions`` is p, with the
  offsets and metadata a full load gives them; unloading forgets them (and their pending transactional offsets)
  and leaves the other partitions' groups alone.
- A transaction's offsets staged in two partitions complete partition by partition (one WriteTxnMarkers each):
  committed in one, still pending in the other until its marker is written, also when a broker loads both
  partitions from their logs (the marker in one does not complete the other's offsets).
"""

from __future__ import annotations

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.coordinator import offsets as O
from pyspark_kafka.broker.coordinator.partition_writer import LogPartitionWriter
from pyspark_kafka.broker.coordinator.internal_topics import partition_for
from pyspark_kafka.broker.log.manager import LogManager

CONFIG = BrokerConfig({"offsets.topic.num.partitions": "3"})
GROUPS = [f"group-{i}" for i in range(12)]


def _store(data_dir) -> O.OffsetStore:
    logs = LogManager(data_dir, CONFIG)
    logs.load()
    store = O.OffsetStore(LogPartitionWriter(logs), CONFIG)
    store.writer.create_topic(O.OFFSETS_TOPIC, CONFIG.get_int("offsets.topic.num.partitions"),
                              CONFIG.get_int("offsets.topic.segment.bytes"))  # as the controller creates it
    store.snapshots = False  # as in the cluster
    return store


def _write_history(store: O.OffsetStore) -> None:
    member = O.Member("m-1", None, "client", "/127.0.0.1", 30000, 10000, [("range", b"sub")], b"asg")
    for i, group in enumerate(GROUPS):
        store.commit(group, {("t", 0): O.OffsetAndMetadata(100 + i, -1, "", 1_700_000_000_000)}, 1_700_000_000_000)
        store.store_group(group, O.GroupRecord("consumer", i, "range", "m-1", i, (member,)), 1_700_000_000_000)


def test_each_partition_loads_and_unloads_exactly_its_groups(tmp_path):
    writer = _store(tmp_path / "data")
    writer.load(range(writer.partition_count()))  # every partition, as their leader
    _write_history(writer)
    by_partition = {p: {g for g in GROUPS if partition_for(g, 3) == p} for p in range(3)}
    assert all(by_partition.values())  # the 12 ids spread over the 3 partitions

    store = _store(tmp_path / "data")
    store.load([1])
    assert store.group_ids() == by_partition[1] == set(store.loaded_groups)
    for g in by_partition[1]:
        assert store.committed(g) == writer.committed(g) and store.loaded_groups[g] == writer.loaded_groups[g]
    store.load([2])
    assert store.group_ids() == by_partition[1] | by_partition[2]
    store.unload(1)
    assert store.group_ids() == by_partition[2] == set(store.loaded_groups)
    store.load([1])  # loading again gives the same state
    assert {g: store.committed(g) for g in store.group_ids()} == \
        {g: writer.committed(g) for g in by_partition[1] | by_partition[2]}


def test_staged_transactional_offsets_complete_partition_by_partition(tmp_path):
    store = _store(tmp_path / "data")
    store.load(range(store.partition_count()))  # every partition, as their leader
    g1 = next(g for g in GROUPS if partition_for(g, 3) == 0)
    g2 = next(g for g in GROUPS if partition_for(g, 3) == 2)
    for g in (g1, g2):
        store.stage_txn_offsets(4000, 0, g, {("t", 0): O.OffsetAndMetadata(7)}, 1_700_000_000_000)
    assert store.complete_txn(4000, True, 1_700_000_000_000, partition=0)
    assert store.committed(g1)[("t", 0)].offset == 7
    assert store.committed(g2) == {} and store.has_pending(g2, ("t", 0))
    assert not store.complete_txn(4000, True, 1_700_000_000_000, partition=1)  # nothing staged there
    store.unload(2)  # the broker lost partition 2: its pending offsets go with it
    assert not store.has_pending(g2, ("t", 0))
    store.load([2])  # the next leader replays the staged batch: still pending (no marker yet)
    assert store.has_pending(g2, ("t", 0)) and store.committed(g2) == {}
    assert store.complete_txn(4000, True, 1_700_000_000_000, partition=2)
    assert store.committed(g2)[("t", 0)].offset == 7 and not store.has_pending(g2, ("t", 0))


def test_replaying_one_partitions_marker_leaves_the_other_partitions_offsets_pending(tmp_path):
    store = _store(tmp_path / "data")
    store.load(range(store.partition_count()))  # every partition, as their leader
    g0 = next(g for g in GROUPS if partition_for(g, 3) == 0)
    g2 = next(g for g in GROUPS if partition_for(g, 3) == 2)
    for g in (g0, g2):
        store.stage_txn_offsets(5000, 0, g, {("t", 1): O.OffsetAndMetadata(9)}, 1_700_000_000_000)
    assert store.complete_txn(5000, True, 1_700_000_000_000, partition=0)  # the marker of partition 0 only
    fresh = _store(tmp_path / "data")
    fresh.load([2])
    fresh.load([0])  # partition 0's COMMIT marker is replayed after partition 2's staged batch
    assert fresh.committed(g0)[("t", 1)].offset == 9
    assert fresh.committed(g2) == {} and fresh.has_pending(g2, ("t", 1))
