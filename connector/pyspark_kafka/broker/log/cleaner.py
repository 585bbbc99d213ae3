"""Log compaction (``cleanup.policy=compact`` or ``compact,delete``): keep the latest record per key.

Kafka's ``LogCleaner`` and ``LogCleanerManager`` (``storage`` module) for one broker, run by
:meth:`LogManager.run_cleaner` every ``log.cleaner.backoff.ms`` (default 15000) when
``log.cleaner.enable`` is true. Offsets never change; configs changed at runtime
(IncrementalAlterConfigs) apply at the next run, since each run reads the log's current config.

**When a log is cleaned** (:func:`cleanable_range`, Kafka's ``cleanableOffsets``,
``calculateCleanableBytes`` and ``grabFilthiestCompactedLog``):

- the **first dirty offset** is where the previous cleaning stopped (kept across restarts in
  ``cleaner-offset-checkpoint`` by the :class:`LogManager`, as Kafka does), or the log start offset;
- the **first uncleanable offset** is the smallest of the last stable offset, the active
  segment's base offset (the active segment is never cleaned) and, with ``min.compaction.lag.ms``
  > 0, the base offset of the first dirty segment whose largest timestamp is newer than
  ``now - min.compaction.lag.ms``; rounded down to the base offset of its segment;
- **cleanable bytes** are the sizes of the segments in [first dirty, first uncleanable), **clean
  bytes** those before the first dirty offset; the **dirty ratio** is cleanable / (clean + cleanable);
- the log is cleaned when the ratio is *greater than* ``min.cleanable.dirty.ratio`` (default 0.5),
  or when there are cleanable bytes and the earliest first-batch timestamp of a dirty closed
  segment is older than ``now - max.compaction.lag.ms`` (Kafka's ``maxCompactionDelay``).

**What a cleaning does** (Kafka's ``Cleaner.doClean``/``cleanSegments`` and
``MemoryRecords.filterTo``): an offset map ``key -> last offset`` is built over the dirty range;
every segment below the first uncleanable offset is then rewritten keeping a record when its
offset is at least its key's offset in the map and it is not a tombstone whose batch's **delete
horizon** has passed. Records without a key are dropped (Kafka counts them invalid). A batch that
keeps a tombstone and has no delete horizon yet gets one (KIP-534): attribute bit 6 set, its base
timestamp becomes ``now + delete.retention.ms`` and the records' timestamp deltas are rewritten
relative to it, so the tombstone stays readable for ``delete.retention.ms`` after the cleaning
that first saw it and goes at the first cleaning after that. A batch that loses records keeps its
base offset, last offset delta, codec, timestamp type, producer fields and leader epoch; its max
timestamp becomes the largest retained record's (CreateTime). A batch left empty disappears;
unchanged batches are copied byte for byte. The first dirty offset then moves to the first
uncleanable offset.

**Crash safety**: the new segment file is written as ``<base>.log.cleaned``, fsynced, its index
files deleted and the ``.cleaned`` file renamed over the ``.log`` (``os.replace``); the indexes
are rebuilt. A crash in between leaves either the old ``.log`` (the ``.cleaned`` file is removed
on load) or the new ``.log`` without indexes (rebuilt on load).

**Transactions** (Kafka's ``CleanedTransactionMetadata``): records of committed transactions are
compacted like any other; batches of aborted transactions (the producer state's aborted
transactions, Kafka's transaction index) are left out of the offset map, so they never hide an
older value, and are removed.

Not done (kept whole instead, never dropped): control batches (transaction markers; Kafka removes
a marker once its transaction has no records left and its delete horizon has passed), and
compressed batches that would expand past the cleaner's bound (64 x max(batch size, 1 MiB)).
Segments are cleaned one by one and never merged (Kafka groups small cleaned segments).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator

from pyspark_kafka.broker.errors import KafkaError
from pyspark_kafka.broker.log.checkpoint import fsync_dir, write_synced
from pyspark_kafka.broker.log.compression import compress, decompress
from pyspark_kafka.broker.log.record_batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    DELETE_HORIZON_BIT,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    RecordView,
    build_batch,
    iter_record_views,
)
from pyspark_kafka.broker.log.segment import LogSegment
from pyspark_kafka.broker.log.validator import UNCOMPRESSED_BOUND_FACTOR
from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.kafka.record_format import MAX_VARINT_BYTES, encode_zigzag, read_zigzag

log = get_logger(__name__)

CLEANED_SUFFIX = ".cleaned"
_CLEANER_MIN_BOUND = 1 << 20
"""The cleaner decompresses a batch to at most 64 x max(its size, 1 MiB); a batch that expands further is kept whole."""


@dataclass
class CleanStats:
    """What one cleaning of a log did (sizes in bytes)."""

    segments_rewritten: int = 0
    records_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


@dataclass(frozen=True)
class CleanableRange:
    """Kafka's ``LogToClean`` for one log: offsets and sizes (bytes) that decide whether it is cleaned.

    ``first_dirty``: where the last cleaning stopped; ``first_uncleanable``: base offset of the
    first segment that may not be cleaned; ``clean_bytes`` / ``cleanable_bytes``: sizes of the
    segments before / in ``[first_dirty, first_uncleanable)``; ``need_compaction_now``: a dirty
    segment waited longer than ``max.compaction.lag.ms``.
    """

    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def dirty_ratio(self) -> float:
        """cleanable / (clean + cleanable) bytes; 0 for an empty log."""
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    def should_clean(self, min_cleanable_dirty_ratio: float) -> bool:
        """Kafka's ``grabFilthiestCompactedLog`` filter: non-empty, and the dirty ratio is above
        ``min.cleanable.dirty.ratio`` or compaction is due by ``max.compaction.lag.ms``."""
        if self.clean_bytes + self.cleanable_bytes == 0:
            return False
        return (self.need_compaction_now and self.cleanable_bytes > 0) or self.dirty_ratio > min_cleanable_dirty_ratio


def _segment_end(plog, i: int) -> int:
    return plog.segments[i + 1].base_offset if i + 1 < len(plog.segments) else plog.log_end_offset


def _sizes_between(plog, start: int, end: int) -> int:
    """Bytes of the segments holding offsets in ``[start, end)`` (Kafka's ``logSegments(from, to)``)."""
    return sum(s.size for i, s in enumerate(plog.segments)
               if s.base_offset < end and _segment_end(plog, i) > start)


def _first_batch_timestamp(segment: LogSegment) -> int:
    """maxTimestamp of the segment's first batch (Kafka's ``getFirstBatchTimestamp``), -1 when empty."""
    if segment.first_batch_timestamp is None:
        for _, header in segment.iter_headers():
            segment.first_batch_timestamp = header.max_timestamp  # a closed segment's first batch stays
            break
    return -1 if segment.first_batch_timestamp is None else segment.first_batch_timestamp


def cleanable_range(plog, first_dirty: int | None, now_ms: int) -> CleanableRange:
    """The :class:`CleanableRange` of partition log ``plog`` at ``now_ms`` (ms) with the first dirty
    offset the last cleaning left (None: never cleaned). Rules in the module docstring."""
    config = plog.config
    start, end = plog.log_start_offset, plog.log_end_offset
    if first_dirty is None or first_dirty < start or first_dirty > end:
        first_dirty = start
    active_base = plog.active_segment.base_offset
    dirty_closed = [(i, s) for i, s in enumerate(plog.segments[:-1]) if _segment_end(plog, i) > first_dirty]
    bounds = [plog.last_stable_offset, active_base]
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        for _, segment in dirty_closed:
            if segment.largest_timestamp > now_ms - lag:
                bounds.append(segment.base_offset)
                break
    uncleanable = max(first_dirty, min(bounds))
    first_uncleanable = active_base  # rounded down to the base offset of the segment holding it
    for i, segment in enumerate(plog.segments[:-1]):
        if segment.base_offset <= uncleanable < _segment_end(plog, i):
            first_uncleanable = segment.base_offset
            break
    cleanable = _sizes_between(plog, min(first_dirty, first_uncleanable), first_uncleanable)
    clean = _sizes_between(plog, -1, first_dirty)
    need_now = False
    clean_until = now_ms - max(config.max_compaction_lag_ms, 0)
    if clean_until > 0:  # the default (Long.MAX_VALUE) never forces a cleaning: no need to read headers
        firsts = [t for t in (_first_batch_timestamp(s) for _, s in dirty_closed) if t > 0]
        need_now = bool(firsts) and min(firsts) < clean_until
    return CleanableRange(first_dirty, first_uncleanable, clean, cleanable, need_now)


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


def retime_record(raw: bytes, delta_change: int) -> bytes:
    """Record ``raw`` (length varint included) with its timestamp delta lowered by ``delta_change`` ms
    (the batch's base timestamp rose by that much), the length prefix re-encoded."""
    if delta_change == 0:
        return raw
    end = len(raw)
    _, pos = read_zigzag(raw, 0, end, MAX_VARINT_BYTES)
    delta, after = read_zigzag(raw, pos + 1, end)  # the attributes byte, then timestampDelta
    body = raw[pos:pos + 1] + encode_zigzag(delta - delta_change) + raw[after:]
    return encode_zigzag(len(body)) + body


def rebuild_batch(header: BatchHeader, records: list[RecordView], delete_horizon_ms: int | None = None) -> bytes:
    """A batch of ``records`` keeping ``header``'s base offset, last offset delta, codec, timestamp type,
    producer fields and leader epoch (Kafka's ``buildRetainedRecordsInto``).

    With ``delete_horizon_ms`` the base timestamp is the delete horizon and attribute bit 6 is set
    (KIP-534); otherwise it is the first record's timestamp. Record timestamp deltas are rewritten
    relative to the new base; maxTimestamp is the largest record timestamp (CreateTime) or kept
    (LogAppendTime).
    """
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_BIT)
    original = [header.base_timestamp + _record_delta(r.raw) for r in records]
    base = delete_horizon_ms if delete_horizon_ms is not None else original[0]
    body = b"".join(retime_record(r.raw, base - header.base_timestamp) for r in records)
    codec = header.attributes & COMPRESSION_MASK
    if codec:
        body = compress(codec, body)
    attributes = header.attributes | DELETE_HORIZON_BIT if delete_horizon_ms is not None else header.attributes
    return build_batch(
        body, record_count=len(records), last_offset_delta=header.last_offset_delta,
        base_timestamp=base, max_timestamp=header.max_timestamp if log_append_time else max(original),
        attributes=attributes, producer_id=header.producer_id,
        producer_epoch=header.producer_epoch, base_sequence=header.base_sequence, base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
    )


