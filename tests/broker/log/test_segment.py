"""Direct tests of one log segment (``broker/log/segment.py``, after Kafka's ``LogSegment``).

Batches are built with the test batch builder and given their offsets by rewriting the
``baseOffset`` field (outside the CRC, as the broker does). Index files are checked byte for
byte against Kafka's format (8-byte ``.index`` entries, 12-byte ``.timeindex`` entries).
"""

from __future__ import annotations

import os
import struct

import pytest

from pyspark_kafka.broker.log.index import INT32_MAX
from pyspark_kafka.broker.log.record_batch import parse_header
from pyspark_kafka.broker.log.segment import LogSegment, segment_file_name
from support.batches import make_batch

BASE = 100
TS = 1_700_000_000_000


def batch_at(offset: int, records: int = 3, timestamp_ms: int = TS) -> bytes:
    """A valid batch of ``records`` records whose first offset is ``offset``."""
    batch = make_batch(records, timestamp_ms=timestamp_ms)
    return struct.pack(">q", offset) + batch[8:]


def open_segment(tmp_path, interval: int = 4096, max_index_size: int = 1 << 20, base: int = BASE) -> LogSegment:
    return LogSegment(tmp_path, base, interval, max_index_size)


def append(segment: LogSegment, *batches: bytes) -> None:
    segment.append(list(batches), [parse_header(b) for b in batches])


def fill(segment: LogSegment, count: int, records: int = 3, timestamp_step_ms: int = 10) -> list[bytes]:
    """Append ``count`` batches of ``records`` records each, one call per batch, after ``next_offset``."""
    batches = []
    for i in range(count):
        batch = batch_at(segment.next_offset, records, TS + i * timestamp_step_ms)
        append(segment, batch)
        batches.append(batch)
    return batches


@pytest.fixture
def segment(tmp_path):
    seg = open_segment(tmp_path)
    yield seg
    seg.close()


def test_new_segment_files_are_named_by_20_digit_base_offset(tmp_path, segment):
    assert segment_file_name(42, ".log") == "00000000000000000042.log"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["00000000000000000100.index", "00000000000000000100.log", "00000000000000000100.timeindex"]
    assert segment.size == 0
    assert segment.next_offset == BASE


def test_append_writes_batches_verbatim(segment):
    first, second = batch_at(BASE, 3), batch_at(BASE + 3, 5)
    append(segment, first, second)
    assert segment.log_path.read_bytes() == first + second
    assert segment.size == len(first) + len(second)
    assert segment.next_offset == BASE + 8
    assert [(pos, h.base_offset) for pos, h in segment.iter_headers()] == [(0, BASE), (len(first), BASE + 3)]


def test_index_entry_after_every_index_interval_bytes(tmp_path):
    size = len(batch_at(0))
    interval = 2 * size  # an entry once more than two batches follow the last one
    segment = open_segment(tmp_path, interval=interval)
    fill(segment, 10)
    segment.flush()
    # Kafka's rule: a batch is indexed when the bytes since the last entry exceed the interval
    # (before counting the batch itself): batches 3, 6, 9 (0-based), each by its last offset.
    expected = [(BASE + 3 * i + 2, i * size) for i in (3, 6, 9)]
    assert list(zip(segment.offset_index.keys, segment.offset_index.values)) == expected
    on_disk = segment.offset_index_path.read_bytes()
    assert on_disk == b"".join(struct.pack(">ii", offset - BASE, pos) for offset, pos in expected)
    # the time index: (largest timestamp so far, its offset) at the same batches, 12 bytes each
    expected_time = [(TS + i * 10 + 2, BASE + 3 * i + 2) for i in (3, 6, 9)]
    assert segment.time_index_path.read_bytes() == b"".join(
        struct.pack(">qi", ts, offset - BASE) for ts, offset in expected_time
    )
    segment.close()


def test_no_index_entry_within_first_interval(segment):
    fill(segment, 5)  # 5 small batches, far below 4096 bytes
    assert len(segment.offset_index) == 0
    assert segment.translate_offset(BASE + 7)[0] == 2 * len(batch_at(0))  # found by scanning headers


def test_translate_offset_finds_batch_holding_offset(tmp_path):
    size = len(batch_at(0))
    segment = open_segment(tmp_path, interval=size)
    fill(segment, 8)
    assert len(segment.offset_index) > 0
    for offset in range(BASE, BASE + 24):
        position, header = segment.translate_offset(offset)
        assert header.base_offset <= offset <= header.last_offset
        assert position == (offset - BASE) // 3 * size
    assert segment.translate_offset(BASE + 24) is None
    segment.close()


