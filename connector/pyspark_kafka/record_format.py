"""Kafka's RecordBatch v2 format (magic 2), defined once for the broker's log, the columnar reader and the tests.

Layout of the 61-byte batch header (Kafka's ``DefaultRecordBatch``, big-endian)::

    0  baseOffset int64          21 attributes int16        43 producerId int64
    8  batchLength int32         23 lastOffsetDelta int32   51 producerEpoch int16
    12 partitionLeaderEpoch int32 27 baseTimestamp int64    53 baseSequence int32
    16 magic int8                35 maxTimestamp int64      57 recordCount int32
    17 crc uint32 (CRC-32C of bytes 21..end)                 61 records...

``batchLength`` counts the bytes after itself, so a batch occupies ``12 + batchLength`` bytes
(at least 61: :data:`MIN_BATCH_LENGTH`). ``baseOffset`` and ``partitionLeaderEpoch`` are
outside the CRC: the broker rewrites them without recomputing it. Attributes: bits 0-2
compression, bit 3 timestamp type (1 = LogAppendTime), bit 4 transactional, bit 5 control,
bit 6 delete horizon set (KIP-534).

Records (Kafka's ``DefaultRecord``) follow the header, compressed as a whole when the batch is:
``length varint, attributes int8, timestampDelta varlong, offsetDelta varint, keyLength varint,
key, valueLength varint, value, headerCount varint, headers (keyLength varint >= 0, key,
valueLength varint >= -1, value)``; every varint is zigzag-encoded, an int32 varint takes at most
5 bytes and a varlong at most 10 (Kafka's ``ByteUtils.readVarint``/``readVarlong``). A record
needs at least 7 bytes (:data:`MIN_RECORD_SIZE`). A control record's key is ``version int16,
type int16`` (0 abort, 1 commit).

This module imports nothing of the package, so the broker (:mod:`pyspark_kafka.broker.log.record_batch`)
and the connector (:mod:`pyspark_kafka.read.record_decoder`) both build on it.
"""

from __future__ import annotations

import struct

import crc32c

BATCH_HEADER_SIZE = 61
"""Bytes of a RecordBatch v2 header, up to and including its record count."""
LOG_OVERHEAD = 12
"""baseOffset + batchLength: the bytes of a batch not counted by batchLength."""
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
"""The smallest valid batchLength (49): a header and no records."""
MAGIC = 2
MAGIC_OFFSET = 16
CRC_OFFSET = 17
CRC_START = 21
"""The CRC-32C covers bytes ``CRC_START`` .. end of the batch (attributes onwards)."""
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40
COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")

MIN_RECORD_BODY = 6
"""Bytes of the smallest record after its length varint: attributes, timestampDelta, offsetDelta,
keyLength, valueLength and headerCount, one byte each."""
MIN_RECORD_SIZE = 1 + MIN_RECORD_BODY
"""Bytes of the smallest record, its length varint included: bounds a batch's record count by its size."""
MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

HEADER = struct.Struct(">qiibIhiqqqhii")
"""The 13 header fields, baseOffset .. recordCount."""
assert HEADER.size == BATCH_HEADER_SIZE


def batch_crc(buf, position: int, size: int) -> int:
    """CRC-32C (Castagnoli, the ``crc32c`` package) of bytes ``position + 21 .. position + size`` of ``buf``:
    what the header's crc field of the ``size``-byte batch at ``position`` covers (Kafka's
    ``DefaultRecordBatch.computeChecksum``)."""
    return crc32c.crc32c(memoryview(buf)[position + CRC_START: position + size])


class VarintError(ValueError):
    """A varint runs past its limit (``end``) or is longer than its type allows."""


def read_zigzag(buf, position: int, end: int, max_bytes: int = MAX_VARLONG_BYTES) -> tuple[int, int]:
    """The zigzag varint at ``position`` of ``buf`` (bytes-like), read no further than ``end``:
    ``(value, position after it)``.

    ``max_bytes``: 5 for an int32 varint (value then within int32), 10 for a varlong. Raises
    :class:`VarintError` when the varint reaches ``end`` unfinished or is longer than ``max_bytes``
    (Kafka's ``ByteUtils.illegalVarintException``).
    """
    raw = shift = 0
    limit = min(end, position + max_bytes)
    while position < limit:
        byte = buf[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            value = (raw >> 1) ^ -(raw & 1)
            if max_bytes == MAX_VARINT_BYTES and not -(1 << 31) <= value < (1 << 31):
                raise VarintError(f"varint value {value} does not fit an int32")
            if max_bytes == MAX_VARLONG_BYTES and not -(1 << 63) <= value < (1 << 63):
                raise VarintError(f"varlong value {value} does not fit an int64")
            return value, position
        shift += 7
    if position >= end:
        raise VarintError(f"a varint runs past the end of its record (byte {end})")
    raise VarintError(f"a varint is longer than {max_bytes} bytes")
