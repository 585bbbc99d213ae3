"""The log of one topic partition: ordered segments, offsets, roll, retention, flush and recovery.

Kafka's ``UnifiedLog``/``LocalLog`` for one replica (loading and recovery, Kafka's ``LogLoader``, are in
:mod:`~pyspark_kafka.broker.log.log_loader`; the timestamp searches in
:mod:`~pyspark_kafka.broker.log.timestamp_search`):

- **log end offset (LEO)**: the offset the next appended record gets;
- **high watermark**: the offset up to which records are committed; moved by the partition's leader
  (:meth:`PartitionLog.update_high_watermark`; the smallest LEO over the ISR, so with an ISR of one the LEO
  after every append), never by an append itself;
- **log start offset**: the first offset still readable; advanced when retention deletes segments;
- **recovery point**: every offset below it is fsynced; a restart after a crash re-validates only
  the segments at or after it (Kafka's ``recovery-point-offset-checkpoint``);
- **last stable offset (LSO)**: the first offset of the oldest open transaction, else the high
  watermark; read_committed consumers read below it (KIP-98).

Producer state (idempotent sequences, open and aborted transactions) is kept by a
:class:`~pyspark_kafka.broker.log.producer_state.ProducerStateManager`, snapshotted on roll and
close and rebuilt on load from the newest snapshot plus the batches after it.

Appends go to the active (last) segment only. A produce request's record set is validated as a
whole first (CRC32C, magic 2, sizes): a bad batch leaves the log unchanged. Offsets are assigned by
rewriting each batch's ``baseOffset``; records are decompressed only to validate them, and rewritten
only when the topic's ``compression.type`` names another codec than the batch's.
"""

from __future__ import annotations

import os
import shutil
import uuid
from bisect import bisect_right
from pathlib import Path
from typing import Callable, NamedTuple

from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker import clock
from pyspark_kafka.broker.topic_config import LogConfig
from pyspark_kafka.broker.log.checkpoint import fsync_dir
from pyspark_kafka.broker.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from pyspark_kafka.broker.log.compression import decompress
from pyspark_kafka.broker.log.log_loader import RecoveryStats, load_segments, rebuild_producer_state
from pyspark_kafka.broker.log.timestamp_search import first_offset_at_or_after, max_timestamp_offset
from pyspark_kafka.broker.log.record_batch import (
    COMPRESSION_MASK,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    TIMESTAMP_TYPE_BIT,
    parse_header,
    stored_batch,
    validate_batches,
)
from pyspark_kafka.broker.log.producer_state import AbortedTxn, ProducerStateManager
from pyspark_kafka.broker.log.records import control_batch, control_marker
from pyspark_kafka.broker.log.segment import LogSegment
from pyspark_kafka.broker.log.validator import (
    UNCOMPRESSED_BOUND_FACTOR,
    recompress_batch,
    target_codec,
    validate_client_batch,
)
from pyspark_kafka.broker.log.offset_targets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

log = get_logger(__name__)



class AppendResult(NamedTuple):
    """Outcome of :meth:`PartitionLog.append` (what a ProduceResponse partition needs)."""

    base_offset: int  # offset given to the first record
    last_offset: int  # offset given to the last record
    log_append_time_ms: int  # the broker's timestamp with LogAppendTime, else -1
    log_start_offset: int
    record_count: int


class FetchSlice(NamedTuple):
    """Whole record batches to send: ``length`` bytes of ``path`` from ``position`` (zero copy with sendfile).

    ``length`` is 0 when there is nothing to read. The file may be deleted by retention after
    the slice was made: opening it then raises FileNotFoundError (answer with an empty slice).
    """

    path: Path
    position: int
    length: int

    def read_bytes(self) -> bytes:
        """The slice's bytes (for callers that do not use sendfile)."""
        if self.length == 0:
            return b""
        with open(self.path, "rb") as f:
            return os.pread(f.fileno(), self.length, self.position)


