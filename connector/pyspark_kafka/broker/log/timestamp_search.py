"""Finding records by timestamp in a partition's segments (ListOffsets: Kafka's
``UnifiedLog.searchOffsetInLocalLog``, ``LogSegment.findOffsetByTimestamp``, ``FileRecords.searchForTimestamp``).

Pure reads of :class:`~pyspark_kafka.broker.log.segment.LogSegment` objects: the time index narrows the
search, then the batches are read record by record (a compressed batch decompressed, bounded like the
produce path). :class:`~pyspark_kafka.broker.log.partition_log.PartitionLog` answers the special
ListOffsets targets and calls these.
"""

from __future__ import annotations

from typing import Sequence

from pyspark_kafka.broker.errors import KafkaError
from pyspark_kafka.broker.log.compression import decompress
from pyspark_kafka.broker.log.record_batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    iter_record_offsets_and_timestamps,
    iter_record_views,
)
from pyspark_kafka.broker.log.segment import LogSegment
from pyspark_kafka.broker.log.validator import UNCOMPRESSED_BOUND_FACTOR


def first_offset_at_or_after(segments: Sequence[LogSegment], ts_ms: int, start: int) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record with timestamp ``>= ts_ms`` (ms) and offset ``>= start``
    (the log start offset), searching ``segments`` (from the one holding ``start``, in offset order).

    Commits to the first segment whose largest timestamp reaches ``ts_ms`` and answers only from it (see
    :meth:`PartitionLog.offset_for_timestamp <pyspark_kafka.broker.log.partition_log.PartitionLog.offset_for_timestamp>`
    for why, as Apache Kafka does). None when there is no such record.
    """
    for segment in segments:
        if segment.largest_timestamp < ts_ms:
            continue
        entry = segment.time_index.lookup(ts_ms)
        from_offset = max(entry[1] if entry else segment.base_offset, start)
        _, position = segment.offset_index.lookup(from_offset)
        for pos, header in segment.iter_headers(position):
            if header.max_timestamp < ts_ms or header.last_offset < start:
                continue
            found = _first_record_at_or_after(segment, pos, header, ts_ms, start)
            if found is not None:
                return found
        return None
    return None


def _record_timestamps(segment: LogSegment, position: int, header):
    """``(offset, timestamp)`` of each record of the batch at ``position``; a compressed batch
    is decompressed (bounded like the produce path). None when it cannot be decoded."""
    batch = segment.read_batch(position, header.size)
    codec = header.attributes & COMPRESSION_MASK
    if not codec:
        return iter_record_offsets_and_timestamps(batch)
    try:
        body = decompress(codec, memoryview(batch)[BATCH_HEADER_SIZE:],
                          UNCOMPRESSED_BOUND_FACTOR * max(header.size, 1 << 20))
    except KafkaError:
        return None
    return ((r.offset, r.timestamp) for r in iter_record_views(header, body))


def _first_record_at_or_after(segment: LogSegment, position: int, header, ts_ms: int,
                              start: int) -> tuple[int, int] | None:
    """The first record of the batch at ``position`` with a timestamp ``>= ts_ms`` and an
    offset ``>= start`` (Kafka's ``FileRecords.searchForTimestamp`` per batch), None when the
    batch has none. Every record of a LogAppendTime batch has its maxTimestamp; a batch that
    cannot be decoded answers its first offset at or after ``start``."""
    if header.timestamp_type == "LogAppendTime":
        return max(header.base_offset, start), header.max_timestamp
    records = _record_timestamps(segment, position, header)
    if records is None:
        return max(header.base_offset, start), header.max_timestamp
    for offset, timestamp in records:
        if timestamp >= ts_ms and offset >= start:
            return offset, timestamp
    return None


def max_timestamp_offset(segments: Sequence[LogSegment], log_start_offset: int) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the record with the largest timestamp (ListOffsets -3, KIP-734).

    The earliest such record, of compressed and LogAppendTime batches too (Kafka 3.8+ reads
    the records of the batch that holds it, KAFKA-16310). None for an empty log.
    """
    best: tuple[int, int] | None = None  # (timestamp, segment index)
    for i, segment in enumerate(segments):
        if segment.size and (best is None or segment.largest_timestamp > best[0]):
            if segment.max_timestamp >= 0:
                best = (segment.max_timestamp, i)
    if best is None:
        return None
    timestamp, i = best
    segment = segments[i]
    found = segment.translate_offset(segment.offset_of_max_timestamp)
    if found is not None:
        position, header = found
        if header.max_timestamp == timestamp and header.last_offset >= log_start_offset:
            found = _first_record_at_or_after(segment, position, header, timestamp, log_start_offset)
            if found is not None:
                return found
    return max(segment.offset_of_max_timestamp, log_start_offset), timestamp