def test_read_returns_whole_batches_up_to_max_bytes(segment):
    size = len(batch_at(0))
    fill(segment, 6)
    assert segment.read(BASE + 4, max_bytes=2 * size + size // 2, max_position=segment.size,
                        min_one_message=False) == (size, 2 * size)
    assert segment.read(BASE, max_bytes=10 * size, max_position=segment.size, min_one_message=False) == (0, 6 * size)
    # never past max_position (e.g. the high watermark)
    assert segment.read(BASE, max_bytes=10 * size, max_position=4 * size, min_one_message=False) == (0, 4 * size)
    assert segment.read(BASE + 12, max_bytes=10 * size, max_position=4 * size, min_one_message=False) == (4 * size, 0)
    assert segment.read(BASE + 18, 1 << 20, segment.size, False) is None  # past the segment


def test_read_first_batch_larger_than_max_bytes(segment):
    size = len(batch_at(0))
    fill(segment, 2)
    assert segment.read(BASE, max_bytes=size - 1, max_position=segment.size, min_one_message=True) == (0, size)
    assert segment.read(BASE, max_bytes=size - 1, max_position=segment.size, min_one_message=False) == (0, 0)


def test_read_bytes_match_the_file(segment):
    batches = fill(segment, 4)
    position, length = segment.read(BASE + 3, 1 << 20, segment.size, False)
    assert segment.read_batch(position, length) == b"".join(batches[1:])


def test_position_limit(segment):
    size = len(batch_at(0))
    fill(segment, 3)
    assert segment.position_limit(BASE + 3) == size  # batch 1 starts at offset 103
    assert segment.position_limit(BASE + 4) == 2 * size  # inside batch 1: after it
    assert segment.position_limit(BASE + 99) == segment.size


def test_should_roll_by_bytes(segment):
    fill(segment, 1)
    size = segment.size
    kwargs = dict(segment_ms=10**12, max_timestamp=TS, last_offset=BASE + 10, now=0)
    assert not segment.should_roll(segment_bytes=2 * size, messages_size=size, **kwargs)
    assert segment.should_roll(segment_bytes=2 * size, messages_size=size + 1, **kwargs)


def test_should_roll_by_time_uses_first_batch_timestamp(segment):
    fill(segment, 1)
    first = segment.first_batch_timestamp
    assert first == TS + 2  # the first batch's maxTimestamp (Kafka's rollingBasedTimestamp)
    kwargs = dict(segment_bytes=1 << 30, messages_size=10, last_offset=BASE + 10, now=0)
    assert not segment.should_roll(segment_ms=1000, max_timestamp=first + 1000, **kwargs)
    assert segment.should_roll(segment_ms=1000, max_timestamp=first + 1001, **kwargs)


def test_empty_segment_does_not_roll_by_time(segment):
    assert not segment.should_roll(segment_bytes=1 << 30, segment_ms=0, messages_size=10,
                                   max_timestamp=TS + 10**9, last_offset=BASE, now=TS + 10**9)


def test_should_roll_when_index_full_or_offsets_overflow(tmp_path):
    size = len(batch_at(0))
    segment = open_segment(tmp_path, interval=1, max_index_size=8)  # one offset-index entry
    kwargs = dict(segment_bytes=1 << 30, segment_ms=10**12, messages_size=10, max_timestamp=TS, now=0)
    fill(segment, 1)
    assert not segment.should_roll(last_offset=BASE + 3, **kwargs)
    assert not segment.should_roll(last_offset=BASE + INT32_MAX, **kwargs)
    assert segment.should_roll(last_offset=BASE + INT32_MAX + 1, **kwargs)
    fill(segment, 1)  # second batch: indexed, the index is now full
    assert segment.offset_index.is_full
    assert list(segment.offset_index.values) == [size]
    assert segment.should_roll(last_offset=BASE + 6, **kwargs)
    segment.close()


def test_time_index_lookup_and_largest_timestamp(tmp_path):
    size = len(batch_at(0))
    segment = open_segment(tmp_path, interval=size)
    fill(segment, 6, timestamp_step_ms=100)
    assert segment.largest_timestamp == TS + 500 + 2
    assert segment.offset_of_max_timestamp == BASE + 17
    segment.on_become_inactive()  # the largest timestamp goes into the time index
    assert segment.time_index.last_entry == (TS + 502, BASE + 17)
    ts, offset = segment.time_index.lookup(TS + 350)
    assert ts <= TS + 350 and segment.translate_offset(offset) is not None
    segment.close()


def test_largest_timestamp_of_empty_segment_is_file_mtime(segment):
    os.utime(segment.log_path, (1_600_000_000, 1_600_000_000))
    assert segment.largest_timestamp == 1_600_000_000_000