class PartitionLog:
    """One partition's log directory ``DATA_DIR/<topic>-<partition>/`` (see the module docstring).

    ``PartitionLog(topic, partition, dir, config, recovery_point=0, log_start_offset=0,
    clean_shutdown=False)`` loads or creates the directory; segments at or after
    ``recovery_point`` are re-validated unless ``clean_shutdown``. ``recovery_stats`` tells what
    loading did. Not thread-safe: the broker calls it from one asyncio thread.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        dir: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        leader_epoch: int = 0,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.dir = dir if isinstance(dir, Path) else Path(dir)  # not Path(a Path): parsed again, per partition
        self.config = config
        self.leader_epoch = leader_epoch
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        self.last_flush_ms = clock.now_ms()
        self.on_flush: Callable[[], None] | None = None  # called when the recovery point advances
        self.recovery_stats = RecoveryStats(clean_shutdown=clean_shutdown)
        self.producer_state = ProducerStateManager(self.dir, f"{topic}-{partition}")
        try:
            snapshot_offsets = self._load(recovery_point, log_start_offset, clean_shutdown)  # makes a missing dir
            self._load_producer_state(snapshot_offsets)
        except OSError as e:
            raise KafkaStorageError(f"cannot load log {self.dir}: {e}") from e

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, log_start_offset={self.log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, segments={len(self.segments)})"
        )

    # -- loading and recovery (Kafka's LogLoader) -------------------------------------------
    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(self.dir, base_offset, self.config.index_interval_bytes, self.config.max_index_size)

    def _load(self, recovery_point: int, log_start_offset: int, clean: bool) -> list[int]:
        """Open the segments on disk, recovering those at or after ``recovery_point`` unless ``clean``
        (:func:`~pyspark_kafka.broker.log.log_loader.load_segments`); return the producer snapshots' offsets
        found by the same directory listing."""
        loaded = load_segments(self.dir, self._new_segment, recovery_point, log_start_offset, clean,
                               self.recovery_stats, f"{self.topic}-{self.partition}")
        self.segments, self.log_start_offset, self.log_end_offset = loaded[:3]
        self._bases = [s.base_offset for s in self.segments]
        self.high_watermark = self.log_end_offset
        self.recovery_point = self.log_end_offset
        return loaded.snapshot_offsets

    def _load_producer_state(self, snapshot_offsets: list[int] | None = None) -> None:
        """Newest producer snapshot at or below the LEO, then the batches after it
        (:func:`~pyspark_kafka.broker.log.log_loader.rebuild_producer_state`); ``snapshot_offsets`` from the
        load's listing of the directory, else it is listed again."""
        rebuild_producer_state(self.producer_state, self.segments, self.log_start_offset, self.log_end_offset,
                               f"{self.topic}-{self.partition}", snapshot_offsets)

    def _snapshot_producer_state(self, now_ms: int | None = None) -> None:
        """Drop expired producers (``producer.id.expiration.ms``), then snapshot the state at the LEO."""
        now = now_ms if now_ms is not None else clock.now_ms()
        self.producer_state.remove_expired(now, self.config.producer_id_expiration_ms)
        self.producer_state.take_snapshot(self.log_end_offset)

    # -- segments ---------------------------------------------------------------------------
    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    def size_in_bytes(self) -> int:
        """Total bytes of all segments' ``.log`` files."""
        return sum(s.size for s in self.segments)

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op when the active segment is empty).

        As in Kafka, the segments before the new one are then flushed and the recovery point moves
        to the new base offset, so a crash re-validates at most the active segment (Kafka does
        this flush asynchronously; here it is done at once).
        """
        active = self.active_segment
        if active.size == 0:
            return active
        active.on_become_inactive()
        active.next_offset = self.log_end_offset
        segment = self._new_segment(self.log_end_offset)
        if segment.size:
            raise KafkaStorageError(
                f"cannot roll {self.dir}: segment file {segment.log_path.name} already holds data"
            )
        segment.created_ms = now_ms if now_ms is not None else segment.created_ms
        segment.next_offset = self.log_end_offset
        self.segments.append(segment)
        self._bases.append(segment.base_offset)
        fsync_dir(self.dir)  # the new segment's directory entry
        self._snapshot_producer_state(now_ms)
        self._flush_segments(self.segments[self._segment_index_for(self.recovery_point) : -1], segment.base_offset,
                             now_ms)
        return segment

    # -- append -----------------------------------------------------------------------------
    def append(self, records, now_ms: int | None = None, *, from_client: bool = False) -> AppendResult:
        """Append one produce request's record set (1+ RecordBatch v2, any compression).

        All batches are validated before anything is written: CRC32C, magic 2, framing,
        record count vs offset range, each batch at most ``max.message.bytes``, the whole set
        at most ``segment.bytes``. A topic whose ``compression.type`` is not ``producer`` stores each
        data batch in that codec (recompressed when it differs, Kafka's ``LogValidator``; ``uncompressed``
        decompresses). Offsets are assigned from the log end offset by rewriting
        ``baseOffset``; with ``message.timestamp.type=LogAppendTime`` each batch gets the
        broker's time (maxTimestamp, attribute bit, new CRC), as Kafka's ``LogValidator`` does.

        Batches with a producer id go through the producer state checks (see
        :mod:`~pyspark_kafka.broker.log.producer_state`): a duplicate of a recent batch is
        acknowledged with its original offsets (``record_count`` 0) and nothing is appended.
        A control batch (transaction marker, written by the broker's coordinators) ends its
        producer's open transaction here; ``from_client=True`` (the produce handler) refuses
        more than one batch (Produce v3+ carries exactly one per partition) and control batches
        with INVALID_RECORD and decodes every record of the batch
        (:func:`~pyspark_kafka.broker.log.validator.validate_client_batch`), as Kafka's
        ``LogValidator`` does, so a batch whose records disagree with its header is refused.

        Raises CorruptRecordError, InvalidRecordError, UnsupportedCompressionError, RecordTooLargeError,
        RecordBatchTooLargeError, OutOfOrderSequenceError, InvalidProducerEpochError,
        InvalidTxnStateError (log unchanged) or KafkaStorageError.
        """
        now = now_ms if now_ms is not None else clock.now_ms()
        headers = validate_batches(records)
        if from_client and len(headers) > 1:
            raise InvalidRecordError(
                f"a produce request to {self.topic}-{self.partition} holds {len(headers)} record batches: Produce "
                "requests with version 3 or later must have exactly one record batch per partition (Kafka's "
                "ProduceRequest.validateRecords); send one batch per partition")
        self._check_sizes(headers, len(records))
        controls = []
        position = 0
        view = memoryview(records)
        for header in headers:
            if from_client:
                if header.is_control:
                    raise InvalidRecordError(
                        f"a produce request to {self.topic}-{self.partition} holds a control batch: transaction "
                        "markers are written by the broker's transaction coordinator, never by clients"
                    )
                validate_client_batch(view[position:position + header.size], header,
                                      where=f"{self.topic}-{self.partition}",
                                      max_message_bytes=self.config.max_message_bytes,
                                      compacted=self.config.compacts,
                                      timestamp_bounds=self.config.timestamp_bounds(now))
            if header.is_control:
                self._check_marker_epoch(header.producer_id, header.producer_epoch)
                controls.append(control_marker(bytes(view[position : position + header.size])))
            else:
                controls.append(None)
            position += header.size
        codec = target_codec(self.config.compression_type)
        if codec is not None and any(not h.is_control and h.attributes & COMPRESSION_MASK != codec for h in headers):
            records, headers = self._recompress(view, headers, codec)
        duplicate = self.producer_state.check_batches(headers)
        if duplicate is not None:
            append_time = duplicate.timestamp if self.config.log_append_time else -1
            return AppendResult(duplicate.first_offset, duplicate.last_offset, append_time, self.log_start_offset, 0)
        return self._append_valid(records, headers, now, controls)

    def _recompress(self, view: memoryview, headers, codec: int):
        """The record set with each data batch in ``codec`` (the topic's ``compression.type``), and its
        headers; refuses (RecordTooLargeError) a batch that grew past ``max.message.bytes``."""
        pieces = []
        position = 0
        limit = UNCOMPRESSED_BOUND_FACTOR * self.config.max_message_bytes
        for header in headers:
            batch = view[position:position + header.size]
            if header.is_control or header.attributes & COMPRESSION_MASK == codec:
                pieces.append(bytes(batch))
            else:
                pieces.append(recompress_batch(batch, header, codec, self.config.compression_level, limit))
            position += header.size
        records = b"".join(pieces)
        headers = validate_batches(records)
        self._check_sizes(headers, len(records))
        return records, headers

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int = 0,
                      now_ms: int | None = None) -> AppendResult:
        """Append a transaction marker (control batch: COMMIT or ABORT) for ``producer_id`` (KIP-98).

        Ends the producer's open transaction on this partition; an abort records an
        :class:`AbortedTxn` so read_committed fetches skip its records. The LSO moves on.
        Raises InvalidProducerEpochError when ``producer_epoch`` is older than the partition's.
        """
        now = now_ms if now_ms is not None else clock.now_ms()
        self._check_marker_epoch(producer_id, producer_epoch)
        records = control_batch(producer_id, producer_epoch, commit, coordinator_epoch, now)
        return self._append_valid(records, [parse_header(records)], now,
                                  [(CONTROL_COMMIT if commit else CONTROL_ABORT, coordinator_epoch)])

    def _check_marker_epoch(self, producer_id: int, producer_epoch: int) -> None:
        entry = self.producer_state.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"transaction marker for producer {producer_id} with epoch {producer_epoch} on "
                f"{self.topic}-{self.partition}: the partition has seen epoch {entry.epoch}"
            )

    def _check_sizes(self, headers, total: int) -> None:
        config = self.config
        for header in headers:
            if header.size > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"a record batch of {header.size} bytes to {self.topic}-{self.partition} exceeds "
                    f"max.message.bytes={config.max_message_bytes}: produce smaller batches or raise the "
                    "topic's max.message.bytes"
                )
        if total > config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"a record set of {total} bytes to {self.topic}-{self.partition} is larger than "
                f"segment.bytes={config.segment_bytes}: produce smaller requests or raise segment.bytes"
            )

    def append_as_follower(self, records, now_ms: int | None = None) -> int:
        """Append batches fetched from the leader as they are: offsets and leader epochs kept (Kafka's
        ``UnifiedLog.appendAsFollower``). Returns the new log end offset.

        Every batch is validated (CRC32C, framing) and must start at the log end offset (contiguous), else
        CorruptRecordError / OffsetOutOfRangeError and nothing is written. The producer state follows the batches
        (no duplicate or sequence checks: the leader made them). The high watermark is left to the caller.
        """
        now = now_ms if now_ms is not None else clock.now_ms()
        headers = validate_batches(records)
        if not headers:
            return self.log_end_offset
        if headers[0].base_offset != self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self.topic}-{self.partition}: fetched batch starts at offset {headers[0].base_offset}, the "
                f"follower's log end offset is {self.log_end_offset}")
        view = memoryview(records)
        pieces: list = []
        controls = []
        position = 0
        max_timestamp = -1
        for header in headers:
            batch = view[position:position + header.size]
            pieces.append(batch)
            controls.append(control_marker(bytes(batch)) if header.is_control else None)
            max_timestamp = max(max_timestamp, header.max_timestamp)
            position += header.size
        segment = self.active_segment
        if segment.should_roll(self.config.segment_bytes, self.config.max_segment_ms, len(records), max_timestamp,
                               headers[-1].last_offset, now):
            segment = self.roll(now)
        segment.append(pieces, headers)
        self.log_end_offset = headers[-1].next_offset
        self._track_producers(headers, controls)
        self._maybe_flush(now)
        return self.log_end_offset

    def _append_valid(self, records, headers, now: int, controls: list) -> AppendResult:
        """Assign offsets to validated batches, write them, update the producer state.

        ``controls[i]`` is ``(marker type, coordinator epoch)`` of control batch ``i`` (None for data batches). The
        record bytes are written from the request's buffer (no copy) behind a new 16-byte prefix
        per batch; only LogAppendTime batches are copied, to be stamped.
        """
        config = self.config
        total = len(records)
        view = memoryview(records)
        append_time = now if config.log_append_time else -1
        offset = self.log_end_offset
        assigned = []
        pieces: list = []
        position = 0
        max_timestamp = -1
        for header in headers:
            pieces += stored_batch(view, position, header, offset, self.leader_epoch, append_time)
            if append_time >= 0:
                header = header._replace(max_timestamp=append_time, attributes=header.attributes | TIMESTAMP_TYPE_BIT)
            header = header._replace(base_offset=offset, partition_leader_epoch=self.leader_epoch)
            assigned.append(header)
            max_timestamp = max(max_timestamp, header.max_timestamp)
            offset = header.next_offset
            position += header.size
        first_offset = assigned[0].base_offset
        last_offset = assigned[-1].last_offset

        segment = self.active_segment
        if segment.should_roll(config.segment_bytes, config.max_segment_ms, total, max_timestamp, last_offset, now):
            segment = self.roll(now)
        segment.append(pieces, assigned)
        self.log_end_offset = offset  # the high watermark is the partition's to move (update_high_watermark)
        self._track_producers(assigned, controls)
        self._maybe_flush(now)
        return AppendResult(first_offset, last_offset, append_time, self.log_start_offset, offset - first_offset)

    def _track_producers(self, headers: list, controls: list) -> None:
        """Feed the appended batches to the producer state: ``controls[i]`` is None for a data batch, else the
        control marker's fields (:func:`control_marker`) of the control batch ``headers[i]``."""
        for header, control in zip(headers, controls):
            if control is None:
                self.producer_state.on_batch(header)
            else:
                self.producer_state.on_batch(header, *control)

    # -- flush ------------------------------------------------------------------------------
    def _maybe_flush(self, now: int) -> None:
        """Kafka's flush policy: fsync after ``flush.messages`` unflushed records or ``flush.ms``."""
        config = self.config
        if self.log_end_offset - self.recovery_point >= config.flush_messages or now - self.last_flush_ms >= config.flush_ms:
            self.flush(now)

    def flush_if_due(self, now_ms: int) -> bool:
        """Flush when ``flush.ms`` has passed since the last flush and there is unflushed data; True if flushed."""
        if self.log_end_offset > self.recovery_point and now_ms - self.last_flush_ms >= self.config.flush_ms:
            self.flush(now_ms)
            return True
        return False

    def flush(self, now_ms: int | None = None) -> None:
        """fsync every segment holding offsets at or after the recovery point; advance the recovery point to the LEO."""
        self._flush_segments(self.segments[self._segment_index_for(self.recovery_point) :], self.log_end_offset,
                             now_ms)

    def _flush_segments(self, segments: list[LogSegment], recovery_point: int, now_ms: int | None) -> None:
        for segment in segments:
            segment.flush()
        self.last_flush_ms = now_ms if now_ms is not None else clock.now_ms()
        if recovery_point > self.recovery_point:
            self.recovery_point = recovery_point
            if self.on_flush is not None:
                self.on_flush()

    # -- read -------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> FetchSlice:
        """Whole batches starting with the one holding ``offset``, at most ``max_bytes`` (bytes).

        Stops before batches whose base offset is ``>= max_offset`` (the server passes the high
        watermark). If the first batch is larger than ``max_bytes`` it is returned whole when
        ``min_one_message`` (KIP-74). ``offset == log end offset`` gives an empty slice.
        Raises :class:`OffsetOutOfRangeError` when ``offset`` is below the log start offset or
        above the log end offset, :class:`CorruptRecordError` (CORRUPT_MESSAGE) when the scan for
        ``offset`` meets a batch length below the minimum. Bytes are served as stored, a damaged
        batch included (Kafka's ``LocalLog.read`` / ``LogSegment.read``; see :meth:`LogSegment.read`).
        """
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}: valid offsets are "
                f"{self.log_start_offset}..{self.log_end_offset} (log start offset..log end offset)"
            )
        limit_offset = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        active = self.active_segment
        if offset >= limit_offset:
            return FetchSlice(active.log_path, active.size, 0)
        for i in range(self._segment_index_for(offset), len(self.segments)):
            segment = self.segments[i]
            segment_end = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else self.log_end_offset
            max_position = segment.size if limit_offset >= segment_end else segment.position_limit(limit_offset)
            found = segment.read(offset, max_bytes, max_position, min_one_message)
            if found is not None:
                return FetchSlice(segment.log_path, found[0], found[1])
        return FetchSlice(active.log_path, active.size, 0)

    @property
    def last_stable_offset(self) -> int:
        """First offset of the oldest open transaction (at least the log start offset), else the high
        watermark (read_committed bound)."""
        first = self.producer_state.first_unstable_offset()
        return self.high_watermark if first is None else min(max(first, self.log_start_offset), self.high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions with records in ``[fetch_offset, upper_bound)`` (for read_committed fetches)."""
        return self.producer_state.aborted_transactions(fetch_offset, upper_bound)

    # -- timestamps (ListOffsets; the searches are in log/timestamp_search.py) -------------------
    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp ``>= ts_ms`` (Kafka's ListOffsets).

        Kafka's ``UnifiedLog.searchOffsetInLocalLog``: commits to the first segment (from the one
        holding the log start offset) whose largest timestamp reaches ``ts_ms`` and answers only
        from it, binary-searching its time index, then scanning its batches whose max timestamp
        reaches ``ts_ms`` record by record (a compressed batch decompressed, bounded like the produce
        path), as ``LogSegment.findOffsetByTimestamp`` / ``FileRecords.searchForTimestamp`` do. None
        when that segment has no such record at or after the log start offset, even if a later
        segment has one: a segment keeps the largest timestamp of records the cleaner removed or
        that DeleteRecords put below the log start offset (an emptied segment's is its file's
        mtime), so Apache Kafka answers -1 there too (checked side by side,
        ``tests/broker/log/test_log_partition.py``). None when no record is that recent.
        Special values: -2 -> (log start offset, -1), -1 -> (log end offset, -1),
        -3 -> :meth:`max_timestamp_offset`.
        """
        if ts_ms == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1
        if ts_ms == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        if ts_ms == MAX_TIMESTAMP:
            return self.max_timestamp_offset()
        if ts_ms < 0:
            raise ValueError(f"timestamp {ts_ms} is not a time: give ms since the epoch, or -1, -2, -3")
        start = self.log_start_offset
        return first_offset_at_or_after(self.segments[self._segment_index_for(start):], ts_ms, start)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the record with the largest timestamp (ListOffsets -3, KIP-734; see
        :func:`~pyspark_kafka.broker.log.timestamp_search.max_timestamp_offset`). None for an empty log."""
        return max_timestamp_offset(self.segments, self.log_start_offset)

    # -- retention --------------------------------------------------------------------------
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Delete segments past retention; return how many were deleted.

        A segment goes when (Kafka's ``UnifiedLog.deleteOldSegments``/``deletableSegments``): its
        largest timestamp is older than ``now - retention.ms``; or the log is larger than
        ``retention.bytes`` by at least the segment's size (oldest first); or (closed segments) it
        lies wholly below the log start offset. Segments are taken oldest first and only while
        wholly below the high watermark. As in Kafka, the non-empty *active* segment is deletable
        too: when every segment goes, a new empty active segment is rolled at the log end offset
        first, so records whose timestamps are older than ``retention.ms`` disappear even
        without a roll. Time and size rules only with ``cleanup.policy`` containing ``delete``.
        The log start offset advances to the first remaining segment's base offset.
        """
        now = now_ms if now_ms is not None else clock.now_ms()
        config = self.config
        deletable = 0
        if config.deletes:
            excess = self.size_in_bytes() - config.retention_bytes if config.retention_bytes >= 0 else -1
            for i, segment in enumerate(self.segments):
                last = i == len(self.segments) - 1
                if last and segment.size == 0:
                    break
                upper = self.log_end_offset if last else self.segments[i + 1].base_offset
                expired = config.retention_ms >= 0 and now - segment.largest_timestamp > config.retention_ms
                too_big = excess >= segment.size and config.retention_bytes >= 0
                below_start = not last and upper <= self.log_start_offset
                if upper > self.high_watermark or not (expired or too_big or below_start):
                    break
                if too_big:
                    excess -= segment.size
                deletable += 1
        else:
            while (deletable < len(self.segments) - 1
                   and self.segments[deletable + 1].base_offset <= self.log_start_offset):
                deletable += 1
        if deletable == 0:
            return 0
        if deletable == len(self.segments):
            self.roll(now)  # keep an (empty) active segment at the log end offset
        for segment in self.segments[:deletable]:
            log.info("%s-%s: retention deletes segment %s", self.topic, self.partition, segment.log_path.name)
            segment.delete()
        del self.segments[:deletable]
        del self._bases[:deletable]
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.producer_state.on_log_start_offset(self.log_start_offset)
        return deletable

    # -- DeleteRecords ------------------------------------------------------------------------
    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` (DeleteRecords); True when it moved.

        Kafka's ``UnifiedLog.maybeIncrementLogStartOffset``: ``offset`` past the high watermark
        raises OffsetOutOfRangeError; an offset at or below the current log start offset changes
        nothing. The closed segments then lying wholly below the new log start offset are
        deleted at once (Kafka leaves that to the next retention check); the start may sit inside
        a batch: fetches below it get OFFSET_OUT_OF_RANGE, a fetch at it gets the whole batch.
        The caller persists the new start (``log-start-offset-checkpoint``).
        """
        if offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"Cannot increment the log start offset to {offset} of partition {self.topic}-{self.partition} "
                f"since it is larger than the high watermark {self.high_watermark}"
            )
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self.producer_state.on_log_start_offset(offset)
        doomed = 0
        while doomed < len(self.segments) - 1 and self.segments[doomed + 1].base_offset <= offset:
            doomed += 1
        for segment in self.segments[:doomed]:
            log.info("%s-%s: DeleteRecords deletes segment %s", self.topic, self.partition, segment.log_path.name)
            segment.delete()
        del self.segments[:doomed]
        del self._bases[:doomed]
        return True

    # -- high watermark ------------------------------------------------------------------------
    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark to ``offset``, bounded below by the log start offset and above by the log end
        offset (Kafka's ``UnifiedLog.updateHighWatermark``); returns the new value. An append never moves it:
        the leader's :class:`~pyspark_kafka.broker.cluster.partition.Partition` does (the smallest LEO over the
        ISR; with an ISR of one the LEO at once), as Kafka's ``Partition.maybeIncrementLeaderHW``."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    # -- truncation (for future use: replication) ----------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after the batch holding ``offset``; the LEO becomes that batch's base offset.

        For future use (replication); Kafka's followers truncate this way.
        """
        if offset >= self.log_end_offset:
            return
        i = self._segment_index_for(offset)
        for segment in self.segments[i + 1 :]:
            segment.delete()
        del self.segments[i + 1 :]
        del self._bases[i + 1 :]
        segment = self.segments[i]
        found = segment.translate_offset(offset)
        segment.truncate_to_position(found[0] if found is not None else segment.size)
        self.log_end_offset = segment.next_offset
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self._load_producer_state()

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        """Flush everything, snapshot the producer state at the LEO and close the files."""
        self.flush()
        self._snapshot_producer_state()
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        """Close and remove the whole partition directory.

        The directory is first renamed to ``<topic>-<partition>.<id>-delete`` (as Kafka does), so a
        crash during removal leaves a name that the next load recognises and removes.
        """
        for segment in self.segments:
            segment.close()
        doomed = self.dir.with_name(f"{self.dir.name}.{uuid.uuid4().hex}-delete")
        try:
            os.replace(self.dir, doomed)
        except OSError:
            doomed = self.dir
        shutil.rmtree(doomed, ignore_errors=True)

