"""RecordBatch v2 (magic 2) batches on the broker's side: header parsing and validation, offset
assignment, header encoding (:func:`build_batch`) and record walking, without decoding values.

The format itself (the 61-byte header's layout, the attribute bits, the record layout, the CRC and
the varints) is defined once in :mod:`pyspark_kafka.kafka.record_format`, shared with the columnar
reader; the names this module re-exports from there (``BATCH_HEADER_SIZE``, ``CONTROL_BIT``,
``CONTROL_COMMIT`` ...) are that module's. Whole batches of the broker's own records (coordinator
state, transaction markers) are encoded through kio in :mod:`~pyspark_kafka.broker.log.records`.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

import crc32c

from pyspark_kafka.broker.errors import CorruptRecordError, InvalidRecordError
from pyspark_kafka.kafka.record_format import AFTER_CRC as _AFTER_CRC
from pyspark_kafka.kafka.record_format import BEFORE_CRC as _BEFORE_CRC
from pyspark_kafka.kafka.record_format import HEADER as _HEADER
from pyspark_kafka.kafka.record_format import OFFSET_LENGTH as _OFFSET_LENGTH
from pyspark_kafka.kafka.record_format import PREFIX as _PREFIX
from pyspark_kafka.kafka.record_format import (  # the layout is defined once, for the broker and the reader
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    COMPRESSION_NAMES,
    CONTROL_ABORT,  # noqa: F401 - re-exported: the control record types
    CONTROL_BIT,
    CONTROL_COMMIT,  # noqa: F401
    CRC_OFFSET,
    CRC_START,  # noqa: F401 - re-exported
    DELETE_HORIZON_BIT,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MAX_VARINT_BYTES,
    MAX_VARLONG_BYTES,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    VarintError,
    batch_crc,
    read_zigzag,
)

NO_PRODUCER_ID = -1  # header sentinels: a batch from a non-idempotent producer
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

PREFIX_SIZE = _PREFIX.size
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")


class BatchHeader(NamedTuple):
    """The header fields of one RecordBatch v2 (offsets absolute, timestamps in ms)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the batch occupies on disk and on the wire (``12 + batchLength``)."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def compression(self) -> str:
        """Codec name: none, gzip, snappy, lz4 or zstd (``unknown(N)`` otherwise)."""
        code = self.attributes & COMPRESSION_MASK
        return COMPRESSION_NAMES[code] if code < len(COMPRESSION_NAMES) else f"unknown({code})"

    @property
    def timestamp_type(self) -> str:
        """``CreateTime`` or ``LogAppendTime`` (attribute bit 3)."""
        return "LogAppendTime" if self.attributes & TIMESTAMP_TYPE_BIT else "CreateTime"

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


