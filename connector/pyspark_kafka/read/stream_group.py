"""A streaming query's reader as a member of its consumer group (``groupMembership=true``, and the group
commits of ``commitOffsets=true``): :class:`StreamGroup` and the SIGTERM handler of Spark's stream-reader
process that lets the member leave the group cleanly.

The rules it applies (options, offsets to commit, which partitions to read and adopt) and the group-offsets
client are in :mod:`pyspark_kafka.read.consumer_group`; its log lines go to that module's logger, as
they did when this class lived there.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Mapping

from pyspark_kafka import offsets as O
from pyspark_kafka.kafka.clients import new_consumer
from pyspark_kafka.kafka.client_config import kafka_params
from pyspark_kafka.read.consumer_group import (
    GroupOffsets,
    GroupOptions,
    group_consumer_conf,
    log,
    member_plan,
    needs_adoption,
    partitions_text,
    resolve_start,
)

MEMBER_ASSIGN_WAIT_MS = 2_000
"""Longest wait of one ``latestOffset`` call for a member that has no assignment (joining, rebalancing)."""
_RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"
"""``__main__`` of Spark's stream-reader process, the only process whose SIGTERM handler :class:`StreamGroup` sets."""
CLOSE_DEADLINE_S = 30
"""Bound of a stream reader's clean exit after SIGTERM (s): the consumer's commit and LeaveGroup
(Kafka's ``KafkaConsumer.close()`` default timeout is 30 s too)."""


