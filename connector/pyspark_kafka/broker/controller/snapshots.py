"""Snapshots of the cluster metadata log (KIP-630): the state at an offset, so a restart replays only the tail.

A snapshot holds the records that rebuild a node's metadata state as of ``end_offset`` (every record below it
applied). Kafka's snapshots are files ``<endOffset>-<epoch>.checkpoint`` in ``__cluster_metadata-0/``, written by
the controllers and the brokers from their metadata image; we use the same name and place
(``%020d-%010d.checkpoint``), with our own file format (Kafka's is record batches with a header and a footer
control record):

============ ======================================================================================
bytes        field
============ ======================================================================================
8            magic ``PKSNAP01``
8            ``end_offset`` (int64): the first offset *not* in the snapshot
4            ``epoch`` (int32): the leader epoch of the record at ``end_offset - 1``
4            record count (int32)
n x (4 + m)  each record: length (int32), then its bytes
4            CRC-32 (zlib) of every byte above
8            end magic ``PKSNAPOK``
============ ======================================================================================

Durability: written to ``<name>.tmp``, fsynced, renamed, directory fsynced (:func:`pyspark_kafka.kafka.fsutil.atomic_write`).
A file whose length, magic, count or checksum does not match is **refused** (an ERROR log line names the file
and the reason) and the next older snapshot is tried; with none left the node replays the log from offset 0.
The newest :data:`RETAINED` snapshots are kept, older ones deleted. The log itself is never truncated by a
snapshot here (Kafka moves the log start offset to the snapshot and deletes older segments).

When (Kafka's ``SnapshotGenerator`` rules, same names and defaults, :class:`SnapshotPolicy`): once the committed
records applied since the last snapshot reach ``metadata.log.max.record.bytes.between.snapshots`` bytes
(20971520), or ``metadata.log.max.snapshot.interval.ms`` (3600000, one hour; 0 disables) after the last
snapshot when at least one record came since.
"""

from __future__ import annotations

import re
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Protocol

from pyspark_kafka.kafka.fsutil import atomic_write, fsync_dir
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger("pyspark_kafka.metadata_snapshots")

MAGIC = b"PKSNAP01"
END_MAGIC = b"PKSNAPOK"
_HEAD = struct.Struct(">8sqii")
_LEN = struct.Struct(">i")
_TAIL = struct.Struct(">I8s")
SUFFIX = ".checkpoint"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
#: how many snapshots are kept (the newest; an older one is the fallback when the newest is damaged)
RETAINED = 2

MAX_BYTES_CONFIG = "metadata.log.max.record.bytes.between.snapshots"
MAX_BYTES_DEFAULT = 20 * 1024 * 1024  # Kafka's MetadataLogConfig.METADATA_SNAPSHOT_MAX_NEW_RECORD_BYTES
INTERVAL_CONFIG = "metadata.log.max.snapshot.interval.ms"
INTERVAL_DEFAULT = 3_600_000  # Kafka's METADATA_SNAPSHOT_MAX_INTERVAL_MS_DEFAULT (1 hour)


class SnapshotError(ValueError):
    """A snapshot file that cannot be used (torn, corrupt, wrong magic); the message names the file and cause."""


def snapshot_name(end_offset: int, epoch: int) -> str:
    """Kafka's snapshot file name: ``<endOffset, 20 digits>-<epoch, 10 digits>.checkpoint``."""
    return f"{end_offset:020d}-{epoch:010d}{SUFFIX}"


def encode_snapshot(end_offset: int, epoch: int, records: list[bytes]) -> bytes:
    """The file bytes of a snapshot (format in the module docstring)."""
    body = b"".join([_HEAD.pack(MAGIC, end_offset, epoch, len(records))]
                    + [_LEN.pack(len(r)) + r for r in records])
    return body + _TAIL.pack(zlib.crc32(body), END_MAGIC)


