"""Record-level validation of a client's record batch before it is written (Kafka's ``LogValidator``).

The framing checks in :mod:`~pyspark_kafka.broker.log.record_batch` (whole batch present,
magic 2, CRC32C, record count = lastOffsetDelta + 1) trust what the header says about the
records. A CRC only proves the bytes arrived as the client made them, so a batch whose
records disagree with its header would reach every consumer: a reader stuck at an offset,
offsets repeating, permanent decompression errors. :func:`validate_client_batch` therefore
decodes the records of each batch a client produces, decompressing compressed batches within
a bound (:mod:`~pyspark_kafka.broker.log.compression`), and refuses the batch when

- a producer id is set but the base sequence is negative (INVALID_RECORD; Kafka's ``validateBatch``);
- a record's length, key, value or header sizes run past the record or the batch, a size is
  negative (other than -1 for a null key, value or header value), or the record's fields do not
  end exactly where its length says (INVALID_RECORD, as Kafka's ``DefaultRecord.readFrom``);
- record ``i`` does not carry offset delta ``i`` (INVALID_RECORD). Kafka rebuilds such a batch
  when it is compressed and stores uncompressed ones as sent; this broker stores every batch
  as sent, so it refuses instead (documented difference);
- bytes remain after the last counted record, or the records end before the count is reached
  (INVALID_RECORD: "Incorrect declared batch size");
- the topic is compacted and a record has a null key (INVALID_RECORD, Kafka's
  "Compacted topic cannot accept message without key in topic partition t-0"), or, with
  ``message.timestamp.type=CreateTime``, a record's timestamp is more than
  ``message.timestamp.before.max.ms`` before or ``message.timestamp.after.max.ms`` after the
  broker's clock (INVALID_TIMESTAMP). These two are *record errors* (Kafka's ``RecordError``):
  every record of the batch is checked, and the exception (from
  :func:`~pyspark_kafka.broker.errors.record_validation_error`) carries each bad record's index
  and message, which Produce v8+ returns in ``record_errors`` (KIP-467);
- the compressed records cannot be decompressed or expand past the bound (CORRUPT_MESSAGE), or
  the codec id is not one Kafka defines (UNSUPPORTED_COMPRESSION_TYPE).

Cost: one pass over each record's varints in Python; the bytes written are the client's own
(nothing is re-encoded) unless the topic's ``compression.type`` names a codec other than the
batch's: then :func:`recompress_batch` rewrites the batch in that codec, as Kafka's
``LogValidator.validateMessagesAndAssignOffsetsCompressed`` does (``uncompressed`` decompresses).
"""

from __future__ import annotations

import numpy as np

from pyspark_kafka.broker.log.compression import CODEC_IDS, compress, decompress
from pyspark_kafka.broker.errors import InvalidRecordError, record_validation_error
from pyspark_kafka.broker.log.record_batch import BATCH_HEADER_SIZE, COMPRESSION_MASK, BatchHeader, build_batch
from pyspark_kafka.kafka.record_format import (
    MAX_VARINT_BYTES,
    MAX_VARLONG_BYTES,
    MIN_RECORD_BODY,
    MIN_RECORD_SIZE,
    VARINT_PAD,
    VarintError,
    read_zigzag,
    zigzag_varints,
)

UNCOMPRESSED_BOUND_FACTOR = 64
"""A compressed batch may expand to at most this many times the topic's ``max.message.bytes``."""
VECTORIZE_FROM = 256
"""Batches with at least this many records are checked with numpy (one Python step per record
to chain the record lengths, every other field decoded for all records at once); smaller ones
record by record in Python. Both accept and refuse exactly the same batches."""


_PAD = bytes(VARINT_PAD)


class _Truncated(VarintError):
    """A record's fields run past its end or the batch's (raised by the inline fast paths below; the
    varints they do not read come from :func:`pyspark_kafka.kafka.record_format.read_zigzag`, whose
    :class:`~pyspark_kafka.kafka.record_format.VarintError` is caught alike): refused as "fewer bytes than
    its records need"."""

    def __init__(self):
        super().__init__("a record runs past the end of its record or batch", truncated=True)