def exit_once_on_sigterm(signum=signal.SIGTERM, frame=None) -> None:
    """SIGTERM handler of Spark's stream-reader process: leave through SystemExit(143), once.

    Spark signals that process twice when a query stops
    (``PythonWorkerFactory.stopWorker`` destroys the worker, then ``stop()``
    destroys every simple worker again). A second SystemExit raised while the
    runner's ``finally: reader.stop()`` runs would cut the consumer's close
    short: no commit of the revoked partitions, no LeaveGroup, and the other
    members wait ``session.timeout.ms`` for the partitions. So the first
    SIGTERM ignores further ones and arms ``SIGALRM`` (default action:
    terminate) after :data:`CLOSE_DEADLINE_S`, which bounds the clean exit.

    Raises SystemExit(143) (128 + SIGTERM, the status a shell reports).
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.alarm(CLOSE_DEADLINE_S)
    raise SystemExit(143)



class StreamGroup:
    """The consumer-group side of one streaming query (runs in Spark's stream-reader process).

    ``group``: the parsed options; ``options``: the data source options (for
    the client configuration); ``subscription``: the reader's
    ``Subscription`` (``kind``, ``topics``, ``pattern``); ``timeout_ms``: bound
    of one group request (``kafka.default.api.timeout.ms``).

    Created without I/O (Spark also builds readers in planning processes); the
    consumer is created at first use and dropped when pickled. With
    ``groupMembership`` the consumer subscribes with rebalance callbacks that
    run inside :meth:`poll` (so only between micro-batches): ``on_revoke``
    commits the processed offsets of the revoked partitions before they are
    released; ``on_assign`` takes the new partitions and pauses them (the
    driver never fetches records).
    """

    def __init__(self, group: GroupOptions, options: Mapping[str, str], subscription, timeout_ms: int):
        self.group = group
        self._options = dict(options)
        self._subscription = subscription
        self._timeout_s = timeout_ms / 1000
        self._consumer = None
        self._offsets: GroupOffsets | None = None
        self.owned: set = set()
        self.continuing: set = set()
        self._processed: dict = {}
        self._initial: dict | None = None
        self._waiting = True  # a member without an assignment since it subscribed or was revoked
        self._previous_sigterm = None

    def __getstate__(self):
        state = dict(self.__dict__)
        for k in ("_consumer", "_offsets", "_previous_sigterm"):
            state[k] = None
        return {**state, "owned": set(), "continuing": set(), "_processed": {}, "_waiting": True}

    @property
    def offsets(self) -> GroupOffsets:
        """The group's offsets, through the member consumer (membership) or a non-member consumer."""
        if self._offsets is None:
            consumer = new_consumer(group_consumer_conf(self._options, self.group.group_id))
            self._consumer = consumer
            self._offsets = GroupOffsets(consumer, self.group.group_id, self._timeout_s)
            if self.group.membership:
                self._subscribe(consumer)
        return self._offsets

    # ----------------------------------------------------------------- commits

    def start_offsets(self, meta, tps: list, report_data_loss) -> dict:
        """``startingOffsets=group`` of a new query (:func:`resolve_start`)."""
        return resolve_start(self.offsets, meta, tps, self.group.offset_reset, report_data_loss)

    def set_initial(self, initial: Mapping[tuple, int]) -> None:
        """Remember the query's initial offsets: a start, not progress, so they are not committed."""
        self._initial = dict(initial)

    def processed(self, begin: Mapping[tuple, int]) -> None:
        """Spark finished every offset before ``begin``: remember it and commit it (``commitOffsets``).

        Under membership only partitions read continuously by this member are
        committed (others may belong to another member by now).
        """
        done = dict(begin)
        if self.group.membership:
            done = {tp: o for tp, o in done.items() if tp in self.continuing and tp in self.owned}
        self._processed.update(done)
        if self.group.commit_offsets and done and dict(begin) != self._initial:
            self.offsets.commit(done)

    # ----------------------------------------------------------------- membership

    def _subscribe(self, consumer) -> None:
        sub = self._subscription
        topics = list(sub.topics) if sub.kind == "subscribe" else [f"^({sub.pattern})$"]
        consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
        self._leave_group_on_sigterm()

    def _cooperative(self) -> bool:
        strategy = str(kafka_params(self._options).get("partition.assignment.strategy", ""))
        return "cooperative" in strategy.lower()

    def _on_assign(self, consumer, partitions) -> None:
        if self._cooperative():
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        consumer.pause(partitions)
        self.owned |= {(tp.topic, tp.partition) for tp in partitions}
        self._waiting = False
        log.info("group %r assigned %s to this query", self.group.group_id, partitions_text(self.owned))

    def _on_revoke(self, consumer, partitions) -> None:
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        done = {tp: o for tp, o in self._processed.items() if tp in revoked and tp in self.continuing}
        if done:
            self._offsets.commit(done)  # before the partitions are released: the next owner continues here
        self.owned -= revoked
        self.continuing -= revoked
        self._waiting = not self.owned
        log.info("group %r revoked %s from this query", self.group.group_id, partitions_text(revoked))

    def _on_lost(self, consumer, partitions) -> None:
        lost = {(tp.topic, tp.partition) for tp in partitions}
        self.owned -= lost
        self.continuing -= lost
        self._waiting = not self.owned
        log.warning(
            "group %r: this query lost %s (session timeout or max.poll.interval.ms exceeded) without committing; "
            "the next owner re-reads from the last commit", self.group.group_id, partitions_text(lost),
        )

    def poll(self, wait_ms: int = MEMBER_ASSIGN_WAIT_MS) -> None:
        """Serve the group's callbacks; while unassigned, wait for an assignment at most ``wait_ms``."""
        consumer = self.offsets.consumer
        deadline = time.monotonic() + wait_ms / 1000
        for _ in range(10_000):
            msg = consumer.poll(0.1 if self._waiting else 0)
            if msg is not None and msg.error() is not None:
                log.warning("group %r consumer: %s", self.group.group_id, msg.error())
            if msg is None and not (self._waiting and time.monotonic() < deadline):
                return

    def member_end_offsets(self, begin: Mapping[tuple, int], meta, report_data_loss) -> tuple[dict, list]:
        """One membership step: serve the callbacks, then plan (:func:`member_plan`).

        Returns ``(end, reading)``: the end offsets without the reading
        partitions' latest offsets (adopted partitions at their group offset),
        and the reading partitions, whose end the caller sets (latest, rate
        limited). ``meta`` provides ``earliest``/``latest``.
        """
        self.poll()
        todo = needs_adoption(begin, self.owned, self.continuing)
        adopt = self.start_offsets(meta, todo, report_data_loss) if todo else {}
        plan = member_plan(begin, self.owned, self.continuing, adopt)
        if plan.released or plan.adopted:
            log.info("group %r: reading %s, adopting %s, released %s", self.group.group_id,
                     partitions_text(plan.reading), plan.adopted, partitions_text(plan.released))
        self.continuing = set(plan.reading) | set(plan.adopted)
        return dict(plan.adopted), plan.reading

    def _leave_group_on_sigterm(self) -> None:
        """In Spark's stream-reader process, turn SIGTERM into a clean exit so the member leaves the group.

        Spark stops that process with SIGTERM when the query stops; without a
        handler it dies at once and the group only notices after
        ``session.timeout.ms``. The handler (:func:`exit_once_on_sigterm`)
        raises SystemExit, so the runner's ``finally: reader.stop()`` closes
        the consumer (revoke callback: commit, then LeaveGroup). Nothing is
        installed in other processes.
        """
        main = sys.modules.get("__main__")
        if getattr(getattr(main, "__spec__", None), "name", None) != _RUNNER_MODULE:
            return
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        self._previous_sigterm = signal.signal(signal.SIGTERM, exit_once_on_sigterm)

    def close(self) -> None:
        """Close the consumer: a member commits its processed offsets (revoke callback) and leaves the group."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception as exc:  # closing is best effort: the query is stopping
                log.warning("closing the consumer of group %r failed: %s", self.group.group_id, exc)
        self._offsets = None
        self.owned, self.continuing = set(), set()
        if self._previous_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None
