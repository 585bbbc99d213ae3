"""The consumer-group side of a ``pykafka`` read: group options, rules, group offsets, membership.

Spark's built-in Kafka source ignores consumer groups. Three options of the
``pykafka`` reader (all need ``kafka.group.id``) bring them back; see
``docs/consumer-groups.md`` for the user's view:

- ``commitOffsets=true`` (streaming): the offsets Spark has finished are
  committed to the group (OffsetCommit), so lag tools see the query's
  progress. Commits are retried, never fatal, and never move an offset
  backwards (:func:`offsets_to_commit`).
- ``startingOffsets=group``: a new query starts at the group's committed
  offsets; partitions without one start at ``kafka.auto.offset.reset``
  (default latest) (:func:`group_start_offsets`). Batch jobs use
  :func:`pyspark_kafka.groups.read_batch` to commit after their write.
- ``groupMembership=true`` (streaming): the query's stream reader joins the
  group through confluent-kafka's classic group protocol and reads only the
  partitions the coordinator assigns to it (:class:`~pyspark_kafka.read.stream_group.StreamGroup`,
  :func:`member_plan`).

This module sits below the readers (:mod:`pyspark_kafka.read.options`,
:mod:`pyspark_kafka.read.batch`, :mod:`pyspark_kafka.read.stream`) and never
imports them: the offset reader is passed in (``meta``), the subscription too.

Where the code runs: a streaming query's reader lives in one Python process
that Spark starts for the query (``python_streaming_source_runner``); its
``latestOffset(start)`` is called once the micro-batch ending at ``start`` is
complete, so ``start`` is what the query has processed. Everything that talks
to the group lives in that process; executors only read offset ranges.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

from pyspark_kafka import offsets as O
from pyspark_kafka.kafka.clients import consumer_config, new_consumer
from pyspark_kafka.errors import OptionError, PySparkKafkaError
from pyspark_kafka.options import get_option, parse_bool
from pyspark_kafka.kafka.client_config import kafka_params

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 3
"""Attempts of one offset commit when the error is retriable (coordinator moving, timeouts)."""
COMMIT_BACKOFF_MS = 200
"""Wait before the second commit attempt; doubled for each further attempt."""
COMMIT_RETRY_MS = 5_000
"""After a failed commit, the same offsets are tried again at most this often (new offsets at once)."""

_RESET = {
    "earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
    "latest": "latest", "largest": "latest", "end": "latest",
    "none": "none", "error": "none",
}
STARTING_OPTIONS = ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp")
"""The options that choose where a read starts (``groupMembership`` allows only ``startingOffsets=group``)."""


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class GroupOptions:
    """The parsed consumer-group options of a read.

    ``group_id``: ``kafka.group.id`` (None when unset); ``commit_offsets``:
    ``commitOffsets`` (default: ``groupMembership``); ``membership``:
    ``groupMembership``; ``start_from_group``: ``startingOffsets=group``;
    ``offset_reset``: where partitions without a committed offset start,
    ``"earliest"``, ``"latest"`` or ``"none"`` (fail), from
    ``kafka.auto.offset.reset``.
    """

    group_id: str | None = None
    commit_offsets: bool = False
    membership: bool = False
    start_from_group: bool = False
    offset_reset: str = "latest"

    @property
    def active(self) -> bool:
        """True when the read talks to the consumer group at all."""
        return self.commit_offsets or self.membership or self.start_from_group


def parse_group_options(options: Mapping[str, str], subscription_kind: str, starting, mode: str | None) -> GroupOptions:
    """Validate ``commitOffsets``, ``groupMembership``, ``startingOffsets=group`` and ``kafka.auto.offset.reset``.

    ``subscription_kind``: ``"subscribe"``, ``"subscribePattern"`` or
    ``"assign"``; ``starting``: the parsed starting limit
    (:func:`pyspark_kafka.offsets.offset_limit`); ``mode``: ``"batch"``,
    ``"stream"`` or None (only the shared rules). Raises OptionError naming the
    option and the fix: any of the three without ``kafka.group.id``;
    ``commitOffsets``/``groupMembership`` in a batch read (a batch reader cannot
    know when the write succeeded: use :func:`pyspark_kafka.groups.read_batch`);
    ``groupMembership`` with ``assign``, with another starting option, or with
    ``commitOffsets=false``; ``kafka.auto.offset.reset`` without
    ``startingOffsets=group``/``groupMembership``, or with an unknown value.
    """
    membership = parse_bool(options, "groupMembership", False)
    commit_given = get_option(options, "commitOffsets") is not None
    commit = parse_bool(options, "commitOffsets", membership)
    start_from_group = isinstance(starting, O.GroupLimit)
    group_id = (get_option(options, "kafka.group.id") or "").strip() or None
    used = [n for n, on in (("commitOffsets=true", commit and commit_given), ("startingOffsets=group", start_from_group),
                            ("groupMembership=true", membership)) if on]
    if used and group_id is None:
        raise OptionError(
            f"option {used[0]} needs 'kafka.group.id', the consumer group whose offsets the query uses: "
            f"add .option('kafka.group.id', 'my-group')"
        )
    if mode == "batch" and (commit or membership):
        name = "groupMembership" if membership else "commitOffsets"
        raise OptionError(
            f"option '{name}' is not supported by spark.read: a batch reader cannot know when your write "
            f"succeeded. Use pyspark_kafka.groups.read_batch(spark, options) and call .commit() on its result "
            f"after the write (startingOffsets=group alone works with spark.read)"
        )
    if membership:
        if commit_given and not commit:
            raise OptionError(
                "options groupMembership=true and commitOffsets=false can't be combined: a member commits what it "
                "processed so the next owner of a partition continues there; remove commitOffsets"
            )
        if subscription_kind == "assign":
            raise OptionError(
                "option groupMembership=true needs 'subscribe' or 'subscribePattern' (the coordinator assigns the "
                "partitions); remove 'assign'"
            )
        others = [n for n in STARTING_OPTIONS if get_option(options, n) is not None and not start_from_group]
        if others:
            raise OptionError(
                f"option '{others[0]}' can't be used with groupMembership=true: every assigned partition starts "
                f"at the group's committed offset (kafka.auto.offset.reset when it has none); remove it or set "
                f"startingOffsets=group"
            )
    reset_raw = kafka_params(options).get("auto.offset.reset")
    reset = "latest"
    if reset_raw is not None:
        if not (start_from_group or membership):
            raise OptionError(
                "Kafka option 'kafka.auto.offset.reset' is not supported: set the source option 'startingOffsets' "
                "to 'earliest' or 'latest' instead; the query tracks its own offsets (it only applies with "
                "startingOffsets=group or groupMembership=true, to partitions without a committed offset)"
            )
        reset = _RESET.get(str(reset_raw).strip().lower())
        if reset is None:
            raise OptionError(
                f"Kafka option 'kafka.auto.offset.reset' must be 'earliest', 'latest' or 'none', got {reset_raw!r}"
            )
    return GroupOptions(group_id, commit, membership, start_from_group, reset)


def group_consumer_conf(options: Mapping[str, str], group_id: str) -> dict:
    """Configuration of the driver-side group consumer: ``kafka.*`` settings, no auto commit.

    ``kafka.auto.offset.reset`` is dropped (the reader decides offsets; Java's
    ``none`` is no librdkafka value); the consumer never fetches records.
    """
    conf = consumer_config(options, group_id, **{"enable.auto.commit": False, "enable.auto.offset.store": False})
    conf.pop("auto.offset.reset", None)
    conf["group.id"] = group_id
    return conf


# --------------------------------------------------------------------------- pure rules


def offsets_to_commit(processed: Mapping[tuple, int], committed: Mapping[tuple, int | None]) -> dict:
    """The offsets of ``processed`` worth committing: those ahead of the group's ``committed`` offset.

    ``processed``/``committed``: ``{(topic, partition): next offset}``
    (committed None or absent: the group has none). A commit never moves a
    group's offset backwards (another member, a restarted query from an old
    checkpoint, or a replayed micro-batch may be behind the group); negative
    offsets are never committed.
    """
    return {
        tp: off
        for tp, off in sorted(processed.items())
        if off >= 0 and (committed.get(tp) is None or off > committed[tp])
    }


def group_start_offsets(
    committed: Mapping[tuple, int | None],
    earliest: Mapping[tuple, int],
    latest: Mapping[tuple, int],
    reset: str,
    group_id: str,
    report_data_loss: Callable[[str], None],
) -> dict:
    """Starting offsets of ``startingOffsets=group`` for the partitions of ``latest``.

    A partition with a committed offset starts there (Kafka's consumer rule).
    One without starts at ``reset``: ``"earliest"`` (log start offset),
    ``"latest"``, or ``"none"`` (OptionError naming the partitions, like Kafka's
    NoOffsetForPartitionException). A committed offset below the log start
    offset (retention removed the records) or above the latest offset (topic
    recreated) is data loss: ``report_data_loss(msg)`` raises or warns
    (``failOnDataLoss``), then the start is clamped into ``[earliest, latest]``.
    """
    out, missing = {}, []
    for tp in sorted(latest):
        off = committed.get(tp)
        if off is None or off < 0:
            if reset == "none":
                missing.append(tp)
            out[tp] = earliest[tp] if reset == "earliest" else latest[tp]
            continue
        low, high = earliest[tp], latest[tp]
        if off < low or off > high:
            where = "below the log start offset" if off < low else "above the latest offset (topic recreated?)"
            report_data_loss(
                f"group {group_id!r} committed offset {off} for {tp[0]}-{tp[1]}, {where} [{low}, {high}]"
            )
            off = min(max(off, low), high)
        out[tp] = off
    if missing:
        names = ", ".join(f"{t}-{p}" for t, p in missing)
        raise OptionError(
            f"group {group_id!r} has no committed offset for {names} and kafka.auto.offset.reset is 'none': "
            f"set kafka.auto.offset.reset to 'earliest' or 'latest', or commit offsets for them first"
        )
    return out


def needs_adoption(begin: Mapping[tuple, int], owned, continuing) -> list:
    """Owned partitions whose start must come from the group: not read continuously since ``begin``."""
    return sorted(tp for tp in owned if not (tp in begin and tp in continuing))


@dataclass(frozen=True)
class MemberPlan:
    """What a member does with its partitions in one micro-batch (see :func:`member_plan`).

    ``reading``: partitions read from their ``begin`` offset; ``adopted``:
    ``{tp: offset}`` taken over at the group's offset (an empty range this
    micro-batch, read from the next one); ``released``: partitions of
    ``begin`` left out of this micro-batch (no longer owned, or owned again but
    the group moved on: adopted at the next micro-batch).
    """

    reading: list = field(default_factory=list)
    adopted: dict = field(default_factory=dict)
    released: list = field(default_factory=list)


def member_plan(begin: Mapping[tuple, int], owned, continuing, adopt: Mapping[tuple, int]) -> MemberPlan:
    """Split a member's partitions for the micro-batch after ``begin`` (offsets stay deterministic).

    ``begin``: the previous micro-batch's end; ``owned``: the current
    assignment; ``continuing``: owned partitions this process has read since
    ``begin`` was planned; ``adopt``: the group's start offset of each
    partition of :func:`needs_adoption`. Spark re-plans a micro-batch from its
    logged start and end only, so a partition's start must be in ``begin``:
    a newly owned partition first appears in an end offset at its adopted
    offset (an empty range), and is read from the next micro-batch. A partition
    owned again after another member may have read it continues from ``begin``
    only when the group's offset equals it; otherwise it is released for one
    micro-batch and adopted in the next.
    """
    reading, adopted, released = [], {}, []
    for tp in sorted(owned):
        if tp in begin and (tp in continuing or adopt.get(tp) == begin[tp]):
            reading.append(tp)
        elif tp in begin:
            released.append(tp)
        else:
            adopted[tp] = adopt[tp]
    released += sorted(tp for tp in begin if tp not in owned)
    return MemberPlan(reading, adopted, sorted(released))


# --------------------------------------------------------------------------- group offsets (I/O)


def partitions_text(tps) -> str:
    """``[("t", 0), ("t", 1)]`` → ``"t-0, t-1"`` (sorted), for messages."""
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


def _retriable(exc: Exception) -> bool:
    err = exc.args[0] if exc.args else None
    return bool(getattr(err, "retriable", lambda: False)())


def commit_fix(exc: Exception) -> str:
    """The fix to name after a failed commit whose confluent-kafka error is ``exc.args[0]``."""
    from confluent_kafka import KafkaError

    err = exc.args[0] if exc.args else None
    code = err.code() if hasattr(err, "code") else None
    if code in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION):
        return ("the group has active members, and Kafka only accepts commits from outside a group while it is "
                "empty: use a kafka.group.id of its own for this query, or groupMembership=true")
    if code == KafkaError.REBALANCE_IN_PROGRESS:
        return "the group is rebalancing; the offsets are committed with the next micro-batch"
    return "check that the brokers are reachable; the offsets are committed with the next micro-batch"


COMMITTED_SLICE_S = 1.0
"""Slice of an OffsetFetch wait (seconds) after which pending error events are looked at."""


def _timed_out(exc: Exception) -> bool:
    from confluent_kafka import KafkaError

    err = exc.args[0] if exc.args else None
    return hasattr(err, "code") and err.code() == KafkaError._TIMED_OUT


class GroupOffsets:
    """Reads and commits one consumer group's offsets through a confluent-kafka Consumer.

    ``consumer``: a ``confluent_kafka.Consumer`` configured with the group id
    (a member or not; a non-member commits with generation -1, which Kafka
    accepts only while the group has no members); ``timeout_s``: bound of one
    request. :meth:`commit` never moves an offset backwards and never raises.
    """

    def __init__(self, consumer, group_id: str, timeout_s: float):
        self.consumer = consumer
        self.group_id = group_id
        self._timeout_s = timeout_s
        self._done: dict = {}  # offsets known to be committed (or behind the group): skip them next time
        self._failed: tuple = ({}, 0.0)  # the offsets of the last failed commit, and when to try them again
        self.last_error: Exception | None = None

    def committed(self, tps) -> dict:
        """``{(topic, partition): committed offset or None}`` for ``tps``; raises PySparkKafkaError."""
        from confluent_kafka import KafkaException, TopicPartition

        if not tps:
            return {}
        deadline = time.monotonic() + self._timeout_s
        while True:  # 1 s slices: a denied group (an error event, not an answer) ends the wait at once
            remaining = deadline - time.monotonic()
            try:
                got = self.consumer.committed([TopicPartition(t, p) for t, p in tps],
                                              timeout=max(0.1, min(COMMITTED_SLICE_S, remaining)))
                break
            except KafkaException as exc:
                denied = self._group_denied()
                if denied is None and _timed_out(exc) and remaining > COMMITTED_SLICE_S:
                    continue
                raise PySparkKafkaError(
                    f"could not fetch the committed offsets of group {self.group_id!r} for {partitions_text(tps)}: "
                    + (f"{denied.str()} ({denied.name()}); the principal lacks READ (and DESCRIBE) on group "
                       f"{self.group_id!r}: ask for a group ACL, e.g. kafka-acls --add --allow-principal "
                       f"User:<name> --operation Read --group {self.group_id}" if denied is not None else
                       f"{exc}. Check that the brokers are reachable")
                ) from exc
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in got}

    def _group_denied(self):
        """GROUP_AUTHORIZATION_FAILED among the consumer's pending error events (librdkafka reports
        a denied FindCoordinator that way), or None. Only a consumer without assigned partitions
        is asked (its queue holds no records to lose)."""
        from confluent_kafka import KafkaError

        try:
            if self.consumer.assignment():
                return None
            events = self.consumer.consume(10, 0)
        except Exception:  # noqa: BLE001 - a closed or subscribed consumer: nothing to learn here
            return None
        return next((m.error() for m in events
                     if m.error() is not None and m.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED), None)

    def _commit_once(self, offsets: Mapping[tuple, int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        result = self.consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())], asynchronous=False
        )
        failed = [tp for tp in result or () if tp.error is not None]
        if failed:
            raise KafkaException(failed[0].error)

    def commit(self, processed: Mapping[tuple, int]) -> dict | None:
        """Commit ``processed`` (``{tp: next offset}``) where it is ahead of the group.

        Returns the offsets written (``{}`` when the group is already there or
        ahead), or None when the commit failed: retriable errors are retried
        :data:`COMMIT_ATTEMPTS` times, then the failure is logged as a warning
        naming the group, the partitions and the fix, and kept in
        :attr:`last_error`. The same offsets are tried again by a call at least
        :data:`COMMIT_RETRY_MS` later (Spark may ask for offsets every few ms
        while idle); new offsets are tried at once.
        """
        todo = {tp: o for tp, o in processed.items() if self._done.get(tp) != o}
        if not todo:
            return {}
        if todo == self._failed[0] and time.monotonic() < self._failed[1]:
            return None
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                ahead = offsets_to_commit(todo, self.committed(list(todo)))
                if ahead:
                    self._commit_once(ahead)
                self._done.update(todo)
                self.last_error = None
                return ahead
            except Exception as exc:  # KafkaException, or PySparkKafkaError from committed()
                cause = exc.__cause__ if isinstance(exc, PySparkKafkaError) and exc.__cause__ else exc
                self.last_error = cause
                if attempt + 1 < COMMIT_ATTEMPTS and _retriable(cause):
                    time.sleep(COMMIT_BACKOFF_MS * 2**attempt / 1000)
                    continue
                log.warning(
                    "could not commit offsets of %s to consumer group %r: %s; %s",
                    partitions_text(todo), self.group_id, exc, commit_fix(cause),
                )
                self._failed = (todo, time.monotonic() + COMMIT_RETRY_MS / 1000)
                return None
        return None


@contextmanager
def group_offsets(options: Mapping[str, str], group_id: str, timeout_s: float) -> Iterator[GroupOffsets]:
    """A short-lived :class:`GroupOffsets` (its own non-member consumer, closed on exit)."""
    consumer = new_consumer(group_consumer_conf(options, group_id))
    try:
        yield GroupOffsets(consumer, group_id, timeout_s)
    finally:
        consumer.close()


def resolve_start(offsets: GroupOffsets, meta, tps: list, reset: str, report_data_loss) -> dict:
    """``startingOffsets=group`` for ``tps``: committed offsets, else ``reset`` (:func:`group_start_offsets`).

    ``meta``: the reader's offset reader (``earliest(tps)``, ``latest(tps)``).
    """
    if not tps:
        return {}
    committed = offsets.committed(tps)
    return group_start_offsets(committed, meta.earliest(tps), meta.latest(tps), reset, offsets.group_id,
                               report_data_loss)
