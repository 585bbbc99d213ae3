"""Log compaction (``cleanup.policy=compact`` or ``compact,delete``): keep the latest record per key.

Kafka's ``LogCleaner`` for one broker, run by :meth:`LogManager.run_retention` on each
retention check (``log.retention.check.interval.ms``) when ``log.cleaner.enable`` is true:

1. The **cleanable range** is the closed segments (never the active one) whose largest
   timestamp is at least ``min.compaction.lag.ms`` old, from the first segment on.
2. An **offset map** ``key -> offset of its last record`` is built over that range.
3. Each segment of the range is rewritten keeping a record when it has no key, or it is the
   last record of its key and is not a tombstone (null value) older than
   ``delete.retention.ms`` (by the record's timestamp). Batches keep their base offset, so
   **offsets never change**; a batch left without records disappears; a batch losing some
   records is rewritten uncompressed with the same base offset, last offset delta, timestamps
   and producer fields (CRC recomputed). Unchanged batches are copied byte for byte.
4. The new segment file is written as ``<base>.log.cleaned``, fsynced, then its index files
   are deleted and it replaces the ``.log`` (``os.replace``); the indexes are rebuilt. A crash in
   between leaves either the old ``.log`` (and a ``.cleaned`` file removed on load) or the new
   ``.log`` without indexes (rebuilt on load).

Not done (kept whole instead, never dropped): control batches, transactional batches (their
records are neither compacted nor used to compact others, so aborted data never hides an
older committed value), and compressed batches that would expand past the cleaner's bound
(64 x max(batch size, 1 MiB)). Segments are cleaned one by one and never merged; a log is re-cleaned only
when new segments were closed or a retained tombstone's ``delete.retention.ms`` passed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.log.checkpoint import fsync_dir, write_synced
from pyspark_kafka.broker.log.compression import decompress
from pyspark_kafka.broker.errors import KafkaError
from pyspark_kafka.broker.log.record_batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    BatchHeader,
    RecordView,
    build_batch,
    iter_record_views,
)
from pyspark_kafka.broker.log.segment import LogSegment
from pyspark_kafka.broker.log.validator import UNCOMPRESSED_BOUND_FACTOR

log = get_logger(__name__)

CLEANED_SUFFIX = ".cleaned"
_CLEANER_MIN_BOUND = 1 << 20
"""The cleaner decompresses a batch to at most 64 x max(its size, 1 MiB); a batch that expands further is kept whole."""


@dataclass
class CleanStats:
    """What one cleaning of a log did."""

    segments_rewritten: int = 0
    records_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


# --- records (pure functions) -------------------------------------------------------------------


def iter_records(header: BatchHeader, batch: bytes) -> Iterator[RecordView] | None:
    """The records of one whole batch (``batch`` = its bytes), or None when it cannot be decoded."""
    body = batch[BATCH_HEADER_SIZE:]
    codec = header.attributes & COMPRESSION_MASK
    if codec:
        try:  # bounded like the produce path (the batch was validated when it was appended)
            body = decompress(codec, body, UNCOMPRESSED_BOUND_FACTOR * max(header.size, _CLEANER_MIN_BOUND))
        except KafkaError:
            return None
    return iter_record_views(header, body)


def rebuild_batch(header: BatchHeader, records: list[RecordView]) -> bytes:
    """An uncompressed batch with ``records`` and the header's base offset, offset delta, timestamps and
    producer fields (Kafka's cleaner keeps them so offsets and producer state stay right)."""
    return build_batch(
        b"".join(r.raw for r in records), record_count=len(records), last_offset_delta=header.last_offset_delta,
        base_timestamp=header.base_timestamp, max_timestamp=header.max_timestamp,
        attributes=header.attributes & ~COMPRESSION_MASK, producer_id=header.producer_id,
        producer_epoch=header.producer_epoch, base_sequence=header.base_sequence, base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
    )


def _compactable(header: BatchHeader) -> bool:
    return not header.is_control and not header.is_transactional


def keep_record(record: RecordView, offset_map: dict[bytes, int], now_ms: int, delete_retention_ms: int) -> bool:
    """Kafka's retention rule for one record of the cleanable range."""
    if record.key is None:
        return True
    if offset_map.get(record.key, -1) > record.offset:
        return False  # a later record has the same key
    return not (record.tombstone and record.timestamp < now_ms - delete_retention_ms)


# --- cleaning a log -------------------------------------------------------------------------------


class LogCleaner:
    """Compacts logs; remembers per log how far it cleaned, so clean logs are not re-read.

    ``LogCleaner().clean(partition_log, now_ms)`` returns :class:`CleanStats` or None when there
    was nothing to do. Raises OSError/KafkaStorageError from the file system (the log is left
    as it was: the ``.log`` is only replaced by a complete, fsynced file).
    """

    def __init__(self) -> None:
        self._cleaned: dict[Path, tuple[int, int]] = {}  # dir -> (end of cleaned range, next tombstone expiry)

    def clean(self, plog, now_ms: int) -> CleanStats | None:
        config = plog.config
        closed = plog.segments[:-1]
        lag_limit = now_ms - config.min_compaction_lag_ms
        cleanable = []
        for segment in closed:
            if segment.size and segment.largest_timestamp > lag_limit:
                break
            cleanable.append(segment)
        if not cleanable:
            return None
        end = plog.segments[len(cleanable)].base_offset
        done_to, tombstone_due = self._cleaned.get(plog.dir, (-1, -1))
        if end <= done_to and not (0 <= tombstone_due <= now_ms):
            return None
        offset_map: dict[bytes, int] = {}
        for segment in cleanable:
            for _, header, batch in _batches(segment):
                records = iter_records(header, batch) if _compactable(header) else None
                for record in records or ():
                    if record.key is not None:
                        offset_map[record.key] = record.offset
        stats = CleanStats()
        next_expiry = -1
        for i, segment in enumerate(cleanable):
            expiry = self._clean_segment(plog, i, offset_map, now_ms, config.delete_retention_ms, stats)
            if expiry >= 0:
                next_expiry = expiry if next_expiry < 0 else min(next_expiry, expiry)
        self._cleaned[plog.dir] = (end, next_expiry)
        if stats.segments_rewritten:
            log.info("%s-%s: compacted %d segments, removed %d records (%d -> %d bytes)", plog.topic,
                     plog.partition, stats.segments_rewritten, stats.records_removed, stats.bytes_before,
                     stats.bytes_after)
        return stats

    def _clean_segment(self, plog, index: int, offset_map: dict[bytes, int], now_ms: int,
                       delete_retention_ms: int, stats: CleanStats) -> int:
        """Rewrite segment ``index`` of ``plog`` if it loses records; returns the earliest time (ms) a
        retained tombstone may be removed, or -1."""
        segment: LogSegment = plog.segments[index]
        out = bytearray()
        removed = 0
        expiry = -1
        for _, header, batch in _batches(segment):
            records = iter_records(header, batch) if _compactable(header) else None
            if records is None:
                out += batch
                continue
            records = list(records)
            kept = [r for r in records if keep_record(r, offset_map, now_ms, delete_retention_ms)]
            for r in kept:
                if r.tombstone:
                    due = r.timestamp + delete_retention_ms
                    expiry = due if expiry < 0 else min(expiry, due)
            removed += len(records) - len(kept)
            if len(kept) == len(records):
                out += batch
            elif kept:
                out += rebuild_batch(header, kept)
        if not removed:
            return expiry
        stats.segments_rewritten += 1
        stats.records_removed += removed
        stats.bytes_before += segment.size
        stats.bytes_after += len(out)
        plog.segments[index] = _swap_in(segment, bytes(out), plog.config)
        following = plog.segments[index + 1].base_offset
        plog.segments[index].next_offset = following
        return expiry


def _batches(segment: LogSegment) -> Iterator[tuple[int, BatchHeader, bytes]]:
    for position, header in list(segment.iter_headers()):
        yield position, header, segment.read_batch(position, header.size)


def _swap_in(segment: LogSegment, data: bytes, config) -> LogSegment:
    """Replace ``segment``'s ``.log`` with ``data`` (crash-safe order) and return the reopened segment."""
    cleaned = segment.log_path.with_name(segment.log_path.name + CLEANED_SUFFIX)
    write_synced(cleaned, data)
    segment.close()
    segment.offset_index_path.unlink(missing_ok=True)
    segment.time_index_path.unlink(missing_ok=True)
    os.replace(cleaned, segment.log_path)
    fsync_dir(segment.dir)
    fresh = LogSegment(segment.dir, segment.base_offset, config.index_interval_bytes, config.max_index_size)
    fresh.recover()  # rebuilds both indexes from the new .log
    fresh.flush()
    return fresh
