"""Exactly-once writes into Kafka: one Kafka transaction per Spark task, made replay-safe by a marker.

Kafka has no transaction that several producers can prepare and one party commit later
(KIP-939's two-phase commit is not generally available), so the Spark driver cannot commit
what its tasks wrote. Each task therefore commits its own transaction (KIP-98), and stores,
**in that same transaction**, a marker saying "micro-batch ``b`` of this task is written":

- ``transactional.id = f"{prefix}-{scope}-{partition}"``: ``scope`` is the streaming query's id
  (kept in the checkpoint, so it survives restarts) or, for a batch job, a random job id;
  ``partition`` is the Spark partition id. Every attempt of a task, and every replay of a
  micro-batch, uses the same id, so ``init_transactions()`` (InitProducerId) fences older
  attempts still running (zombies) and aborts a transaction a killed attempt left open.
- The marker is the committed offset of the consumer group named like the transactional id,
  on partition 0 of the first row's topic: ``offset = batch id + 1``, metadata = JSON with the
  batch id and a fingerprint of the task's input (rows, key and value bytes). It is written
  with ``send_offsets_to_transaction`` (AddOffsetsToTxn + TxnOffsetCommit), so it becomes
  visible exactly when the records do (EndTxn).
- After ``init_transactions()`` the task reads the marker (OffsetFetch): if this batch (or a
  later one) is already committed, the task writes nothing; otherwise it begins a
  transaction, produces, adds the marker and commits.
- A marker that is never stored would make every replay write again, silently (librdkafka's
  mock cluster answers TxnOffsetCommit with success and stores nothing). So once per query in
  each Python worker, a task that found no marker first commits a transaction holding only a
  probe offset and reads it back; if it is not there the task stops with
  :class:`MarkerNotStoredError` before producing anything.

This is exactly-once for ``read_committed`` consumers **if a replayed micro-batch gives each
Spark partition the same rows** as the first run (true for a ``pykafka`` source replaying the
offset ranges in the checkpoint with unchanged options). A replay whose partition was already
committed with a different fingerprint fails with :class:`ReplayMismatchError` instead of
silently dropping or duplicating rows. See docs/exactly-once-kafka.md.
"""

from __future__ import annotations

import json
import os
import time
import uuid
import warnings
from dataclasses import dataclass
from enum import Enum
from typing import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_kafka.errors import DeliveryError, OptionError, PySparkKafkaError
from pyspark_kafka.options import get_option

DEFAULT_PREFIX = "pykafka"
"""Default of option ``transactionalIdPrefix``."""

DEFAULT_TRANSACTION_TIMEOUT_MS = 60000
"""``transaction.timeout.ms`` unless ``kafka.transaction.timeout.ms`` is set (Kafka's and librdkafka's default)."""

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Spark local property holding the streaming query's id (``StreamExecution.QUERY_ID_KEY``, kept in the checkpoint)."""

BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""Spark local property holding the micro-batch id (``MicroBatchExecution.BATCH_ID_KEY``)."""

MARKER_VERSION = 1

# Producer settings a transactional producer needs (KIP-98); the user may not weaken them.
_REQUIRED = {"acks": ("all", "-1"), "enable.idempotence": ("true",)}

# librdkafka producer-only settings, dropped from the marker consumer's configuration.
_PRODUCER_ONLY = {
    "acks", "request.required.acks", "enable.idempotence", "enable.gapless.guarantee",
    "delivery.timeout.ms", "message.timeout.ms", "transaction.timeout.ms", "transactional.id",
    "linger.ms", "queue.buffering.max.ms", "batch.size", "batch.num.messages",
    "queue.buffering.max.messages", "queue.buffering.max.kbytes", "compression.type",
    "compression.codec", "compression.level", "retries", "message.send.max.retries",
    "partitioner", "sticky.partitioning.linger.ms", "request.timeout.ms", "delivery.report.only.error",
}


class FencedError(DeliveryError):
    """A newer producer with the same ``transactional.id`` took over; this attempt's transaction is aborted."""


