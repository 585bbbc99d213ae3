"""``RaftMetadataLog``: the cluster metadata log replicated by Raft among the controller voters (KIP-595).

Kafka's ``KafkaRaftClient`` with its ``QuorumState``: every replica is in one state per leader
epoch, persisted in ``quorum-state`` (:mod:`~pyspark_kafka.broker.raft.quorum_state`) before it
acts:

- **unattached**: no known leader in the epoch (maybe a vote cast: ``voted_id``); a voter that
  hears nothing for a random time in [election timeout, 2 x election timeout) becomes candidate;
- **candidate**: epoch + 1, votes for itself, sends Vote (52) to every voter; a majority of grants
  makes it **leader**; otherwise it backs off (random, ``controller.quorum.election.backoff.max.ms``)
  and tries again with a higher epoch;
- **leader**: appends a ``LeaderChangeMessage`` control batch opening its epoch, tells the voters
  with BeginQuorumEpoch (53); followers then *pull* with Fetch (1) on ``__cluster_metadata``
  partition 0 (replica id, fetch offset, last fetched epoch). A fetch whose (offset, epoch) is not in
  the leader's log is answered with ``DivergingEpoch`` and the follower truncates. The **high
  watermark** is the largest offset that a majority of voters (the leader included) have, moved
  only once it covers the epoch's first batch (Raft's rule: a leader commits nothing of older
  epochs by counting replicas until one record of its own epoch is committed) and never back;
  a leader that no majority fetched from for 1.5 x ``controller.quorum.fetch.timeout.ms`` resigns
  (Kafka's check-quorum); stopping a leader sends EndQuorumEpoch (54) so the others elect at once;
- **follower**: fetches from the leader; no successful fetch for ``controller.quorum.fetch.timeout.ms``
  and a voter becomes candidate.

Observers (``node.id`` not among ``controller.quorum.voters``: brokers) fetch the same way,
never vote and never become candidates; they find the leader through any voter's answer (the
``CurrentLeader`` of a NOT_LEADER_OR_FOLLOWER Fetch response). A vote is granted only to a
candidate whose log is at least as up to date: (last epoch, end offset) compared in that order.
DescribeQuorum (55) is answered by the leader with every voter's and observer's log end offset.

Snapshots (KIP-630, :mod:`~pyspark_kafka.broker.controller.snapshots`), when a ``MetadataSnapshots`` is given: every
voter and observer writes snapshots of its own committed state into its ``__cluster_metadata-0/`` and, on start,
loads the newest usable one (its end offset is committed: the high watermark starts there) and replays only the
log after it. The log is kept whole (no log start offset, so no FetchSnapshot: a replica behind fetches records).

Implements the ``MetadataLog`` seam (see docs/replication.md "Controller quorum"): ``start``,
``stop``, ``leader``, ``is_voter``, ``append``, ``committed_offset``, ``subscribe``. One asyncio
event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import random
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from kio.schema.begin_quorum_epoch.v0 import request as bqe
from kio.schema.end_quorum_epoch.v0 import request as eqe
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.vote.v0 import request as vote_v0

from pyspark_kafka.broker.errors import CorruptRecordError, ErrorCode, NotControllerError
from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.raft.config import QuorumConfig
from pyspark_kafka.broker.raft.quorum_state import ElectionState, QuorumStateStore
from pyspark_kafka.broker.raft.raft_apis import RaftApis, ReplicaProgress, Role, _now_ms, metadata_partition
from pyspark_kafka.broker.raft.storage import METADATA_PARTITION, METADATA_TOPIC, MetadataLogStorage
from pyspark_kafka.broker.raft.transport import RaftChannel, RaftServer

log = get_logger(__name__)

FETCH_MAX_WAIT_MS = 500  # Kafka's KafkaRaftClient fetch max wait
FETCH_MAX_BYTES = 8 * 1024 * 1024  # Kafka's KafkaRaftClient MAX_FETCH_SIZE_BYTES
CHECK_QUORUM_FACTOR = 1.5  # Kafka: the leader resigns after 1.5 x fetch timeout without a majority fetching
#: Observer leader discovery: longest wait (s) of one round for the voters' answers before asking again the
#: voters that answered (a silent voter's question stays in flight until its request timeout).
DISCOVERY_ROUND_S = 0.2


def _consume(task: asyncio.Future) -> None:
    """Read a finished request task's outcome, so that asyncio never reports it as an exception nobody retrieved;
    the outcome itself is dropped (the caller has stopped waiting for it)."""
    if not task.cancelled():
        task.exception()


def _current_leader(task: asyncio.Future) -> Any | None:
    """The ``CurrentLeader`` of a finished Fetch request task, or None when the voter did not answer one
    (refused, timed out, no metadata partition); the task's outcome is read either way."""
    _consume(task)
    if task.cancelled() or task.exception() is not None:
        return None
    try:
        return metadata_partition(task.result()).current_leader
    except ValueError:
        return None


