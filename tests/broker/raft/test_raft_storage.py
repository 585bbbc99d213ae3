"""``__cluster_metadata-0`` on disk: epochs per batch, the leader epoch cache and its checkpoint,
truncation, follower appends and recovery of a torn tail (what a SIGKILL mid-write leaves)."""

from __future__ import annotations

import pytest

from pyspark_kafka.broker.errors import CorruptRecordError
from pyspark_kafka.broker.raft.quorum_state import ElectionState, QuorumStateStore
from pyspark_kafka.broker.raft.storage import MetadataLogStorage


def test_epochs_end_offsets_truncation_and_a_torn_tail(tmp_path):
    log = MetadataLogStorage(tmp_path)
    assert (log.end_offset, log.last_epoch, log.end_offset_for_epoch(0)) == (0, 0, (0, 0))
    log.append_leader_change(1, 0, [0, 1, 2], [0, 1])          # offset 0, epoch 1
    assert log.append_as_leader([b"a", b"b"], 1) == (1, 2)
    log.append_leader_change(3, 2, [0, 1, 2], [2, 1])          # offset 3, epoch 3
    assert log.append_as_leader([b"c"], 3) == (4, 4)
    assert [tuple(e) for e in log.epochs] == [(1, 0), (3, 3)]
    # Kafka's LeaderEpochFileCache.endOffsetFor: the largest epoch <= asked, ending where the next begins.
    assert log.end_offset_for_epoch(1) == (1, 3)
    assert log.end_offset_for_epoch(2) == (1, 3)
    assert log.end_offset_for_epoch(3) == (3, 5)
    assert log.end_offset_for_epoch(9) == (3, 5)
    assert log.end_offset_for_epoch(0) == (-1, -1)
    assert list(log.records(0, 5)) == [(1, b"a"), (2, b"b"), (4, b"c")]  # control batches are not records
    assert log.leader_changes() == [(0, 1, 0, [0, 1]), (3, 3, 2, [2, 1])]
    checkpoint = (log.dir / "leader-epoch-checkpoint").read_text().splitlines()
    assert checkpoint == ["0", "2", "1 0", "3 3"]

    follower = MetadataLogStorage(tmp_path / "follower")
    assert follower.append_as_follower(log.read(0, 1 << 20)) == 4
    assert [tuple(e) for e in follower.epochs] == [(1, 0), (3, 3)]
    with pytest.raises(CorruptRecordError, match="does not continue this log"):
        follower.append_as_follower(log.read(1, 1 << 20))

    log.truncate_to(3)
    assert (log.end_offset, log.last_epoch) == (3, 1)
    assert (log.dir / "leader-epoch-checkpoint").read_text().splitlines() == ["0", "1", "1 0"]
    log.append_as_leader([b"d"], 4)
    first_batch = log.read(0, 1 << 20)
    log.close()

    segment = log.dir / "00000000000000000000.log"
    whole = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(first_batch[:40])  # a torn batch: a crash in the middle of a write
    reopened = MetadataLogStorage(tmp_path)
    assert segment.stat().st_size == whole
    assert reopened.end_offset == 4 and [tuple(e) for e in reopened.epochs] == [(1, 0), (4, 3)]
    assert list(reopened.records(0, 4)) == [(1, b"a"), (2, b"b"), (3, b"d")]
    reopened.close()
    follower.close()


def test_quorum_state_is_kafkas_json_and_a_corrupt_file_is_refused(tmp_path):
    store = QuorumStateStore(tmp_path, [2, 0, 1])
    assert store.read() == ElectionState()
    store.write(ElectionState(epoch=7, leader_id=-1, voted_id=2))
    assert store.path.read_text() == ('{"clusterId":"","leaderId":-1,"leaderEpoch":7,"votedId":2,"appliedOffset":0,'
                                      '"currentVoters":[{"voterId":0},{"voterId":1},{"voterId":2}],"data_version":0}')
    assert QuorumStateStore(tmp_path, [0, 1, 2]).read() == ElectionState(7, -1, 2)
    store.path.write_text("{not json")
    with pytest.raises(ValueError, match="quorum-state"):
        store.read()
