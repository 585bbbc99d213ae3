"""Crash recovery: torn/garbage/corrupt tails, damaged indexes, recovery point, clean-shutdown marker.

A "crash" is a forked child that appends through a LogManager and leaves with ``os._exit``:
no close, no flush of Python buffers, no checkpoint, like ``kill -9`` of the broker (the page
cache survives, as it does when only the process dies).
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from kio.records.readers import read_batch

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.log.manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, LogManager
from pyspark_kafka.broker.log.record_batch import validate_batches
from support.batches import make_batch

T0 = 1_700_000_000_000
TOPIC = "orders"


def _child(data_dir: str, create: bool, batches: int, first_ts: int, flush_after: int | None, configs: dict,
           broker: dict) -> None:
    manager = LogManager(Path(data_dir), BrokerConfig(broker))
    manager.load()
    if create:
        manager.create_topic(TOPIC, 1, configs)
    log = manager.get_log(TOPIC, 0)
    for i in range(batches):
        log.append(make_batch(3, timestamp_ms=first_ts + 10 * i))
        if flush_after is not None and i + 1 == flush_after:
            manager.flush_all()
    os._exit(0)


def crash_after_appends(data_dir: Path, batches: int, *, create: bool = True, first_ts: int = T0,
                        flush_after: int | None = None, configs: dict | None = None,
                        broker: dict | None = None) -> None:
    """Append ``batches`` 3-record batches in a child process that then dies without closing anything."""
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_child, args=(str(data_dir), create, batches, first_ts, flush_after, configs or {},
                                                  broker or {}))
    child.start()
    child.join(60)
    assert child.exitcode == 0


def reopen(data_dir: Path) -> LogManager:
    manager = LogManager(data_dir, BrokerConfig())
    manager.load()
    return manager


def all_offsets(log) -> list[int]:
    offsets, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        raw = log.read(offset, 1 << 20).read_bytes()
        position = 0
        while position < len(raw):
            batch, size = read_batch(raw[position:], 0)  # independent decoder, checks CRC
            offsets += [r.offset for r in batch.records]
            position += size
        offset = validate_batches(raw)[-1].next_offset
    return offsets


def active_log_file(data_dir: Path) -> Path:
    return sorted((data_dir / f"{TOPIC}-0").glob("*.log"))[-1]


SMALL_SEGMENTS = {"segment.bytes": "1000", "index.interval.bytes": "150"}


def test_crash_keeps_every_written_batch_and_appends_continue(tmp_path):
    crash_after_appends(tmp_path, 30, configs=SMALL_SEGMENTS)
    manager = reopen(tmp_path)
    log = manager.get_log(TOPIC, 0)
    assert not manager.clean_shutdown
    assert log.recovery_stats.segments_scanned >= 1 and log.recovery_stats.bytes_truncated == 0
    assert all_offsets(log) == list(range(90))
    assert log.append(make_batch(2)).base_offset == 90
    assert log.offset_for_timestamp(T0 + 151) == (46, T0 + 151)
    manager.close()


@pytest.mark.parametrize("damage", ["torn write", "garbage tail", "zeros tail"])
def test_torn_or_garbage_tail_is_truncated(tmp_path, damage):
    crash_after_appends(tmp_path, 10)
    path = active_log_file(tmp_path)
    size = path.stat().st_size
    batch_size = len(make_batch(3))
    if damage == "torn write":
        os.truncate(path, size - 7)  # the last batch lost its last 7 bytes
        expected = 27
    else:
        with open(path, "ab") as f:
            f.write(b"\x00" * 100 if damage == "zeros tail" else b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x50junk")
        expected = 30
    log = reopen(tmp_path).get_log(TOPIC, 0)
    assert all_offsets(log) == list(range(expected))
    assert path.stat().st_size == expected // 3 * batch_size
    assert log.recovery_stats.bytes_truncated > 0
    assert log.append(make_batch(3)).base_offset == expected
    assert all_offsets(log) == list(range(expected + 3))


def test_bad_crc_in_active_segment_truncates_from_that_batch(tmp_path):
    crash_after_appends(tmp_path, 10)
    path = active_log_file(tmp_path)
    batch_size = len(make_batch(3))
    with open(path, "r+b") as f:  # flip a value byte inside batch 6 (offsets 18..20)
        f.seek(6 * batch_size + 70)
        byte = f.read(1)
        f.seek(6 * batch_size + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    log = reopen(tmp_path).get_log(TOPIC, 0)
    assert all_offsets(log) == list(range(18))
    assert log.log_end_offset == 18


def test_corrupt_segment_after_recovery_point_drops_later_segments(tmp_path):
    crash_after_appends(tmp_path, 40, configs=SMALL_SEGMENTS)
    files = sorted((tmp_path / f"{TOPIC}-0").glob("*.log"))
    assert len(files) >= 4
    second = files[1]
    with open(second, "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xff\xff")
    manager = reopen(tmp_path)
    log = manager.get_log(TOPIC, 0)
    assert log.recovery_stats.segments_deleted == len(files) - 2
    base = int(second.name[:20])
    assert log.log_end_offset < int(files[2].name[:20])
    assert all_offsets(log) == list(range(log.log_end_offset))
    assert log.log_end_offset >= base
    assert log.append(make_batch(1)).base_offset == log.log_end_offset - 1


@pytest.mark.parametrize("damage", ["deleted", "odd size", "decreasing", "past the log", "garbage", "past the end"])
def test_damaged_indexes_are_rebuilt_after_clean_shutdown(tmp_path, damage):
    manager = reopen(tmp_path)
    manager.create_topic(TOPIC, 1, {"index.interval.bytes": "150"})
    log = manager.get_log(TOPIC, 0)
    for i in range(40):
        log.append(make_batch(3, timestamp_ms=T0 + 10 * i))
    manager.close()
    directory = tmp_path / f"{TOPIC}-0"
    index = directory / f"{0:020d}.index"
    timeindex = directory / f"{0:020d}.timeindex"
    good_index, good_timeindex = index.read_bytes(), timeindex.read_bytes()
    log_size = active_log_file(tmp_path).stat().st_size
    if damage == "deleted":
        index.unlink()
        timeindex.unlink()
    elif damage == "odd size":
        with open(index, "ab") as f:
            f.write(b"\x01\x02\x03")
    elif damage == "decreasing":
        index.write_bytes((5).to_bytes(4, "big") + (900).to_bytes(4, "big") + (3).to_bytes(4, "big")
                          + (100).to_bytes(4, "big"))
    elif damage == "past the log":
        index.write_bytes((5).to_bytes(4, "big") + (log_size + 10).to_bytes(4, "big"))
    elif damage == "past the end":  # a well-formed time index entry for offset 500 of a 120-offset log
        with open(timeindex, "ab") as f:
            f.write((T0 + 10**6).to_bytes(8, "big") + (500).to_bytes(4, "big"))
    else:
        timeindex.write_bytes(b"\xff" * 36)
    manager = reopen(tmp_path)
    log = manager.get_log(TOPIC, 0)
    assert manager.clean_shutdown and log.active_segment.indexes_rebuilt
    assert all_offsets(log) == list(range(120))
    assert log.offset_for_timestamp(T0 + 201) == (61, T0 + 201)
    log.flush()
    assert index.read_bytes() == good_index and timeindex.read_bytes()[: len(good_timeindex)] == good_timeindex
    assert log.append(make_batch(1)).base_offset == 120


def test_damaged_index_of_old_segment_is_rebuilt_on_clean_restart(tmp_path):
    manager = reopen(tmp_path)
    manager.create_topic(TOPIC, 1, SMALL_SEGMENTS)
    log = manager.get_log(TOPIC, 0)
    for i in range(40):
        log.append(make_batch(3, timestamp_ms=T0 + 10 * i))
    manager.close()
    first_index = tmp_path / f"{TOPIC}-0" / f"{0:020d}.index"
    first_index.write_bytes(b"\xff" * 8)
    manager = reopen(tmp_path)
    log = manager.get_log(TOPIC, 0)
    assert manager.clean_shutdown and log.recovery_stats.segments_scanned == 0
    assert all_offsets(log) == list(range(120))
    assert log.segments[0].indexes_rebuilt


def test_recovery_point_limits_rescanning(tmp_path):
    # 60 batches in ~1000-byte segments; flush (and checkpoint) after 50, then crash
    crash_after_appends(tmp_path, 60, configs=SMALL_SEGMENTS, flush_after=50)
    checkpoint = (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text().splitlines()
    assert checkpoint[:2] == ["0", "1"] and checkpoint[2] == f"{TOPIC} 0 150"
    manager = reopen(tmp_path)
    log = manager.get_log(TOPIC, 0)
    stats = log.recovery_stats
    bases = [segment.base_offset for segment in log.segments]
    holding_150_or_later = sum(1 for base, nxt in zip(bases, bases[1:] + [10**9]) if nxt > 150)
    assert stats.segments >= 8 and 1 <= holding_150_or_later <= 3
    assert stats.segments_scanned == holding_150_or_later  # older segments are not re-validated
    assert all_offsets(log) == list(range(180))
    # recovered data was fsynced: the next crash re-scans nothing before the new recovery point
    assert f"{TOPIC} 0 180" in (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text()


def test_roll_flushes_closed_segments_so_a_crash_rescans_only_the_active_one(tmp_path):
    crash_after_appends(tmp_path, 60, configs=SMALL_SEGMENTS,
                        broker={"log.flush.offset.checkpoint.interval.ms": "0"})
    manager = reopen(tmp_path)
    log = manager.get_log(TOPIC, 0)
    assert log.recovery_stats.segments >= 8
    assert log.recovery_stats.segments_scanned == 1
    assert all_offsets(log) == list(range(180))


def test_clean_shutdown_skips_scan_and_marker_is_consumed(tmp_path):
    manager = reopen(tmp_path)
    manager.create_topic(TOPIC, 2, SMALL_SEGMENTS)
    for i in range(30):
        manager.get_log(TOPIC, i % 2).append(make_batch(3, timestamp_ms=T0 + i))
    manager.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    manager = reopen(tmp_path)
    assert manager.clean_shutdown and not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert all(s.segments_scanned == 0 for s in manager.recovery_stats.values())
    logs = [manager.get_log(TOPIC, p) for p in (0, 1)]
    assert [lg.log_end_offset for lg in logs] == [45, 45]
    assert all_offsets(logs[1]) == list(range(45))
    # now crash: the next load must not believe the shutdown was clean
    crash_after_appends(tmp_path, 1, create=False)
    manager = reopen(tmp_path)
    assert not manager.clean_shutdown
    assert manager.get_log(TOPIC, 0).log_end_offset == 48


def test_recovery_after_crash_during_retention_keeps_log_start(tmp_path):
    manager = reopen(tmp_path)
    manager.create_topic(TOPIC, 1, {**SMALL_SEGMENTS, "retention.bytes": "2000"})
    log = manager.get_log(TOPIC, 0)
    for i in range(40):
        log.append(make_batch(3, timestamp_ms=T0 + i))
    log.update_high_watermark(log.log_end_offset)  # retention deletes only below the high watermark
    assert manager.run_retention(now_ms=T0) > 0
    start = log.log_start_offset
    crash_after_appends(tmp_path, 2, create=False)
    log = reopen(tmp_path).get_log(TOPIC, 0)
    assert log.log_start_offset == start > 0
    assert all_offsets(log) == list(range(start, 126))