def decode_snapshot(data: bytes, where: str = "snapshot") -> tuple[int, int, list[bytes]]:
    """``(end_offset, epoch, records)`` of snapshot file bytes.

    Raises SnapshotError (naming ``where`` and the cause) for a short file, a wrong magic, a checksum mismatch,
    a record count or record length that does not fit the file, or records that do not fill the file exactly;
    nothing else (``tests/support/fuzz_snapshots.py`` fuzzes this).
    """
    if len(data) < _HEAD.size + _TAIL.size:
        raise SnapshotError(f"{where}: {len(data)} bytes, shorter than a header and trailer (a torn write)")
    magic, end_offset, epoch, count = _HEAD.unpack_from(data, 0)
    crc, end_magic = _TAIL.unpack_from(data, len(data) - _TAIL.size)
    if magic != MAGIC or end_magic != END_MAGIC:
        raise SnapshotError(f"{where}: not a whole metadata snapshot (magic {magic!r} / end {end_magic!r}; "
                            "a torn write or another file)")
    body = memoryview(data)[:len(data) - _TAIL.size]
    if zlib.crc32(body) != crc:
        raise SnapshotError(f"{where}: checksum mismatch (stored {crc:#010x}, computed {zlib.crc32(body):#010x}): "
                            "the file is corrupt")
    records, position = [], _HEAD.size
    if count < 0 or count > (len(body) - position) // _LEN.size:  # each record takes at least its 4-byte length
        raise SnapshotError(f"{where}: record count {count} does not fit the file's {len(body)} bytes: "
                            "the file is corrupt")
    for _ in range(count):
        if position + _LEN.size > len(body):
            raise SnapshotError(f"{where}: record {len(records)} of {count} has no room for its length: "
                                "the file is corrupt")
        (size,) = _LEN.unpack_from(body, position)
        position += _LEN.size
        if size < 0 or size > len(body) - position:
            raise SnapshotError(f"{where}: record {len(records)} of {count} overruns the file")
        records.append(bytes(body[position:position + size]))
        position += size
    if position != len(body) or end_offset < 0:
        raise SnapshotError(f"{where}: {len(body) - position} bytes after the {count} records, end offset "
                            f"{end_offset}: the file is corrupt")
    return end_offset, epoch, records


@dataclass(frozen=True)
class Snapshot:
    """A loaded snapshot: every record below ``end_offset`` applied; ``records`` rebuild that state."""

    end_offset: int
    epoch: int
    records: list[bytes]
    path: Path


class SnapshotStore:
    """The snapshot files of one metadata log directory (``SnapshotStore(directory: Path)``). Not thread-safe."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)

    def paths(self) -> list[Path]:
        """Snapshot files, newest (highest end offset) first; ``.tmp`` leftovers of a crash are deleted."""
        if not self.dir.is_dir():
            return []
        for tmp in self.dir.glob(f"*{SUFFIX}.tmp"):
            tmp.unlink(missing_ok=True)
        found = [(int(m.group(1)), int(m.group(2)), p) for p in self.dir.iterdir() if (m := _NAME.match(p.name))]
        return [p for _, _, p in sorted(found, reverse=True)]

    def write(self, end_offset: int, epoch: int, records: list[bytes]) -> Path:
        """Write a snapshot durably (temp file, fsync, rename, directory fsync); keep the newest :data:`RETAINED`.

        Raises OSError from the file system (the caller logs it; the log still holds every record)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / snapshot_name(end_offset, epoch)
        atomic_write(path, encode_snapshot(end_offset, epoch, records))
        fsync_dir(self.dir)
        for old in self.paths()[RETAINED:]:
            old.unlink(missing_ok=True)
        return path

    def load_latest(self, max_end_offset: int | None = None) -> Snapshot | None:
        """The newest snapshot that is whole and checksum-valid with ``end_offset <= max_end_offset`` (when given:
        the log end offset; a snapshot beyond the log cannot be continued). Every refused file is logged at ERROR
        with its cause; None when no snapshot is usable (the node then replays the log from offset 0)."""
        for path in self.paths():
            try:
                end_offset, epoch, records = decode_snapshot(path.read_bytes(), str(path))
                if max_end_offset is not None and end_offset > max_end_offset:
                    raise SnapshotError(f"{path}: ends at offset {end_offset}, past the log end offset "
                                        f"{max_end_offset}: it cannot be continued by this log")
            except (OSError, SnapshotError, struct.error) as exc:
                log.error("metadata snapshot refused: %s; falling back to an older snapshot or the log", exc)
                continue
            return Snapshot(end_offset, epoch, records, path)
        return None


