"""Build RecordBatch v2 bytes for tests and benchmarks (exact ms timestamps, optional gzip).

Import as ``from support.batches import make_batch``: ``tests`` is on pytest's ``pythonpath``
(setup.cfg); ``bench/broker_bench.py`` puts it on ``sys.path`` itself.

kio's writer takes ``datetime`` timestamps, which cannot hold every ms value exactly through a
float; tests of timestamp lookups need exact values, hence this small encoder of Kafka's
record format (``DefaultRecord``): varint-framed records after the 61-byte batch header.
"""

from __future__ import annotations

import struct
import zlib

from pyspark_kafka.broker.log.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, batch_crc, build_batch

GZIP = 1


def _varint(value: int) -> bytes:
    """Zigzag varint (Kafka's ``ByteUtils.writeVarlong``)."""
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw & ~0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _bytes_field(value: bytes | None) -> bytes:
    return _varint(-1) if value is None else _varint(len(value)) + value


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    """One record: length, attributes, timestamp delta, offset delta, key, value, 0 headers."""
    body = b"\x00" + _varint(timestamp_delta) + _varint(offset_delta) + _bytes_field(key) + _bytes_field(value)
    body += _varint(0)
    return _varint(len(body)) + body


def make_batch(
    values: list[bytes | None] | int,
    *,
    timestamp_ms: int = 1_700_000_000_000,
    timestamp_step_ms: int = 1,
    timestamps: list[int] | None = None,
    key: bytes | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    compression: int = 0,
) -> bytes:
    """One RecordBatch v2 (base offset 0, valid CRC32C) holding ``values`` (or that many small values).

    Record ``i`` gets ``timestamps[i]`` or ``timestamp_ms + i * timestamp_step_ms`` (ms).
    ``compression=1`` gzips the records (attribute bits 0-2 = 1), as a producer would.
    """
    if isinstance(values, int):
        values = [b"value-%04d" % i for i in range(values)]
    if timestamps is None:
        timestamps = [timestamp_ms + i * timestamp_step_ms for i in range(len(values))]
    base_ts = timestamps[0]
    records = b"".join(
        encode_record(i, ts - base_ts, key, value) for i, (ts, value) in enumerate(zip(timestamps, values))
    )
    if compression == GZIP:
        records = zlib.compress(records, wbits=31)  # gzip container
    elif compression:
        raise ValueError("only compression 0 (none) and 1 (gzip) are supported by this test helper")
    return build_batch(
        records, record_count=len(values), last_offset_delta=len(values) - 1, base_timestamp=base_ts,
        max_timestamp=max(timestamps), attributes=compression, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence,
    )


def transactional(batch: bytearray) -> bytes:
    """Set the transactional attribute bit and recompute the CRC32C."""
    attributes = struct.unpack_from(">h", batch, 21)[0] | 0x10
    struct.pack_into(">h", batch, 21, attributes)
    struct.pack_into(">I", batch, 17, batch_crc(batch, 0, len(batch)))
    return bytes(batch)