def validate_client_batch(batch, header: BatchHeader, *, where: str, max_message_bytes: int,
                          compacted: bool, timestamp_bounds: tuple[int, int] | None = None) -> None:
    """Validate the records of one whole batch (``batch``: its bytes, header included).

    ``where`` names the partition for messages (``topic-0``); ``max_message_bytes`` is the
    topic's ``max.message.bytes`` (the decompression bound is 64 times it); ``compacted``
    requires a key on every record; ``timestamp_bounds`` ``(low, high)``, when given, the range
    every record's timestamp (other than -1) must be in. Raises InvalidTimestampError, InvalidRecordError, CorruptRecordError or
    UnsupportedCompressionError; returns None when the batch is valid.
    """
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"record batch to {where} has producer id {header.producer_id} but base sequence "
            f"{header.base_sequence}: an idempotent or transactional batch needs a sequence number >= 0")
    codec = header.attributes & COMPRESSION_MASK
    body = memoryview(batch)[BATCH_HEADER_SIZE:header.size]
    if codec:
        body = decompress(codec, body, UNCOMPRESSED_BOUND_FACTOR * max_message_bytes)
    try:
        deltas = None if timestamp_bounds is None else (timestamp_bounds[0] - header.base_timestamp,
                                                        timestamp_bounds[1] - header.base_timestamp)
        if header.record_count < VECTORIZE_FROM or not _records_valid(body, header.record_count, compacted, deltas):
            _walk_records(body, header.record_count, compacted, where,  # raises, naming the bad record(s)
                          header.base_timestamp, header.base_offset, timestamp_bounds)
    except VarintError as exc:
        if not exc.truncated:  # longer than Kafka's 5 (int32) or 10 (varlong) bytes, or outside its type
            raise InvalidRecordError(f"record batch to {where} (base offset {header.base_offset}) has a malformed "
                                     f"record: {exc}") from None
        raise InvalidRecordError(
            f"record batch to {where} (base offset {header.base_offset}) has fewer bytes than its "
            f"{header.record_count} records need: a record runs past the end of the batch") from None


def target_codec(compression_type: str) -> int | None:
    """Codec id a topic's ``compression.type`` stores batches in; None for ``producer`` (as sent)."""
    return None if compression_type == "producer" else CODEC_IDS[compression_type]


def recompress_batch(batch, header: BatchHeader, codec: int, level: int | None, limit: int) -> bytes:
    """The whole batch ``batch`` (validated, header included) with its records in codec ``codec``
    (0 = uncompressed) at ``level`` (None: Kafka's default).

    Every header field stays (offsets, timestamps, timestamp type, producer id/epoch/sequence,
    transactional flag); the codec bits and the CRC change. ``limit`` bounds the decompression
    (bytes). Kafka's ``LogValidator`` recompresses this way when the topic's ``compression.type``
    differs from the batch's codec (a client's request holds one batch per partition).
    """
    body = memoryview(batch)[BATCH_HEADER_SIZE:header.size]
    source = header.attributes & COMPRESSION_MASK
    records = decompress(source, body, limit) if source else bytes(body)
    if codec:
        records = compress(codec, records, level)
    return build_batch(records, record_count=header.record_count, last_offset_delta=header.last_offset_delta,
                       base_timestamp=header.base_timestamp, max_timestamp=header.max_timestamp,
                       attributes=(header.attributes & ~COMPRESSION_MASK) | codec, producer_id=header.producer_id,
                       producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
                       base_offset=header.base_offset, partition_leader_epoch=header.partition_leader_epoch)