def test_close_and_reopen_with_load_tail(tmp_path):
    size = len(batch_at(0))
    segment = open_segment(tmp_path, interval=size)
    fill(segment, 7)
    keys = list(segment.offset_index.keys)
    segment.flush()
    segment.close()
    reopened = open_segment(tmp_path, interval=size)
    assert reopened.next_offset is None  # unknown until loaded
    reopened.load_tail()
    assert not reopened.indexes_rebuilt
    assert reopened.next_offset == BASE + 21
    assert list(reopened.offset_index.keys) == keys
    assert reopened.first_batch_timestamp == TS + 2
    fill(reopened, 1)  # appending continues after the reopened end
    assert reopened.next_offset == BASE + 24
    reopened.close()


def test_recover_truncates_a_partial_last_batch(tmp_path):
    segment = open_segment(tmp_path)
    batches = fill(segment, 3)
    segment.close()
    with open(segment.log_path, "ab") as f:
        f.write(batch_at(BASE + 9)[:40])  # a torn write
    reopened = open_segment(tmp_path)
    assert reopened.recover() == 40
    assert reopened.size == sum(map(len, batches))
    assert reopened.next_offset == BASE + 9
    assert os.path.getsize(reopened.log_path) == reopened.size
    reopened.close()


def test_recover_stops_at_a_batch_failing_its_crc(tmp_path):
    size = len(batch_at(0))
    segment = open_segment(tmp_path, interval=1)
    fill(segment, 4)
    segment.close()
    with open(segment.log_path, "r+b") as f:  # flip a byte inside the third batch's records
        f.seek(2 * size + size - 1)
        byte = f.read(1)
        f.seek(2 * size + size - 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    reopened = open_segment(tmp_path, interval=1)
    assert reopened.recover() == 2 * size
    assert reopened.next_offset == BASE + 6
    assert list(reopened.offset_index.values) == [size]  # rebuilt: only batch 1 remains indexed
    reopened.flush()
    assert reopened.offset_index_path.read_bytes() == struct.pack(">ii", 5, size)
    reopened.close()


def test_recover_of_an_intact_segment_truncates_nothing(segment):
    fill(segment, 3)
    before = segment.log_path.read_bytes()
    assert segment.recover() == 0
    assert segment.log_path.read_bytes() == before
    assert segment.next_offset == BASE + 9


def test_trailing_garbage_found_by_load_tail_triggers_rebuild(tmp_path):
    segment = open_segment(tmp_path)
    fill(segment, 2)
    good = segment.size
    segment.close()
    with open(segment.log_path, "ab") as f:
        f.write(b"\x00" * 70)  # not a batch (batchLength 0)
    reopened = open_segment(tmp_path)
    reopened.load_tail()
    assert reopened.indexes_rebuilt
    assert reopened.size == good
    assert reopened.next_offset == BASE + 6
    reopened.close()


def _partial_offset_index_entry(segment: LogSegment) -> None:
    with open(segment.offset_index_path, "ab") as f:
        f.write(b"\x01\x02\x03")


def _missing_time_index(segment: LogSegment) -> None:
    segment.time_index_path.unlink()


@pytest.mark.parametrize("damage", [_partial_offset_index_entry, _missing_time_index])
def test_damaged_index_is_rebuilt_from_the_log(tmp_path, damage):
    size = len(batch_at(0))
    segment = open_segment(tmp_path, interval=size)
    fill(segment, 6)
    expected = list(zip(segment.offset_index.keys, segment.offset_index.values))
    expected_time = list(zip(segment.time_index.keys, segment.time_index.values))
    segment.flush()
    segment.close()
    damage(segment)
    reopened = open_segment(tmp_path, interval=size)
    assert list(zip(reopened.offset_index.keys, reopened.offset_index.values)) == expected
    assert list(zip(reopened.time_index.keys, reopened.time_index.values)) == expected_time
    assert reopened.indexes_rebuilt
    assert reopened.next_offset == BASE + 18
    reopened.close()


def test_truncate_to_position_rebuilds_indexes(tmp_path):
    size = len(batch_at(0))
    segment = open_segment(tmp_path, interval=size)
    fill(segment, 6)
    segment.truncate_to_position(3 * size)
    assert segment.size == 3 * size == os.path.getsize(segment.log_path)
    assert segment.next_offset == BASE + 9
    assert all(pos < 3 * size for pos in segment.offset_index.values)
    assert segment.max_timestamp == TS + 20 + 2
    segment.close()


def test_delete_removes_all_three_files(tmp_path, segment):
    fill(segment, 1)
    segment.delete()
    assert list(tmp_path.iterdir()) == []
