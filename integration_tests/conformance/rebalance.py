"""Incremental cooperative rebalancing (KIP-429) on the classic protocol: group members of three
clients that log what they own, and the checks of a run of joins and leaves.

A member (:class:`Member`) subscribes to one topic with the client's ``cooperative-sticky``
assignor and keeps three logs: ``events`` ``[(wall-clock ms, "assigned" | "revoked" | "lost",
{partition, ...}), ...]`` from its rebalance callbacks (incremental under the cooperative
protocol: only the partitions added or taken away), ``records`` ``[(partition, offset), ...]``
every record it consumed, and its current assignment. Before a revoke is logged the member
commits, synchronously, the offsets after what it consumed of the revoked partitions; leaving,
it commits what it owns and closes (LeaveGroup). So the next owner of a partition resumes where
the previous one stopped: every record is consumed once.

- :class:`ConfluentMember`: librdkafka through confluent-kafka (``partition.assignment.strategy=
  cooperative-sticky``), polled by its own thread.
- :class:`KafkaPythonMember`: kafka-python's ``CooperativeStickyAssignor``, polled by its own thread.
- Kafka's Java client (``CooperativeStickyAssignor``): one JVM per member through the Java
  driver's ``group_member`` command (its events and records are printed by the JVM).

:func:`overlaps` checks the event logs for a partition owned by two members at once (the
cooperative protocol revokes a partition, in a first rebalance, before assigning it to another
member in a second one); :func:`converged` checks one moment's assignments.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from typing import Iterator

WAIT_S = 40.0
"""Bound of a round's convergence (joins and leaves, two rebalances each under KIP-429)."""
SESSION_MS = 10_000
HEARTBEAT_MS = 500
LEAVE_COMMIT_ATTEMPTS = 20
"""Bound of a leaving member's commit attempts (each after a poll) while the group rebalances."""


def _rebalance_error(e: BaseException) -> bool:
    """Whether a client's commit error says the group is rebalancing (Kafka error codes 22, 27)."""
    text = repr(e)
    return any(name in text for name in ("ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS", "RebalanceInProgress",
                                         "IllegalGeneration"))


def now_ms() -> int:
    """Wall-clock ms, the clock every member (and the JVMs' ``System.currentTimeMillis``) logs with."""
    return int(time.time() * 1000)


class Member:
    """One group member of one client; :meth:`assignment` is what it owns now."""

    def __init__(self) -> None:
        self.events: list[tuple[int, str, set[int]]] = []
        self.records: list[tuple[int, int]] = []
        self._owned: set[int] = set()
        self._lock = threading.Lock()

    def assignment(self) -> set[int]:
        with self._lock:
            return set(self._owned)

    def _event(self, kind: str, partitions: set[int]) -> None:
        with self._lock:
            self.events.append((now_ms(), kind, set(partitions)))
            if kind == "assigned":
                self._owned |= partitions
            else:
                self._owned -= partitions


class _ThreadMember(Member):
    """A member polled by its own thread until :meth:`stop`; subclasses make the consumer and
    implement :meth:`_poll`, :meth:`_commit` and :meth:`_close`."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__()
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self._next: dict[int, int] = {}  # partition -> offset after the last consumed record
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"member-{group}")
        self._thread.start()

    def _consumed(self, partition: int, offset: int) -> None:
        self.records.append((partition, offset))
        self._next[partition] = offset + 1

    def _revoke(self, partitions: set[int]) -> None:
        done = {p: self._next[p] for p in partitions if p in self._next}
        if done:
            self._commit(done)  # the offsets are forgotten only once committed: a failed commit is retried
        for p in done:
            self._next.pop(p, None)
        self._event("revoked", partitions)

    def _leave(self) -> None:
        """Commit what it consumed before the close (which revokes). A commit that meets a rebalance
        another member's leave began (ILLEGAL_GENERATION: the member's generation moved on while the
        commit was in flight; REBALANCE_IN_PROGRESS) is retried after a poll, as Kafka's consumer
        documents ("complete the rebalance by calling poll() and then retry"; the Java client turns
        that ILLEGAL_GENERATION into RebalanceInProgressException). Bounded: LEAVE_COMMIT_ATTEMPTS."""
        for attempt in range(LEAVE_COMMIT_ATTEMPTS):
            try:
                self._revoke(self.assignment())
                return
            except Exception as e:  # noqa: BLE001 - the client's own exception types differ
                if attempt == LEAVE_COMMIT_ATTEMPTS - 1 or not _rebalance_error(e):
                    raise
            try:
                self._poll()
            except Exception as e:  # noqa: BLE001 - a revocation's commit inside the poll may meet it too
                if not _rebalance_error(e):
                    raise

    def _run(self) -> None:
        try:
            self._open()
            deadline = time.monotonic() + 10 * WAIT_S
            while not self._stop.is_set() and time.monotonic() < deadline:
                self._poll()
            self._leave()
            self._close()
        except BaseException as e:  # reported by assignment()/stop()
            self.error = e

    def assignment(self) -> set[int]:
        assert self.error is None, f"{type(self).__name__} failed: {self.error!r}"
        return super().assignment()

    def stop(self) -> None:
        """Commit, leave the group, close; wait for it (bounded)."""
        self._stop.set()
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), f"{type(self).__name__} did not close in {WAIT_S:g} s"
        assert self.error is None, f"{type(self).__name__} failed: {self.error!r}"

    def _open(self) -> None:
        raise NotImplementedError

    def _poll(self) -> None:
        raise NotImplementedError

    def _commit(self, offsets: dict[int, int]) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError


class ConfluentMember(_ThreadMember):
    """librdkafka's cooperative-sticky assignor (confluent-kafka ``Consumer``)."""

    def _open(self) -> None:
        from confluent_kafka import Consumer

        self._c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                            "partition.assignment.strategy": "cooperative-sticky", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_MS,
                            "heartbeat.interval.ms": HEARTBEAT_MS})
        self._c.subscribe([self.topic], on_assign=lambda c, ps: self._event("assigned", {p.partition for p in ps}),
                          on_revoke=lambda c, ps: self._revoke({p.partition for p in ps}),
                          on_lost=lambda c, ps: self._event("lost", {p.partition for p in ps}))

    def _poll(self) -> None:
        m = self._c.poll(0.1)
        if m is not None and m.error() is None:
            self._consumed(m.partition(), m.offset())

    def _commit(self, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        self._c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()], asynchronous=False)

    def _close(self) -> None:
        self._c.close()


