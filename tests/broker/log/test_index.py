"""Direct tests of the sparse offset and time indexes (``broker/log/index.py``).

The on-disk format is Kafka's: ``.index`` entries are 8 bytes (relative offset int32, position
int32), ``.timeindex`` entries 12 bytes (timestamp int64, relative offset int32), big-endian,
offsets relative to the segment's base offset (Kafka's ``OffsetIndex`` / ``TimeIndex``).
"""

from __future__ import annotations

import struct

import pytest

from pyspark_kafka.broker.log.index import INT32_MAX, IndexCorruptError, OffsetIndex, TimeIndex

BASE = 1000


def offset_index(tmp_path, max_index_size: int = 1 << 20, base: int = BASE) -> OffsetIndex:
    return OffsetIndex(tmp_path / "x.index", base, max_index_size)


def time_index(tmp_path, max_index_size: int = 1 << 20, base: int = BASE) -> TimeIndex:
    return TimeIndex(tmp_path / "x.timeindex", base, max_index_size)


# -- OffsetIndex ---------------------------------------------------------------------------------


def test_offset_index_entries_are_8_bytes_relative_offset_and_position(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 5, 0)
    index.append(BASE + 70_000, 4242)
    index.flush(fsync=False)
    data = index.path.read_bytes()
    assert len(data) == 2 * OffsetIndex.ENTRY_SIZE == 16
    assert data == struct.pack(">ii", 5, 0) + struct.pack(">ii", 70_000, 4242)
    assert list(index.keys) == [BASE + 5, BASE + 70_000]  # in memory: absolute offsets
    assert list(index.values) == [0, 4242]


def test_offset_index_lookup_is_largest_entry_at_or_below_target(tmp_path):
    index = offset_index(tmp_path)
    for rel, pos in [(9, 100), (19, 250), (29, 400)]:
        index.append(BASE + rel, pos)
    assert index.lookup(BASE) == (BASE, 0)  # below the first entry: the segment start
    assert index.lookup(BASE + 8) == (BASE, 0)
    assert index.lookup(BASE + 9) == (BASE + 9, 100)  # exact hit
    assert index.lookup(BASE + 18) == (BASE + 9, 100)
    assert index.lookup(BASE + 19) == (BASE + 19, 250)
    assert index.lookup(BASE + 10_000) == (BASE + 29, 400)  # past the last entry
    assert index.floor(BASE - 1) == -1
    assert index.floor(BASE + 25) == 1


def test_offset_index_empty_lookup_points_at_segment_start(tmp_path):
    index = offset_index(tmp_path)
    assert len(index) == 0
    assert index.lookup(BASE + 123) == (BASE, 0)
    assert index.lookup_by_position(10_000) == 0


def test_offset_index_lookup_by_position(tmp_path):
    index = offset_index(tmp_path)
    for rel, pos in [(9, 100), (19, 250), (29, 400)]:
        index.append(BASE + rel, pos)
    assert index.lookup_by_position(99) == 0
    assert index.lookup_by_position(100) == 100
    assert index.lookup_by_position(399) == 250
    assert index.lookup_by_position(1 << 30) == 400


def test_offset_index_is_full_at_max_index_size_over_entry_size(tmp_path):
    index = offset_index(tmp_path, max_index_size=3 * 8 + 7)  # room for 3 whole entries
    assert index.max_entries == 3
    for i in range(3):
        assert not index.is_full
        index.append(BASE + i, i * 10)
    assert index.is_full
    assert offset_index(tmp_path, max_index_size=1).max_entries == 1  # never below one entry


def test_offset_index_rejects_offset_past_int32_relative_range(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + INT32_MAX, 0)  # the largest relative offset still fits
    with pytest.raises(ValueError, match="does not fit"):
        index.append(BASE + INT32_MAX + 1, 10)
    assert len(index) == 1


def test_offset_index_reopens_from_disk(tmp_path):
    index = offset_index(tmp_path)
    entries = [(BASE + 3, 0), (BASE + 50, 1000), (BASE + 99, 5000)]
    for key, value in entries:
        index.append(key, value)
    index.flush()
    index.close()
    reopened = offset_index(tmp_path)
    reopened.load(log_size=6000, next_offset=BASE + 100)
    assert list(zip(reopened.keys, reopened.values)) == entries
    assert reopened.lookup(BASE + 60) == (BASE + 50, 1000)


def test_offset_index_append_after_reopen_extends_the_file(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 1, 0)
    index.close()
    reopened = offset_index(tmp_path)
    reopened.load(log_size=100, next_offset=None)
    reopened.append(BASE + 2, 50)
    reopened.close()
    assert (tmp_path / "x.index").read_bytes() == struct.pack(">iiii", 1, 0, 2, 50)


def test_offset_index_missing_file_loads_empty(tmp_path):
    index = offset_index(tmp_path)
    index.load(log_size=0, next_offset=BASE)
    assert len(index) == 0


