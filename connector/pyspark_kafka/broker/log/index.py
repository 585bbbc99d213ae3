"""Sparse offset and time indexes of one log segment (Kafka's ``OffsetIndex`` / ``TimeIndex``).

- ``.index``: 8-byte entries ``(relative offset int32, file position int32)``, big-endian; relative
  to the segment's base offset. The offset is the *last* offset of an indexed batch and the
  position is that batch's start, as in Kafka; both strictly increase.
- ``.timeindex``: 12-byte entries ``(timestamp int64 ms, relative offset int32)``: the largest
  timestamp seen so far in the segment and the offset of the batch holding it. An entry is added
  only when the timestamp grows, so both columns increase.

Entries are appended at most one per ``index.interval.bytes`` of log, so an index stays small and
lives in memory (two arrays); the file is append-only and written through a buffer that is flushed
with the segment. A lookup is a binary search (:mod:`bisect`) followed, by the caller, by a short
scan of batch headers in the ``.log`` file.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

INT32_MAX = 2**31 - 1


class IndexCorruptError(Exception):
    """An index file failed its sanity check; the segment rebuilds it from the ``.log``."""


class _SparseIndex:
    """Two parallel increasing columns (``keys``, ``values``) kept in memory and mirrored to a file."""

    ENTRY_SIZE = 0
    _KEY_NAME = ""

    def __init__(self, path: Path | str, base_offset: int, max_index_size: int) -> None:
        # the file's path as a string; its Path (:attr:`path`) made on first use: a start opens two indexes per
        # partition, and pathlib's parsing cost more than reading an index file
        self.filename = os.fspath(path)
        self._path: Path | None = path if isinstance(path, Path) else None
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.ENTRY_SIZE)
        self.keys = array("q")
        self.values = array("q")
        self._writer = None  # opened on first append

    @property
    def path(self) -> Path:
        """The index file."""
        if self._path is None:
            self._path = Path(self.filename)
        return self._path

    # -- file I/O -------------------------------------------------------------------------
    def _pack(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _unpack_all(self, data: bytes) -> tuple[array, array]:
        raise NotImplementedError

    def load(self, log_size: int, next_offset: int | None, *, required: bool = False) -> None:
        """Read the file and sanity-check it against the segment (Kafka's ``sanityCheck``).

        Checks: the size is a whole number of entries, both columns strictly increase, offsets
        are at or above the base offset and below ``next_offset`` (when known), positions are
        inside the ``.log`` (``log_size`` bytes). A missing file is an empty index, unless
        ``required`` (a segment holding bytes). Raises :class:`IndexCorruptError`; OSError when the
        file cannot be read.
        """
        try:
            # os calls, not Path.read_bytes (a file object per index): a start reads the active segment's two
            fd = os.open(self.filename, os.O_RDONLY)
        except FileNotFoundError:
            if required:
                raise IndexCorruptError("index file missing") from None
            data = b""
        else:
            try:
                chunks = []
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
            finally:
                os.close(fd)
            data = b"".join(chunks)
        if len(data) % self.ENTRY_SIZE:
            raise IndexCorruptError(
                f"{os.path.basename(self.filename)}: size {len(data)} is not a multiple of the "
                f"{self.ENTRY_SIZE}-byte entry size"
            )
        keys, values = self._unpack_all(data)
        self._check(keys, values, log_size, next_offset)
        self.keys, self.values = keys, values

    def _check(self, keys: array, values: array, log_size: int, next_offset: int | None) -> None:
        raise NotImplementedError

    def append(self, key: int, value: int) -> None:
        """Append an entry (caller guarantees both columns increase and the index is not full)."""
        if self._writer is None:
            self._writer = open(self.filename, "ab")
        self._writer.write(self._pack(key, value))
        self.keys.append(key)
        self.values.append(value)

    def flush(self, fsync: bool = True) -> None:
        """Write buffered entries to the file (and fsync it)."""
        if self._writer is not None:
            self._writer.flush()
            if fsync:
                os.fsync(self._writer.fileno())

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def reset(self) -> None:
        """Drop every entry and empty the file (before a rebuild)."""
        self.close()
        self.keys = array("q")
        self.values = array("q")
        with open(self.filename, "wb"):
            pass

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.filename)
        except FileNotFoundError:
            pass

    # -- queries --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.keys)

    @property
    def is_full(self) -> bool:
        return len(self.keys) >= self.max_entries

    def floor(self, key: int) -> int:
        """Index of the last entry whose key is ``<= key``, or -1 (binary search)."""
        return bisect_right(self.keys, key) - 1


class OffsetIndex(_SparseIndex):
    """Sparse map from offset to file position in the segment's ``.log``.

    ``keys`` are absolute offsets (the last offset of an indexed batch), ``values`` the file
    position where that batch starts. Entries are 8 bytes on disk: relative offset int32,
    position int32.
    """

    ENTRY_SIZE = 8

    def _pack(self, key: int, value: int) -> bytes:
        return struct.pack(">ii", key - self.base_offset, value)

    def _unpack_all(self, data: bytes) -> tuple[array, array]:
        flat = array("i")
        flat.frombytes(data)
        if sys.byteorder == "little":
            flat.byteswap()
        rel = flat[0::2]
        return array("q", (self.base_offset + r for r in rel)), array("q", flat[1::2])

    def _check(self, keys: array, values: array, log_size: int, next_offset: int | None) -> None:
        name = os.path.basename(self.filename)
        if keys and keys[0] < self.base_offset:
            raise IndexCorruptError(f"{name}: entry offset {keys[0]} is below the base offset {self.base_offset}")
        if not _strictly_increasing(keys) or not _strictly_increasing(values):
            raise IndexCorruptError(f"{name}: entries do not strictly increase")
        if values and (values[0] < 0 or values[-1] >= log_size):
            raise IndexCorruptError(f"{name}: last entry points to byte {values[-1]}, past the log's {log_size} bytes")
        if keys and next_offset is not None and keys[-1] >= next_offset:
            raise IndexCorruptError(f"{name}: last entry offset {keys[-1]} is not below the next offset {next_offset}")

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry with offset ``<= offset``, else ``(base_offset, 0)``.

        The batch holding ``offset`` starts at or after the returned position.
        """
        i = self.floor(offset)
        if i < 0:
            return self.base_offset, 0
        return self.keys[i], self.values[i]

    def lookup_by_position(self, position: int) -> int:
        """The largest indexed batch start ``<= position`` (0 if none): a batch boundary to scan from."""
        i = bisect_right(self.values, position) - 1
        return self.values[i] if i >= 0 else 0

    def append(self, key: int, value: int) -> None:
        if key - self.base_offset > INT32_MAX:
            raise ValueError(f"offset {key} does not fit the index of segment {self.base_offset}")
        super().append(key, value)


class TimeIndex(_SparseIndex):
    """Sparse map from timestamp to offset: ``keys`` are timestamps (ms), ``values`` absolute offsets.

    Entries are 12 bytes on disk: timestamp int64, relative offset int32.
    """

    ENTRY_SIZE = 12

    def _pack(self, key: int, value: int) -> bytes:
        return struct.pack(">qi", key, value - self.base_offset)

    def _unpack_all(self, data: bytes) -> tuple[array, array]:
        keys, values = array("q"), array("q")
        for ts, rel in struct.iter_unpack(">qi", data):
            keys.append(ts)
            values.append(self.base_offset + rel)
        return keys, values

    def _check(self, keys: array, values: array, log_size: int, next_offset: int | None) -> None:
        name = os.path.basename(self.filename)
        if values and values[0] < self.base_offset:
            raise IndexCorruptError(f"{name}: entry offset {values[0]} is below the base offset {self.base_offset}")
        if not _strictly_increasing(keys) or not _non_decreasing(values):
            raise IndexCorruptError(f"{name}: entries do not increase")
        if values and next_offset is not None and values[-1] >= next_offset:
            raise IndexCorruptError(
                f"{name}: last entry offset {values[-1]} is not below the next offset {next_offset}"
            )

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the last entry, or None."""
        return (self.keys[-1], self.values[-1]) if self.keys else None

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if ``timestamp`` is larger than the last entry's (Kafka's ``maybeAppend``)."""
        if timestamp < 0 or (self.keys and timestamp <= self.keys[-1]):
            return
        if self.is_full and not skip_full_check:
            return
        self.append(timestamp, offset)

    def lookup(self, timestamp: int) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the last entry with timestamp ``<= timestamp``, or None."""
        i = self.floor(timestamp)
        return (self.keys[i], self.values[i]) if i >= 0 else None


def _strictly_increasing(a: array) -> bool:
    return all(x < y for x, y in zip(a, a[1:]))


def _non_decreasing(a: array) -> bool:
    return all(x <= y for x, y in zip(a, a[1:]))
