"""Whole RecordBatch v2 encoding and decoding (via kio) for the records the broker writes itself.

The coordinators keep their state as records in internal topics (``__consumer_offsets``,
``__transaction_state``) and write transaction markers (control batches); they build and read
those batches here, and transaction markers (:func:`control_batch`). The produce and fetch paths never use this module: client batches are
stored and served as sent (see :mod:`~pyspark_kafka.broker.log.record_batch`).
"""

from __future__ import annotations

import datetime
import io
import struct
from typing import Iterable, Iterator

from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record, RecordBatch
from kio.records.writers import write_new_batch

from pyspark_kafka.broker.log.record_batch import (
    CONTROL_ABORT,
    CONTROL_BIT,
    CONTROL_COMMIT,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_BIT,
)
from pyspark_kafka.kafka.record_format import CONTROL_KEY


def encode_batch(records: Iterable[tuple[bytes | None, bytes | None]], timestamp_ms: int, *,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                 attributes: int = 0) -> bytes:
    """One uncompressed RecordBatch v2 (base offset 0, no sequence) of ``(key, value)`` records.

    Every record gets ``timestamp_ms`` (ms since the epoch); ``attributes`` are the batch
    attribute bits (e.g. transactional, control). A ``None`` value is a tombstone.
    """
    ts = datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.timezone.utc)
    batch = NewRecordBatch(
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE, attributes=attributes,
        records=tuple(Record(attributes=0, timestamp=ts, offset=i, key=key, value=value, headers=())
                      for i, (key, value) in enumerate(records)),
    )
    buf = io.BytesIO()
    write_new_batch(buf, batch)
    return buf.getvalue()


def decode_batch(data: bytes) -> RecordBatch:
    """The kio :class:`RecordBatch` (header fields and decoded records) of one whole batch."""
    return read_batch(data, 0)[0]


def control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int) -> bytes:
    """A transaction marker: a RecordBatch v2 with the transactional and control bits and one control record.

    Key: version 0 (int16), type (int16: 0 abort, 1 commit); value: version 0 (int16),
    coordinator epoch (int32) — Kafka's ``EndTransactionMarker``. Base offset 0, sequence -1.
    """
    key = CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return encode_batch([(key, value)], timestamp_ms, producer_id=producer_id, producer_epoch=producer_epoch,
                        attributes=TRANSACTIONAL_BIT | CONTROL_BIT)


def control_marker(batch: bytes) -> tuple[int, int]:
    """``(CONTROL_COMMIT or CONTROL_ABORT, coordinator epoch)`` of a control batch's one record (key:
    version int16, type int16; value: version int16, coordinator epoch int32 — Kafka's
    ``EndTransactionMarker``); coordinator epoch -1 when the value is shorter. Raises
    :class:`ValueError` when the record has no 4-byte key."""
    record = decode_batch(batch).records[0]
    key, value = record.key, record.value
    if key is None or len(key) < 4:
        raise ValueError("control record without a 4-byte key")
    epoch = int.from_bytes(value[2:6], "big", signed=True) if value is not None and len(value) >= 6 else -1
    return int.from_bytes(key[2:4], "big", signed=True), epoch


def control_type(batch: bytes) -> int:
    """CONTROL_COMMIT or CONTROL_ABORT of a control batch (see :func:`control_marker`)."""
    return control_marker(batch)[0]


def batch_identity(plog, offset: int) -> tuple[int, int] | None:
    """``(partition_leader_epoch, crc)`` of the batch of ``plog`` that holds ``offset``, or None when no
    batch holds it. Two replicas' logs holding a batch with the same offset, leader epoch and CRC agree
    on everything before it (the leader of an epoch appends once; followers truncate to match it, KIP-101)."""
    if not plog.log_start_offset <= offset < plog.log_end_offset:
        return None
    for segment in reversed(plog.segments):
        if segment.base_offset <= offset:
            found = segment.translate_offset(offset)
            if found is None or found[1].base_offset > offset:
                return None
            return found[1].partition_leader_epoch, found[1].crc
    return None


def iter_batches(plog, from_offset: int = 0) -> Iterator[RecordBatch]:
    """Every batch of partition log ``plog`` from ``max(log start offset, from_offset)``, decoded (for
    replaying a coordinator's internal topic at start; not for client data). Segments wholly below
    the start are skipped, and the first one is entered through its offset index."""
    start = max(plog.log_start_offset, from_offset)
    segments = list(plog.segments)
    for i, segment in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
            continue
        begin = 0
        if segment.base_offset < start:
            found = segment.translate_offset(start)
            if found is None:
                continue
            begin = found[0]
        for position, header in segment.iter_headers(begin):
            if header.last_offset >= start:
                yield decode_batch(segment.read_batch(position, header.size))