@pytest.mark.parametrize(
    "entries, log_size, next_offset, message",
    [
        ([(-1, 0)], 100, None, "below the base offset"),
        ([(5, 0), (5, 10)], 100, None, "strictly increase"),  # repeated offset
        ([(5, 10), (6, 10)], 100, None, "strictly increase"),  # repeated position
        ([(5, 10), (4, 20)], 100, None, "strictly increase"),
        ([(5, 0), (6, 100)], 100, None, "past the log"),  # position at the end of the log
        ([(5, 0), (9, 10)], 100, BASE + 9, "not below the next offset"),
    ],
)
def test_offset_index_sanity_check_rejects_inconsistent_entries(tmp_path, entries, log_size, next_offset, message):
    path = tmp_path / "x.index"
    path.write_bytes(b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries))
    index = offset_index(tmp_path)
    with pytest.raises(IndexCorruptError, match=message):
        index.load(log_size=log_size, next_offset=next_offset)
    assert len(index) == 0  # nothing half-loaded


def test_offset_index_partial_entry_is_corrupt(tmp_path):
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">ii", 1, 0) + b"\x00\x00\x00")  # a torn second entry
    with pytest.raises(IndexCorruptError, match="not a multiple of the 8-byte entry size"):
        offset_index(tmp_path).load(log_size=100, next_offset=None)


def test_reset_empties_file_and_memory(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 1, 0)
    index.append(BASE + 2, 10)
    index.reset()
    assert len(index) == 0
    assert index.path.read_bytes() == b""
    index.append(BASE + 7, 3)  # usable again after a reset
    index.flush(fsync=False)
    assert index.path.read_bytes() == struct.pack(">ii", 7, 3)


def test_delete_removes_the_file(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 1, 0)
    index.delete()
    assert not index.path.exists()
    index.delete()  # a second delete is harmless


# -- TimeIndex -----------------------------------------------------------------------------------


def test_time_index_entries_are_12_bytes_timestamp_and_relative_offset(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(1_700_000_000_000, BASE + 4)
    index.maybe_append(1_700_000_000_500, BASE + 9)
    index.flush(fsync=False)
    data = index.path.read_bytes()
    assert len(data) == 2 * TimeIndex.ENTRY_SIZE == 24
    assert data == struct.pack(">qi", 1_700_000_000_000, 4) + struct.pack(">qi", 1_700_000_000_500, 9)
    assert index.last_entry == (1_700_000_000_500, BASE + 9)


def test_time_index_only_appends_growing_timestamps(tmp_path):
    index = time_index(tmp_path)
    assert index.last_entry is None
    index.maybe_append(-1, BASE)  # no timestamp (-1): ignored
    index.maybe_append(100, BASE + 1)
    index.maybe_append(100, BASE + 2)  # not larger
    index.maybe_append(50, BASE + 3)  # smaller
    index.maybe_append(200, BASE + 4)
    assert list(zip(index.keys, index.values)) == [(100, BASE + 1), (200, BASE + 4)]


def test_time_index_full_check_and_its_override(tmp_path):
    index = time_index(tmp_path, max_index_size=2 * 12)
    index.maybe_append(1, BASE)
    index.maybe_append(2, BASE + 1)
    assert index.is_full
    index.maybe_append(3, BASE + 2)
    assert len(index) == 2
    index.maybe_append(3, BASE + 2, skip_full_check=True)  # what a segment does before a roll
    assert index.last_entry == (3, BASE + 2)


def test_time_index_lookup_is_largest_timestamp_at_or_below_target(tmp_path):
    index = time_index(tmp_path)
    for ts, rel in [(100, 0), (200, 10), (300, 20)]:
        index.maybe_append(ts, BASE + rel)
    assert index.lookup(99) is None
    assert index.lookup(100) == (100, BASE)
    assert index.lookup(250) == (200, BASE + 10)
    assert index.lookup(10**15) == (300, BASE + 20)


def test_time_index_reopens_from_disk(tmp_path):
    index = time_index(tmp_path)
    for ts, rel in [(100, 0), (200, 10), (300, 10)]:  # offsets may repeat: only timestamps must grow
        index.maybe_append(ts, BASE + rel)
    index.close()
    reopened = time_index(tmp_path)
    reopened.load(log_size=0, next_offset=BASE + 11)
    assert list(zip(reopened.keys, reopened.values)) == [(100, BASE), (200, BASE + 10), (300, BASE + 10)]


@pytest.mark.parametrize(
    "entries, next_offset, message",
    [
        ([(100, -1)], None, "below the base offset"),
        ([(100, 0), (100, 1)], None, "do not increase"),  # repeated timestamp
        ([(100, 5), (200, 4)], None, "do not increase"),  # offset going back
        ([(100, 0), (200, 5)], BASE + 5, "not below the next offset"),
    ],
)
def test_time_index_sanity_check(tmp_path, entries, next_offset, message):
    (tmp_path / "x.timeindex").write_bytes(b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries))
    with pytest.raises(IndexCorruptError, match=message):
        time_index(tmp_path).load(log_size=0, next_offset=next_offset)


def test_time_index_partial_entry_is_corrupt(tmp_path):
    (tmp_path / "x.timeindex").write_bytes(struct.pack(">qi", 1, 0) + b"\x01" * 8)
    with pytest.raises(IndexCorruptError, match="12-byte entry size"):
        time_index(tmp_path).load(log_size=0, next_offset=None)
