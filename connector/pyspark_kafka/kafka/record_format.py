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
bit 6 delete horizon set (KIP-534: baseTimestamp is then the time after which the cleaner may
remove the batch's tombstones).

Records (Kafka's ``DefaultRecord``) follow the header, compressed as a whole when the batch is:
``length varint, attributes int8, timestampDelta varlong, offsetDelta varint, keyLength varint,
key, valueLength varint, value, headerCount varint, headers (keyLength varint >= 0, key,
valueLength varint >= -1, value)``; every varint is zigzag-encoded, an int32 varint takes at most
5 bytes and a varlong at most 10 (Kafka's ``ByteUtils.readVarint``/``readVarlong``). A record
needs at least 7 bytes (:data:`MIN_RECORD_SIZE`). A control record's key is ``version int16,
type int16`` (0 abort, 1 commit).

The varints, one definition each (every other module imports them): :func:`read_zigzag` (scalar) and
:func:`zigzag_varints` (numpy, many at once) decode a record's zigzag varints, :func:`encode_zigzag`
writes one; :func:`read_uvarint` and :func:`encode_uvarint` are the unsigned varint the zigzag one is
built on, also the wire protocol's compact lengths (re-exported by :mod:`pyspark_kafka.kafka.wire_header`).

This module imports nothing of the package, so the broker (:mod:`pyspark_kafka.broker.log.record_batch`)
and the connector (:mod:`pyspark_kafka.read.record_decoder`) both build on it.
"""

from __future__ import annotations

import struct

import crc32c
import numpy as np

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
OFFSET_LENGTH = struct.Struct(">qi")
"""baseOffset, batchLength: the log overhead (:data:`LOG_OVERHEAD` bytes) in front of every batch."""
PREFIX = struct.Struct(">qii")
"""baseOffset, batchLength, partitionLeaderEpoch: the header fields the broker rewrites (outside the CRC)."""
BEFORE_CRC = struct.Struct(">qiibI")
"""baseOffset .. crc: the header fields before the CRC'd part."""
AFTER_CRC = struct.Struct(">hiqqqhii")
"""attributes .. recordCount: the header fields the CRC covers."""
assert HEADER.size == BATCH_HEADER_SIZE == BEFORE_CRC.size + AFTER_CRC.size
assert BEFORE_CRC.size == CRC_START and OFFSET_LENGTH.size == LOG_OVERHEAD

CONTROL_KEY = struct.Struct(">hh")
"""A control record's key: version int16 (0), type int16 (Kafka's ``ControlRecordType``)."""
CONTROL_ABORT = 0
"""Control record type of an ABORT transaction marker."""
CONTROL_COMMIT = 1
"""Control record type of a COMMIT transaction marker."""


def batch_crc(buf, position: int, size: int) -> int:
    """CRC-32C (Castagnoli, the ``crc32c`` package) of bytes ``position + 21 .. position + size`` of ``buf``:
    what the header's crc field of the ``size``-byte batch at ``position`` covers (Kafka's
    ``DefaultRecordBatch.computeChecksum``)."""
    return crc32c.crc32c(memoryview(buf)[position + CRC_START: position + size])


class VarintError(ValueError):
    """A varint runs past its limit (``end``) or is longer than its type allows.

    ``truncated`` is True when the bytes ran out before the varint ended (the limit came first),
    False when it is too long or its value does not fit its type: callers that name the two
    causes differently (the request-bounds checker) read it instead of the message."""

    def __init__(self, message: str, truncated: bool = False):
        super().__init__(message)
        self.truncated = truncated


# The varints of Kafka's formats, defined once (Kafka's ``ByteUtils``): LEB128, 7 bits a byte, low
# bits first, the high bit set on every byte but the last. A record's int32 and int64 fields are
# zigzag-encoded (``(n << 1) ^ (n >> 63)``: small magnitudes take few bytes); the wire protocol's
# compact lengths and counts (KIP-482) are unsigned. Every decoder here reads no further than the
# caller's ``end`` and at most ``max_bytes`` bytes, and says which limit stopped it.
# The numba kernel of the columnar reader (pyspark_kafka.read.decode_kernel._varint) is a compiled
# copy of read_zigzag; tests/connector/test_varints.py checks that all of them agree.


def encode_uvarint(n: int) -> bytes:
    """``n`` (int ≥ 0) as an unsigned varint, 7 bits a byte, low bits first: the length of a compact
    string, bytes or array is ``len + 1`` written so (KIP-482, Kafka's ``ByteUtils.writeUnsignedVarint``),
    and a record's zigzag varint is this of the zigzag value (:func:`encode_zigzag`). Raises ValueError
    for a negative ``n``. Also importable as :func:`pyspark_kafka.kafka.wire_header.encode_uvarint`."""
    if n < 0:
        raise ValueError(f"an unsigned varint cannot hold {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_zigzag(value: int) -> bytes:
    """``value`` (int within int64) as a zigzag varint, 1 to 10 bytes (Kafka's ``ByteUtils.writeVarlong``;
    an int32 takes at most 5, as ``writeVarint``). Raises ValueError when ``value`` is outside int64."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"a zigzag varlong cannot hold {value}: it is outside int64")
    return encode_uvarint((value << 1) ^ (value >> 63))


def read_uvarint(buf, position: int, end: int, max_bytes: int = MAX_VARINT_BYTES) -> tuple[int, int]:
    """The unsigned varint at ``position`` of ``buf`` (bytes-like), read no further than ``end``:
    ``(value ≥ 0, position after it)`` (Kafka's ``ByteUtils.readUnsignedVarint``: the wire protocol's
    compact lengths and counts, KIP-482). ``max_bytes``: 5 (an unsigned int32; the value itself is not
    range-checked, callers compare it with the bytes left). Raises :class:`VarintError` when ``max_bytes``
    bytes all have the continuation bit (``truncated`` False) or ``end`` comes first (``truncated`` True).
    Also importable as :func:`pyspark_kafka.kafka.wire_header.read_uvarint`."""
    if position < end:
        value = buf[position]
        if value < 0x80:  # one byte (0..127): most compact lengths, counts and tag sections
            return value, position + 1
    start = position
    value = shift = 0
    limit = min(end, position + max_bytes)
    while position < limit:
        byte = buf[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    if position - start >= max_bytes:
        raise VarintError(f"a varint is longer than {max_bytes} bytes")
    raise VarintError(f"a varint runs past its end (byte {end})", truncated=True)


def read_zigzag(buf, position: int, end: int, max_bytes: int = MAX_VARLONG_BYTES) -> tuple[int, int]:
    """The zigzag varint at ``position`` of ``buf`` (bytes-like), read no further than ``end``:
    ``(value, position after it)``. The one scalar decoder of a record's varints.

    ``max_bytes``: 5 for an int32 varint (value then within int32), 10 for a varlong (value within
    int64); at least 2. Raises :class:`VarintError` when ``max_bytes`` bytes all have the continuation bit or the
    value does not fit its type (``truncated`` False; Kafka's ``ByteUtils.illegalVarintException``),
    or when the varint reaches ``end`` unfinished (``truncated`` True).
    """
    if position + 1 < end:  # one or two bytes (-8192..8191): most lengths and deltas, no loop
        byte = buf[position]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), position + 1
        raw = buf[position + 1]
        if raw < 0x80:
            raw = (byte & 0x7F) | (raw << 7)
            return (raw >> 1) ^ -(raw & 1), position + 2
    raw, after = read_uvarint(buf, position, end, max_bytes)  # three bytes or more: the unsigned loop
    if after - position == max_bytes:  # only a varint of the longest size can overflow its type
        if max_bytes == MAX_VARINT_BYTES and raw >> 32:
            raise VarintError(f"varint value {(raw >> 1) ^ -(raw & 1)} does not fit an int32")
        if max_bytes == MAX_VARLONG_BYTES and raw >> 64:
            raise VarintError(f"varlong value {(raw >> 1) ^ -(raw & 1)} does not fit an int64")
    return (raw >> 1) ^ -(raw & 1), after


VARINT_PAD = MAX_VARLONG_BYTES
"""Zero bytes :func:`zigzag_varints` needs after the last byte it may read (a varint has at most 10)."""


def zigzag_varints(buf, position, limit, max_bytes: int):
    """The zigzag varints at ``position`` (numpy int64 array) of ``buf`` (numpy uint8 array), all at once,
    each read no further than its ``limit`` (int64 array) nor ``max_bytes`` (5: int32, 10: int64):
    ``(values int64, positions after them int64, ok bool)``. The one vectorized decoder of a record's
    varints; ``ok`` is False exactly where :func:`read_zigzag` would raise (the varint runs past its limit,
    is longer than ``max_bytes`` or overflows its type), and that row's value and position are then
    meaningless.

    ``buf`` must hold :data:`VARINT_PAD` readable bytes after every ``position`` (pad it with zeros and
    keep ``position <= limit <= unpadded length``): no index is clamped, so an unpadded read past the
    end raises IndexError rather than returning a wrong value. Cost: one numpy pass per byte of the
    longest varint, no Python step per row.
    """
    n = position.shape[0]
    raw = np.zeros(n, np.uint64)
    done = np.zeros(n, np.bool_)
    over = np.zeros(n, np.bool_)
    length = np.zeros(n, np.int64)
    for i in range(max_bytes):
        b = buf[position + i].astype(np.uint64)
        live = ~done
        raw |= np.where(live, (b & np.uint64(0x7F)) << np.uint64(7 * i), np.uint64(0))
        length += live
        ending = live & (b < 0x80)
        if i == MAX_VARLONG_BYTES - 1:
            over |= ending & (b > 1)
        done |= ending
        if done.all():
            break
    ok = done & (position + length <= limit) & ~over
    if max_bytes == MAX_VARINT_BYTES:
        ok &= raw <= np.uint64(0xFFFFFFFF)
    value = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return value, position + length, ok
