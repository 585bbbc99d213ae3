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
"""

from __future__ import annotations

import asyncio
import os
import struct
import zlib
from pathlib import Path
from typing import Callable, Protocol

from pyspark_kafka.broker.controller.channel import ChannelClient
from pyspark_kafka.broker.errors import NotControllerError
from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.controller.snapshots import MetadataSnapshots

log = get_logger("pyspark_kafka.controller")

_HEAD = struct.Struct(">iI")
Listener = Callable[[int, bytes], None]


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
        self._records: list[bytes] = []  # voter: the whole log (small: metadata)
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

    def committed_offset(self) -> int:
        return len(self._records) if self.is_voter() else self._next

    def describe_quorum(self) -> dict:
        """The quorum as DescribeQuorum (55) describes it (KIP-595), voter only: ``leader_id``, ``leader_epoch``,
        ``high_watermark`` (the next offset to commit), ``voters`` (this voter, caught up now: ``replica_id``,
        ``log_end_offset``, ``last_fetch_timestamp``, ``last_caught_up_timestamp`` in epoch ms) and ``observers``
        (none listed: observers fetch over the controller channel). NotControllerError on an observer."""
        import time

        if not self.is_voter():
            raise NotControllerError(f"node {self.node_id} is not the controller (voter {self.voter_id})")
        now = int(time.time() * 1000)
        end = len(self._records)
        return {"leader_id": self.voter_id, "leader_epoch": 1, "high_watermark": end, "observers": [],
                "voters": [{"replica_id": self.voter_id, "log_end_offset": end, "last_fetch_timestamp": now,
                            "last_caught_up_timestamp": now}]}

    def _replayed(self, offset: int) -> bytes:
        """The record at ``offset`` for a replay: decoded once while the start's replay lasts (each listener then
        finds the decoded dict, :class:`~pyspark_kafka.broker.controller.image.DecodedRecord`), else the bytes."""
        if self._replay is None:
            return self._records[offset]
        record = self._replay.get(offset)
        if record is None:
            from pyspark_kafka.broker.controller.image import decoded_record

            record = self._replay[offset] = decoded_record(self._records[offset])
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
            for offset in range(self._snapshot_start, len(self._records)):
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
        path = directory / "metadata.log"
        data = path.read_bytes() if path.exists() else b""
        position = 0
        while position + _HEAD.size <= len(data):
            size, crc = _HEAD.unpack_from(data, position)
            body = data[position + _HEAD.size: position + _HEAD.size + size]
            if size < 0 or len(body) != size or zlib.crc32(body) != crc:
                break
            self._records.append(bytes(body))
            position += _HEAD.size + size
        if position != len(data):
            log.warning("metadata log %s: truncating a torn tail of %d bytes at position %d",
                        path, len(data) - position, position)
        self._file = open(path, "r+b" if path.exists() else "w+b")
        self._file.truncate(position)
        self._file.seek(position)
        self._replay = {}  # until the first append: the start's listeners share one decode per record
        if self.snapshots is not None:
            snapshot = self.snapshots.load(max_end_offset=len(self._records))
            self._snapshot_start = 0 if snapshot is None else snapshot.end_offset
            for offset in range(self._snapshot_start, len(self._records)):
                self.snapshots.apply(offset, self._replayed(offset))
            self.snapshots.maybe_write(1)
        log.info("metadata log %s loaded: %d records (replaying from offset %d)", path, len(self._records),
                 self._snapshot_start)

    async def append(self, records: list[bytes]) -> int:
        """Append ``records`` durably (write + fsync) and deliver them to the listeners; return the last offset."""
        if not self.is_voter():
            raise NotControllerError(f"node {self.node_id} is not the controller (voter {self.voter_id})")
        self._file.write(b"".join(_HEAD.pack(len(r), zlib.crc32(r)) + r for r in records))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._replay = self._snapshot_replay = None  # the start's replay is over: its decoded records go
        from pyspark_kafka.broker.cluster.leader_epoch import batched_writes

        from pyspark_kafka.broker.controller.image import decoded_record

        with batched_writes():  # one batch's leader elections (300 at a node's unfence) fsync their checkpoints at once
            for record in records:
                offset = len(self._records)
                self._records.append(record)
                self._committed(offset, decoded_record(record))  # one decode for every listener
        if self.snapshots is not None:
            self.snapshots.maybe_write(1)
        self._appended.set()
        self._appended = asyncio.Event()
        return len(self._records) - 1

    async def read(self, offset: int, max_records: int, wait_ms: int) -> list[bytes]:
        """Voter: committed records from ``offset`` (at most ``max_records``), waiting up to ``wait_ms`` for one."""
        if offset >= len(self._records) and wait_ms > 0:
            try:
                await asyncio.wait_for(self._appended.wait(), wait_ms / 1000)
            except asyncio.TimeoutError:
                pass
        return self._records[offset: offset + max_records]

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
