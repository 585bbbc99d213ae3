"""RecordBatch v2 header parsing and validation (no per-record decoding on the produce path)."""

from __future__ import annotations

import struct

import crc32c
import pytest
from kio.records.readers import read_batch

from pyspark_kafka.broker.errors import CorruptRecordError, InvalidRecordError
from pyspark_kafka.broker.log.record_batch import (
    BATCH_HEADER_SIZE,
    iter_record_offsets_and_timestamps,
    parse_header,
    set_log_append_time,
    stored_batch,
    validate_batches,
)
from support.batches import GZIP, make_batch


def test_header_fields_match_kio_reader():
    raw = make_batch([b"a", b"bb", None], timestamp_ms=1_700_000_000_123, producer_id=7, producer_epoch=2,
                     base_sequence=5)
    header = validate_batches(raw)[0]
    batch, size = read_batch(raw, 0)  # independent decoder
    assert header.size == size == len(raw)
    assert (header.crc, header.record_count, header.max_timestamp) == (batch.crc, 3, 1_700_000_000_125)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 5)
    assert (header.last_offset, header.next_offset, header.compression) == (2, 3, "none")
    assert [r.value for r in batch.records] == [b"a", b"bb", None]


def test_validate_accepts_several_batches_back_to_back():
    raw = make_batch(2) + make_batch(5) + make_batch(1)
    assert [h.record_count for h in validate_batches(raw)] == [2, 5, 1]


@pytest.mark.parametrize("byte", [21, 30, 60, 61, -1])
def test_flipped_byte_inside_crc_range_is_corrupt(byte):
    raw = bytearray(make_batch(4))
    raw[byte] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        validate_batches(bytes(raw))


@pytest.mark.parametrize("log_append_time", [-1, 1_800_000_000_000])
def test_stored_batch_gets_its_offset_and_leader_epoch_and_keeps_a_valid_crc(log_append_time):
    raw = make_batch(4) + make_batch(2)
    first, second = validate_batches(raw)
    stored = b"".join(stored_batch(memoryview(raw), first.size, second, 123456, 9, log_append_time))
    header = validate_batches(stored)[0]  # baseOffset and partitionLeaderEpoch are outside the CRC
    assert (header.base_offset, header.partition_leader_epoch, header.record_count) == (123456, 9, 2)
    assert header.max_timestamp == (second.max_timestamp if log_append_time < 0 else log_append_time)
    if log_append_time < 0:
        assert stored[16:] == raw[first.size + 16:]  # the rest is the producer's bytes, untouched
    assert read_batch(stored, 0)[0].records[1].offset == 123457  # an independent reader agrees


def test_truncated_batch_is_corrupt():
    raw = make_batch(4)
    for cut in (5, BATCH_HEADER_SIZE - 1, len(raw) - 1):
        with pytest.raises(CorruptRecordError, match="truncated"):
            validate_batches(raw[:cut])


def test_wrong_magic_is_rejected_with_the_fix():
    raw = bytearray(make_batch(1))
    raw[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1.*Produce v3"):
        validate_batches(raw)


def test_inconsistent_count_and_empty_sets_are_invalid():
    raw = bytearray(make_batch(3))
    struct.pack_into(">i", raw, 57, 2)  # recordCount 2 but lastOffsetDelta 2
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    with pytest.raises(InvalidRecordError, match="inconsistent"):
        validate_batches(raw)
    with pytest.raises(InvalidRecordError, match="empty"):
        validate_batches(b"")


def test_log_append_time_rewrites_max_timestamp_attribute_and_crc():
    raw = bytearray(make_batch(3, timestamp_ms=1000))
    set_log_append_time(raw, 0, len(raw), 5_000_000)
    header = validate_batches(raw)[0]  # CRC recomputed, still valid
    assert header.timestamp_type == "LogAppendTime" and header.max_timestamp == 5_000_000
    assert read_batch(bytes(raw), 0)[0].max_timestamp == 5_000_000
    assert [ts for _, ts in iter_record_offsets_and_timestamps(raw)] == [5_000_000] * 3


def test_compressed_batch_is_validated_without_decompressing():
    raw = make_batch(10, compression=GZIP)
    header = validate_batches(raw)[0]
    assert header.compression == "gzip" and header.record_count == 10


def test_record_timestamps_of_uncompressed_batch():
    raw = make_batch(3, timestamps=[10, 30, 20])
    assert list(iter_record_offsets_and_timestamps(raw)) == [(0, 10), (1, 30), (2, 20)]
    assert parse_header(raw).max_timestamp == 30
