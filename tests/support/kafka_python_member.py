"""A kafka-python group member polled without pause by its own thread (:class:`PolledMember`).

Why a thread: kafka-python 3.0.12 runs a group join (JoinGroup, then SyncGroup) as a task on its
I/O thread. ``poll(timeout_ms=N)`` waits for that task at most N ms. A later ``poll`` that finds
the task already finished does not take its result: it starts a new join
(``BaseCoordinator.join_group_async``: ``if self._join_task is None or self._join_task.is_done``).
So an assignment is applied only when the SyncGroup answer arrives while a ``poll`` is waiting.
Polled with pauses (another member's poll, a sleep), a member whose join takes longer than its
poll timeout joins again and again. From the leader each new JoinGroup begins a new generation
(Kafka's classic group rule for a leader's JoinGroup in a stable group). The group never settles.
Apache Kafka 4.4.0 shows the same loop (docs/testing-time-and-flakes.md). A member that is
always inside ``poll`` catches each answer; it is also how applications run a consumer.

A second case loses the join for good. A leader that assigned before it had the topic's metadata
rejoins only because its metadata snapshot changed (``rejoin_needed`` stays False). The new
assignment step copies the snapshot, so ``need_rejoin()`` turns False while the task runs. If the
task finishes after the poll stopped waiting, no later poll looks at it: the assignment is never
applied and the heartbeat stays off until the session expires. After each poll the member checks
for that state (a finished join task and no rejoin pending) and asks the client to join again
(``request_rejoin``), counting it in :attr:`PolledMember.lost_joins`. The broker's answers are
not involved: the check reads only the client's own state.
"""

from __future__ import annotations

import logging
import threading

from kafka import KafkaConsumer

log = logging.getLogger(__name__)

POLL_MS = 100
"""Timeout of each ``poll`` of the member's thread (ms)."""
STOP_S = 30.0
"""Bound of :meth:`PolledMember.close` waiting for the thread (s)."""


class PolledMember:
    """``consumer``: a subscribed KafkaConsumer, polled from now on only by this member's thread.

    :meth:`assignment` is the set of partition numbers the consumer owns after its latest poll;
    :attr:`records` collects ``(partition, offset, value bytes)`` of what it consumed;
    :attr:`lost_joins` counts the finished joins the client dropped and this member restarted.
    :meth:`close` stops the thread and closes the consumer (``close(**close_args)``, which
    sends LeaveGroup). A poll that raises ends the thread; :meth:`assignment` and :meth:`close`
    then raise AssertionError with that error.
    """

    def __init__(self, consumer: KafkaConsumer, name: str = "kafka-python-member", **close_args) -> None:
        self.consumer = consumer
        self.records: list[tuple[int, int, bytes]] = []
        self.error: BaseException | None = None
        self.lost_joins = 0
        self._close_args = close_args
        self._owned: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                got = self.consumer.poll(timeout_ms=POLL_MS)
                coordinator = self.consumer._coordinator
                task = coordinator._join_task
                if task is not None and task.is_done and not coordinator.need_rejoin():
                    self.lost_joins += 1  # a finished join no poll will collect (see the module doc)
                    log.warning("kafka-python dropped a finished join of group %s; joining again",
                                coordinator.group_id)
                    coordinator.request_rejoin()
                owned = {tp.partition for tp in self.consumer.assignment()}
                with self._lock:
                    for batch in got.values():
                        self.records += [(r.partition, r.offset, r.value) for r in batch]
                    self._owned = owned
        except BaseException as e:  # reported by assignment() and close()
            self.error = e

    def assignment(self) -> set[int]:
        """Partition numbers owned after the latest poll. AssertionError if a poll raised."""
        assert self.error is None, f"kafka-python member failed: {self.error!r}"
        with self._lock:
            return set(self._owned)

    def received(self) -> list[tuple[int, int, bytes]]:
        """A copy of the records consumed so far."""
        with self._lock:
            return list(self.records)

    def close(self) -> None:
        """Stop polling (waits at most STOP_S s), then close the consumer (leaves the group)."""
        self._stop.set()
        self._thread.join(STOP_S)
        alive = self._thread.is_alive()
        if not alive:
            self.consumer.close(**self._close_args)
        assert not alive, f"kafka-python member's poll thread did not stop within {STOP_S:g} s"
        assert self.error is None, f"kafka-python member failed: {self.error!r}"