class KafkaPythonMember(_ThreadMember):
    """kafka-python's ``CooperativeStickyAssignor``."""

    def _open(self) -> None:
        from kafka import AsyncConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor

        member = self

        class Listener(AsyncConsumerRebalanceListener):
            # kafka-python 3 runs the listener on its IO loop: a blocking commit() there raises,
            # so the commit is the coordinator's awaitable synchronous commit
            async def on_partitions_revoked(self, revoked):
                partitions = {tp.partition for tp in revoked}
                done = {p: member._next.pop(p) for p in partitions if p in member._next}
                if done:
                    await member._c._coordinator._commit_offsets_sync_async(
                        {TopicPartition(member.topic, p): OffsetAndMetadata(o, "", -1) for p, o in done.items()})
                member._event("revoked", partitions)

            async def on_partitions_assigned(self, assigned):
                member._event("assigned", {tp.partition for tp in assigned})

            async def on_partitions_lost(self, lost):
                member._event("lost", {tp.partition for tp in lost})

        self._c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, enable_auto_commit=False,
                                auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                                heartbeat_interval_ms=HEARTBEAT_MS,
                                partition_assignment_strategy=[CooperativeStickyAssignor])
        self._c.subscribe([self.topic], listener=Listener())

    def _poll(self) -> None:
        for records in self._c.poll(timeout_ms=100).values():
            for r in records:
                self._consumed(r.partition, r.offset)

    def _commit(self, offsets: dict[int, int]) -> None:
        from kafka import OffsetAndMetadata, TopicPartition

        self._c.commit({TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})

    def _close(self) -> None:
        self._c.close()


@contextlib.contextmanager
def _thread_member(cls, bootstrap: str, topic: str, group: str) -> Iterator[Member]:
    member = cls(bootstrap, topic, group)
    try:
        yield member
    finally:
        if member._thread.is_alive():
            member.stop()


@contextlib.contextmanager
def _java_member(bootstrap: str, topic: str, group: str) -> Iterator[Member]:
    from integration_tests.conformance.drivers.java_client import JavaClientDriver

    with JavaClientDriver(bootstrap).group_member(topic, group, "cooperative-sticky") as member:
        member.stop = member.proc.stdin.close  # the JVM commits, leaves and exits
        yield member


CLIENTS = {
    "librdkafka": lambda b, t, g: _thread_member(ConfluentMember, b, t, g),
    "kafka-python": lambda b, t, g: _thread_member(KafkaPythonMember, b, t, g),
    "java": _java_member,
}
"""``{client: (bootstrap, topic, group) -> context manager of a Member}``."""


def new_group() -> str:
    return f"cooperative-{uuid.uuid4().hex[:8]}"


def converged(members: list[Member], partitions: int) -> bool:
    """Every partition owned by exactly one of ``members`` and the counts balanced (they differ
    by one at most, so with at least as many partitions as members each member owns one)."""
    owned = [m.assignment() for m in members]
    counts = [len(o) for o in owned]
    flat = [p for o in owned for p in o]
    return (sorted(flat) == list(range(partitions)) and max(counts) - min(counts) <= 1)


def incremental_revocations(members: list[Member]) -> int:
    """How many "revoked" events left the member owning partitions still: the cooperative
    protocol takes away only what moves (an eager rebalance revokes everything)."""
    count = 0
    for m in members:
        owned: set[int] = set()
        for _, kind, parts in m.events:
            if kind == "assigned":
                owned |= parts
            else:
                owned -= parts
                count += kind == "revoked" and bool(parts) and bool(owned)
    return count


def overlaps(members: list[Member]) -> list[str]:
    """Partitions that two members owned at the same time according to their event logs (a
    partition is owned from its "assigned" event until its "revoked"/"lost" event, or on; a
    member that left owns nothing after its last event). Empty when the protocol held."""
    intervals: dict[int, list[tuple[int, int, int]]] = {}
    for i, m in enumerate(members):
        start: dict[int, int] = {}
        for ms, kind, parts in m.events:
            for p in parts:
                if kind == "assigned":
                    start[p] = ms
                elif p in start:
                    intervals.setdefault(p, []).append((start.pop(p), ms, i))
        for p, ms in start.items():
            intervals.setdefault(p, []).append((ms, 1 << 62, i))
    found = []
    for p, spans in sorted(intervals.items()):
        spans.sort()
        for (s1, e1, a), (s2, e2, b) in zip(spans, spans[1:]):
            if s2 < e1:
                found.append(f"partition {p}: member {a} owned it until {e1}, member {b} from {s2}")
    return found
