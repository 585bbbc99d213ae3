"""Damaged bytes on disk: what recovery says when it truncates, and what a fetch serves.

Recovery (Kafka's ``LogSegment.recover`` / ``LogLoader.recoverLog``): every truncation logs a WARNING
naming the segment file, the byte position, the first invalid offset (the offset the invalid batch
would start at), the reason and the bytes dropped; segments deleted after a corrupt one name their
bytes and offsets. Fetch (Kafka's ``LogSegment.read`` / ``FileLogInputStream.nextBatch``): bytes are
served as stored from the damaged batch's position, so the client's CRC check names the damage;
a batch length below the minimum met while scanning for the fetch offset answers CORRUPT_MESSAGE.

Every log here is a real :class:`PartitionLog` in a tmp dir; it is reopened with its default
``recovery_point=0`` and no clean-shutdown marker, i.e. the unclean-shutdown path that re-validates
every segment.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import crc32c
import pytest

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.errors import CorruptRecordError, ErrorCode
from pyspark_kafka.broker.log.partition_log import PartitionLog
from pyspark_kafka.broker.log.record_batch import CRC_START, validate_batches
from pyspark_kafka.broker.replica_manager import ReplicaManager
from support.replicas import lead
from pyspark_kafka.broker.topic_config import LogConfig
from support.batches import make_batch

BATCHES = 5
RECORDS = 3  # per batch, so batch i holds offsets 3i .. 3i+2
DAMAGED = 2  # the batch that gets damaged: offsets 6..8
LOGGER = "pyspark_kafka.broker"


def _write(dir: Path, config: LogConfig | None = None, batches: int = BATCHES) -> tuple[Path, list[tuple[int, int]]]:
    """A closed log of ``batches`` 3-record batches; returns its first ``.log`` file and ``(position, size)`` per batch."""
    plog = PartitionLog("t", 0, dir, config or LogConfig())
    for i in range(batches):
        plog.append(make_batch([b"value-%d-%d" % (i, j) for j in range(RECORDS)]))
    layout = [(position, header.size) for segment in plog.segments for position, header in segment.iter_headers()]
    path = plog.segments[0].log_path
    plog.close()
    return path, layout


def _patch(path: Path, position: int, data: bytes) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, data, position)
    finally:
        os.close(fd)


def _read(path: Path, position: int, size: int) -> bytes:
    with open(path, "rb") as f:
        return os.pread(f.fileno(), size, position)


def _flip_value_byte(path: Path, position: int, size: int) -> None:
    """Invert a byte near the end of the batch (inside the last record's value; the CRC no longer matches)."""
    at = position + size - 3
    _patch(path, at, bytes([_read(path, at, 1)[0] ^ 0xFF]))


def _set_length(path: Path, position: int, length: int) -> None:
    _patch(path, position + 8, struct.pack(">i", length))


def _reopen(dir: Path, caplog, config: LogConfig | None = None) -> PartitionLog:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        return PartitionLog("t", 0, dir, config or LogConfig())


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# -- recovery ---------------------------------------------------------------------------------------

def test_crc_mismatch_names_file_position_offset_stored_and_computed_crc_and_bytes(tmp_path, caplog):
    path, layout = _write(tmp_path / "t-0")
    position, size = layout[DAMAGED]
    _flip_value_byte(path, position, size)
    damaged = _read(path, position, size)
    stored = struct.unpack_from(">I", damaged, 17)[0]
    computed = crc32c.crc32c(damaged[CRC_START:])
    file_size = path.stat().st_size

    plog = _reopen(tmp_path / "t-0", caplog)

    (warning, *rest) = _warnings(caplog)
    assert warning.startswith(f"Found invalid messages in log segment {path} at byte offset {position} "
                              f"(first invalid offset {DAMAGED * RECORDS}): CRC32C mismatch")
    assert f"stored crc = {stored:#010x}, computed crc = {computed:#010x}" in warning
    assert f"truncated {file_size - position} bytes" in warning
    assert plog.log_end_offset == DAMAGED * RECORDS
    stats = plog.recovery_stats
    assert stats.bytes_truncated == file_size - position
    assert [(i.position, i.first_invalid_offset, i.bytes_truncated) for i in stats.invalid] == [
        (position, DAMAGED * RECORDS, file_size - position)]
    # the partition-level line says which offsets were lost (the last segment's end is not known cheaply)
    assert any(f"t-0: corruption found in segment {path.name}, truncating to offset 6: {file_size - position} bytes "
               "and offsets from 6 on dropped" == line for line in rest)
    plog.close()


@pytest.mark.parametrize("damage, reason", [
    # the length raised by 8 runs into the next batch: the CRC now covers 8 of its bytes
    (lambda path, position, size: _set_length(path, position, size - 12 + 8), "CRC32C mismatch (stored crc = "),
    (lambda path, position, size: _set_length(path, position, 10), "batch length 10 is below the minimum 49"),
    (lambda path, position, size: _patch(path, position + 16, b"\x01"), "bad magic 1, expected 2"),
    # baseOffset is outside the CRC: an offset going backwards is only caught by the offset check
    (lambda path, position, size: _patch(path, position, struct.pack(">q", 0)),
     "offsets not increasing: base offset 0 is below the next offset 6"),
])
def test_each_kind_of_damage_is_named(tmp_path, caplog, damage, reason):
    path, layout = _write(tmp_path / "t-0")
    position, size = layout[DAMAGED]
    file_size = path.stat().st_size
    damage(path, position, size)

    plog = _reopen(tmp_path / "t-0", caplog)

    warning = _warnings(caplog)[0]
    assert warning.startswith(f"Found invalid messages in log segment {path} at byte offset {position} "
                              f"(first invalid offset 6): {reason}")
    assert f"truncated {file_size - position} bytes, the segment now ends at offset 6" in warning
    assert plog.log_end_offset == 6 and path.stat().st_size == position
    plog.close()


def test_torn_tail_batch_running_past_the_end_of_the_file(tmp_path, caplog):
    path, layout = _write(tmp_path / "t-0")
    position, size = layout[-1]
    os.truncate(path, position + size - 20)

    plog = _reopen(tmp_path / "t-0", caplog)

    warning = _warnings(caplog)[0]
    assert warning.startswith(
        f"Found invalid messages in log segment {path} at byte offset {position} (first invalid offset 12): "
        f"the batch runs past the end of the file: its length says {size} bytes, {size - 20} are present (torn write)")
    assert f"truncated {size - 20} bytes" in warning
    assert plog.log_end_offset == 12
    plog.close()


def test_torn_header_fewer_bytes_than_a_batch_header(tmp_path, caplog):
    path, layout = _write(tmp_path / "t-0")
    position, size = layout[-1]
    os.truncate(path, position + 30)

    plog = _reopen(tmp_path / "t-0", caplog)

    warning = _warnings(caplog)[0]
    assert warning.startswith(
        f"Found invalid messages in log segment {path} at byte offset {position} (first invalid offset 12): "
        "30 bytes left at the end of the file, fewer than the 61-byte batch header (torn write)")
    assert "truncated 30 bytes" in warning
    plog.close()


def test_an_intact_log_recovers_without_a_warning(tmp_path, caplog):
    _write(tmp_path / "t-0")
    plog = _reopen(tmp_path / "t-0", caplog)
    assert _warnings(caplog) == [] and plog.recovery_stats.invalid == [] and plog.log_end_offset == 15
    plog.close()


def test_segments_deleted_after_a_corrupt_batch_name_their_bytes_and_offsets(tmp_path, caplog):
    config = LogConfig(segment_bytes=260)  # two 3-record batches (~115 bytes each) per segment
    _, _ = _write(tmp_path / "t-0", config, batches=8)
    files = sorted((tmp_path / "t-0").glob("*.log"))
    bases = [int(f.name[:20]) for f in files]
    assert bases == [0, 6, 12, 18]
    first_of_second = _read(files[1], 0, 12)
    size = 12 + struct.unpack_from(">i", first_of_second, 8)[0]
    _flip_value_byte(files[1], 0, size)  # the first batch of segment 6: offsets 6..8
    sizes = {f.name: f.stat().st_size for f in files}

    plog = _reopen(tmp_path / "t-0", caplog, config)

    warnings = _warnings(caplog)
    assert warnings[0].startswith(f"Found invalid messages in log segment {files[1]} at byte offset 0 "
                                  "(first invalid offset 6): CRC32C mismatch")
    assert (f"t-0: corruption found in segment {files[1].name}, truncating to offset 6: {sizes[files[1].name]} bytes "
            "and offsets 6..11 (6 offsets) dropped") in warnings
    assert (f"t-0: deleting segment {files[2].name} after a corrupt batch in segment {files[1].name}: "
            f"{sizes[files[2].name]} bytes, offsets 12..17 (6 offsets)") in warnings
    assert (f"t-0: deleting segment {files[3].name} after a corrupt batch in segment {files[1].name}: "
            f"{sizes[files[3].name]} bytes, offsets from 18 on") in warnings
    stats = plog.recovery_stats
    assert (stats.segments_deleted, stats.bytes_deleted) == (2, sizes[files[2].name] + sizes[files[3].name])
    assert plog.log_end_offset == 6
    plog.close()


def test_clean_shutdown_with_garbage_after_the_last_batch_warns_too(tmp_path, caplog):
    path, layout = _write(tmp_path / "t-0")
    end = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\x00" * 70)  # a zero length: not a batch
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        plog = PartitionLog("t", 0, tmp_path / "t-0", LogConfig(), clean_shutdown=True)
    warning = _warnings(caplog)[0]
    assert warning.startswith(f"Found invalid messages in log segment {path} at byte offset {end} "
                              "(first invalid offset 15): batch length 0 is below the minimum 49")
    assert "truncated 70 bytes" in warning
    plog.close()


# -- fetch: bytes as stored -------------------------------------------------------------------------

def _open_damaged(tmp_path: Path, damage) -> tuple[PartitionLog, Path, int, int]:
    """A log whose middle batch is damaged after it was loaded (no recovery has seen the damage)."""
    plog = PartitionLog("t", 0, tmp_path / "t-0", LogConfig())
    for i in range(BATCHES):
        plog.append(make_batch([b"value-%d-%d" % (i, j) for j in range(RECORDS)]))
    layout = [(position, header.size) for position, header in plog.segments[0].iter_headers()]
    position, size = layout[DAMAGED]
    path = plog.segments[0].log_path
    damage(path, position, size)
    return plog, path, position, size


def test_fetch_at_a_batch_with_a_flipped_value_byte_serves_it_as_stored(tmp_path):
    plog, path, position, size = _open_damaged(tmp_path, _flip_value_byte)
    fetched = plog.read(DAMAGED * RECORDS + 1, 1 << 20)
    assert fetched.position == position
    raw = fetched.read_bytes()
    assert raw[:size] == _read(path, position, size)
    with pytest.raises(CorruptRecordError, match="fails its CRC32C check"):  # what a checking client finds
        validate_batches(raw)
    plog.close()


def test_fetch_at_a_batch_whose_length_runs_into_the_next_serves_its_stored_bytes(tmp_path):
    plog, path, position, size = _open_damaged(
        tmp_path, lambda path, position, size: _set_length(path, position, size - 12 + 8))
    fetched = plog.read(DAMAGED * RECORDS, 1 << 20)
    assert fetched.position == position and fetched.length >= size + 8
    raw = fetched.read_bytes()
    assert raw[: size + 8] == _read(path, position, size + 8)
    with pytest.raises(CorruptRecordError, match="fails its CRC32C check"):
        validate_batches(raw[: size + 8])
    # an earlier fetch offset gets the good batches and the damaged one, from the first batch on
    assert plog.read(0, 1 << 20).position == 0 and plog.read(0, 1 << 20).length == position + size + 8
    plog.close()


def test_fetch_meeting_a_length_below_the_minimum_answers_corrupt_message(tmp_path, caplog):
    plog, path, position, size = _open_damaged(tmp_path, lambda path, position, size: _set_length(path, position, 10))
    with pytest.raises(CorruptRecordError, match=f"length 10 smaller than the minimum 49 .* at byte {position} of "):
        plog.read(DAMAGED * RECORDS, 1 << 20)
    with pytest.raises(CorruptRecordError):  # scanning from the start of the segment meets it too
        plog.read(DAMAGED * RECORDS + RECORDS, 1 << 20)
    # a fetch before it gets the good batches, ending where the damaged one starts
    before = plog.read(0, 1 << 20)
    assert (before.position, before.length) == (0, position)
    plog.close()


def test_replica_manager_answers_corrupt_message_and_logs_an_error(tmp_path, caplog):
    rm = ReplicaManager(tmp_path, BrokerConfig({"num.partitions": "1"}), lambda *a: None)
    rm.logs.load()
    lead(rm, "t", 1)
    for i in range(BATCHES):
        rm.append_records("t", 0, make_batch([b"value-%d-%d" % (i, j) for j in range(RECORDS)]), 1, 0)
    segment = rm.logs.get_log("t", 0).segments[0]
    position = [p for p, _ in segment.iter_headers()][DAMAGED]
    _set_length(segment.log_path, position, 10)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        result = rm.read_records("t", 0, DAMAGED * RECORDS, 1 << 20, read_committed=False, min_one_message=True)
    assert result.error_code == ErrorCode.corrupt_message
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(m.startswith("Error processing fetch with max size 1048576 from consumer on partition t-0 at offset 6")
               for m in errors), errors
    rm.logs.close()


@pytest.mark.parametrize("chunk", [1, 61, 100, 150, 333])
def test_recovery_reads_in_chunks_without_losing_or_misplacing_a_batch(tmp_path, caplog, monkeypatch, chunk):
    """Recovery reads the ``.log`` in chunks (4 MiB; tiny here): headers and batches that straddle a chunk
    boundary are read whole, and damage in a later chunk is reported at its file position."""
    import pyspark_kafka.broker.log.segment as segment_module

    monkeypatch.setattr(segment_module, "_RECOVER_CHUNK", chunk)
    path, layout = _write(tmp_path / "t-0", batches=8)
    plog = _reopen(tmp_path / "t-0", caplog)
    assert _warnings(caplog) == [] and plog.log_end_offset == 24
    plog.close()
    position, size = layout[6]
    _flip_value_byte(path, position, size)
    plog = _reopen(tmp_path / "t-0", caplog)
    assert _warnings(caplog)[0].startswith(
        f"Found invalid messages in log segment {path} at byte offset {position} (first invalid offset 18): CRC32C")
    assert plog.log_end_offset == 18
    plog.close()
