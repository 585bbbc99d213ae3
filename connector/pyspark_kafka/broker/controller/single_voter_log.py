"""The cluster metadata log (KRaft's ``__cluster_metadata`` partition 0) behind the :class:`MetadataLog` seam.

:class:`SingleVoterMetadataLog` is the one-voter implementation: the voter (the controller) appends records to
a durable file in ``<data dir>/__cluster_metadata-0/`` and a record is committed as soon as it is fsynced (one
voter is a majority); other nodes are observers that fetch the log from the voter over the controller channel
(``fetch_metadata``, a long poll) and keep no copy of the log. The Raft quorum (``broker/raft/``) implements the
same protocol with 3 voters.

Snapshots (KIP-630, :mod:`~pyspark_kafka.broker.controller.snapshots`), when a :class:`MetadataSnapshots` is given: the
voter writes them beside ``metadata.log`` and an observer with a ``data_dir`` in its own
``<data_dir>/__cluster_metadata-0/``. On start the newest usable snapshot rebuilds the state and only the records
after it are replayed: listeners get the snapshot's records first (each at offset ``end_offset - 1``), then the
records from ``end_offset`` on. The voter keeps the whole log (the file is never truncated), so an observer that
has no snapshot fetches from offset 0 as before.

File format: frames of ``length (int32) | crc32 (uint32) | record bytes``; a torn or corrupt tail (a crash in
the middle of an append) is truncated on start. Kafka keeps this log in its record-batch segment format;
ours is this simpler file (docs/replication.md).

Start-up reads only the log after the newest snapshot, so a restart stays flat as the log grows (#38; Kafka's
``LogLoader`` recovers only past its recovery point and its metadata loader seeks to the snapshot's end offset
by the offset index). Each time the voter writes a snapshot it records where that snapshot's end offset begins
in ``metadata.log`` in ``metadata.log.positions`` (:class:`LogPositions`, written atomically after the snapshot):
the file position and the length and CRC of the frame just before it. On start, when the newest usable snapshot
has such an entry and the frame before that position is the recorded one (length and CRC read back and the
frame's CRC verified), only the frames from that position on are read and checked; the records before it are
read, and CRC-checked, the first time an observer fetches below the snapshot (:meth:`SingleVoterMetadataLog.read`;
a corrupt frame there raises CorruptRecordError naming the file and position and is never served). Without a
usable entry (no positions file, a damaged one, an entry that does not match the file) the whole file is read as
before, with a WARNING naming the cause.
"""

from __future__ import annotations

import asyncio
import os
import struct
import zlib
from pathlib import Path
from typing import Callable, Protocol

from pyspark_kafka.broker.controller.channel import ChannelClient
from pyspark_kafka.broker.errors import CorruptRecordError, NotControllerError
from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.controller.snapshots import RETAINED, MetadataSnapshots
from pyspark_kafka.kafka.fsutil import atomic_write

log = get_logger("pyspark_kafka.controller")

_HEAD = struct.Struct(">iI")
Listener = Callable[[int, bytes], None]
POSITIONS_FILE = "metadata.log.positions"


def _frames(data: bytes | memoryview, limit: int | None = None) -> tuple[list[bytes], int, tuple[int, int] | None]:
    """Parse ``length | crc32 | bytes`` frames from the start of ``data`` until the first torn or corrupt one (or
    ``limit`` frames): ``(records, bytes consumed, (length, crc) of the last whole frame or None)``."""
    records: list[bytes] = []
    position, last, end = 0, None, len(data)
    while position + _HEAD.size <= end and (limit is None or len(records) < limit):
        size, crc = _HEAD.unpack_from(data, position)
        if size < 0 or size > end - position - _HEAD.size:
            break
        body = bytes(data[position + _HEAD.size: position + _HEAD.size + size])
        if zlib.crc32(body) != crc:
            break
        records.append(body)
        position += _HEAD.size + size
        last = (size, crc)
    return records, position, last