def parse_header(buf, position: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``position`` of ``buf`` (bytes-like); no validation."""
    return BatchHeader._make(_HEADER.unpack_from(buf, position))


def check_batch(buf, position: int, end: int) -> BatchHeader:
    """Validate the batch at ``position`` of ``buf`` (ending at most at ``end``) and return its header.

    Checks (Kafka's ``DefaultRecordBatch.ensureValid`` plus framing): the header fits, the
    length is sane and the whole batch is present, magic is 2, and the CRC32C matches.
    Raises :class:`CorruptRecordError` naming what is wrong.
    """
    remaining = end - position
    if remaining < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch at byte {position} is truncated: {remaining} bytes left, a RecordBatch v2 header needs "
            f"{BATCH_HEADER_SIZE}"
        )
    header = parse_header(buf, position)
    if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"record batch at byte {position} has batchLength {header.batch_length}, less than the "
            f"{BATCH_HEADER_SIZE - LOG_OVERHEAD}-byte minimum"
        )
    if header.size > remaining:
        raise CorruptRecordError(
            f"record batch at byte {position} is truncated: batchLength says {header.size} bytes, "
            f"only {remaining} present"
        )
    if header.magic != MAGIC:
        raise CorruptRecordError(
            f"record batch at byte {position} has magic {header.magic}: this broker stores only RecordBatch v2 "
            "(magic 2); use a client speaking Produce v3 or later"
        )
    actual = batch_crc(buf, position, header.size)
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at byte {position} (base offset {header.base_offset}) fails its CRC32C check: "
            f"stored {header.crc:#010x}, computed {actual:#010x}; the batch was damaged in transit or on disk"
        )
    return header


def validate_batches(buf) -> list[BatchHeader]:
    """Validate a produce request's record set: whole v2 batches, each with a good CRC.

    ``buf`` is bytes-like holding 1+ batches back to back. Besides :func:`check_batch`,
    each batch must have a positive record count that agrees with its offset range
    (Kafka's ``LogValidator.validateBatch``). Returns the headers in order.

    Raises :class:`CorruptRecordError` (CORRUPT_MESSAGE) for framing/magic/CRC problems and
    :class:`InvalidRecordError` (INVALID_RECORD) for inconsistent counts or an empty record set.
    """
    view = memoryview(buf)
    end = len(view)
    if end == 0:
        raise InvalidRecordError("the record set is empty: a produce request needs at least one record batch")
    headers: list[BatchHeader] = []
    position = 0
    while position < end:
        header = check_batch(view, position, end)
        if header.record_count <= 0:
            raise InvalidRecordError(
                f"record batch at byte {position} reports {header.record_count} records: a batch needs at least one"
            )
        if header.last_offset_delta + 1 != header.record_count:
            raise InvalidRecordError(
                f"record batch at byte {position} is inconsistent: lastOffsetDelta {header.last_offset_delta} "
                f"but {header.record_count} records"
            )
        headers.append(header)
        position += header.size
    return headers


def set_log_append_time(buf: bytearray, position: int, size: int, now_ms: int) -> None:
    """Stamp the batch with LogAppendTime: set the timestamp-type bit and maxTimestamp, recompute the CRC.

    What Kafka's ``LogValidator`` does for ``message.timestamp.type=LogAppendTime`` on v2 batches;
    the records themselves are not touched (readers use maxTimestamp for every record).
    """
    (attributes,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, now_ms)
    _UINT32.pack_into(buf, position + CRC_OFFSET, batch_crc(buf, position, size))


def stored_batch(view: memoryview, position: int, header: BatchHeader, base_offset: int, leader_epoch: int,
                 log_append_time_ms: int = -1) -> list:
    """The pieces of bytes to store for the batch at ``position`` of ``view`` once it has its offsets.

    A new 16-byte prefix (``baseOffset``, ``batchLength``, ``partitionLeaderEpoch``: outside the
    CRC, so the CRC stays valid) and the rest of the batch as sent, a slice of ``view`` (not
    copied). With ``log_append_time_ms >= 0`` the batch is copied and stamped instead (see
    :func:`set_log_append_time`). Kafka's ``LogValidator`` assigns offsets the same way.
    """
    if log_append_time_ms >= 0:
        batch = bytearray(view[position : position + header.size])
        set_log_append_time(batch, 0, header.size, log_append_time_ms)
        _PREFIX.pack_into(batch, 0, base_offset, header.batch_length, leader_epoch)
        return [batch]
    prefix = _PREFIX.pack(base_offset, header.batch_length, leader_epoch)
    return [prefix, view[position + PREFIX_SIZE : position + header.size]]


def build_batch(records: bytes, *, record_count: int, last_offset_delta: int, base_timestamp: int,
                max_timestamp: int, attributes: int = 0, producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE, base_offset: int = 0,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """One whole RecordBatch v2: a 61-byte header (magic 2, CRC32C computed) followed by ``records``.

    ``records`` are the encoded records as they go after the header (already compressed when
    ``attributes`` names a codec); timestamps are ms. No record is decoded or checked against
    ``record_count`` / ``last_offset_delta``: the caller supplies consistent values.
    """
    after_crc = _AFTER_CRC.pack(attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
                                producer_epoch, base_sequence, record_count) + records
    batch_length = BATCH_HEADER_SIZE - LOG_OVERHEAD + len(records)
    return _BEFORE_CRC.pack(base_offset, batch_length, partition_leader_epoch, MAGIC,
                            crc32c.crc32c(after_crc)) + after_crc


def read_offset_and_length(buf, position: int = 0) -> tuple[int, int]:
    """``(baseOffset, batchLength)`` of the batch at ``position`` (the 12-byte log overhead)."""
    return _OFFSET_LENGTH.unpack_from(buf, position)


def iter_record_offsets_and_timestamps(batch) -> Iterator[tuple[int, int]]:
    """``(offset, timestamp ms)`` of each record of one *uncompressed* batch (bytes-like, whole batch).

    Decodes only each record's length, timestamp delta and offset delta; for LogAppendTime
    batches every record has the batch's maxTimestamp (Kafka's rule). Raises
    :class:`CorruptRecordError` when a varint runs past its record or the batch, or is too long.
    """
    header = parse_header(batch)
    position = BATCH_HEADER_SIZE
    end = len(batch)
    log_append_time = header.timestamp_type == "LogAppendTime"
    for _ in range(header.record_count):
        try:
            length, position = read_zigzag(batch, position, end, MAX_VARINT_BYTES)
            record_end = min(position + length, end)
            ts_delta, after_ts = read_zigzag(batch, position + 1, record_end)  # skip the attributes byte
            offset_delta, _ = read_zigzag(batch, after_ts, record_end, MAX_VARINT_BYTES)
        except VarintError as exc:
            raise CorruptRecordError(f"malformed record in the batch at offset {header.base_offset}: {exc}") from None
        timestamp = header.max_timestamp if log_append_time else header.base_timestamp + ts_delta
        yield header.base_offset + offset_delta, timestamp
        position = position + length


class RecordView(NamedTuple):
    """One record of a batch: absolute offset, timestamp (ms), key, tombstone flag, raw bytes (framing included)."""

    offset: int
    timestamp: int
    key: bytes | None
    tombstone: bool
    raw: bytes


def iter_record_views(header: BatchHeader, body) -> Iterator[RecordView]:
    """The records in ``body``, the *uncompressed* records part of the batch described by ``header``.

    Decodes each record's framing, timestamp and offset deltas, key and value length (not the
    value or headers); for LogAppendTime batches every record has the batch's maxTimestamp.
    ``raw`` is the record's bytes as stored, so records can be copied into a new batch. Raises
    :class:`CorruptRecordError` when a varint runs past its record or the records section, or is too
    long (the varints are read by :func:`pyspark_kafka.kafka.record_format.read_zigzag`).
    """
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_BIT)
    pos = 0
    body_end = len(body)
    for _ in range(header.record_count):
        try:
            start = pos
            length, pos = read_zigzag(body, pos, body_end, MAX_VARINT_BYTES)
            end = pos + length
            limit = min(end, body_end)
            ts_delta, pos = read_zigzag(body, pos + 1, limit, MAX_VARLONG_BYTES)  # after the attributes int8
            offset_delta, pos = read_zigzag(body, pos, limit, MAX_VARINT_BYTES)
            key_len, pos = read_zigzag(body, pos, limit, MAX_VARINT_BYTES)
            key = None if key_len < 0 else bytes(body[pos : pos + key_len])
            value_len, _ = read_zigzag(body, pos + max(key_len, 0), limit, MAX_VARINT_BYTES)
        except VarintError as exc:
            raise CorruptRecordError(f"malformed record in the batch at offset {header.base_offset}: {exc}") from None
        timestamp = header.max_timestamp if log_append_time else header.base_timestamp + ts_delta
        yield RecordView(header.base_offset + offset_delta, timestamp, key, value_len < 0, bytes(body[start:end]))
        pos = end
