"""What a start reads of each partition directory (Kafka's ``LogLoader``), and that reading less changed nothing.

A start lists each partition directory once: the segment files, the leftovers to remove and the producer snapshots
come from that one listing, and the offset checkpoints it read are not written again. After an unclean shutdown the same listing still leads to a torn tail being truncated
and to a producer snapshot past the new log end being dropped.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.log.manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from support.batches import make_batch

TOPIC = "orders"


def _reopen(data_dir: Path) -> LogManager:
    manager = LogManager(data_dir, BrokerConfig())
    manager.load()
    return manager


def _fill(manager: LogManager, partitions: int) -> None:
    """Ten idempotent batches of 4 records (producer 7, sequences 0..39) per partition, several segments each."""
    manager.create_topic(TOPIC, partitions, {"segment.bytes": "600"})
    now = int(time.time() * 1000)  # close() expires producers older than producer.id.expiration.ms
    for partition in range(partitions):
        log = manager.get_log(TOPIC, partition)
        for seq in range(0, 40, 4):
            log.append(make_batch(4, producer_id=7, producer_epoch=2, base_sequence=seq, timestamp_ms=now))
        assert len(log.segments) > 1


def test_a_clean_start_lists_each_partition_directory_once_and_loads_its_snapshot(tmp_path, monkeypatch, caplog):
    manager = _reopen(tmp_path)
    _fill(manager, 3)
    manager.close()  # a producer snapshot at each log end offset
    listed: list[str] = []
    scandir, listdir = os.scandir, os.listdir
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(os.fspath(path)) or scandir(path))
    monkeypatch.setattr(os, "listdir", lambda path=".": listed.append(os.fspath(path)) or listdir(path))
    caplog.set_level(logging.INFO, logger="pyspark_kafka")
    manager = _reopen(tmp_path)
    try:
        partition_dirs = sorted(p for p in listed if Path(p).parent == tmp_path)
        assert partition_dirs == [str(tmp_path / f"{TOPIC}-{p}") for p in range(3)]  # once each
        # the snapshot at the log end offset came from that listing: no batch replayed to rebuild the state
        assert "producer state rebuilt" not in caplog.text
        for partition in range(3):
            log = manager.get_log(TOPIC, partition)
            assert log.producer_state.producers[7].last_seq == 39
            duplicate = log.append(make_batch(4, producer_id=7, producer_epoch=2, base_sequence=36))
            assert (duplicate.base_offset, duplicate.record_count) == (36, 0)
    finally:
        manager.close()


def test_an_unclean_start_truncates_a_torn_tail_and_drops_the_snapshot_past_it(tmp_path, caplog):
    manager = _reopen(tmp_path)
    _fill(manager, 1)
    log = manager.get_log(TOPIC, 0)
    active = log.active_segment.log_path
    manager.close()  # snapshot at offset 40
    directory = tmp_path / f"{TOPIC}-0"
    assert (directory / f"{40:020d}.snapshot").exists()
    # The crash: no clean-shutdown marker, the last batch (offsets 36..39) torn, a snapshot write and an index
    # of a segment whose .log was deleted left behind.
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    with open(active, "r+b") as f:
        f.truncate(os.path.getsize(active) - 10)
    (directory / f"{44:020d}.snapshot.tmp").write_bytes(b"{")
    (directory / f"{90:020d}.index").write_bytes(b"")
    caplog.set_level(logging.WARNING, logger="pyspark_kafka")
    manager = _reopen(tmp_path)
    try:
        log = manager.get_log(TOPIC, 0)
        stats = log.recovery_stats
        assert not manager.clean_shutdown
        assert log.log_end_offset == 36 and stats.bytes_truncated > 0 and stats.orphan_files_deleted == 2
        assert "corruption found in segment" in caplog.text
        snapshots = sorted(p.name for p in directory.glob("*.snapshot*"))
        assert all(int(name.split(".")[0]) <= 36 for name in snapshots), snapshots  # 40 and the .tmp gone
        assert not (directory / f"{90:020d}.index").exists()
        # the producer state is the log's: sequence 36 is new (the snapshot at 40 would call it a duplicate)
        appended = log.append(make_batch(4, producer_id=7, producer_epoch=2, base_sequence=36))
        assert (appended.base_offset, appended.record_count) == (36, 4)
    finally:
        manager.close()


def test_a_clean_start_does_not_write_the_offset_checkpoints_again(tmp_path):
    """They hold what the start read (the unclean case, where recovery moves the recovery point and the file is
    written, is test_log_recovery.py's test_recovery_point_limits_rescanning)."""
    manager = _reopen(tmp_path)
    _fill(manager, 2)
    manager.close()
    files = [tmp_path / RECOVERY_POINT_CHECKPOINT, tmp_path / LOG_START_OFFSET_CHECKPOINT]
    before = [(f.stat().st_ino, f.stat().st_mtime_ns, f.read_text()) for f in files]
    assert f"{TOPIC} 1 40" in before[0][2]
    manager = _reopen(tmp_path)
    try:
        assert manager.clean_shutdown
        assert [(f.stat().st_ino, f.stat().st_mtime_ns, f.read_text()) for f in files] == before
    finally:
        manager.close()