def _walk_records(body, count: int, compacted: bool, where: str, base_timestamp: int = 0, base_offset: int = 0,
                  timestamp_bounds: tuple[int, int] | None = None) -> None:
    """Walk ``count`` records of an uncompressed records section; raise on the first malformed one.

    Record errors (a null key on a compacted topic, a timestamp outside ``timestamp_bounds``) do
    not stop the walk: once every record is read they are raised together
    (:func:`~pyspark_kafka.broker.errors.record_validation_error`), each as ``(index, Kafka's message)``.

    The hot path of every produce request: varints are decoded inline with a one-byte fast path
    (most lengths and deltas of small records), the slow path in
    :func:`pyspark_kafka.kafka.record_format.read_zigzag` (at most 5 bytes for an int32 field, 10 for the
    timestamp delta, never past the record).
    """
    body = bytes(body)  # indexing bytes is faster than a memoryview
    end = len(body)
    if count * MIN_RECORD_SIZE > end:
        raise InvalidRecordError(f"record batch to {where} declares {count} records in {end} bytes of records")
    pos = 0
    varint = read_zigzag
    record_errors: list[tuple[int, str]] = []
    for i in range(count):
        if pos >= end:
            raise _Truncated
        b = body[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif pos + 1 < end and body[pos + 1] < 0x80:
            raw = (b & 0x7F) | (body[pos + 1] << 7)
            length, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            length, pos = varint(body, pos, end, MAX_VARINT_BYTES)
        record_end = pos + length
        if length < MIN_RECORD_BODY or record_end > end:
            raise InvalidRecordError(f"record {i} of a batch to {where} has length {length}, "
                                     f"{end - pos} bytes are left in the batch")
        # attributes (1 byte, unused in v2), then timestampDelta: skip its varint bytes
        pos += 1
        if timestamp_bounds is not None and pos < record_end:
            timestamp_delta, next_pos = varint(body, pos, record_end, MAX_VARLONG_BYTES)
            timestamp = base_timestamp + timestamp_delta
            if timestamp != -1 and not timestamp_bounds[0] <= timestamp <= timestamp_bounds[1]:
                record_errors.append((i, f"Timestamp {timestamp} of message with offset {base_offset + i} is out "
                                         f"of range. The timestamp should be within [{timestamp_bounds[0]}, "
                                         f"{timestamp_bounds[1]}]"))
        stop = pos + MAX_VARLONG_BYTES  # skip the timestampDelta varlong: at most 10 bytes, within the record
        if stop > record_end:  # noqa: PLR1730 - an if costs less than min() once per record
            stop = record_end
        while pos < stop and body[pos] >= 0x80:
            pos += 1
        if pos >= stop:
            raise _Truncated
        pos += 1
        if pos >= record_end:
            raise _Truncated
        b = body[pos]
        if b < 0x80:
            offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            offset_delta, pos = varint(body, pos, record_end, MAX_VARINT_BYTES)
        if offset_delta != i:
            raise InvalidRecordError(f"record {i} of a batch to {where} has offset delta {offset_delta}: the "
                                     f"records of a batch must carry offset deltas 0, 1, 2, ... in order")
        if pos >= record_end:
            raise _Truncated
        b = body[pos]
        if b < 0x80:
            key_length, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            key_length, pos = varint(body, pos, record_end, MAX_VARINT_BYTES)
        if key_length < 0:
            if key_length != -1:
                raise InvalidRecordError(f"record {i} of a batch to {where} has key length {key_length}")
            if compacted:
                record_errors.append((i, f"Compacted topic cannot accept message without key in topic partition "
                                         f"{where}"))
        else:
            pos += key_length
        if pos >= record_end:
            raise InvalidRecordError(f"record {i} of a batch to {where} has key length {key_length}, which does "
                                     f"not fit its record")
        b = body[pos]
        if b < 0x80:
            value_length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif pos + 1 < record_end and body[pos + 1] < 0x80:
            raw = (b & 0x7F) | (body[pos + 1] << 7)
            value_length, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            value_length, pos = varint(body, pos, record_end, MAX_VARINT_BYTES)
        if value_length < -1 or pos + value_length >= record_end:
            raise InvalidRecordError(f"record {i} of a batch to {where} has value length {value_length}, which "
                                     f"does not fit its record")
        if value_length > 0:
            pos += value_length
        b = body[pos]
        if b == 0:  # no headers: the common case
            pos += 1
        else:
            pos = _walk_headers(body, pos, record_end, i, where)
        if pos != record_end:
            raise InvalidRecordError(f"invalid record size: record {i} of a batch to {where} declares "
                                     f"{length} bytes but its fields take {length - (record_end - pos)}")
    if pos != end:
        raise InvalidRecordError(f"incorrect declared batch size: {end - pos} bytes remain after the "
                                 f"{count} records of a batch to {where}")
    if record_errors:
        raise record_validation_error(record_errors)


def _walk_headers(body: bytes, pos: int, record_end: int, i: int, where: str) -> int:
    headers, pos = read_zigzag(body, pos, record_end, MAX_VARINT_BYTES)
    if headers < 0 or headers * 2 > record_end - pos:
        raise InvalidRecordError(f"record {i} of a batch to {where} declares {headers} headers, which do not "
                                 f"fit its record")
    for _ in range(headers):
        n, pos = read_zigzag(body, pos, record_end, MAX_VARINT_BYTES)
        if n < 0 or pos + n > record_end:
            raise InvalidRecordError(f"record {i} of a batch to {where} has a header key of length {n}")
        pos += n
        n, pos = read_zigzag(body, pos, record_end, MAX_VARINT_BYTES)
        if n < -1 or pos + n > record_end:
            raise InvalidRecordError(f"record {i} of a batch to {where} has a header value of length {n}")
        pos += max(n, 0)
    return pos


def _records_valid(body, count: int, compacted: bool, timestamp_deltas: tuple[int, int] | None = None) -> bool:
    """True when all ``count`` records of ``body`` pass the checks of :func:`_walk_records`.

    Only the chain of record lengths is walked in Python; the fields of all records are then
    decoded and checked together with numpy. Records with headers are checked one by one.
    """
    data = b"".join((body, _PAD))  # one copy, zero-padded for zigzag_varints (which reads up to 10 bytes on)
    end = len(data) - VARINT_PAD
    if count * MIN_RECORD_SIZE > end:
        return False
    starts = []  # first byte after each record's length varint
    ends = []
    add_start, add_end = starts.append, ends.append
    pos = 0
    for _ in range(count):
        if pos >= end:
            return False
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif pos + 1 < end and data[pos + 1] < 0x80:
            raw = (b & 0x7F) | (data[pos + 1] << 7)
            length = (raw >> 1) ^ -(raw & 1)
            pos += 2
        else:
            try:
                length, pos = read_zigzag(data, pos, end, MAX_VARINT_BYTES)
            except VarintError:
                return False
        if length < MIN_RECORD_BODY:
            return False
        add_start(pos)
        pos += length
        add_end(pos)
    if pos != end:
        return False
    starts = np.array(starts, dtype=np.int64)
    ends = np.array(ends, dtype=np.int64)
    buf = np.frombuffer(data, dtype=np.uint8)
    # Each step returns as soon as a record fails: the next step's positions are then all within their records.
    ts_delta, p, ok = zigzag_varints(buf, starts + 1, ends, MAX_VARLONG_BYTES)  # attributes byte, then timestampDelta
    if timestamp_deltas is not None:  # a -1 timestamp is never refused: the slow path decides
        ok &= (ts_delta >= timestamp_deltas[0]) & (ts_delta <= timestamp_deltas[1])
    if not ok.all():
        return False
    delta, p, ok = zigzag_varints(buf, p, ends, MAX_VARINT_BYTES)
    if not (ok & (delta == np.arange(count))).all():
        return False
    key_len, p, ok = zigzag_varints(buf, p, ends, MAX_VARINT_BYTES)
    p = p + np.maximum(key_len, 0)
    if not (ok & (key_len >= (0 if compacted else -1)) & (p < ends)).all():
        return False
    value_len, p, ok = zigzag_varints(buf, p, ends, MAX_VARINT_BYTES)
    p = p + np.maximum(value_len, 0)
    if not (ok & (value_len >= -1) & (p < ends)).all():
        return False
    no_headers = buf[p] == 0
    ok = np.where(no_headers, p + 1 == ends, True)
    if not ok.all():
        return False
    for i in np.flatnonzero(~no_headers):  # records with headers: rare, checked one by one
        try:
            if _walk_headers(data, int(p[i]), int(ends[i]), int(i), "") != ends[i]:
                return False
        except (InvalidRecordError, VarintError):
            return False
    return True
