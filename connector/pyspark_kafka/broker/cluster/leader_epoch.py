"""The leader-epoch cache and its checkpoint file (Kafka's ``LeaderEpochFileCache`` and
``leader-epoch-checkpoint``, KIP-101).

Entries ``(leader epoch, start offset)``: the first offset written at each leader epoch, epochs and offsets both
increasing. The file is Kafka's text format: a version line ``0``, the entry count, then ``epoch offset`` lines,
rewritten atomically (temp file + fsync + rename) on every change; inside :func:`batched_writes` the files of
one metadata batch are written together when it ends.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pyspark_kafka.broker.log_escape import get_logger

log = get_logger("pyspark_kafka.broker.cluster")

FILE_NAME = "leader-epoch-checkpoint"
BATCH_THREADS = 16
"""Threads that write one batch's checkpoint files at once (:func:`batched_writes`): the disk groups concurrent
fsyncs (300 files: 107 ms one after another, 57 ms from 16 threads, measured on the 2-core test machine)."""

_local = threading.local()  # .batch: {path: file body} while batched_writes() is active on this thread


@contextmanager
def batched_writes() -> Iterator[None]:
    """Inside the block, checkpoint files changed on this thread are written when it ends, all at once
    (:data:`BATCH_THREADS` threads), each still to a temporary file, fsynced, then renamed over the old one, as
    one at a time (Kafka 4.4's ``CheckpointFile.write``). A caller that runs nothing else until the block ends
    (the synchronous delivery of one metadata batch) keeps Kafka's order: every new epoch is durable before any
    request is served at it. Nested blocks write at the outermost one's end. A failed write is logged with its
    path and cause (as a failed write inside a metadata record's apply was) and the others are still made."""
    if getattr(_local, "batch", None) is not None:
        yield
        return
    _local.batch = {}
    try:
        yield
    finally:
        batch, _local.batch = _local.batch, None
        _write_all(batch)


def _write_all(batch: dict[Path, str]) -> set[Path]:
    failed: set[Path] = set()
    if len(batch) <= 1:
        for path, body in batch.items():
            try:
                _write_file(path, body)
            except OSError as exc:
                failed.add(path)
                log.error("%s not written: %s (the cache in memory is current; the next change writes it again)",
                          path, exc)
        return failed
    with ThreadPoolExecutor(min(BATCH_THREADS, len(batch)), thread_name_prefix="leader-epoch-checkpoint") as pool:
        futures = [pool.submit(_write_file, path, body, True) for path, body in batch.items()]
    for path, future in zip(batch, futures):
        if future.exception() is not None:
            failed.add(path)
            log.error("%s not written: %s (the cache in memory is current; the next change writes it again)", path,
                      future.exception())
    return failed


def write_durably(batch: dict[Path, str]) -> set[Path]:
    """Write each ``{path: checkpoint body}`` of ``batch`` as :func:`batched_writes` does (:data:`BATCH_THREADS`
    threads; temporary file, fsync, rename; nothing for a partition directory that is gone) and return the paths
    that were not written (each logged with its cause). Blocks until every file is durable: the broker lifecycle
    runs it in a worker thread for the leader elections of a metadata batch (:meth:`LeaderEpochCache.entries_after`
    gives the bodies)."""
    return _write_all(batch)


def _write_file(path: Path, body: str, if_dir_exists: bool = False) -> None:
    """``body`` into ``path`` durably: a temporary file, fsync, rename (Kafka's ``CheckpointFile.write``). With
    ``if_dir_exists``, nothing when the partition directory is gone (deleted later in the same batch; Kafka's
    ``writeIfDirExists``)."""
    if if_dir_exists and not path.parent.is_dir():
        return
    tmp = path.with_name(FILE_NAME + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)  # os calls: little Python between the syscalls
    try:
        os.write(fd, body.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class LeaderEpochCache:
    """``LeaderEpochCache(partition_dir)`` loads ``leader-epoch-checkpoint`` (a missing or malformed file = empty)."""

    def __init__(self, directory: Path) -> None:
        # a string, its Path made on first use (:attr:`path`): a start makes one cache per partition, and pathlib's
        # parsing cost as much as reading the file
        self._file = os.path.join(directory, FILE_NAME)
        self._path: Path | None = None
        self.entries: list[tuple[int, int]] = []
        try:
            # os calls, not Path.read_text (a text wrapper per file): a start reads one file per partition
            fd = os.open(self._file, os.O_RDONLY)
            try:
                chunks = []
                while chunk := os.read(fd, 65536):
                    chunks.append(chunk)
            finally:
                os.close(fd)
            lines = b"".join(chunks).decode().split("\n")
            count = int(lines[1])
            self.entries = [tuple(int(x) for x in line.split()) for line in lines[2:2 + count]]
        except (OSError, ValueError, IndexError):
            self.entries = []

    @property
    def path(self) -> Path:
        """The ``leader-epoch-checkpoint`` file of this partition."""
        if self._path is None:
            self._path = Path(self._file)
        return self._path

    def latest_epoch(self) -> int:
        """The newest leader epoch (-1 when empty)."""
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (ignored unless newer than the latest epoch)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        self.entries = self.entries_after(epoch, start_offset)
        self._write()

    def entries_after(self, epoch: int, start_offset: int) -> list[tuple[int, int]]:
        """The entries :meth:`assign` would leave for a new ``epoch`` starting at ``start_offset`` (nothing
        changed, nothing written): the entries starting before ``start_offset``, then the new one."""
        return [(e, o) for e, o in self.entries if o < start_offset] + [(epoch, start_offset)]

    def assigned_durably(self, entries: list[tuple[int, int]]) -> None:
        """Take ``entries`` (from :meth:`entries_after`) whose file :func:`write_durably` has written: the next
        :meth:`assign` of the same epoch then writes nothing."""
        self.entries = list(entries)

    @staticmethod
    def body(entries: list[tuple[int, int]]) -> str:
        """The checkpoint file's text for ``entries`` (Kafka's format: version 0, count, ``epoch offset`` lines)."""
        return "0\n%d\n%s" % (len(entries), "".join(f"{e} {o}\n" for e, o in entries))

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(largest epoch <= epoch, its end offset)`` (Kafka's ``endOffsetFor``): the end of an epoch is the start
        of the next one; the latest epoch ends at ``log_end_offset``; ``(-1, -1)`` for epoch -1 (undefined) and
        when ``epoch`` is newer than every known epoch (Kafka's ``LeaderEpochFileCache.endOffsetFor``: "the requested
        epoch is larger than any known epoch"); ``(epoch, start of the first known epoch)`` when ``epoch`` is older
        than every known one (as the single node answers it)."""
        if not self.entries or epoch > self.entries[-1][0] or epoch == -1:
            return -1, -1
        if epoch < self.entries[0][0]:  # older than every known epoch: it ends where the first known one starts
            return epoch, self.entries[0][1]
        found = -1
        for i, (e, _) in enumerate(self.entries):
            if e <= epoch:
                found = i
        if found < 0:
            return -1, -1
        end = self.entries[found + 1][1] if found + 1 < len(self.entries) else log_end_offset
        return self.entries[found][0], end

    def truncate_from_end(self, offset: int) -> None:
        """Drop the epochs starting at or after ``offset`` (the log was truncated there)."""
        kept = [(e, o) for e, o in self.entries if o < offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def _write(self) -> None:
        body = self.body(self.entries)
        batch = getattr(_local, "batch", None)
        if batch is not None:  # batched_writes(): written with the others when the block ends
            batch[self.path] = body
        else:
            _write_file(self.path, body)
