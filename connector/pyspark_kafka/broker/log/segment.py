"""One log segment: a ``.log`` file of record batches plus its sparse ``.index`` and ``.timeindex``.

A segment is named by its base offset, zero-padded to 20 digits (``00000000000000000000.log``).
Batches are appended to the end of the ``.log`` exactly as they will be served; after every
``index.interval.bytes`` of appended batches the next batch gets an offset-index entry
(its last offset, its position) and a time-index entry (largest timestamp so far, its offset),
as in Kafka's ``LogSegment.append``. Offsets are stored relative to the base offset in the
index files, so a segment holds at most 2^31-1 offsets past its base.

Invariants: ``size`` is the byte length of whole, valid batches in the ``.log``; batches' offsets
increase; ``next_offset`` is one past the last offset in the segment (the base offset when empty).
Indexes are loaded on first use and rebuilt from the ``.log`` when their sanity check fails.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator, NamedTuple

from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.clock import now_ms
from pyspark_kafka.broker.errors import CorruptRecordError, KafkaStorageError
from pyspark_kafka.broker.log.index import INT32_MAX, IndexCorruptError, OffsetIndex, TimeIndex
from pyspark_kafka.broker.log.record_batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    batch_crc,
    parse_header,
    read_offset_and_length,
)

log = get_logger(__name__)

#: log directories whose last segment write failed (an episode: one error log at its start, one info at its end)
_FAILING_DIRS: set[Path] = set()


def _free_bytes(directory: Path) -> str:
    try:
        return f"{shutil.disk_usage(directory).free} bytes free"
    except OSError as e:
        return f"free space unknown ({e})"


def _write_failed(log_path: Path, error: OSError) -> None:
    """Log once per episode (until a write to the directory succeeds again) that writes to the log directory of
    ``log_path`` fail, naming the directory, the error and the free space (Kafka takes the directory offline)."""
    directory = log_path.parent.parent
    if directory not in _FAILING_DIRS:
        _FAILING_DIRS.add(directory)
        log.error("writes to log directory %s fail (first: %s, %s): answering KAFKA_STORAGE_ERROR and cutting "
                  "partial writes back until writes succeed again; %s", directory, log_path.parent.name, error,
                  _free_bytes(directory))


def _write_succeeded(log_path: Path) -> None:
    directory = log_path.parent.parent
    if directory in _FAILING_DIRS:
        _FAILING_DIRS.discard(directory)
        log.info("writes to log directory %s succeed again (%s); %s", directory, log_path.parent.name,
                 _free_bytes(directory))


LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
_FIRST_SCAN_CHUNK = 1 << 12  # a header scan reads this much first (a fetch usually needs one or two headers),
_SCAN_CHUNK = 1 << 16  # then twice as much per read, up to this
_RECOVER_CHUNK = 1 << 22  # recovery reads (and CRC-checks) this much at a time
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
_IOV_MAX = os.sysconf("SC_IOV_MAX")  # most buffers one pwritev takes


class InvalidBatch(NamedTuple):
    """Where and why :meth:`LogSegment.recover` stopped trusting a segment's ``.log``.

    ``position`` is the byte position of the first invalid batch (every byte from there on was
    truncated); ``first_invalid_offset`` is the offset that batch would have started at (the
    segment's next offset after its last valid batch); ``reason`` says what is wrong with it;
    ``bytes_truncated`` is how many bytes were cut (file size minus ``position``).
    """

    position: int
    first_invalid_offset: int
    reason: str
    bytes_truncated: int


class _StopRecovery(Exception):
    """Raised inside :meth:`LogSegment.recover` at the first invalid batch (Kafka's ``CorruptRecordException``
    ends its ``LogSegment.recover`` loop the same way)."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(reason)
        self.position = position
        self.reason = reason


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` for base offset 42 (Kafka's 20-digit file names)."""
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    """A ``.log`` file with its offset and time indexes (see the module docstring).

    ``LogSegment(dir, base_offset, index_interval_bytes, max_index_size)`` opens (or creates) the
    three files. Call :meth:`recover` to CRC-check and rebuild it, or :meth:`load_tail` to learn
    ``next_offset`` of a segment trusted as flushed.
    """

    def __init__(self, dir: Path | str, base_offset: int, index_interval_bytes: int, max_index_size: int) -> None:
        # Strings, the Paths made on first use (:attr:`dir`, :attr:`log_path`, ...): a start opens a segment per
        # partition at least, and pathlib's parsing cost more than opening the files.
        self._dir = os.fspath(dir)
        self._dir_path: Path | None = dir if isinstance(dir, Path) else None
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        stem = f"{self._dir}/{base_offset:020d}"  # segment_file_name's names, without posixpath.join's cost
        self._log_file = stem + LOG_SUFFIX
        self._log_path: Path | None = None
        self._offset_index = OffsetIndex(stem + INDEX_SUFFIX, base_offset, max_index_size)
        self._time_index = TimeIndex(stem + TIME_INDEX_SUFFIX, base_offset, max_index_size)
        self._indexes_loaded = False
        try:
            self.fd = os.open(self._log_file, os.O_RDWR | os.O_CREAT, 0o644)
            self.size = os.fstat(self.fd).st_size
            if self.size == 0:  # a new segment: its (empty) index files exist from the start, as in Kafka
                for index in (self._offset_index, self._time_index):
                    os.close(os.open(index.filename, os.O_WRONLY | os.O_CREAT, 0o666))  # Path.touch's mode
        except OSError as e:
            raise KafkaStorageError(f"cannot open log segment {self._log_file}: {e}") from e
        self.created_ms = now_ms()
        self.next_offset: int | None = base_offset if self.size == 0 else None
        self.max_timestamp = -1  # largest batch maxTimestamp seen (-1: none / not loaded)
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = None  # Kafka's rollingBasedTimestamp
        self.bytes_since_last_index_entry = 0
        self.indexes_rebuilt = False  # set when a damaged index was rebuilt from the .log
        self.last_recovery: InvalidBatch | None = None  # what the last recover() truncated, None when intact

    @property
    def dir(self) -> Path:
        """The partition directory holding the segment's files."""
        if self._dir_path is None:
            self._dir_path = Path(self._dir)
        return self._dir_path

    @property
    def log_path(self) -> Path:
        """The segment's ``.log`` file."""
        if self._log_path is None:
            self._log_path = Path(self._log_file)
        return self._log_path

    @property
    def offset_index_path(self) -> Path:
        """The segment's ``.index`` file."""
        return self._offset_index.path

    @property
    def time_index_path(self) -> Path:
        """The segment's ``.timeindex`` file."""
        return self._time_index.path

    # -- indexes ---------------------------------------------------------------------------
    @property
    def offset_index(self) -> OffsetIndex:
        if not self._indexes_loaded:
            self._load_indexes()
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if not self._indexes_loaded:
            self._load_indexes()
        return self._time_index

    def _load_indexes(self) -> None:
        """Load both index files and sanity-check them; rebuild from the ``.log`` when damaged."""
        self._indexes_loaded = True
        try:
            # a segment holding bytes must have both files (a missing one is rebuilt below)
            self._offset_index.load(self.size, self.next_offset, required=self.size > 0)
            self._time_index.load(self.size, self.next_offset, required=self.size > 0)
        except (IndexCorruptError, OSError) as e:
            log.warning("rebuilding indexes of %s: %s", self.log_path, e)
            self.recover()
            self.indexes_rebuilt = True
            return
        last = self._time_index.last_entry
        if last is not None and last[0] > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = last

    @property
    def largest_timestamp(self) -> int:
        """Largest batch timestamp in the segment (ms); the file's mtime when it has none (Kafka's rule)."""
        self.time_index  # noqa: B018 - loads the max timestamp
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self.log_path).st_mtime * 1000)

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        """Track timestamps and add index entries for the batch just placed at ``position``."""
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            if not self._offset_index.is_full:
                self._offset_index.append(header.last_offset, position)
            self._time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += header.size

    # -- append ----------------------------------------------------------------------------
    def append(self, pieces: list, headers: list[BatchHeader]) -> None:
        """Write whole batches whose offsets are already assigned at the end of the ``.log``.

        ``pieces`` are bytes-like objects that together hold the batches described by ``headers``
        (in order). One ``pwritev`` (pieces joined first when there are more than the system's
        IOV_MAX); on a short or failed write the file is cut back to its previous size and
        :class:`KafkaStorageError` is raised.
        """
        self.offset_index  # noqa: B018 - make sure the indexes are loaded before adding to them
        start = self.size
        expected = sum(header.size for header in headers)
        if len(pieces) > _IOV_MAX:
            pieces = [b"".join(pieces)]
        try:
            written = os.pwritev(self.fd, pieces, start)
            if written != expected:
                raise OSError(f"short write: {written} of {expected} bytes")
        except OSError as e:
            try:
                os.ftruncate(self.fd, start)
            except OSError:
                pass
            _write_failed(self.log_path, e)
            raise KafkaStorageError(f"cannot append to {self.log_path}: {e}") from e
        if _FAILING_DIRS:
            _write_succeeded(self.log_path)
        position = start
        for header in headers:
            self._index_batch(position, header)
            position += header.size
        self.size = position
        self.next_offset = headers[-1].next_offset

    def should_roll(self, segment_bytes: int, segment_ms: int, messages_size: int, max_timestamp: int,
                    last_offset: int, now: int) -> bool:
        """Kafka's ``LogSegment.shouldRoll``: full by bytes, old by time, an index full, or offsets overflowing."""
        if self.size > segment_bytes - messages_size:
            return True
        if self.size > 0:
            if self.first_batch_timestamp is not None and self.first_batch_timestamp >= 0:
                waited = max_timestamp - self.first_batch_timestamp
            else:
                waited = now - self.created_ms
            if waited > segment_ms:
                return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        return last_offset - self.base_offset > INT32_MAX

    def on_become_inactive(self) -> None:
        """Before a roll: record the segment's largest timestamp in its time index (Kafka does the same)."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self._offset_index.flush(fsync=False)
        self._time_index.flush(fsync=False)

    # -- reads -----------------------------------------------------------------------------
    def iter_headers(self, start: int = 0, end: int | None = None, *,
                     strict: bool = False) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` of the batches from byte ``start`` (a batch boundary) to ``end``.

        Reads only headers, 4 KiB first and up to 64 KiB at a time when the scan goes on; no CRC
        or magic check (Kafka's ``FileLogInputStream.nextBatch`` reads no more either). The scan
        ends where fewer than a header's bytes are left or where a batch runs past ``end`` (a torn
        tail: Kafka's ``nextBatch`` returns null there). A ``batchLength`` below the v2 minimum (49)
        ends it too, unless ``strict``: then :class:`CorruptRecordError` (CORRUPT_MESSAGE) is raised
        naming the file and byte position, as Kafka's ``nextBatch`` throws ``CorruptRecordException``
        for a size below the minimum record overhead. The fetch path is strict; scans of logs that
        recovery already checked (producer state, cleaner, timestamp search) are not.
        """
        end = self.size if end is None else end
        position = start
        buf = b""
        buf_start = start
        chunk = _FIRST_SCAN_CHUNK
        while position + BATCH_HEADER_SIZE <= end:
            rel = position - buf_start
            if rel + BATCH_HEADER_SIZE > len(buf):
                buf = os.pread(self.fd, min(chunk, end - position), position)
                chunk = min(2 * chunk, _SCAN_CHUNK)
                buf_start, rel = position, 0
                if len(buf) < BATCH_HEADER_SIZE:
                    return
            header = parse_header(buf, rel)
            if header.batch_length < _MIN_BATCH_LENGTH:
                if strict:
                    raise CorruptRecordError(
                        f"found record batch length {header.batch_length} smaller than the minimum "
                        f"{_MIN_BATCH_LENGTH} of a RecordBatch v2 at byte {position} of {self.log_path}: "
                        "the segment is damaged on disk"
                    )
                return
            if position + header.size > end:
                return
            yield position, header
            position += header.size

    def translate_offset(self, offset: int, start_position: int = 0, *,
                         strict: bool = False) -> tuple[int, BatchHeader] | None:
        """``(position, header)`` of the first batch whose last offset is ``>= offset``, or None.

        Binary search in the offset index, then a scan of batch headers (Kafka's ``translateOffset``,
        which scans with ``FileRecords.searchForOffsetWithSize``). ``strict``: see :meth:`iter_headers`
        (raises :class:`CorruptRecordError` at a length below the minimum before the batch is found).
        """
        _, position = self.offset_index.lookup(offset)
        for pos, header in self.iter_headers(max(position, start_position), strict=strict):
            if header.last_offset >= offset:
                return pos, header
        return None

    def position_limit(self, max_offset: int) -> int:
        """Byte position where batches whose base offset is ``>= max_offset`` begin (``size`` if none).

        Raises :class:`CorruptRecordError` like :meth:`read` (it is part of the fetch path)."""
        found = self.translate_offset(max_offset, strict=True)
        if found is None:
            return self.size
        position, header = found
        return position if header.base_offset >= max_offset else position + header.size

    def read(self, offset: int, max_bytes: int, max_position: int, min_one_message: bool) -> tuple[int, int] | None:
        """``(position, length)`` of whole batches from the one holding ``offset``; None if past the segment.

        At most ``max_bytes`` unless the first batch alone is larger and ``min_one_message``
        (KIP-74), never past ``max_position``.

        As Kafka's ``LogSegment.read``, the broker serves the bytes as stored: no CRC or magic check,
        so a damaged batch (a flipped byte, a ``batchLength`` that runs into the next batch) is
        sent from its own position and the client's CRC check names it. Raises
        :class:`CorruptRecordError` (CORRUPT_MESSAGE) when the scan for the first batch meets a
        ``batchLength`` below the minimum (Kafka's ``FileLogInputStream.nextBatch`` throws
        ``CorruptRecordException`` there); a damaged batch *after* the first one ends the slice
        before it, so the next fetch starts at it and gets that error. A batch that runs past the
        segment's end is not found (None), as Kafka's ``nextBatch`` returns null for it.
        """
        found = self.translate_offset(offset, strict=True)
        if found is None:
            return None
        start, first = found
        limit = min(max_position, self.size)
        if start >= limit:
            return start, 0
        if first.size > max_bytes:
            return (start, first.size) if min_one_message else (start, 0)
        cap = min(limit, start + max_bytes)
        end = max(start, self.offset_index.lookup_by_position(cap))
        for pos, header in self.iter_headers(end, limit):
            if pos + header.size > cap:
                break
            end = pos + header.size
        return start, end - start

    def read_batch(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    # -- recovery --------------------------------------------------------------------------
    def _iter_valid(self) -> Iterator[tuple[int, BatchHeader]]:
        """Yield every valid batch from the start of the file; raise :class:`_StopRecovery` at the first bad one.

        Checks, in Kafka's order (``FileLogInputStream.nextBatch`` then ``DefaultRecordBatch.ensureValid``):
        a whole header is present, ``batchLength`` is at least the v2 minimum, the batch ends inside
        the file, magic is 2, the CRC32C matches. Reads 4 MiB at a time (more for a larger batch).
        """
        file_size = os.fstat(self.fd).st_size
        position = 0
        while position < file_size:
            left = file_size - position
            want = _RECOVER_CHUNK
            if left >= LOG_OVERHEAD:
                _, length = read_offset_and_length(os.pread(self.fd, LOG_OVERHEAD, position))
                want = max(want, LOG_OVERHEAD + length)
            buf = os.pread(self.fd, min(left, want), position)
            rel = 0
            while rel < len(buf):
                at = position + rel
                avail = len(buf) - rel
                if avail < BATCH_HEADER_SIZE:
                    if at + avail < file_size:
                        break  # the header continues in the next chunk
                    raise _StopRecovery(at, f"{avail} bytes left at the end of the file, fewer than the "
                                            f"{BATCH_HEADER_SIZE}-byte batch header (torn write)")
                header = parse_header(buf, rel)
                if header.batch_length < _MIN_BATCH_LENGTH:
                    raise _StopRecovery(at, f"batch length {header.batch_length} is below the minimum "
                                            f"{_MIN_BATCH_LENGTH} of a RecordBatch v2")
                if header.size > file_size - at:
                    raise _StopRecovery(at, f"the batch runs past the end of the file: its length says "
                                            f"{header.size} bytes, {file_size - at} are present (torn write)")
                if header.size > avail:
                    break  # the batch continues in the next chunk
                if header.magic != MAGIC:
                    raise _StopRecovery(at, f"bad magic {header.magic}, expected {MAGIC} (RecordBatch v2)")
                computed = batch_crc(buf, rel, header.size)
                if computed != header.crc:
                    raise _StopRecovery(at, f"CRC32C mismatch (stored crc = {header.crc:#010x}, computed crc = "
                                            f"{computed:#010x}) in the batch whose header says base offset "
                                            f"{header.base_offset}")
                yield at, header
                rel += header.size
            position += rel

    def recover(self) -> int:
        """Re-validate every batch (header sanity, magic, CRC32C, increasing offsets), rebuild both indexes,
        and truncate the ``.log`` after the last valid batch (Kafka's ``LogSegment.recover``).

        Returns the number of bytes truncated (0 when the segment was intact). When bytes are cut,
        :attr:`last_recovery` holds an :class:`InvalidBatch` (byte position, first invalid offset,
        reason, bytes truncated) and a WARNING names the segment file, the byte position, the first
        invalid offset, the reason and the bytes dropped, in the words of Kafka's ``LogSegment.recover``
        ("Found invalid messages in log segment ... at byte offset ...: <reason>"). Kafka warns only for
        a ``CorruptRecordException``/``InvalidRecordException`` and truncates a torn tail (a batch
        running past the end of the file) with a DEBUG line; here every truncation warns.
        """
        self._indexes_loaded = True
        self._offset_index.reset()
        self._time_index.reset()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = None
        self.bytes_since_last_index_entry = 0
        expected = self.base_offset
        valid_end = 0
        problem: _StopRecovery | None = None
        try:
            for position, header in self._iter_valid():
                if header.base_offset < expected:
                    raise _StopRecovery(position, f"offsets not increasing: base offset {header.base_offset} is "
                                                  f"below the next offset {expected} of the batch before it")
                if header.last_offset - self.base_offset > INT32_MAX:
                    raise _StopRecovery(position, f"last offset {header.last_offset} is more than {INT32_MAX} "
                                                  f"past the segment's base offset {self.base_offset}")
                self._index_batch(position, header)
                valid_end = position + header.size
                expected = header.next_offset
        except _StopRecovery as stop:
            problem = stop
        file_size = os.fstat(self.fd).st_size
        truncated = file_size - valid_end
        if truncated:
            os.ftruncate(self.fd, valid_end)
        self.size = valid_end
        self.next_offset = expected
        self.last_recovery = None
        if truncated:
            reason = problem.reason if problem is not None else "bytes after the last valid batch"
            self.last_recovery = InvalidBatch(valid_end, expected, reason, truncated)
            log.warning("Found invalid messages in log segment %s at byte offset %d (first invalid offset %d): %s; "
                        "truncated %d bytes, the segment now ends at offset %d", self.log_path, valid_end, expected,
                        reason, truncated, expected)
        return truncated

    def load_tail(self) -> None:
        """For a segment trusted as flushed: learn ``next_offset`` and the time-roll timestamp by
        scanning headers after the last offset-index entry (Kafka's ``readNextOffset``)."""
        index = self.offset_index
        start = index.values[-1] if len(index) else 0
        next_offset = self.base_offset
        last_end = start
        for position, header in self.iter_headers(start):
            next_offset = header.next_offset
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            last_end = position + header.size
        beyond = [i.keys[-1] if i is index else i.values[-1] for i in (index, self._time_index) if len(i)]
        if last_end != self.size or any(offset >= next_offset for offset in beyond):
            # trailing bytes that are not a batch, or index entries past the end: rebuild
            self.recover()
            self.indexes_rebuilt = True
            return
        self.next_offset = next_offset
        self.bytes_since_last_index_entry = self.size - start
        if self.size >= BATCH_HEADER_SIZE:
            self.first_batch_timestamp = parse_header(os.pread(self.fd, BATCH_HEADER_SIZE, 0)).max_timestamp

    # -- lifecycle -------------------------------------------------------------------------
    def flush(self) -> None:
        """fsync the ``.log`` and both indexes."""
        os.fsync(self.fd)
        self._offset_index.flush()
        self._time_index.flush()

    def truncate_to_position(self, position: int) -> None:
        """Cut the segment at a batch boundary ``position`` and rebuild its indexes and timestamps."""
        os.ftruncate(self.fd, position)
        self.recover()

    def close(self) -> None:
        self._offset_index.close()
        self._time_index.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        """Close and remove the three files."""
        self.close()
        self._offset_index.delete()
        self._time_index.delete()
        self.log_path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self.next_offset})"