class LogPositions:
    """``metadata.log.positions``: for each retained snapshot's end offset, where that offset begins in
    ``metadata.log``. ``LogPositions(path)``; :meth:`read` -> ``{end_offset: (position, frame_length, frame_crc)}``
    (the frame just before ``position``; bytes, CRC-32); :meth:`add` writes atomically.

    Text, Kafka's checkpoint style: a version line (``0``), a count line, one ``end_offset position length crc``
    line per entry, then ``crc32 <hex>`` of the lines above. A missing file reads as empty; a damaged one (short,
    bad count or number, wrong checksum) reads as empty with a WARNING naming it: the caller then reads the whole
    log, which costs time, never data."""

    VERSION = 0
    KEPT = RETAINED + 2  # the retained snapshots' entries, with room for one whose write failed

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def read(self) -> dict[int, tuple[int, int, int]]:
        """The entries of the file; ``{}`` when it is missing, or (with a WARNING) unreadable or refused by
        :meth:`decode`."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("metadata log positions %s unreadable (%s): reading the whole metadata log", self.path, exc)
            return {}
        try:
            return self.decode(data)
        except ValueError as exc:
            log.warning("metadata log positions %s refused (%s): reading the whole metadata log", self.path, exc)
            return {}

    @classmethod
    def decode(cls, data: bytes) -> dict[int, tuple[int, int, int]]:
        """The entries of the file's bytes. Raises ValueError (naming the cause) for anything :meth:`encode` would
        not write: not ASCII, short, a wrong checksum, version or count, a malformed or out-of-range number
        (``tests/support/fuzz_metadata_log.py`` fuzzes this)."""
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError("not ASCII text") from None
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "" or not lines[-2].startswith("crc32 "):
            raise ValueError("not a whole file")
        body = "\n".join(lines[:-2]) + "\n"
        if lines[-2] != f"crc32 {zlib.crc32(body.encode('ascii')):08x}":
            raise ValueError("checksum mismatch")
        if lines[0] != str(cls.VERSION) or lines[1] != str(len(lines) - 4):
            raise ValueError(f"version {lines[0]!r} / count {lines[1]!r} do not match the file")
        entries = {}
        for line in lines[2:-2]:
            fields = line.split(" ")
            if len(fields) != 4 or not all(f.isdigit() and f == str(int(f)) for f in fields):
                raise ValueError(f"malformed entry {line!r}")
            end_offset, position, size, crc = map(int, fields)
            if crc > 0xFFFFFFFF or end_offset in entries:
                raise ValueError(f"out-of-range or repeated value in {line!r}")
            entries[end_offset] = (position, size, crc)
        if list(entries) != sorted(entries):
            raise ValueError("entries not in end-offset order")
        return entries

    @classmethod
    def encode(cls, entries: dict[int, tuple[int, int, int]]) -> bytes:
        """The file's bytes for ``{end_offset: (position, frame_length, frame_crc)}`` (non-negative; crc < 2^32)."""
        body = f"{cls.VERSION}\n{len(entries)}\n" + "".join(
            f"{e} {p} {n} {c}\n" for e, (p, n, c) in sorted(entries.items()))
        return (body + f"crc32 {zlib.crc32(body.encode('ascii')):08x}\n").encode("ascii")

    def add(self, end_offset: int, position: int, frame: tuple[int, int]) -> None:
        """Record that offset ``end_offset`` begins at byte ``position``, after a frame of ``frame`` =
        ``(length, crc)``; keeps the newest :attr:`KEPT` entries. Raises OSError from the file system."""
        entries = self.read()
        entries[end_offset] = (position, *frame)
        atomic_write(self.path, self.encode(dict(sorted(entries.items())[-self.KEPT:])))


