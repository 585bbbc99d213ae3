"""Loading one partition's log directory after a start (Kafka's ``LogLoader``), a pass of its own.

:func:`load_segments` opens the segment files of a directory: leftovers of unfinished cleanings and
deletions (``.deleted``, ``.cleaned``, ``.swap``, ``.tmp``) and indexes without their ``.log`` are
removed; after an unclean shutdown the segments at or after the recovery point are re-validated
(Kafka's ``recoverLog``): a torn or corrupt tail is truncated after its last valid batch and every
later segment is deleted, so the log stays contiguous. :func:`rebuild_producer_state` then replays
the batches after the newest producer snapshot (Kafka's ``rebuildProducerState``). What loading did
is counted in a :class:`RecoveryStats`.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

from pyspark_kafka.broker.errors import KafkaStorageError
from pyspark_kafka.broker.log.producer_state import SNAPSHOT_SUFFIX, ProducerStateManager
from pyspark_kafka.broker.log.records import control_marker
from pyspark_kafka.broker.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, InvalidBatch, LogSegment
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger("pyspark_kafka.broker.log.partition_log")


@dataclass
class RecoveryStats:
    """What loading a partition log did (for logs and tests)."""

    segments: int = 0  # segments found on disk
    segments_scanned: int = 0  # segments whose batches were re-validated (CRC) because of a crash
    bytes_truncated: int = 0  # torn or corrupt bytes cut from the tail
    segments_deleted: int = 0  # segments after a corrupt one, dropped to keep the log contiguous
    bytes_deleted: int = 0  # the bytes of those segments
    invalid: list[InvalidBatch] = field(default_factory=list)  # where and why each truncated segment was cut
    orphan_files_deleted: int = 0
    clean_shutdown: bool = False


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """``(base_offset, suffix)`` for ``00000000000000000042.log`` style names, else None."""
    stem, dot, suffix = name.partition(".")
    if not dot or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem), "." + suffix


class LoadedLog(NamedTuple):
    """What :func:`load_segments` found: the segments, the log start and end offsets, and the offsets of the
    producer snapshot files (``<offset>.snapshot``) in the directory, ascending, from the same listing."""

    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    snapshot_offsets: list[int]


def load_segments(directory: Path | str, new_segment: Callable[[int], LogSegment], recovery_point: int,
                  log_start_offset: int, clean: bool, stats: RecoveryStats, name: str) -> LoadedLog:
    """The :class:`LoadedLog` of the log in ``directory`` (created when missing).

    ``new_segment(base_offset)`` opens (or creates) one segment; with no segment on disk one is
    created at ``log_start_offset``. Unless ``clean`` (the clean-shutdown marker was found), segments
    holding offsets at or after ``recovery_point`` are re-validated. ``stats`` is updated; ``name``
    (``topic-partition``) is for the log lines. The directory is listed once (one ``scandir``): the
    segment files, the leftovers to remove and the producer snapshots all come from that listing.
    Raises KafkaStorageError when the directory is inconsistent (a segment ending past the next one's
    base offset); OSError when it cannot be listed or created.
    """
    topic, _, partition = name.rpartition("-")
    bases: set[int] = set()
    snapshots: list[int] = []
    index_files: list[tuple[int, str]] = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:  # a new partition: its directory is made here (no listing to do)
        os.makedirs(directory, exist_ok=True)
        entries = []
    for entry in entries:
        if entry.name.endswith((".deleted", ".cleaned", ".swap", ".tmp")):  # unfinished cleaning/deletes
            os.unlink(entry.path)
            stats.orphan_files_deleted += 1
            continue
        parsed = parse_segment_file_name(entry.name)
        if parsed is None:
            continue
        base, suffix = parsed
        if suffix == LOG_SUFFIX:
            bases.add(base)
        elif suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            index_files.append((base, entry.path))
        elif suffix == SNAPSHOT_SUFFIX:
            snapshots.append(base)
    for base, path in index_files:
        if base not in bases:  # an index without its .log
            os.unlink(path)
            stats.orphan_files_deleted += 1

    segments = [new_segment(base) for base in sorted(bases)]
    if not segments:
        segments = [new_segment(max(0, log_start_offset))]
        clean = True  # nothing to recover
    stats.segments = len(segments)

    # Closed segments end where the next one begins.
    for segment, following in zip(segments, segments[1:]):
        segment.next_offset = following.base_offset

    if clean:
        segments[-1].load_tail()
    else:
        _recover(segments, recovery_point, stats, name)

    log_end_offset = segments[-1].next_offset
    start = max(log_start_offset, segments[0].base_offset)
    if stats.segments_scanned or stats.bytes_truncated:
        log.info(
            "recovered %s-%s: re-validated %d of %d segments, truncated %d bytes, dropped %d segments; "
            "log end offset %d",
            topic, partition, stats.segments_scanned, stats.segments, stats.bytes_truncated,
            stats.segments_deleted, log_end_offset,
        )
    return LoadedLog(segments, min(start, log_end_offset), log_end_offset, sorted(snapshots))


def _recover(segments: list[LogSegment], recovery_point: int, stats: RecoveryStats, name: str) -> None:
    """Re-validate the segments holding offsets at or after ``recovery_point`` (Kafka's ``recoverLog``).

    A segment with a torn or corrupt tail is truncated after its last valid batch and every
    later segment is deleted (``segments`` shortened in place: the log must stay contiguous).
    :meth:`LogSegment.recover` warns with the file, byte position, first invalid offset and reason;
    here a WARNING per truncated segment says to which offset it was cut and which offsets were
    lost (known up to the next segment's base offset), and one per deleted segment names its file,
    bytes and offsets (Kafka logs "Corruption found in segment ..., truncating to offset ..." and
    "Deleting segments as part of log recovery: ...").
    Recovered segments are fsynced, so the recovery point moves to the new log end offset.
    """
    first = max(0, bisect_right([s.base_offset for s in segments], recovery_point) - 1)
    i = first
    while i < len(segments):
        segment = segments[i]
        end_before = segment.next_offset  # the next segment's base offset; None for the last segment
        truncated = segment.recover()
        stats.segments_scanned += 1
        stats.bytes_truncated += truncated
        if truncated:
            stats.invalid.append(segment.last_recovery)
            # Kafka's LogLoader.recoverLog: "Corruption found in segment ..., truncating to offset ..."
            lost = (f"offsets {segment.next_offset}..{end_before - 1} ({end_before - segment.next_offset} offsets)"
                    if end_before is not None and end_before > segment.next_offset
                    else f"offsets from {segment.next_offset} on")
            log.warning("%s: corruption found in segment %s, truncating to offset %d: %d bytes and %s dropped",
                        name, segment.log_path.name, segment.next_offset, truncated, lost)
        if truncated and i + 1 < len(segments):
            dropped = segments[i + 1 :]
            for j, doomed in enumerate(dropped):
                following = dropped[j + 1].base_offset if j + 1 < len(dropped) else None
                span = (f"offsets {doomed.base_offset}..{following - 1} ({following - doomed.base_offset} offsets)"
                        if following is not None else f"offsets from {doomed.base_offset} on")
                log.warning("%s: deleting segment %s after a corrupt batch in segment %s: %d bytes, %s",
                            name, doomed.log_path.name, segment.log_path.name, doomed.size, span)
                stats.bytes_deleted += doomed.size
                doomed.delete()
                stats.segments_deleted += 1
            del segments[i + 1 :]
        if i + 1 < len(segments) and segment.next_offset > segments[i + 1].base_offset:
            raise KafkaStorageError(
                f"segment {segment.log_path} ends at offset {segment.next_offset}, past the base offset of "
                f"the next segment {segments[i + 1].base_offset}: the log directory is inconsistent"
            )
        i += 1
    for segment in segments[first:]:
        segment.flush()
    for segment, following in zip(segments, segments[1:]):
        if segment.next_offset is None or segment.next_offset < following.base_offset:
            segment.next_offset = following.base_offset


def rebuild_producer_state(state: ProducerStateManager, segments: list[LogSegment], log_start_offset: int,
                           log_end_offset: int, name: str, snapshot_offsets: list[int] | None = None) -> None:
    """Load the newest producer snapshot at or below ``log_end_offset``, then replay the batches after it
    (Kafka's ``rebuildProducerState``); batches without a producer id only move the position.
    ``snapshot_offsets``: the snapshot files' offsets from a listing just made (:class:`LoadedLog`), else the
    directory is listed."""
    start = max(state.load_snapshot(log_end_offset, snapshot_offsets), log_start_offset)
    if start >= log_end_offset:
        return
    replayed = 0
    first = max(0, bisect_right([s.base_offset for s in segments], start) - 1)
    for segment in segments[first:]:
        found = segment.translate_offset(start)
        if found is None:
            continue
        for position, header in segment.iter_headers(found[0]):
            if header.last_offset < start:
                continue
            control, coordinator_epoch = None, -1
            if header.is_control:
                control, coordinator_epoch = control_marker(segment.read_batch(position, header.size))
            state.on_batch(header, control, coordinator_epoch)
            replayed += 1
    if replayed:
        topic, _, partition = name.rpartition("-")
        log.info("%s-%s: producer state rebuilt from offset %d (%d batches)", topic, partition, start, replayed)