class ReplayMismatchError(PySparkKafkaError):
    """A replayed micro-batch partition differs from the one already committed (rows moved between partitions)."""


class MarkerNotStoredError(DeliveryError):
    """The brokers accept a transactional offset commit (TxnOffsetCommit) but do not store it.

    The marker would then never be visible and a replayed micro-batch would be written twice;
    found on librdkafka's mock cluster (``test.mock.num.brokers``), which answers
    TxnOffsetCommit with success and OffsetFetch with no offset. Raised before any record of
    the task is produced.
    """


# -- options ---------------------------------------------------------------------------------

def parse_prefix(options: Mapping[str, str]) -> str:
    """Option ``transactionalIdPrefix`` (default ``pykafka``); raises OptionError when blank or with whitespace."""
    raw = get_option(options, "transactionalIdPrefix")
    if raw is None:
        return DEFAULT_PREFIX
    if not raw.strip() or any(c.isspace() for c in raw):
        raise OptionError(
            f"option 'transactionalIdPrefix' must be a non-empty name without spaces, got {raw!r}; "
            "e.g. .option('transactionalIdPrefix', 'orders-etl')"
        )
    return raw


def transactional_producer_config(conf: Mapping[str, object]) -> dict:
    """``conf`` (librdkafka producer settings) completed and checked for transactions.

    Defaults: ``acks=all``, ``enable.idempotence=true``, ``transaction.timeout.ms=60000``,
    ``delivery.timeout.ms`` = ``transaction.timeout.ms`` (librdkafka requires
    ``delivery.timeout.ms <= transaction.timeout.ms``). Raises OptionError naming the option
    and the fix for ``acks`` other than all/-1, ``enable.idempotence=false``, a
    ``transactional.id`` (derived per task: use ``transactionalIdPrefix``), non-integer
    timeouts, or a delivery timeout above the transaction timeout.
    """
    out = {str(k): v for k, v in conf.items()}
    if "transactional.id" in out:
        raise OptionError(
            "option 'kafka.transactional.id' cannot be set with deliveryGuarantee=exactly-once: each "
            "Spark task derives its own id from option 'transactionalIdPrefix' (default 'pykafka'), "
            "the query id and its partition; set that option instead"
        )
    for name, allowed in _REQUIRED.items():
        out.setdefault(name, allowed[0])
        if str(out[name]).strip().lower() not in allowed:
            raise OptionError(
                f"option 'kafka.{name}'={out[name]!r} contradicts deliveryGuarantee=exactly-once, which "
                f"needs {name}={allowed[0]} (Kafka transactions, KIP-98); remove the option"
            )
    txn_ms = _int_setting(out, "transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
    alias = "message.timeout.ms" if "message.timeout.ms" in out else "delivery.timeout.ms"
    delivery_ms = _int_setting(out, alias, txn_ms)
    if delivery_ms > txn_ms:
        raise OptionError(
            f"option 'kafka.{alias}'={delivery_ms} is larger than 'kafka.transaction.timeout.ms'={txn_ms}; "
            "a transactional producer needs the delivery timeout <= the transaction timeout: lower the "
            "first or raise the second (at most the brokers' transaction.max.timeout.ms, 900000 by default)"
        )
    out["transaction.timeout.ms"] = txn_ms
    out[alias] = delivery_ms
    return out


def _int_setting(conf: dict, name: str, default: int) -> int:
    raw = conf.get(name, default)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise OptionError(f"option 'kafka.{name}' must be an integer (ms), got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option 'kafka.{name}' must be > 0 ms, got {value}")
    return value


def marker_consumer_config(client_settings: Mapping[str, object]) -> dict:
    """Settings of the consumer that reads and writes a task's marker (group id set per task).

    The ``kafka.*`` client settings minus producer-only ones, with ``isolation.level=read_committed``
    (librdkafka then asks OffsetFetch for stable offsets, KIP-447) and no auto commit.
    """
    conf = {k: v for k, v in client_settings.items() if k not in _PRODUCER_ONLY}
    conf.update({"isolation.level": "read_committed", "enable.auto.commit": False})
    return conf


# -- ids -------------------------------------------------------------------------------------

def transactional_id(prefix: str, scope: str, partition_id: int) -> str:
    """``f"{prefix}-{scope}-{partition_id}"``: the task's ``transactional.id`` and marker group id.

    ``scope``: the streaming query id (stable across restarts from the checkpoint) or a batch
    job's id; ``partition_id``: the Spark partition id (the same for every attempt of a task).
    """
    return f"{prefix}-{scope}-{partition_id}"


def new_job_id() -> str:
    """Scope of a batch job's transactional ids: random, so two jobs never fence each other."""
    return f"job-{uuid.uuid4().hex}"


@dataclass(frozen=True)
class TaskScope:
    """Where a write task belongs: ``transactional_id`` (also the marker group) and ``batch_id``."""

    transactional_id: str
    batch_id: int


def stream_task_scope(prefix: str) -> TaskScope:
    """The running streaming task's scope, from Spark's TaskContext (executor side).

    Query id and batch id are the local properties Spark sets for every micro-batch job
    (:data:`QUERY_ID_PROPERTY`, :data:`BATCH_ID_PROPERTY`). Raises DeliveryError when they are
    missing (not inside a micro-batch of a streaming query).
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    query = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx else None
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
    if not query or batch is None:
        raise DeliveryError(
            "deliveryGuarantee=exactly-once: this task has no streaming query id / batch id "
            f"(Spark local properties {QUERY_ID_PROPERTY!r}, {BATCH_ID_PROPERTY!r}); only micro-batch "
            "streaming queries and batch writes are supported"
        )
    return TaskScope(transactional_id(prefix, query, ctx.partitionId()), int(batch))


def batch_task_scope(prefix: str, job_id: str) -> TaskScope:
    """The running batch-write task's scope: ``job_id`` from the driver, batch id 0."""
    from pyspark import TaskContext

    return TaskScope(transactional_id(prefix, job_id, TaskContext.get().partitionId()), 0)


# -- the marker ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fingerprint:
    """Order-insensitive summary of a task's input: rows, total key bytes, total value bytes."""

    rows: int = 0
    key_bytes: int = 0
    value_bytes: int = 0

    @classmethod
    def of(cls, batch: pa.RecordBatch) -> "Fingerprint":
        """Fingerprint of one Arrow batch (columns ``value`` and optional ``key``; nulls count 0 bytes)."""
        names = batch.schema.names
        key = _byte_total(batch.column("key")) if "key" in names else 0
        value = _byte_total(batch.column("value")) if "value" in names else 0
        return cls(batch.num_rows, key, value)

    def __add__(self, other: "Fingerprint") -> "Fingerprint":
        return Fingerprint(self.rows + other.rows, self.key_bytes + other.key_bytes,
                           self.value_bytes + other.value_bytes)


def _byte_total(column: pa.Array) -> int:
    total = pc.sum(pc.binary_length(column)).as_py()
    return int(total or 0)


@dataclass(frozen=True)
class Marker:
    """A committed task: ``batch_id`` and the ``fingerprint`` of its input (None if unknown)."""

    batch_id: int
    fingerprint: Fingerprint | None = None

    @property
    def offset(self) -> int:
        """The committed offset that stores the marker: ``batch_id + 1`` (0 means "nothing")."""
        return self.batch_id + 1

    def metadata(self) -> str:
        """Offset-commit metadata: compact JSON (well under Kafka's ``offset.metadata.max.bytes``, 4096)."""
        body = {"v": MARKER_VERSION, "batch": self.batch_id}
        if self.fingerprint is not None:
            fp = self.fingerprint
            body.update(rows=fp.rows, keyBytes=fp.key_bytes, valueBytes=fp.value_bytes)
        return json.dumps(body, separators=(",", ":"))


def parse_marker(offset: int, metadata: str | None) -> Marker | None:
    """The marker stored as committed ``offset`` + ``metadata``; None when nothing is committed (offset < 1).

    Metadata that is not ours (or absent) gives a marker without fingerprint.
    """
    if offset is None or offset < 1:
        return None
    fingerprint = None
    try:
        body = json.loads(metadata or "")
        if isinstance(body, dict) and body.get("batch") == offset - 1 and "rows" in body:
            fingerprint = Fingerprint(int(body["rows"]), int(body["keyBytes"]), int(body["valueBytes"]))
    except (ValueError, KeyError, TypeError):
        pass
    return Marker(offset - 1, fingerprint)


class Decision(Enum):
    """What a task attempt does after reading its marker."""

    WRITE = "write"                  # not committed yet: begin, produce, add the marker, commit
    ALREADY_COMMITTED = "committed"  # this batch is committed (a replay or a retry): write nothing
    SUPERSEDED = "superseded"        # a later batch is committed: a zombie of an old batch, write nothing


def decide(marker: Marker | None, batch_id: int) -> Decision:
    """The rule: write unless the marker shows ``batch_id`` or a later batch as committed.

    Markers only move forward (micro-batch ``b+1`` starts after ``b`` is committed on the driver).
    """
    if marker is None or marker.batch_id < batch_id:
        return Decision.WRITE
    if marker.batch_id == batch_id:
        return Decision.ALREADY_COMMITTED
    return Decision.SUPERSEDED


def check_replay(marker: Marker, replayed: Fingerprint, transactional_id: str) -> None:
    """Raise ReplayMismatchError when a replay's input differs from the committed run's.

    Skipping a partition is only right when its rows are the ones already committed; a
    different fingerprint means the replay split the rows differently (e.g. changed
    ``minPartitions`` / ``maxRecordsPerPartition``, or a non-deterministic repartition), and
    skipping would lose rows while writing would duplicate others.
    """
    if marker.fingerprint is None or marker.fingerprint == replayed:
        return
    raise ReplayMismatchError(
        f"batch {marker.batch_id} of the task with transactional.id '{transactional_id}' was already committed to "
        f"Kafka with different input ({_describe(marker.fingerprint)}) than this replay has "
        f"({_describe(replayed)}): the replayed batch is split into Spark partitions differently, so "
        "exactly-once cannot be kept. Restart the query with the options it had when the batch first "
        "ran (minPartitions, maxRecordsPerPartition, no non-deterministic repartition before the sink); "
        "nothing was written by this attempt"
    )


def _describe(fp: Fingerprint) -> str:
    return f"{fp.rows} rows, {fp.key_bytes} key bytes, {fp.value_bytes} value bytes"


# -- the task's transaction (I/O) -------------------------------------------------------------

class InputTruncatedError(PySparkKafkaError):
    """The Spark process feeding this task died while the task read its input.

    PySpark hands a writer its rows through a socket; when the Spark JVM dies (driver
    killed, executor lost) the Arrow stream can end early at a batch boundary, which
    looks like a normal end of input. Committing then would publish part of the
    task's rows as the whole batch, so the transaction is aborted instead.
    """


def _parent_of(pid: int) -> int | None:
    """Parent pid of a live ``pid`` (Linux ``/proc``), or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    state, ppid = stat[stat.rindex(b")") + 2:].split()[:2]
    if state in (b"Z", b"X"):
        return None
    return int(ppid)


class SparkLiveness:
    """Watches the chain of processes that feed this Python worker its input.

    Records this process's parent and grandparent when created (in a PySpark worker:
    the worker daemon and the Spark JVM, or the JVM and the driver) and, in
    :meth:`check`, raises :class:`InputTruncatedError` when either has gone (a process
    whose parent dies is re-parented, so the recorded links change). Call it after the
    input iterator ended and before committing a transaction.
    """

    def __init__(self, depth: int = 2):
        self.depth = depth
        self.chain = self._chain()

    def _chain(self) -> tuple[int | None, ...]:
        """(parent, grandparent, ...) of this process; None where a link is gone."""
        chain = [os.getppid()]
        while len(chain) < self.depth and chain[-1] is not None:
            chain.append(_parent_of(chain[-1]))
        # a dead ancestor (zombie or reaped) breaks the chain even where ppid links lag behind
        if any(p is not None and _parent_of(p) is None for p in chain):
            chain.append(None)
        return tuple(chain)

    def check(self, transactional_id: str) -> None:
        """Raise InputTruncatedError when a recorded ancestor process has gone."""
        now = self._chain()
        if now != self.chain:
            raise InputTruncatedError(
                f"the Spark process feeding the task with transactional.id '{transactional_id}' died "
                f"while it read its input (process chain {self.chain} is now {now}): its rows may be "
                "incomplete, so its Kafka transaction is aborted and nothing is written. Spark replays "
                "the micro-batch when the query restarts from its checkpoint."
            )


# (bootstrap.servers, scope) pairs whose brokers were seen storing a transactional offset commit
# in this process: the check of TaskTransaction.verify_marker_storage runs once per query here.
_VERIFIED_STORAGE: set[tuple[str, str]] = set()

PROBE_OFFSET = 0
"""Committed offset of the marker-storage probe: below 1, so :func:`parse_marker` reads it as "nothing committed"."""


def probe_metadata(nonce: str) -> str:
    """Metadata of the marker-storage probe: ``{"v":1,"probe":nonce}`` (no batch: not a marker)."""
    return json.dumps({"v": MARKER_VERSION, "probe": nonce}, separators=(",", ":"))


def _scope_of(tid: str) -> str:
    """The query (or job) part of a transactional id ``{prefix}-{scope}-{partition}``."""
    return tid.rsplit("-", 1)[0]


class _FirstFatalError:
    """librdkafka ``error_cb`` keeping the first fatal error (``KafkaError.fatal()``)."""

    def __init__(self):
        self.error = None

    def __call__(self, err) -> None:
        if err.fatal() and self.error is None:
            self.error = err


class TaskTransaction:
    """One task attempt's transactional producer and marker consumer.

    ``producer_conf``: checked settings from :func:`transactional_producer_config` (the
    transactional id is added here); ``consumer_conf``: from :func:`marker_consumer_config`;
    ``marker_topic``: the topic whose partition 0 holds the marker; ``timeout_ms``: bound of
    every blocking call. The producer has no delivery callback: a callback running while
    librdkafka raises a fatal error (fenced) breaks confluent-kafka, and a failed record makes
    ``commit_transaction`` fail anyway. Raises FencedError or DeliveryError (naming the
    transactional id, the Kafka error and the fix).
    """

    def __init__(self, producer_conf: Mapping[str, object], consumer_conf: Mapping[str, object],
                 scope: TaskScope, marker_topic: str, timeout_ms: int):
        from pyspark_kafka.kafka.clients import new_consumer, new_producer

        self.scope = scope
        self.tid = scope.transactional_id
        self.marker_topic = marker_topic
        self.timeout_s = timeout_ms / 1000
        self.txn_timeout_ms = int(producer_conf.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))
        # not a bound method: a producer whose close() fails (fenced) would otherwise stay in an
        # uncollectable cycle with this object and keep reconnecting
        self._fatal = _FirstFatalError()
        conf = {**producer_conf, "transactional.id": self.tid, "error_cb": self._fatal}
        self.producer = new_producer(conf)
        self.consumer = new_consumer({**consumer_conf, "group.id": self.tid})
        self.in_transaction = False
        self.storage_key = (str(producer_conf.get("bootstrap.servers", "")), _scope_of(self.tid))

    @property
    def fatal_error(self):
        """The first fatal producer error (e.g. fenced) librdkafka reported through ``error_cb``, or None."""
        return self._fatal.error

    def init(self) -> Marker | None:
        """InitProducerId (fences older attempts, aborts their open transaction), then read the marker."""
        from confluent_kafka import KafkaException

        try:
            self.producer.init_transactions(self.timeout_s)
        except KafkaException as e:
            raise self.kafka_error(e, "initialise the transactional producer") from None
        offset, metadata = self._read_committed()
        marker = parse_marker(offset, metadata)
        if marker is not None:  # a marker was stored: these brokers keep transactional offset commits
            _VERIFIED_STORAGE.add(self.storage_key)
        return marker

    def _read_committed(self) -> tuple[int, str | None]:
        """``(offset, metadata)`` committed by the marker group on partition 0 of the marker topic
        (OffsetFetch, stable offsets only); offset < 0 when nothing is committed."""
        from confluent_kafka import KafkaException, TopicPartition

        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                tp = self.consumer.committed([TopicPartition(self.marker_topic, 0)],
                                             timeout=max(deadline - time.monotonic(), 0.1))[0]
                break
            except KafkaException as e:
                # the group coordinator moves when the leader of its __consumer_offsets partition
                # dies (found killing leaders of a 3-node Apache Kafka): ask again, bounded
                if not _coordinator_moving(e.args[0]) or time.monotonic() >= deadline:
                    raise self.kafka_error(e, f"read the exactly-once marker (group '{self.tid}')") from None
                time.sleep(0.2)
        if tp.error is not None and tp.error.code() != _unknown_topic_code():
            raise DeliveryError(f"cannot read the exactly-once marker of group '{self.tid}': {tp.error.str()}")
        return tp.offset, tp.metadata

    def verify_marker_storage(self) -> None:
        """Check, once per query in this process, that the brokers store transactional offset commits.

        Called after :meth:`init` found no marker and before anything is produced: commits a
        transaction holding only a probe (offset :data:`PROBE_OFFSET`, which reads as "no
        marker", with a random nonce in the metadata) and reads it back. Skipped when this
        process already saw these brokers (``bootstrap.servers``) store one for this query (or
        :meth:`init` found a marker). Raises :class:`MarkerNotStoredError` naming the missing
        behaviour and the fix when the probe is not read back, FencedError / DeliveryError as
        :meth:`commit`.
        """
        if self.storage_key in _VERIFIED_STORAGE:
            return
        expected = probe_metadata(uuid.uuid4().hex)
        self.begin()
        self._commit_offset(PROBE_OFFSET, expected, "commit the exactly-once marker check")
        offset, metadata = self._read_committed()
        if offset != PROBE_OFFSET or metadata != expected:
            raise MarkerNotStoredError(
                f"deliveryGuarantee=exactly-once needs brokers that store offsets committed in a transaction, "
                f"and the brokers at {self.storage_key[0]} do not: they accepted the transactional offset "
                f"commit (TxnOffsetCommit) of group '{self.tid}' on {self.marker_topic}-0 (offset "
                f"{PROBE_OFFSET}, metadata {expected}) but return offset {offset}, metadata {metadata!r} "
                "(OffsetFetch). The replay marker would never be visible, so a replayed micro-batch "
                "would be written twice. Nothing of this task was written. Use brokers that store "
                "transactional offsets (Apache Kafka 0.11+, the embedded broker; librdkafka's mock "
                "cluster does not), or deliveryGuarantee=at-least-once"
            )
        _VERIFIED_STORAGE.add(self.storage_key)

    def begin(self) -> None:
        self.producer.begin_transaction()
        self.in_transaction = True

    def commit(self, marker: Marker) -> None:
        """Add the marker to the transaction and commit it (records and marker become visible together)."""
        self._commit_offset(marker.offset, marker.metadata(), "commit the transaction")

    def _commit_offset(self, offset: int, metadata: str, doing: str) -> None:
        """Add ``offset``/``metadata`` of the marker group to the open transaction and commit it."""
        from confluent_kafka import KafkaException, TopicPartition

        offsets = [TopicPartition(self.marker_topic, 0, offset, metadata)]
        try:
            self.producer.send_offsets_to_transaction(offsets, self.consumer.consumer_group_metadata(),
                                                      self.timeout_s)
            self._commit_with_retries()
        except KafkaException as e:
            raise self.kafka_error(e, doing) from None
        self.in_transaction = False

    def _commit_with_retries(self) -> None:
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                self.producer.commit_transaction(max(deadline - time.monotonic(), 0.1))
                return
            except KafkaException as e:  # a retriable commit (e.g. timed out) may be called again
                if not e.args[0].retriable() or time.monotonic() >= deadline:
                    raise

    def close(self) -> None:
        """Abort an open transaction (best effort) and close both clients."""
        if self.in_transaction:
            try:
                self.producer.purge()
                self.producer.abort_transaction(self.timeout_s)
            except Exception:  # fenced or fatal: the coordinator aborts it (next attempt or timeout)
                pass
            self.in_transaction = False
        with warnings.catch_warnings():  # the producer warns when its close() cannot abort (fenced, unreachable)
            warnings.simplefilter("ignore", RuntimeWarning)
            for close in (self.consumer.close, self.producer.close):
                try:
                    close()
                except Exception:  # closing is best effort
                    pass
        # librdkafka destroys a client when the Python object is freed; an exception's traceback
        # may keep this object alive, so it drops its clients
        self.producer = self.consumer = None

    def kafka_error(self, exc, doing: str) -> DeliveryError:
        """The error to raise for librdkafka's ``KafkaException`` (or ``KafkaError``) ``exc`` while ``doing`` something.

        FencedError when another producer took the transactional id over; otherwise DeliveryError
        with the Kafka error name and, where there is one, the fix.
        """
        from confluent_kafka import KafkaError

        err = exc.args[0] if isinstance(exc, Exception) else exc
        code = err.code()
        if code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH):
            return FencedError(
                f"cannot {doing}: transactional.id '{self.tid}' was taken over by a newer producer (a "
                "retried or speculative attempt of this task, a restarted query, or the transaction "
                f"coordinator aborting a transaction older than transaction.timeout.ms={self.txn_timeout_ms} ms). "
                "This attempt's records are aborted and invisible to read_committed consumers; if tasks "
                "take longer than the transaction timeout, raise kafka.transaction.timeout.ms"
            )
        hint = ""
        if code in (KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION):
            hint = ("; the brokers do not support transactions (KIP-98, Kafka 0.11+): use "
                    "deliveryGuarantee=at-least-once")
        elif code in (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED):
            hint = (f"; grant Write on transactional id '{self.tid}' and Read on group '{self.tid}' "
                    "(or on the prefix) to this client")
        elif code == KafkaError.INVALID_TRANSACTION_TIMEOUT:
            hint = "; lower kafka.transaction.timeout.ms to at most the brokers' transaction.max.timeout.ms"
        return DeliveryError(f"cannot {doing} for transactional.id '{self.tid}': {err.str()} ({err.name()})"
                             f"{hint}. Nothing of this attempt is visible to read_committed consumers")


def _unknown_topic_code() -> int:
    from confluent_kafka import KafkaError

    return KafkaError.UNKNOWN_TOPIC_OR_PART


__all__ = [
    "DEFAULT_PREFIX",
    "Decision",
    "FencedError",
    "Fingerprint",
    "Marker",
    "MarkerNotStoredError",
    "ReplayMismatchError",
    "TaskScope",
    "TaskTransaction",
    "batch_task_scope",
    "check_replay",
    "decide",
    "marker_consumer_config",
    "new_job_id",
    "parse_marker",
    "parse_prefix",
    "stream_task_scope",
    "transactional_id",
    "transactional_producer_config",
]


def _coordinator_moving(error) -> bool:
    """True for the errors Kafka answers while a group coordinator moves or loads
    (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS), or that librdkafka
    marks retriable: a committed-offsets read may be asked again."""
    from confluent_kafka import KafkaError

    moving = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS}
    return error.code() in moving or error.retriable()