class MetadataLog(Protocol):
    """The cluster metadata log (KRaft's ``__cluster_metadata`` partition 0): records are opaque bytes."""

    node_id: int

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def leader(self) -> tuple[int | None, int]:
        """(id of the quorum leader = the active controller, or None while unknown; leader epoch)."""

    def is_voter(self) -> bool: ...

    async def append(self, records: list[bytes]) -> int:
        """Leader only: append and wait until committed; return the offset of the last record.
        Raises NotControllerError (NOT_CONTROLLER, 41) on a non-leader."""

    def committed_offset(self) -> int:
        """The metadata log's high watermark (next offset to be committed) as known by this node."""

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(offset, record)`` for every committed record in offset order from offset 0; with a
        snapshot loaded on start, first the snapshot's records (each at the snapshot's ``end_offset - 1``), then the
        records from ``end_offset`` on."""


class SingleVoterMetadataLog:
    """One controller voter (``voter_id``) and observers.

    ``SingleVoterMetadataLog(node_id, data_dir, voter_id, voter_address=(host, port))``: on the voter
    (``node_id == voter_id``) records live in ``data_dir/__cluster_metadata-0/metadata.log``; on an observer
    ``voter_address`` is the controller channel to fetch from. Listeners are called on the event loop thread.
    The leader epoch is 1 for as long as the voter runs (one voter never loses an election). ``snapshots``: write
    and load metadata snapshots (KIP-630) in ``data_dir/__cluster_metadata-0/`` (an observer needs a ``data_dir``
    for them). ``replayed_records`` counts the log records (not snapshot records) delivered to the listeners.
    """

    def __init__(self, node_id: int, data_dir: Path | None, voter_id: int,
                 voter_address: tuple[str, int] | None = None, snapshots: MetadataSnapshots | None = None) -> None:
        self.node_id = node_id
        self.voter_id = voter_id
        self.data_dir = None if data_dir is None else Path(data_dir)
        self.voter_address = voter_address
        self._records: list[bytes] = []  # voter: the log from offset ``_base`` (small: metadata)
        self._base = 0  # voter: the offset of ``_records[0]`` (a snapshot's end offset when started from one)
        self._base_position = 0  # voter: where offset ``_base`` begins in metadata.log
        self._prefix: list[bytes] | None = None  # voter: offsets below ``_base``, read on the first fetch of them
        self._path: Path | None = None
        self._position = 0  # voter: the file's end (bytes)
        self._last_frame: tuple[int, int] | None = None  # voter: (length, crc) of the file's last frame
        #: voter: records read (and CRC-checked) from metadata.log by the start; the rest wait for a fetch of them
        self.loaded_records = 0
        self._next = 0  # observers: next offset to fetch
        self._listeners: list[Listener] = []
        self._file = None
        self._task: asyncio.Task | None = None
        self._appended = asyncio.Event()
        self.reachable = False  # observers: the last fetch from the voter succeeded
        self._stopping = False
        self.snapshots = snapshots if data_dir is not None else None
        self._snapshot_start = 0  # the loaded snapshot's end offset (0: none)
        self.replayed_records = 0
        #: voter: the listeners DescribeQuorum v2 names for it (``[{"name", "host", "port"}]``; a combined node's,
        #: set once its sockets are bound: :meth:`CombinedController.advertise`)
        self.voter_endpoints: list[dict] = []
        #: voter, from the start's load until the first append: offset -> the record decoded once for every
        #: listener that replays it (the snapshot keeper, the controller, a combined node's broker)
        self._replay: dict[int, bytes] | None = None
        self._snapshot_replay: list[bytes] | None = None

    def _snapshot_records(self) -> list[bytes]:
        loaded = self.snapshots.loaded if self.snapshots is not None else None
        return loaded.records if loaded is not None else []

    def _committed(self, offset: int, record: bytes) -> None:
        """A committed record for the snapshot keeper, then the listeners (a combined node's controller and broker
        read the keeper's image: :meth:`shared_image`)."""
        if self.snapshots is not None:
            self.snapshots.apply(offset, record)
        for listener in self._listeners:
            listener(offset, record)

    def shared_image(self):
        """The voter's snapshot keeper's :class:`~pyspark_kafka.broker.controller.image.ClusterImage`, current with
        every committed record before the listeners hear of it (:meth:`_committed`), or None (no keeper, or an
        observer). A combined node's controller and broker read it instead of replaying into images of their own."""
        state = getattr(self.snapshots, "state", None)
        return getattr(state, "image", None) if self.is_voter() else None

    def is_voter(self) -> bool:
        return self.node_id == self.voter_id

    def leader(self) -> tuple[int | None, int]:
        return self.voter_id, 1

    def _end(self) -> int:
        """Voter: the log end offset (= the high watermark: one voter commits what it fsyncs)."""
        return self._base + len(self._records)

    def committed_offset(self) -> int:
        return self._end() if self.is_voter() else self._next

    def describe_quorum(self) -> dict:
        """The quorum as DescribeQuorum (55) describes it (KIP-595), voter only: ``leader_id``, ``leader_epoch``,
        ``high_watermark`` (the next offset to commit), ``voters`` (this voter, caught up now: ``replica_id``,
        ``log_end_offset``, ``last_fetch_timestamp``, ``last_caught_up_timestamp`` in epoch ms) and ``observers``
        (none listed: observers fetch over the controller channel), ``nodes`` (the voter's :attr:`voter_endpoints`,
        DescribeQuorum v2's ``Nodes``). NotControllerError on an observer."""
        import time

        if not self.is_voter():
            raise NotControllerError(f"node {self.node_id} is not the controller (voter {self.voter_id})")
        now = int(time.time() * 1000)
        end = self._end()
        return {"leader_id": self.voter_id, "leader_epoch": 1, "high_watermark": end, "observers": [],
                "nodes": [{"node_id": self.voter_id, "listeners": self.voter_endpoints}],
                "voters": [{"replica_id": self.voter_id, "log_end_offset": end, "last_fetch_timestamp": now,
                            "last_caught_up_timestamp": now}]}

    def _replayed(self, offset: int) -> bytes:
        """The record at ``offset`` for a replay: decoded once while the start's replay lasts (each listener then
        finds the decoded dict, :class:`~pyspark_kafka.broker.controller.image.DecodedRecord`), else the bytes."""
        if self._replay is None:
            return self._records[offset - self._base]
        record = self._replay.get(offset)
        if record is None:
            from pyspark_kafka.broker.controller.image import decoded_record

            record = self._replay[offset] = decoded_record(self._records[offset - self._base])
        return record

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)
        if self.is_voter():
            snapshot_records = self._snapshot_records()
            if self._replay is not None and snapshot_records:
                if self._snapshot_replay is None:
                    from pyspark_kafka.broker.controller.image import decoded_record

                    self._snapshot_replay = [decoded_record(r) for r in snapshot_records]
                snapshot_records = self._snapshot_replay
            for record in snapshot_records:
                listener(self._snapshot_start - 1, record)
            for offset in range(self._snapshot_start, self._end()):
                listener(offset, self._replayed(offset))
                self.replayed_records += 1

    async def start(self) -> None:
        if self.is_voter():
            self._load()
        else:
            if self.snapshots is not None:
                snapshot = self.snapshots.load()
                if snapshot is not None:
                    self._snapshot_start = self._next = snapshot.end_offset
                    for record in snapshot.records:
                        for listener in self._listeners:
                            listener(snapshot.end_offset - 1, record)
            self._task = asyncio.create_task(self._fetch_loop())

    async def stop(self) -> None:
        self._stopping = True  # Python 3.11's wait_for can swallow a cancellation: loops also check this flag
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._file is not None:
            self._file.close()
            self._file = None

    # --- voter -----------------------------------------------------------------------------

    def _load(self) -> None:
        directory = self.data_dir / "__cluster_metadata-0"
        directory.mkdir(parents=True, exist_ok=True)
        path = self._path = directory / "metadata.log"
        size = path.stat().st_size if path.exists() else 0
        # the newest usable snapshot, read and checked but not yet made the state: the log may not continue it
        snapshot, tried, start = None, False, None
        if self.snapshots is not None and size:
            positions = LogPositions(directory / POSITIONS_FILE).read()
            if positions:
                snapshot, tried = self.snapshots.store.load_latest(), True
                if snapshot is not None:
                    start = self._verified_start(path, size, snapshot.end_offset, positions.get(snapshot.end_offset))
        self._base, self._base_position = (snapshot.end_offset, start[0]) if start else (0, 0)
        data = b""
        if size:
            with open(path, "rb") as file:
                file.seek(self._base_position)
                data = file.read()
        self._records, consumed, last = _frames(data)
        self.loaded_records = len(self._records)
        self._last_frame = last if last is not None else (start[1] if start else None)
        position = self._base_position + consumed
        if position != size:
            log.warning("metadata log %s: truncating a torn tail of %d bytes at position %d",
                        path, size - position, position)
        self._file = open(path, "r+b" if path.exists() else "w+b")
        self._file.truncate(position)
        self._file.seek(position)
        self._position = position
        self._replay = {}  # until the first append: the start's listeners share one decode per record
        if self.snapshots is not None:
            if not tried or (snapshot is not None and start is None and snapshot.end_offset > self._end()):
                snapshot = self.snapshots.store.load_latest(max_end_offset=self._end())  # one this log continues
            self.snapshots.use(snapshot)
            self._snapshot_start = 0 if snapshot is None else snapshot.end_offset
            for offset in range(self._snapshot_start, self._end()):
                self.snapshots.apply(offset, self._replayed(offset))
            self._maybe_snapshot()
        log.info("metadata log %s loaded: %d records, %d of them read from the file (replaying from offset %d)",
                 path, self._end(), self.loaded_records, self._snapshot_start)

    def _verified_start(self, path: Path, size: int, end_offset: int,
                        entry: tuple[int, int, int] | None) -> tuple[int, tuple[int, int]] | None:
        """``(position, (length, crc))`` where ``end_offset`` begins in the file, when ``entry`` (from
        :class:`LogPositions`) matches the file: the frame before ``position`` has the recorded length and CRC and
        its bytes that CRC. None (with a WARNING naming the cause) otherwise: the whole file is read."""
        cause = None
        if entry is None:
            cause = f"no position recorded for the snapshot's end offset {end_offset}"
        else:
            position, length, crc = entry
            frame_start = position - _HEAD.size - length
            if end_offset <= 0 or frame_start < 0 or position > size:
                cause = f"position {position} of offset {end_offset} lies outside the file's {size} bytes"
            else:
                with open(path, "rb") as file:
                    file.seek(frame_start)
                    frame = file.read(_HEAD.size + length)
                if (len(frame) != _HEAD.size + length or _HEAD.unpack_from(frame) != (length, crc)
                        or zlib.crc32(frame[_HEAD.size:]) != crc):
                    cause = (f"the frame before position {position} is not the recorded one (length {length}, "
                             f"crc {crc:#010x})")
        if cause is not None:
            log.warning("metadata log %s: %s; reading the whole log", path, cause)
            return None
        return position, (length, crc)

    def _prefix_records(self) -> list[bytes]:
        """Voter: the records below ``_base`` (read and CRC-checked from the file the first time). Raises
        CorruptRecordError naming the file and position when they are not ``_base`` whole frames ending at the
        recorded position."""
        if self._prefix is None:
            with open(self._path, "rb") as file:
                data = file.read(self._base_position)
            records, consumed, _ = _frames(data, self._base)
            if len(records) != self._base or consumed != self._base_position:
                raise CorruptRecordError(
                    f"metadata log {self._path}: the record at offset {len(records)} (byte {consumed}) is torn or "
                    f"fails its CRC, before the snapshot's end offset {self._base}: a node without a snapshot "
                    "cannot replay this log; give that node a copy of a snapshot (the .checkpoint files) or "
                    "restore metadata.log from a backup")
            self._prefix = records
        return self._prefix

    def _maybe_snapshot(self) -> None:
        """Voter: write a snapshot when due and record where its end offset begins (:class:`LogPositions`)."""
        written = self.snapshots.maybe_write(1)
        if written is None or self.snapshots.next_offset != self._end() or self._last_frame is None:
            return
        try:
            LogPositions(self._path.parent / POSITIONS_FILE).add(self._end(), self._position, self._last_frame)
        except OSError as exc:
            log.warning("metadata log positions not written (%s): the next start reads the whole log", exc)

    async def append(self, records: list[bytes]) -> int:
        """Append ``records`` durably (write + fsync) and deliver them to the listeners; return the last offset."""
        if not self.is_voter():
            raise NotControllerError(f"node {self.node_id} is not the controller (voter {self.voter_id})")
        frames = [(len(r), zlib.crc32(r)) for r in records]
        data = b"".join(_HEAD.pack(*frame) + r for frame, r in zip(frames, records))
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._position += len(data)
        if frames:
            self._last_frame = frames[-1]
        self._replay = self._snapshot_replay = None  # the start's replay is over: its decoded records go
        from pyspark_kafka.broker.cluster.leader_epoch import batched_writes

        from pyspark_kafka.broker.controller.image import decoded_record

        with batched_writes():  # one batch's leader elections (300 at a node's unfence) fsync their checkpoints at once
            for record in records:
                offset = self._end()
                self._records.append(record)
                self._committed(offset, decoded_record(record))  # one decode for every listener
        if self.snapshots is not None:
            self._maybe_snapshot()
        self._appended.set()
        self._appended = asyncio.Event()
        return self._end() - 1

    async def read(self, offset: int, max_records: int, wait_ms: int) -> list[bytes]:
        """Voter: committed records from ``offset`` (at most ``max_records``), waiting up to ``wait_ms`` for one.
        Raises CorruptRecordError when ``offset`` lies before the start's snapshot and the log there is corrupt."""
        if offset >= self._end() and wait_ms > 0:
            try:
                await asyncio.wait_for(self._appended.wait(), wait_ms / 1000)
            except asyncio.TimeoutError:
                pass
        if offset < self._base:
            records = self._prefix_records()[offset: offset + max_records]
            return records + self._records[:max_records - len(records)]
        return self._records[offset - self._base: offset - self._base + max_records]

    # --- observer --------------------------------------------------------------------------

    def _refuse_snapshot(self, voter_end: int) -> None:
        """The voter's log ends before this observer's position (its snapshot came from another, older log: the
        controller's data directory was replaced). Applying what follows would build a wrong image, so the
        snapshots are deleted and fetching stops, loudly; a restart replays the voter's log from offset 0."""
        for path in self.snapshots.store.paths() if self.snapshots is not None else ():
            path.unlink(missing_ok=True)
        log.error("metadata log: the controller's log ends at offset %d, before this node's position %d (its "
                  "snapshot is from another metadata log: was the controller's data directory replaced?); the "
                  "snapshots are deleted and no more metadata is applied: restart this broker to replay the "
                  "controller's log from offset 0", voter_end, self._next)

    async def _fetch_loop(self) -> None:
        client = ChannelClient(*self.voter_address)
        last_error = None
        try:
            while not self._stopping:
                try:
                    answer = await client.call({"op": "fetch_metadata", "offset": self._next, "max_records": 5000,
                                                "wait_ms": 500, "node_id": self.node_id}, timeout_s=5)
                except ConnectionError as exc:
                    self.reachable = False
                    log.debug("metadata fetch failed: %s", exc)
                    await asyncio.sleep(0.2)
                    continue
                self.reachable = True
                if answer.get("error_code", 0):  # e.g. CORRUPT_MESSAGE: the voter's log below its snapshot
                    if answer.get("error_message") != last_error:
                        last_error = answer.get("error_message")
                        log.error("metadata fetch from offset %d refused by the controller: %s", self._next, last_error)
                    await asyncio.sleep(1.0)
                    continue
                last_error = None
                if answer.get("end_offset", self._next) < self._next:
                    self._refuse_snapshot(answer["end_offset"])
                    return
                records = answer.get("records", ())
                for raw in records:
                    self._committed(self._next, raw.encode())
                    self._next += 1
                    self.replayed_records += 1
                if records and self.snapshots is not None:
                    self.snapshots.maybe_write(1)
        finally:
            client.close()