@dataclass(frozen=True)
class SnapshotPolicy:
    """When to write a snapshot (Kafka's names and defaults): ``max_bytes`` of committed records applied since the
    last one (``metadata.log.max.record.bytes.between.snapshots``), or ``interval_ms`` after the last one when
    records came since (``metadata.log.max.snapshot.interval.ms``, 0: never by time)."""

    max_bytes: int = MAX_BYTES_DEFAULT
    interval_ms: int = INTERVAL_DEFAULT

    @classmethod
    def from_config(cls, config: Mapping[str, object] | Callable[[str], object]) -> "SnapshotPolicy":
        """From Kafka-named settings (a mapping or a ``get(name)`` function; missing names take the defaults).

        Raises ValueError naming the setting when a value is not an integer or out of range (bytes >= 1, ms >= 0).
        """
        get = config if callable(config) else config.get
        values = {}
        for name, default, low in ((MAX_BYTES_CONFIG, MAX_BYTES_DEFAULT, 1), (INTERVAL_CONFIG, INTERVAL_DEFAULT, 0)):
            raw = get(name)
            raw = default if raw in (None, "") else raw
            try:
                values[name] = int(raw)
            except (TypeError, ValueError):
                raise ValueError(f"{name}={raw!r} is not an integer (default {default})") from None
            if values[name] < low:
                raise ValueError(f"{name}={raw!r} must be at least {low} (default {default})")
        return cls(values[MAX_BYTES_CONFIG], values[INTERVAL_CONFIG])

    def due(self, new_bytes: int, since_ms: float) -> bool:
        """Whether a snapshot is due after ``new_bytes`` bytes of records and ``since_ms`` ms since the last."""
        return new_bytes >= self.max_bytes or (new_bytes > 0 and self.interval_ms > 0 and since_ms >= self.interval_ms)


class SnapshotState(Protocol):
    """The state machine a snapshot captures (for the cluster metadata:
    :class:`~pyspark_kafka.broker.controller.metadata_snapshot.ImageState`)."""

    def apply(self, offset: int, record: bytes) -> None:
        """Apply the committed ``record`` at ``offset``."""

    def records(self) -> list[bytes]:
        """Records that rebuild the current state when applied in order to an empty state."""

    def load(self, end_offset: int, records: list[bytes]) -> None:
        """Replace the state with the one ``records`` (a snapshot ending at ``end_offset``) rebuild."""


class MetadataSnapshots:
    """Snapshots of one node's metadata log: keeps its own copy of the state, writes snapshots when due, loads
    the newest usable one on start.

    ``MetadataSnapshots(directory, state, policy)``. The log calls :meth:`load` once on start, :meth:`apply` for
    every committed record in offset order (from the loaded snapshot's end offset), and :meth:`maybe_write` after
    each batch of them. ``loaded`` is the snapshot used at start (None: replay from 0); ``written`` counts the
    snapshots written by this process.
    """

    def __init__(self, directory: str | Path, state: SnapshotState, policy: SnapshotPolicy | None = None) -> None:
        self.store = SnapshotStore(directory)
        self.state = state
        self.policy = policy or SnapshotPolicy()
        self.loaded: Snapshot | None = None
        self.next_offset = 0  # the next committed offset to apply
        self.new_bytes = 0
        self.last_mono = time.monotonic()
        self.written = 0

    def load(self, max_end_offset: int | None = None) -> Snapshot | None:
        """Load the newest usable snapshot (see :meth:`SnapshotStore.load_latest`) into the state; returns it."""
        return self.use(self.store.load_latest(max_end_offset))

    def use(self, snapshot: Snapshot | None) -> Snapshot | None:
        """Make ``snapshot`` (already read and checked, :meth:`SnapshotStore.load_latest`) the state, or, with None,
        an empty state replayed from offset 0; returns it."""
        if snapshot is None:
            self.state.load(0, [])
            self.next_offset = 0
        else:
            self.state.load(snapshot.end_offset, snapshot.records)
            self.next_offset = snapshot.end_offset
            log.info("metadata snapshot %s loaded: %d records rebuild the state up to offset %d",
                     snapshot.path.name, len(snapshot.records), snapshot.end_offset)
        self.loaded = snapshot
        self.last_mono = time.monotonic()
        return snapshot

    def apply(self, offset: int, record: bytes) -> None:
        """One committed record (offsets below :attr:`next_offset` are ignored: already in the state)."""
        if offset < self.next_offset:
            return
        self.state.apply(offset, record)
        self.next_offset = offset + 1
        self.new_bytes += len(record)

    def maybe_write(self, epoch: int) -> Path | None:
        """Write a snapshot ending at :attr:`next_offset` (the record before it has leader epoch ``epoch``) when
        :class:`SnapshotPolicy` says it is due; returns its path. A failed write is logged and retried later."""
        if not self.policy.due(self.new_bytes, (time.monotonic() - self.last_mono) * 1000):
            return None
        try:
            started = time.perf_counter()
            records = self.state.records()
            path = self.store.write(self.next_offset, epoch, records)
        except OSError as exc:
            log.error("metadata snapshot at offset %d not written: %s (the log still holds every record)",
                      self.next_offset, exc)
            self.last_mono = time.monotonic()
            return None
        self.written += 1
        self.new_bytes = 0
        self.last_mono = time.monotonic()
        log.info("metadata snapshot %s written: %d records in %.3f s", path.name, len(records),
                 time.perf_counter() - started)
        return path
