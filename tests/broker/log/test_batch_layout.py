"""RecordBatch v2 header encoding (``record_batch.build_batch``) checked against Kafka's documented
layout (``DefaultRecordBatch``): field byte offsets, magic 2, CRC32C over attributes..end."""

from __future__ import annotations

import struct

import crc32c
import pytest

from pyspark_kafka.broker.log.record_batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CONTROL_BIT,
    CRC_OFFSET,
    CRC_START,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    TRANSACTIONAL_BIT,
    build_batch,
    check_batch,
    iter_record_views,
    parse_header,
)

from support.batches import encode_record


def test_build_batch_puts_fields_at_kafka_offsets():
    records = encode_record(0, 0, b"k", b"v") + encode_record(1, 5, None, None)
    batch = build_batch(records, record_count=2, last_offset_delta=1, base_timestamp=1000, max_timestamp=1005,
                        attributes=TRANSACTIONAL_BIT, producer_id=42, producer_epoch=3, base_sequence=7,
                        base_offset=500, partition_leader_epoch=9)
    assert len(batch) == BATCH_HEADER_SIZE + len(records)
    assert struct.unpack_from(">qiib", batch, 0) == (500, len(batch) - 12, 9, 2)
    assert batch[MAGIC_OFFSET] == 2
    assert struct.unpack_from(">I", batch, CRC_OFFSET)[0] == crc32c.crc32c(batch[CRC_START:])
    assert struct.unpack_from(">h", batch, ATTRIBUTES_OFFSET)[0] == TRANSACTIONAL_BIT
    assert struct.unpack_from(">q", batch, MAX_TIMESTAMP_OFFSET)[0] == 1005
    assert struct.unpack_from(">qhii", batch, 43) == (42, 3, 7, 2)  # producerId, epoch, baseSequence, count
    assert batch[BATCH_HEADER_SIZE:] == records
    header = check_batch(batch, 0, len(batch))  # framing, magic and CRC accepted
    assert header == parse_header(batch)
    assert (header.base_offset, header.last_offset, header.is_transactional, header.is_control) == (500, 501, True, False)


def test_build_batch_crc_excludes_offset_and_leader_epoch():
    a = build_batch(b"", record_count=0, last_offset_delta=0, base_timestamp=1, max_timestamp=1,
                    base_offset=0, partition_leader_epoch=-1)
    b = build_batch(b"", record_count=0, last_offset_delta=0, base_timestamp=1, max_timestamp=1,
                    base_offset=77, partition_leader_epoch=4)
    assert a[CRC_OFFSET:] == b[CRC_OFFSET:]
    c = build_batch(b"", record_count=0, last_offset_delta=0, base_timestamp=1, max_timestamp=1,
                    attributes=CONTROL_BIT)
    assert c[CRC_OFFSET:CRC_START] != a[CRC_OFFSET:CRC_START]


@pytest.mark.parametrize("log_append_time", [False, True])
def test_iter_record_views(log_append_time):
    records = [encode_record(0, 0, b"a", b"1"), encode_record(1, 7, None, b"2"), encode_record(2, 3, b"c", None)]
    attributes = 0x08 if log_append_time else 0
    batch = build_batch(b"".join(records), record_count=3, last_offset_delta=2, base_timestamp=100,
                        max_timestamp=999, attributes=attributes, base_offset=10)
    views = list(iter_record_views(parse_header(batch), batch[BATCH_HEADER_SIZE:]))
    assert [(v.offset, v.key, v.tombstone) for v in views] == [(10, b"a", False), (11, None, False), (12, b"c", True)]
    assert [v.timestamp for v in views] == ([999] * 3 if log_append_time else [100, 107, 103])
    assert [v.raw for v in views] == records