def _record_delta(raw: bytes) -> int:
    _, pos = read_zigzag(raw, 0, len(raw), MAX_VARINT_BYTES)
    return read_zigzag(raw, pos + 1, len(raw))[0]


def delete_horizon(header: BatchHeader) -> int | None:
    """The batch's delete horizon (ms) when the cleaner set one (attribute bit 6), else None."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None


def aborted_ranges(plog) -> dict[int, list[tuple[int, int]]]:
    """``producer id -> [(first offset, abort marker offset)]`` of the log's aborted transactions."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    for txn in plog.producer_state.aborted:
        ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
    return ranges


def is_aborted(header: BatchHeader, aborted: dict[int, list[tuple[int, int]]]) -> bool:
    """True for a data batch of an aborted transaction (Kafka's ``onBatchRead``)."""
    return header.is_transactional and not header.is_control and any(first <= header.base_offset <= last
                                           for first, last in aborted.get(header.producer_id, ()))


def keep_record(record: RecordView, offset_map: dict[bytes, int], now_ms: int, horizon: int | None) -> bool:
    """Kafka's ``shouldRetainRecord``: a keyed record at or after its key's last offset in the dirty range,
    and not a tombstone whose batch's delete horizon (``horizon``, ms) has passed."""
    if record.key is None:
        return False
    if offset_map.get(record.key, -1) > record.offset:
        return False  # a later record has the same key
    return not (record.tombstone and horizon is not None and now_ms >= horizon)