class RaftMetadataLog(RaftApis):
    """The replicated metadata log of one node (voter or observer); see the module docstring.

    ``RaftMetadataLog(data_dir, config)``: ``config`` uses Kafka's names (``node.id``,
    ``controller.quorum.voters`` = ``id@host:port,...``, ``controller.quorum.*.ms``; see
    :mod:`~pyspark_kafka.broker.raft.config`) or is a :class:`QuorumConfig`; a voter serves the
    controller listener on its own ``controller.quorum.voters`` address. The log lives in
    ``<data_dir>/__cluster_metadata-0/``; ``snapshots`` (a
    :class:`~pyspark_kafka.broker.controller.snapshots.MetadataSnapshots` over that directory, or None for none) writes
    and loads metadata snapshots. ``replayed_records`` counts the records read from the log for delivery.
    Raises QuorumConfigError for bad settings, ValueError for a corrupt ``quorum-state`` file, KafkaStorageError
    when the log cannot be loaded.
    """

    def __init__(self, data_dir: str | Path, config: dict[str, str] | QuorumConfig, snapshots=None) -> None:
        self.config = config if isinstance(config, QuorumConfig) else QuorumConfig.from_config(config)
        self.node_id = self.config.node_id
        self.voters = dict(self.config.voters)
        self.data_dir = Path(data_dir)
        # Kafka's cluster id comes from `kafka-storage format`; here one id per voter set.
        raw = uuid.uuid5(uuid.NAMESPACE_URL, ",".join(f"{v}@{h}:{p}" for v, (h, p) in sorted(self.voters.items())))
        self.cluster_id = base64.urlsafe_b64encode(raw.bytes).decode().rstrip("=")
        self.storage: MetadataLogStorage | None = None
        self.store = QuorumStateStore(self.data_dir / f"{METADATA_TOPIC}-{METADATA_PARTITION}", list(self.voters))
        self.epoch = 0
        self.role = Role.UNATTACHED
        self.leader_id = -1
        self.voted_id = -1
        self.high_watermark = 0
        self._listeners: list[list] = []  # [callback, next offset]
        self._version = 0  # bumped on every state transition
        self._changed = asyncio.Event()
        self._progress_event = asyncio.Event()
        self._timer_event = asyncio.Event()
        self._election_deadline = 0.0
        self._last_fetch_ok = 0.0
        self._epoch_start_offset = 0
        self._replicas: dict[int, ReplicaProgress] = {}
        self._observers: dict[int, ReplicaProgress] = {}
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._channels: dict[tuple[int, str], RaftChannel] = {}
        self._unreachable: tuple[int, int] = (-1, -1)  # observer: (leader, epoch) whose fetches timed out
        self._asking: dict[int, asyncio.Future] = {}  # observer: voter -> discovery Fetch in flight or unread
        self._server: RaftServer | None = None
        self._task: asyncio.Task | None = None
        self._started = False
        self.snapshots = snapshots
        self._snapshot_start = 0  # end offset of the snapshot loaded on start (0: none)
        self.replayed_records = 0

    # -- the MetadataLog seam ------------------------------------------------------------------
    async def start(self) -> None:
        """Load the log and the quorum state, serve the controller listener (voters), start the Raft loop.

        Raises OSError when a voter's controller address cannot be bound.
        """
        self.storage = MetadataLogStorage(self.data_dir)
        if self.snapshots is not None:
            snapshot = self.snapshots.load(max_end_offset=self.storage.end_offset)
            self._snapshot_start = 0 if snapshot is None else snapshot.end_offset
            self.high_watermark = max(self.high_watermark, self._snapshot_start)  # a snapshot holds committed records
            self._listeners.insert(0, [self.snapshots.apply, self._snapshot_start])
        state = self.store.read()
        self.epoch, self.voted_id = state.epoch, state.voted_id
        # Kafka restarts a replica as unattached (or voted) in its stored epoch; a stored leader
        # is trusted again only when it (re)announces itself, as KafkaRaftClient does for a resigned leader.
        self.leader_id = state.leader_id if state.leader_id != self.node_id else -1
        self.role = Role.FOLLOWER if self.leader_id >= 0 else Role.UNATTACHED
        self._changed = asyncio.Event()
        self._progress_event = asyncio.Event()
        self._timer_event = asyncio.Event()
        self._reset_election_timer()
        self._last_fetch_ok = time.monotonic()
        if self.is_voter():
            host, port = self.voters[self.node_id]
            self._server = RaftServer(self.handle, host, port)
            await self._server.start()
        self._started = True
        self._deliver()  # the loaded snapshot (committed) to the listeners already subscribed
        log.info("controller quorum: node %d starts as %s in epoch %d (log end offset %d, %s)", self.node_id,
                 self.role.value, self.epoch, self.storage.end_offset, "voter" if self.is_voter() else "observer")
        self._task = asyncio.create_task(self._run(), name=f"raft-{self.node_id}")

    async def stop(self) -> None:
        """Stop: a leader first resigns with EndQuorumEpoch (bounded by the request timeout); close the log."""
        if not self._started:
            return
        self._started = False
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=10)
        if self.role is Role.LEADER:
            # Kafka's Resigned state: answer no fetch as leader any more (a follower's probe must not find
            # us), then EndQuorumEpoch so the others elect at once.
            self._transition(Role.UNATTACHED, self.epoch, -1, self.voted_id)
            if len(self.voters) > 1:
                await self._send_end_quorum_epoch()
        self._fail_waiters("the controller is shutting down")
        if self._server is not None:
            await self._server.stop()
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        if self.storage is not None:
            self.storage.close()

    def leader(self) -> tuple[int | None, int]:
        """(id of the quorum leader = the active controller, or None while unknown; leader epoch)."""
        return (self.leader_id if self.leader_id >= 0 else None), self.epoch

    @property
    def epoch_start_offset(self) -> int:
        """Leader only: the offset of this epoch's LeaderChange batch (-1 on a non-leader). Once the high
        watermark passes it, every record of older epochs is committed (the controller's replay is complete)."""
        return self._epoch_start_offset if self.role is Role.LEADER else -1

    def is_voter(self) -> bool:
        """True when ``node.id`` is one of ``controller.quorum.voters``."""
        return self.node_id in self.voters

    def committed_offset(self) -> int:
        """The high watermark as known by this node (next offset to be committed)."""
        return self.high_watermark

    async def append(self, records: list[bytes]) -> int:
        """Leader only: append ``records`` as one batch, wait until a majority of voters has them; return
        the last record's offset.

        Raises NotControllerError (NOT_CONTROLLER, 41) on a non-leader, or when the leadership is
        lost before the batch is committed (the batch may then be truncated, or committed by the
        next leader: the caller re-reads the log to know). ValueError for an empty list.
        """
        if self.role is not Role.LEADER or self.storage is None:
            raise NotControllerError(self._not_leader_message())
        _, last = self.storage.append_as_leader(list(records), self.epoch)
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((last, future))
        self._update_high_watermark()
        self._notify_progress()
        return await future

    def subscribe(self, listener: Callable[[int, bytes], None]) -> None:
        """Call ``listener(offset, record)`` for every committed record in offset order from offset 0
        (records already committed are replayed at once). With a snapshot loaded on start, the listener gets the
        snapshot's records first (each at the snapshot's ``end_offset - 1``), then the records from ``end_offset``."""
        self._listeners.append([listener, 0])
        if self._started:
            self._deliver()

    # -- state transitions ---------------------------------------------------------------------
    def _not_leader_message(self) -> str:
        leader = f"node {self.leader_id}" if self.leader_id >= 0 else "unknown"
        return (f"node {self.node_id} is not the controller quorum's leader (leader: {leader}, epoch {self.epoch}): "
                f"send metadata writes to the active controller")

    def _transition(self, role: Role, epoch: int, leader_id: int, voted_id: int) -> None:
        was_leader = self.role is Role.LEADER
        if (epoch, leader_id, voted_id) != (self.epoch, self.leader_id, self.voted_id):
            self.store.write(ElectionState(epoch, leader_id, voted_id))  # durable before acting on it
        log.info("controller quorum: node %d %s epoch %d -> %s epoch %d (leader %d, voted %d)", self.node_id,
                 self.role.value, self.epoch, role.value, epoch, leader_id, voted_id)
        self.role, self.epoch, self.leader_id, self.voted_id = role, epoch, leader_id, voted_id
        self._version += 1
        if was_leader and role is not Role.LEADER:
            self._fail_waiters(self._not_leader_message())
        self._changed.set()
        self._changed = asyncio.Event()
        self._notify_progress()

    def _observe_epoch(self, epoch: int, leader_id: int) -> bool:
        """React to ``(epoch, leader_id)`` seen in a message; True when the state changed."""
        if epoch > self.epoch:
            if leader_id >= 0 and leader_id != self.node_id:
                self._become_follower(epoch, leader_id)
            else:
                self._transition(Role.UNATTACHED, epoch, -1, -1)
                self._reset_election_timer()
            return True
        if epoch == self.epoch and leader_id >= 0 and leader_id != self.node_id and self.role in (
                Role.UNATTACHED, Role.CANDIDATE):
            self._become_follower(epoch, leader_id)
            return True
        return False

    def _become_follower(self, epoch: int, leader_id: int) -> None:
        voted = self.voted_id if epoch == self.epoch else -1
        self._transition(Role.FOLLOWER, epoch, leader_id, voted)
        self._last_fetch_ok = time.monotonic()

    def _reset_election_timer(self, base_s: float | None = None) -> None:
        timeout = self.config.election_timeout_ms / 1000
        self._election_deadline = time.monotonic() + (base_s if base_s is not None else
                                                      random.uniform(timeout, 2 * timeout))
        self._timer_event.set()  # an unattached voter waiting for the old deadline looks again
        self._timer_event = asyncio.Event()

    def _fail_waiters(self, message: str) -> None:
        waiters, self._waiters = self._waiters, []
        for _, future in waiters:
            if not future.done():
                future.set_exception(NotControllerError(message))

    def _notify_progress(self) -> None:
        self._progress_event.set()
        self._progress_event = asyncio.Event()

    def _majority(self) -> int:
        return len(self.voters) // 2 + 1

    # -- commit and delivery -------------------------------------------------------------------
    def _update_high_watermark(self) -> None:
        """Leader: the offset a majority of voters have, once it covers this epoch's first batch."""
        if self.role is not Role.LEADER:
            return
        offsets = sorted((self.storage.end_offset if v == self.node_id else self._replicas.get(v, ReplicaProgress()).end_offset
                          for v in self.voters), reverse=True)
        majority_offset = offsets[self._majority() - 1]
        if majority_offset > self._epoch_start_offset and majority_offset > self.high_watermark:
            self._set_high_watermark(majority_offset)

    def _set_high_watermark(self, offset: int) -> None:
        if offset <= self.high_watermark:
            return
        self.high_watermark = offset
        still = []
        for last, future in self._waiters:
            if last < offset:
                if not future.done():
                    future.set_result(last)
            else:
                still.append((last, future))
        self._waiters = still
        self._deliver()
        self._notify_progress()

    def _deliver(self) -> None:
        """Committed records below the high watermark to every listener not yet past them (each log record is
        read once for all listeners); a listener starting before the loaded snapshot gets the snapshot first."""
        hw = self.high_watermark
        pending = [entry for entry in self._listeners if entry[1] < hw]
        if not pending:
            return
        snapshot = self.snapshots.loaded if self.snapshots is not None else None
        for entry in pending:
            if snapshot is not None and entry[1] < snapshot.end_offset:
                for record in snapshot.records:
                    self._call(entry[0], snapshot.end_offset - 1, record)
                entry[1] = snapshot.end_offset
        start = min(entry[1] for entry in pending)
        if start < hw:
            for offset, record in self.storage.records(start, hw):
                self.replayed_records += 1
                for entry in pending:
                    if entry[1] <= offset:
                        self._call(entry[0], offset, record)
        for entry in pending:
            entry[1] = hw
        if self.snapshots is not None:
            self.snapshots.maybe_write(self.storage.epoch_at(hw - 1))

    @staticmethod
    def _call(callback: Callable[[int, bytes], None], offset: int, record: bytes) -> None:
        try:
            callback(offset, record)
        except Exception:
            log.exception("controller quorum: a metadata log listener failed on offset %d", offset)

    # -- the driver ----------------------------------------------------------------------------
    async def _run(self) -> None:
        while self._started:  # also ends the loop should a wait_for swallow stop()'s cancellation (Python 3.11)
            try:
                if self.role is Role.LEADER:
                    await self._lead()
                elif self.role is Role.CANDIDATE:
                    await self._campaign()
                else:
                    await self._follow()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller quorum: node %d: unexpected error in state %s", self.node_id,
                              self.role.value)
                await asyncio.sleep(0.1)

    async def _wait_change(self, timeout_s: float, or_timer: bool = False) -> None:
        """Wait up to ``timeout_s`` for a state transition (or, with ``or_timer``, a new election deadline)."""
        events = [self._changed] + ([self._timer_event] if or_timer else [])
        waiters = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waiters, timeout=max(0.0, timeout_s), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def _channel(self, node: int, purpose: str) -> RaftChannel:
        key = (node, purpose)
        if key not in self._channels:
            host, port = self.voters[node]
            self._channels[key] = RaftChannel(host, port, f"raft-client-{self.node_id}")
        return self._channels[key]

    def _become_candidate(self) -> None:
        self._transition(Role.CANDIDATE, self.epoch + 1, -1, self.node_id)

    async def _follow(self) -> None:
        version = self._version
        if self.role is Role.UNATTACHED or self.leader_id < 0:
            if self.is_voter():
                if len(self.voters) == 1:
                    self._become_candidate()
                    return
                await self._wait_change(self._election_deadline - time.monotonic(), or_timer=True)
                if self._version == version and time.monotonic() >= self._election_deadline:
                    if not await self._probe_leader():
                        self._become_candidate()
                return
            await self._discover_leader()
            return
        # the request ends by the fetch timeout at the latest, so the timeout is acted on when it expires (Kafka
        # checks its fetch timer on every poll) rather than up to a request timeout later
        fetch_deadline = self._last_fetch_ok + self.config.fetch_timeout_ms / 1000
        request_s = min(self.config.request_timeout_ms / 1000, max(0.05, fetch_deadline - time.monotonic()))
        try:
            response = await self._channel(self.leader_id, "fetch").request(self._fetch_request(), request_s)
        except ConnectionError as exc:
            log.debug("controller quorum: node %d: fetch from leader %d failed: %s", self.node_id, self.leader_id, exc)
            await self._wait_change(0.05)
            response = None
        if self._version != version:
            return
        if response is not None:
            self._on_fetch_response(response)
        if self._version == version and time.monotonic() - self._last_fetch_ok >= self.config.fetch_timeout_ms / 1000:
            if self.is_voter():
                log.info("controller quorum: node %d: no fetch from leader %d for %d ms, starting an election",
                         self.node_id, self.leader_id, self.config.fetch_timeout_ms)
                self._become_candidate()
            else:
                log.info("controller quorum: observer %d: no fetch from leader %d for %d ms (epoch %d), asking the "
                         "voters", self.node_id, self.leader_id, self.config.fetch_timeout_ms, self.epoch)
                self._unreachable = (self.leader_id, self.epoch)
                self._transition(Role.UNATTACHED, self.epoch, -1, -1)

    async def _probe_leader(self) -> bool:
        """Before standing for election: does a live leader exist? True when this node now follows one.

        Each other voter gets a Fetch with no wait; only a voter that answers *as the leader*
        (its ``CurrentLeader`` names itself, epoch at least ours) counts, so a voter that still
        believes in a dead leader cannot keep us from electing. This spares the quorum an election
        when a resigned or restarted voter comes back while a leader is alive (what KIP-996's
        pre-vote achieves; a cheaper check, not its protocol).
        """
        version = self._version
        others = [v for v in self.voters if v != self.node_id]
        timeout = min(self.config.request_timeout_ms, self.config.election_timeout_ms) / 2000
        results = await asyncio.gather(*(self._channel(v, "probe").request(self._fetch_request(max_wait_ms=0), timeout)
                                         for v in others), return_exceptions=True)
        if self._version != version:
            return True
        for voter, result in zip(others, results):
            if isinstance(result, BaseException):
                continue
            try:
                leader = metadata_partition(result).current_leader
            except ValueError:
                continue
            if leader.leader_id == voter and leader.leader_epoch >= self.epoch:
                self._become_follower(leader.leader_epoch, voter)
                return True
        return False

    async def _discover_leader(self) -> None:
        """Observer: ask every voter (Fetch, no wait) who leads and follow the newest leader named (KIP-595: a
        broker learns the leader from the quorum's ``CurrentLeader``).

        Asking one random voter waited out the request timeout whenever it picked a silent one (a paused old
        leader): a broker then learned of the new leader 2-4 s after the election (issue 25). So every voter is
        asked at once; a voter whose question is still in flight (a paused one: up to the request timeout) is not
        asked again until it answers or times out, and a round ends after :data:`DISCOVERY_ROUND_S` so the others
        are asked again meanwhile. Questions are never cancelled mid-answer on a shared channel.

        Which answer wins (Kafka's ``KafkaRaftClient.maybeTransition``: a higher epoch wins, an answer in an epoch
        below ours changes nothing): the highest epoch among the answers naming a leader, at least our epoch;
        but an answer that names the leader whose fetches just timed out, in the same epoch, counts only when
        that leader gives it itself. A lagging voter still names the paused old leader: following it again had
        the broker wait a whole fetch timeout more on a silent controller while the new controller's session for
        it ran out (issue #38: brokers fenced in 5 of 32 pauses of the active controller; Kafka's observer keeps
        asking the other voters after a fetch timeout to its leader). An answer in a higher epoch without a
        leader (a candidate) moves this observer to that epoch, so older answers no longer count.

        Every answer is read (a refused request too: asyncio otherwise reports "Task exception was never
        retrieved" at ERROR when the task is collected, issue #38)."""
        version = self._version
        timeout = self.config.request_timeout_ms / 1000
        # answers that came in between rounds are dropped (maybe old news); questions in flight are kept
        self._asking = {voter: task for voter, task in self._asking.items() if not task.done()}
        for voter in sorted(self.voters):
            if voter not in self._asking:
                task = asyncio.ensure_future(self._channel(voter, "fetch").request(
                    self._fetch_request(max_wait_ms=0), timeout))
                task.add_done_callback(_consume)  # read even if no round reads it (stopped meanwhile)
                self._asking[voter] = task
        loop = asyncio.get_running_loop()
        round_end = loop.time() + DISCOVERY_ROUND_S
        while self._asking:
            finished = {voter: task for voter, task in self._asking.items() if task.done()}
            if not finished:
                remaining = round_end - loop.time()
                if remaining <= 0:
                    break
                await asyncio.wait(list(self._asking.values()), timeout=remaining,
                                   return_when=asyncio.FIRST_COMPLETED)
                continue
            for voter in finished:
                del self._asking[voter]
            if self._version != version:
                return
            answers = [(voter, leader) for voter, leader in
                       ((voter, _current_leader(task)) for voter, task in finished.items()) if leader is not None]
            if self._follow_newest(answers):
                return
        await self._wait_change(0.1)

    def _follow_newest(self, answers: list[tuple[int, Any]]) -> bool:
        """Observer: act on ``(voter, CurrentLeader)`` answers (see :meth:`_discover_leader`); True when the
        state changed (following a leader, or a higher epoch without one)."""
        usable = [(leader.leader_epoch, voter, leader.leader_id) for voter, leader in answers
                  if leader.leader_id >= 0 and leader.leader_epoch >= self.epoch
                  and ((leader.leader_id, leader.leader_epoch) != self._unreachable or voter == leader.leader_id)]
        if usable:
            epoch, _, leader_id = max(usable)
            self._become_follower(epoch, leader_id)
            return True
        newest = max((leader.leader_epoch for _, leader in answers), default=-1)
        if newest > self.epoch:
            self._transition(Role.UNATTACHED, newest, -1, -1)
            return True
        return False

    def _fetch_request(self, max_wait_ms: int | None = None) -> Any:
        wait = min(FETCH_MAX_WAIT_MS, self.config.fetch_timeout_ms // 2) if max_wait_ms is None else max_wait_ms
        return fetch_v12.FetchRequest(
            replica_id=self.node_id, max_wait=datetime.timedelta(milliseconds=wait), min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            topics=(fetch_v12.FetchTopic(topic=METADATA_TOPIC, partitions=(fetch_v12.FetchPartition(
                partition=METADATA_PARTITION, current_leader_epoch=self.epoch, fetch_offset=self.storage.end_offset,
                last_fetched_epoch=self.storage.last_epoch, log_start_offset=0,
                partition_max_bytes=FETCH_MAX_BYTES),)),),
            forgotten_topics_data=())

    def _on_fetch_response(self, response: Any) -> None:
        """Follower/observer: apply a Fetch response from the leader (KafkaRaftClient.handleFetchResponse)."""
        try:
            p = metadata_partition(response)
        except ValueError:
            return
        leader = p.current_leader
        if self._observe_epoch(leader.leader_epoch, leader.leader_id):
            return
        error = response.error_code or p.error_code
        if error != ErrorCode.none:
            if error == ErrorCode.not_leader_or_follower and leader.leader_epoch == self.epoch \
                    and leader.leader_id != self.leader_id:
                # Our leader resigned in this epoch (check-quorum or stop): no leader until the next election.
                self._transition(Role.UNATTACHED, self.epoch, -1, self.voted_id)
                self._reset_election_timer()
            return
        self._last_fetch_ok = time.monotonic()
        if p.diverging_epoch.epoch >= 0 or p.diverging_epoch.end_offset >= 0:
            epoch, end = self.storage.end_offset_for_epoch(p.diverging_epoch.epoch)
            target = max(0, min(p.diverging_epoch.end_offset, end))
            if target < self.high_watermark:
                log.error("controller quorum: node %d asked to truncate to %d below its high watermark %d",
                          self.node_id, target, self.high_watermark)
                target = self.high_watermark
            log.info("controller quorum: node %d truncates its log from %d to %d (leader %d diverges at epoch %d)",
                     self.node_id, self.storage.end_offset, target, self.leader_id, p.diverging_epoch.epoch)
            self.storage.truncate_to(target)
            return
        if p.records:
            try:
                self.storage.append_as_follower(bytes(p.records))
            except CorruptRecordError as exc:
                log.warning("controller quorum: node %d refused fetched records: %s", self.node_id, exc)
                return
        self._set_high_watermark(min(p.high_watermark, self.storage.end_offset))

    async def _campaign(self) -> None:
        """Candidate: Vote requests to every other voter; a majority makes this node the leader."""
        version = self._version
        granted = {self.node_id}
        if len(granted) >= self._majority():
            self._become_leader(granted)
            return
        request = vote_v0.VoteRequest(topics=(vote_v0.TopicData(topic_name=METADATA_TOPIC, partitions=(
            vote_v0.PartitionData(partition_index=METADATA_PARTITION, replica_epoch=self.epoch,
                                  replica_id=self.node_id, last_offset_epoch=self.storage.last_epoch,
                                  last_offset=self.storage.end_offset),)),))
        timeout = self.config.election_timeout_ms / 1000
        deadline = time.monotonic() + random.uniform(timeout, 2 * timeout)
        tasks = {asyncio.ensure_future(self._channel(v, "vote").request(request, self.config.request_timeout_ms / 1000)): v
                 for v in self.voters if v != self.node_id}
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            while tasks and self._version == version:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                done, _ = await asyncio.wait([*tasks, changed], timeout=remaining,
                                             return_when=asyncio.FIRST_COMPLETED)
                if changed in done or self._version != version:
                    return
                for task in done:
                    voter = tasks.pop(task)
                    if task.exception() is not None:
                        continue
                    try:
                        p = metadata_partition(task.result())
                    except ValueError:
                        continue
                    if self._observe_epoch(p.leader_epoch, p.leader_id) or self._version != version:
                        return
                    if p.error_code == ErrorCode.none and p.vote_granted and p.leader_epoch == self.epoch:
                        granted.add(voter)
                if len(granted) >= self._majority():
                    self._become_leader(granted)
                    return
        finally:
            for task in [*tasks, changed]:
                if task.done():
                    _consume(task)  # a vote answered (or refused) in the round that ended the campaign
                else:
                    task.cancel()
        if self._version != version:
            return
        # Lost or split vote: back off, then stand again with a higher epoch (Kafka's election backoff).
        await self._wait_change(max(0.0, deadline - time.monotonic())
                                + random.uniform(0, self.config.election_backoff_max_ms / 1000))
        if self._version == version:
            self._become_candidate()

    def _become_leader(self, granted: set) -> None:
        self._transition(Role.LEADER, self.epoch, self.node_id, self.node_id)
        self._replicas = {v: ReplicaProgress() for v in self.voters if v != self.node_id}
        self._observers = {}
        self._epoch_start_offset = self.storage.end_offset
        self.storage.append_leader_change(self.epoch, self.node_id, sorted(self.voters), sorted(granted))
        self._update_high_watermark()

    async def _lead(self) -> None:
        version = self._version
        started = time.monotonic()
        check_s = CHECK_QUORUM_FACTOR * self.config.fetch_timeout_ms / 1000
        while self._version == version and self._started:
            now = time.monotonic()
            silent = [v for v, r in self._replicas.items() if r.last_fetch_mono < started]
            if silent:
                await self._send_begin_quorum_epoch(silent)
            if self._version != version:
                return
            fetched = 1 + sum(1 for r in self._replicas.values() if now - r.last_fetch_mono <= check_s)
            if fetched < self._majority() and now - started > check_s:
                log.warning("controller quorum: leader %d resigns in epoch %d: no majority of voters fetched for "
                            "%d ms (check-quorum)", self.node_id, self.epoch, int(check_s * 1000))
                self._transition(Role.UNATTACHED, self.epoch, -1, self.voted_id)
                self._reset_election_timer()
                return
            await self._wait_change(min(0.25, self.config.fetch_timeout_ms / 4000))

    async def _send_begin_quorum_epoch(self, voters: list[int]) -> None:
        request = bqe.BeginQuorumEpochRequest(topics=(bqe.TopicData(topic_name=METADATA_TOPIC, partitions=(
            bqe.PartitionData(partition_index=METADATA_PARTITION, leader_id=self.node_id, leader_epoch=self.epoch),)),))
        version = self._version
        results = await asyncio.gather(*(self._channel(v, "control").request(request, min(
            0.5, self.config.request_timeout_ms / 1000)) for v in voters), return_exceptions=True)
        if self._version != version:
            return
        for result in results:
            if isinstance(result, BaseException):
                continue
            try:
                p = metadata_partition(result)
            except ValueError:
                continue
            if self._observe_epoch(p.leader_epoch, p.leader_id):
                return

    async def _send_end_quorum_epoch(self) -> None:
        others = sorted((v for v in self.voters if v != self.node_id),
                        key=lambda v: -self._replicas.get(v, ReplicaProgress()).end_offset)
        request = eqe.EndQuorumEpochRequest(topics=(eqe.TopicData(topic_name=METADATA_TOPIC, partitions=(
            eqe.PartitionData(partition_index=METADATA_PARTITION, leader_id=self.node_id, leader_epoch=self.epoch,
                              preferred_successors=tuple(others)),)),))
        await asyncio.gather(*(self._channel(v, "control").request(request, min(
            0.5, self.config.request_timeout_ms / 1000)) for v in others), return_exceptions=True)