# --- cleaning a log -------------------------------------------------------------------------------


class LogCleaner:
    """Compacts logs; remembers per partition its first dirty offset (Kafka's ``cleaner-offset-checkpoint``).

    ``LogCleaner(first_dirty={(topic, partition): offset})`` (what the checkpoint file held), then
    ``clean(partition_log, now_ms)``: :class:`CleanStats`, or None when the log is not cleanable
    now (:func:`cleanable_range`). Raises OSError/KafkaStorageError from the file system (the log
    is left as it was: a ``.log`` is only replaced by a complete, fsynced file).
    """

    def __init__(self, first_dirty: dict[tuple[str, int], int] | None = None) -> None:
        self._first_dirty: dict[tuple[str, int], int] = dict(first_dirty or {})

    def first_dirty_offset(self, plog) -> int | None:
        """Where the last cleaning of ``plog`` stopped, or None before its first cleaning."""
        return self._first_dirty.get((plog.topic, plog.partition))

    def first_dirty_offsets(self) -> dict[tuple[str, int], int]:
        """Every partition's first dirty offset (for the checkpoint file), a copy."""
        return dict(self._first_dirty)

    def forget(self, topic: str, partition: int) -> None:
        """Drop a deleted partition's first dirty offset (a new topic of the same name starts clean)."""
        self._first_dirty.pop((topic, partition), None)

    def clean(self, plog, now_ms: int) -> CleanStats | None:
        config = plog.config
        span = cleanable_range(plog, self.first_dirty_offset(plog), now_ms)
        if not span.should_clean(config.min_cleanable_dirty_ratio):
            return None
        end = span.first_uncleanable
        aborted = aborted_ranges(plog)
        offset_map: dict[bytes, int] = {}
        for i, segment in enumerate(plog.segments[:-1]):
            if segment.base_offset >= end or _segment_end(plog, i) <= span.first_dirty:
                continue
            for _, header, batch in _batches(segment):
                skip = header.is_control or is_aborted(header, aborted)
                records = None if skip else iter_records(header, batch)
                for record in records or ():
                    if record.key is not None and span.first_dirty <= record.offset < end:
                        offset_map[record.key] = record.offset
        stats = CleanStats()
        for i in range(len(plog.segments) - 1):
            if plog.segments[i].base_offset >= end:
                break
            self._clean_segment(plog, i, offset_map, now_ms, config.delete_retention_ms, stats, aborted)
        self._first_dirty[(plog.topic, plog.partition)] = end
        if stats.segments_rewritten:
            log.info("%s-%s: compacted %d segments, removed %d records (%d -> %d bytes)", plog.topic,
                     plog.partition, stats.segments_rewritten, stats.records_removed, stats.bytes_before,
                     stats.bytes_after)
        return stats

    def _clean_segment(self, plog, index: int, offset_map: dict[bytes, int], now_ms: int,
                       delete_retention_ms: int, stats: CleanStats, aborted: dict[int, list[tuple[int, int]]]) -> None:
        """Rewrite segment ``index`` of ``plog`` when a batch of it loses records or gets a delete horizon."""
        segment: LogSegment = plog.segments[index]
        out = bytearray()
        removed = 0
        changed = False
        for _, header, batch in _batches(segment):
            if is_aborted(header, aborted):
                removed += header.record_count
                changed = True
                continue
            records = None if header.is_control else iter_records(header, batch)
            if records is None:
                out += batch
                continue
            records = list(records)
            horizon = delete_horizon(header)
            kept = [r for r in records if keep_record(r, offset_map, now_ms, horizon)]
            removed += len(records) - len(kept)
            set_horizon = horizon is None and any(r.tombstone for r in kept)
            if len(kept) == len(records) and not set_horizon:
                out += batch
                continue
            changed = True
            if kept:
                out += rebuild_batch(header, kept, now_ms + delete_retention_ms if set_horizon else horizon)
        if not changed:
            return
        stats.segments_rewritten += 1
        stats.records_removed += removed
        stats.bytes_before += segment.size
        stats.bytes_after += len(out)
        following = _segment_end(plog, index)
        plog.segments[index] = _swap_in(segment, bytes(out), plog.config)
        plog.segments[index].next_offset = following


def _batches(segment: LogSegment) -> Iterator[tuple[int, BatchHeader, bytes]]:
    for position, header in list(segment.iter_headers()):
        yield position, header, segment.read_batch(position, header.size)


def _swap_in(segment: LogSegment, data: bytes, config) -> LogSegment:
    """Replace ``segment``'s ``.log`` with ``data`` (crash-safe order) and return the reopened segment."""
    cleaned = segment.log_path.with_name(segment.log_path.name + CLEANED_SUFFIX)
    write_synced(cleaned, data)
    stat = os.stat(segment.log_path)  # the cleaned file keeps the segment's mtime, as Kafka's cleaner
    os.utime(cleaned, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # does: an emptied segment ages for retention
    segment.close()
    segment.offset_index_path.unlink(missing_ok=True)
    segment.time_index_path.unlink(missing_ok=True)
    os.replace(cleaned, segment.log_path)
    fsync_dir(segment.dir)
    fresh = LogSegment(segment.dir, segment.base_offset, config.index_interval_bytes, config.max_index_size)
    fresh.recover()  # rebuilds both indexes from the new .log
    fresh.flush()
    return fresh

