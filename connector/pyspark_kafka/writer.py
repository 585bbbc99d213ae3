"""The ``pykafka`` sink: batch and streaming writes of a DataFrame to Kafka topics.

Input columns are those of Spark's built-in Kafka sink:

==============  ==========================================  ==============================
column          type                                        meaning
==============  ==========================================  ==============================
``value``       binary or string (required)                 record value; null = tombstone
``key``         binary or string                            record key (string → UTF-8)
``topic``       string (unless option ``topic`` is set)     target topic; the option wins
``partition``   int                                         explicit partition
``headers``     array<struct<key:string,value:binary>>      record headers
``timestamp``   timestamp (or double: seconds)              CreateTime of the record
==============  ==========================================  ==============================

Any other column is ignored, as Spark's sink ignores it, with one warning naming it (checked
against Spark's sink: ``integration_tests/reference``, case ``write_extra_column``); a column of
a known name with the wrong type is a :class:`~pyspark_kafka.errors.SchemaError` on the driver,
before anything is sent.

Each Spark task produces its rows with one confluent-kafka ``Producer`` (``kafka.*``
options passed through; defaults ``acks=all``, ``enable.idempotence=true``,
``delivery.timeout.ms=120000`` as in the Java client; idle producers are reused by later
tasks of the same Python worker) to partitions chosen by
:mod:`pyspark_kafka.routing`, then flushes and checks the delivery reports: the task
succeeds only when every record was acknowledged (at-least-once), otherwise it fails
with :class:`~pyspark_kafka.errors.DeliveryError`. The commit message of a task counts
the acknowledged records per topic-partition.

With ``deliveryGuarantee=exactly-once`` each task writes its rows in one Kafka transaction
with a per-task ``transactional.id`` and commits, in the same transaction, a marker that
makes a replayed micro-batch write nothing twice (:mod:`pyspark_kafka.transactions`,
docs/exactly-once-kafka.md).
"""

from __future__ import annotations

import collections
import itertools
import logging
import operator
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DoubleType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from pyspark_kafka import transactions as txn
from pyspark_kafka.clients import ClientPool, close_quietly, config_key, new_consumer, new_producer, producer_config
from pyspark_kafka.errors import DeliveryError, OptionError, RecordError, SchemaError, authorization_hint
from pyspark_kafka.javaconfig import java_partitioner
from pyspark_kafka.options import get_option, kafka_params, redact
from pyspark_kafka.routing import Router, load_partitioner

log = logging.getLogger(__name__)

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"

PRODUCER_DEFAULTS = {"acks": "all", "enable.idempotence": "true", "delivery.timeout.ms": "120000"}
"""Producer settings applied unless a ``kafka.*`` option sets them (the Java client's defaults)."""

FLUSH_MARGIN_S = 10.0
"""Seconds a task waits for delivery reports beyond ``delivery.timeout.ms`` before giving up."""

_HEADERS_TYPE = "array<struct<key:string,value:binary>>"
_COLUMN_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "value": ((BinaryType, StringType), "binary or string"),
    "key": ((BinaryType, StringType), "binary or string"),
    "topic": ((StringType,), "string"),
    "partition": ((IntegerType,), "int"),
    "headers": ((ArrayType,), _HEADERS_TYPE),
    "timestamp": ((TimestampType, DoubleType), "timestamp (or double seconds since the epoch)"),
}


def _is_headers_type(dt: DataType) -> bool:
    if not isinstance(dt, ArrayType) or not isinstance(dt.elementType, StructType):
        return False
    fields = dt.elementType.fields
    return (
        len(fields) == 2
        and (fields[0].name, fields[1].name) == ("key", "value")
        and isinstance(fields[0].dataType, StringType)
        and isinstance(fields[1].dataType, BinaryType)
    )


def validate_schema(schema: StructType, topic_option: str | None) -> frozenset[str]:
    """Check the input columns against the sink's table; return the names present.

    Rules (Spark's ``KafkaWriter.validateQuery``): ``value`` is required; ``topic`` is required
    unless ``topic_option`` is set; each sink column has one of the types of the module table
    (nullability ignored). Other columns are ignored, as Spark ignores them, with one warning
    naming them (and the sink column a differently-cased name probably meant). Raises
    SchemaError naming the column, the type found, the type expected and the fix.
    """
    names = [f.name for f in schema.fields if f.name in _COLUMN_TYPES]
    unknown = [f.name for f in schema.fields if f.name not in _COLUMN_TYPES]
    if unknown:
        hints = [f" (did you mean '{n.lower()}'?)" if n.lower() in _COLUMN_TYPES else "" for n in unknown]
        log.warning("ignoring column(s) %s: the Kafka sink writes only %s (as Spark's Kafka sink, extra columns "
                    "are not written)", ", ".join(f"'{n}'{h}" for n, h in zip(unknown, hints)),
                    ", ".join(_COLUMN_TYPES))
    for f in schema.fields:
        if f.name not in _COLUMN_TYPES:
            continue
        types, expected = _COLUMN_TYPES[f.name]
        ok = _is_headers_type(f.dataType) if f.name == "headers" else isinstance(f.dataType, types)
        if not ok:
            raise SchemaError(
                f"column '{f.name}' has type {f.dataType.simpleString()}; the Kafka sink expects "
                f"{expected}. Cast it, e.g. CAST({f.name} AS {_cast_hint(f.name)})"
            )
    if "value" not in names:
        raise SchemaError(
            "required column 'value' (binary or string) is missing; "
            "e.g. df.selectExpr('to_json(struct(*)) AS value')"
        )
    if "topic" not in names and not topic_option:
        raise SchemaError(
            "no topic: set option 'topic' (.option('topic', 'name')) or add a string column 'topic'"
        )
    return frozenset(names)


def _cast_hint(name: str) -> str:
    return {"partition": "INT", "topic": "STRING", "timestamp": "TIMESTAMP", "headers": _HEADERS_TYPE}.get(
        name, "STRING"
    )


def parse_delivery_guarantee(options: Mapping[str, str]) -> str:
    """Option ``deliveryGuarantee``: ``at-least-once`` (default) or ``exactly-once`` (any case).

    ``exactly-once`` writes each task's rows in a Kafka transaction (KIP-98) with a replay
    marker (:mod:`pyspark_kafka.transactions`). Any other value raises OptionError listing
    the allowed ones.
    """
    raw = get_option(options, "deliveryGuarantee")
    value = AT_LEAST_ONCE if raw is None else raw.strip().lower()
    if value in (AT_LEAST_ONCE, EXACTLY_ONCE):
        return value
    raise OptionError(f"option 'deliveryGuarantee' must be 'at-least-once' or 'exactly-once', got {raw!r}")


def with_producer_defaults(conf: Mapping[str, object]) -> dict:
    """``conf`` plus :data:`PRODUCER_DEFAULTS` for settings it does not set.

    As in the Java client (KIP-679), idempotence is only defaulted on when ``acks`` is
    unset or ``all``/``-1``: an explicit ``acks=1`` quietly means no idempotence.
    ``message.timeout.ms`` (librdkafka's alias) counts as setting ``delivery.timeout.ms``.
    """
    out = dict(conf)
    out.setdefault("acks", PRODUCER_DEFAULTS["acks"])
    if str(out["acks"]).lower() in ("all", "-1"):
        out.setdefault("enable.idempotence", PRODUCER_DEFAULTS["enable.idempotence"])
    if "message.timeout.ms" not in out:
        out.setdefault("delivery.timeout.ms", PRODUCER_DEFAULTS["delivery.timeout.ms"])
    return out


def delivery_timeout_ms(conf: Mapping[str, object]) -> int:
    """``delivery.timeout.ms`` (alias ``message.timeout.ms`` in librdkafka) of a producer config, in ms."""
    raw = conf.get("delivery.timeout.ms", conf.get("message.timeout.ms"))
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise OptionError(f"option 'kafka.delivery.timeout.ms' must be an integer (ms), got {raw!r}") from None


@dataclass(frozen=True)
class WriteSpec:
    """What a write task needs, built and checked on the driver (picklable).

    ``columns``: input column names present; ``topic``: option ``topic`` or None;
    ``producer``: librdkafka settings; ``partitioner``: option ``partitioner`` as given;
    ``timeout_ms``: delivery timeout, also the bound for metadata requests.
    ``guarantee``: ``at-least-once`` or ``exactly-once``; for exactly-once ``prefix`` is
    option ``transactionalIdPrefix`` and ``consumer`` the marker consumer's settings.
    """

    columns: frozenset
    topic: str | None
    producer: dict
    partitioner: str | None
    timeout_ms: int
    guarantee: str = AT_LEAST_ONCE
    prefix: str | None = None
    consumer: dict | None = None

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == EXACTLY_ONCE

    @classmethod
    def from_options(cls, options: Mapping[str, str], schema: StructType) -> "WriteSpec":
        """Validate options and schema; raise OptionError / SchemaError before any record is sent."""
        guarantee = parse_delivery_guarantee(options)
        topic = get_option(options, "topic")
        columns = validate_schema(schema, topic)
        partitioner = get_option(options, "partitioner")
        java = java_partitioner(kafka_params(options))  # kafka.partitioner.class / kafka.partitioner
        if partitioner is None:
            partitioner = java
        elif java is not None and java != partitioner:
            raise OptionError(f"option 'partitioner' = {partitioner!r} contradicts the Kafka client setting "
                              f"that asks for {java!r}: keep one of them")
        load_partitioner(partitioner)  # fail on the driver, not in every task
        settings = producer_config(options)
        if "bootstrap.servers" not in settings:
            raise OptionError(
                "option 'kafka.bootstrap.servers' is required: "
                ".option('kafka.bootstrap.servers', 'host1:9092,host2:9092')"
            )
        if guarantee == EXACTLY_ONCE:
            return cls._exactly_once(options, settings, columns, topic, partitioner)
        conf = with_producer_defaults(settings)
        timeout_ms = delivery_timeout_ms(conf)
        new_producer(conf).close()  # unknown or malformed kafka.* settings fail here, on the driver
        return cls(columns, topic, conf, partitioner, timeout_ms)

    @classmethod
    def _exactly_once(cls, options, settings, columns, topic, partitioner) -> "WriteSpec":
        prefix = txn.parse_prefix(options)
        conf = txn.transactional_producer_config(settings)
        consumer = txn.marker_consumer_config(settings)
        # unknown or malformed kafka.* settings fail here, on the driver (no connection is made)
        new_producer({**conf, "transactional.id": txn.transactional_id(prefix, "check", 0)}).close()
        new_consumer({**consumer, "group.id": txn.transactional_id(prefix, "check", 0)}).close()
        return cls(columns, topic, conf, partitioner, delivery_timeout_ms(conf), EXACTLY_ONCE, prefix, consumer)


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    """Result of one write task: acknowledged records per ``(topic, partition)``.

    Exactly-once tasks also report their ``transactional_id`` and ``skipped=True`` when the
    marker showed their rows as already committed (a replay or a retry), so nothing was written.
    """

    counts: dict = field(default_factory=dict)
    transactional_id: str | None = None
    skipped: bool = False

    @property
    def records(self) -> int:
        return sum(self.counts.values())


def summarize(messages: Iterable[KafkaCommitMessage | None]) -> dict:
    """Sum the per-partition counts of the tasks' commit messages (None = failed task)."""
    total: Counter = Counter()
    for m in messages:
        if m is not None:
            total.update(m.counts)
    return dict(total)


def _skipped(messages) -> int:
    """Number of exactly-once tasks that found their rows already committed."""
    return sum(1 for m in messages if m is not None and m.skipped)


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("pykafka")``: append the DataFrame's rows to Kafka.

    ``options``: data source options; ``schema``: the DataFrame's schema; ``overwrite``:
    True for ``mode("overwrite")``, which Kafka cannot do (raises OptionError, as Spark's
    sink allows only append / errorifexists). Raises SchemaError / OptionError on bad
    columns or options before anything is sent.

    With ``deliveryGuarantee=exactly-once`` every task commits its own transaction under
    ``transactional.id = {prefix}-job-<random>-{partition}`` (batch id 0): retried and
    speculative attempts of a task write once; a rerun of the whole job writes again.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool):
        if overwrite:
            raise OptionError(
                "save mode 'overwrite' is not allowed for Kafka (topics are append-only); "
                "use mode('append')"
            )
        self.spec = WriteSpec.from_options(options, schema)
        self.job_id = txn.new_job_id() if self.spec.exactly_once else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        if self.spec.exactly_once:
            return write_transactional(self.spec, txn.batch_task_scope(self.spec.prefix, self.job_id), iterator)
        return write_batches(self.spec, iterator)

    def commit(self, messages) -> None:
        counts = summarize(messages)
        log.info("pykafka write committed %d records to %d partitions", sum(counts.values()), len(counts))

    def abort(self, messages) -> None:
        counts = summarize(messages)
        if self.spec.exactly_once:
            log.warning("pykafka write aborted; %d records of successful tasks are committed in Kafka "
                        "(each task's transaction is its own); failed attempts' records are aborted",
                        sum(counts.values()))
            return
        log.warning(
            "pykafka write aborted; %d records from successful tasks remain in Kafka (at-least-once)",
            sum(counts.values()),
        )


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("pykafka")``: append each micro-batch's rows to Kafka.

    ``overwrite`` (output mode ``complete``) is allowed as in Spark's sink: every
    micro-batch writes all rows again. Option ``deliveryGuarantee`` is checked here.

    With ``deliveryGuarantee=exactly-once`` each task commits one transaction under
    ``transactional.id = {prefix}-{queryId}-{partition}`` together with its marker, so a
    micro-batch replayed after a failure is written once (:mod:`pyspark_kafka.transactions`).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool):
        self.spec = WriteSpec.from_options(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        if self.spec.exactly_once:
            return write_transactional(self.spec, txn.stream_task_scope(self.spec.prefix), iterator)
        return write_batches(self.spec, iterator)

    def commit(self, messages, batchId: int) -> None:
        counts = summarize(messages)
        log.info("pykafka micro-batch %d committed %d records to %d partitions (%d tasks found theirs "
                 "already committed)", batchId, sum(counts.values()), len(counts), _skipped(messages))

    def abort(self, messages, batchId: int) -> None:
        counts = summarize(messages)
        if self.spec.exactly_once:
            log.warning("pykafka micro-batch %d aborted; %d records of successful tasks are committed in "
                        "Kafka with their markers: when the batch is replayed those tasks write nothing",
                        batchId, sum(counts.values()))
            return
        log.warning("pykafka micro-batch %d aborted; %d records from successful tasks remain in Kafka",
                    batchId, sum(counts.values()))


def write_batches(spec: WriteSpec, batches: Iterable[pa.RecordBatch]) -> KafkaCommitMessage:
    """Produce every row of ``batches`` and wait until all are acknowledged.

    Returns the acknowledged counts per ``(topic, partition)``. Raises RecordError for a
    row that cannot become a record (checked per Arrow batch before any of its rows is
    sent), DeliveryError when the cluster cannot be reached or a record is not
    acknowledged within ``delivery.timeout.ms``. After an error the producer's queue is
    purged: a failed task sends nothing more (rows of earlier batches may be in Kafka).
    """
    from confluent_kafka import KafkaException

    task = _WriteTask(spec)
    try:
        for batch in batches:
            task.send(batch)
        message = task.finish()
    except KafkaException as e:  # fatal producer error surfacing from poll/flush
        task.abandon()
        err = e.args[0]
        raise DeliveryError(f"the Kafka producer failed: {err.str()} ({err.name()})" + _hint(err)) from None
    except SystemError as e:
        # confluent-kafka (2.16) sets a fatal error's KafkaException in flush() and then runs the
        # delivery callback of each purged record, whose first C call fails with this SystemError
        # ("returned a result with an exception set"), the KafkaException as its cause: name that.
        # Sometimes the exception is lost on the way ("returned NULL without setting an
        # exception", about 1 flush in 20 here) and nothing in confluent-kafka names it again.
        task.abandon()
        if isinstance(e.__cause__, KafkaException):
            err = e.__cause__.args[0]
            raise DeliveryError(f"the Kafka producer failed: {err.str()} ({err.name()})" + _hint(err)) from None
        raise DeliveryError(_LOST_FATAL_ERROR.format(error=e) + (
            _IDEMPOTENT_HINT if _idempotent(spec.producer) else "")) from None
    except BaseException:
        task.abandon()
        raise
    _release(task.pooled)
    return message


def write_transactional(spec: WriteSpec, scope: txn.TaskScope,
                        batches: Iterable[pa.RecordBatch]) -> KafkaCommitMessage:
    """Exactly-once: write ``batches`` in one Kafka transaction of ``scope.transactional_id``.

    Protocol (:mod:`pyspark_kafka.transactions`): no rows → no transaction; otherwise
    ``init_transactions`` (fences older attempts), read the marker; if ``scope.batch_id`` or
    a later batch is committed, consume the input, check it is the committed one
    (:class:`~pyspark_kafka.transactions.ReplayMismatchError` if not) and write nothing;
    else begin, produce (same checks and routing as :func:`write_batches`), flush, add the
    marker and commit. Any error aborts the transaction, so a failed attempt leaves nothing
    visible to read_committed consumers. Raises RecordError, DeliveryError, FencedError.
    """
    from confluent_kafka import KafkaException

    liveness = txn.SparkLiveness()  # before reading: the input ends early if the Spark JVM dies
    rows = iter(batches)
    first = next((b for b in rows if b.num_rows), None)
    if first is None:
        return KafkaCommitMessage({}, scope.transactional_id)
    transaction = txn.TaskTransaction(spec.producer, spec.consumer, scope, _marker_topic(spec, first),
                                      spec.timeout_ms)
    task = None
    try:
        marker = transaction.init()
        decision = txn.decide(marker, scope.batch_id)
        if decision is not txn.Decision.WRITE:
            replayed = sum((txn.Fingerprint.of(b) for b in rows), txn.Fingerprint.of(first))
            if decision is txn.Decision.ALREADY_COMMITTED:
                liveness.check(scope.transactional_id)
                txn.check_replay(marker, replayed, scope.transactional_id)
            log.info("%s: batch %d already committed (%s); writing nothing",
                     scope.transactional_id, scope.batch_id, decision.value)
            return KafkaCommitMessage({}, scope.transactional_id, skipped=True)
        transaction.begin()
        task = _WriteTask(spec, _PooledProducer((), transaction.producer, _DeliveryFailures()))
        fingerprint = txn.Fingerprint()
        for batch in itertools.chain([first], rows):
            fingerprint += txn.Fingerprint.of(batch)
            task.send(batch)
        message = task.finish()
        liveness.check(scope.transactional_id)
        transaction.commit(txn.Marker(scope.batch_id, fingerprint))
        return KafkaCommitMessage(message.counts, scope.transactional_id)
    except txn.FencedError:
        raise
    except KafkaException as e:  # fatal producer error surfacing from poll/flush
        raise transaction.kafka_error(e, "produce") from None
    except DeliveryError:  # records not acknowledged: name the fatal cause (e.g. fenced) when there is one
        if transaction.fatal_error is not None:
            raise transaction.kafka_error(transaction.fatal_error, "produce") from None
        raise
    finally:
        transaction.close()
        if task is not None:  # an exception's traceback keeps this frame: it must not keep the producer alive
            task.producer = task.pooled = None


def _marker_topic(spec: WriteSpec, first: pa.RecordBatch) -> str:
    """Topic whose partition 0 holds the task's marker: option ``topic``, else the first row's topic.

    The same on every replay of the task (its rows are the same). Raises RecordError for a null topic.
    """
    if spec.topic is not None:
        return spec.topic
    topic = first.column("topic")[0].as_py()
    if topic is None:
        raise RecordError(
            "row 0 of this task's batch has a null 'topic'; fill the column or set option "
            "'topic' (.option('topic', 'name')), which then applies to every row"
        )
    return topic


class _DeliveryFailures:
    """The producer's ``on_delivery`` callback: counts failed deliveries, keeps a few reasons.

    With ``delivery.report.only.error`` only failed records are reported, so after
    ``flush()`` leaves nothing queued every record without a report was acknowledged
    (and no Python call is made per successful record).
    """

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        """Forget earlier failures (a pooled producer starts a new task)."""
        self.count = 0
        self.reasons: list[str] = []  # the first few distinct ones, for the error message

    def __call__(self, err, msg) -> None:
        self.count += 1
        reason = (f"topic '{msg.topic()}' partition {msg.partition()}: {err.str()} ({err.name()})"
                  + authorization_hint(err.name(), "WRITE", msg.topic()))
        if len(self.reasons) < 3 and reason not in self.reasons:
            self.reasons.append(reason)


@dataclass
class _PooledProducer:
    key: tuple
    producer: object
    failures: _DeliveryFailures


MAX_IDLE_PRODUCERS = 4
"""Idle producers kept per Python worker process, for the next tasks with the same settings."""

PRODUCERS = ClientPool(MAX_IDLE_PRODUCERS, lambda pooled: close_quietly(pooled.producer))
"""This process's idle producers (:class:`_PooledProducer`), the same pool as the reader's consumers."""


def _acquire(conf: Mapping[str, object]) -> _PooledProducer:
    """A producer for ``conf`` with no queued records: an idle one of this process, or a new one.

    Creating a producer costs a connection, metadata and (idempotent) InitProducerId, tens
    to hundreds of ms; Spark reuses Python workers, so later tasks and micro-batches reuse
    it, as Spark's own sink caches Java producers per executor.
    """
    key = config_key(conf)
    pooled = PRODUCERS.take(key)
    if pooled is not None:
        pooled.failures.reset()
        return pooled
    failures = _DeliveryFailures()
    producer = new_producer({**conf, "delivery.report.only.error": True, "on_delivery": failures})
    return _PooledProducer(key, producer, failures)


def _release(pooled: _PooledProducer) -> None:
    """Return a healthy producer (all its records acknowledged) to the pool; close the oldest beyond the cap."""
    PRODUCERS.put(pooled.key, pooled)


def close_idle_producers() -> None:
    """Close every idle producer of this process (tests, benchmarks, shutdown)."""
    PRODUCERS.close_all()


class _WriteTask:
    """One task's producer, partition metadata cache, router and delivery accounting.

    ``pooled``: the producer to use (a transactional one); by default one from this worker's pool.
    """

    def __init__(self, spec: WriteSpec, pooled: _PooledProducer | None = None):
        self.spec = spec
        self.router = Router(load_partitioner(spec.partitioner))
        self.routed: Counter = Counter()  # (topic, partition) -> records handed to the producer
        self._metadata: dict[str, tuple[int, list[int]]] = {}
        self.pooled = pooled or _acquire(spec.producer)
        self.producer = self.pooled.producer
        self.failures = self.pooled.failures

    # -- metadata -----------------------------------------------------------------
    def partitions_of(self, topic: str, refresh: bool = False) -> tuple[int, list[int]]:
        """``(partition count, partitions with a leader)`` of ``topic``, cached per task."""
        if refresh or topic not in self._metadata:
            self._metadata[topic] = self._fetch_metadata(topic)
        return self._metadata[topic]

    def _fetch_metadata(self, topic: str) -> tuple[int, list[int]]:
        from confluent_kafka import KafkaError, KafkaException

        deadline = time.monotonic() + self.spec.timeout_ms / 1000
        last = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                md = self.producer.list_topics(topic, timeout=remaining)
            except KafkaException as e:
                last = e.args[0]
                break
            tm = md.topics.get(topic)
            last = tm.error if tm is not None else None
            if tm is not None and tm.error is None and tm.partitions:
                available = sorted(p for p, pm in tm.partitions.items() if pm.leader >= 0)
                return len(tm.partitions), available
            if last is not None and last.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise RecordError(
                    f"topic '{topic}' does not exist on {self._servers()}; create it first "
                    "(e.g. AdminClient.create_topics or `pyspark-kafka topics create`), or enable "
                    "auto.create.topics.enable on the brokers"
                )
            time.sleep(min(0.1, max(remaining, 0)))  # topic being created: back off, bounded by deadline
        raise DeliveryError(
            f"cannot fetch metadata of topic '{topic}' from {self._servers()} within "
            f"{self.spec.timeout_ms} ms (kafka.delivery.timeout.ms): {last}. Check "
            "kafka.bootstrap.servers and that the brokers are reachable; nothing was written by this task"
        )

    def _servers(self) -> str:
        return str(redact(self.spec.producer).get("bootstrap.servers"))

    # -- routing and checks -------------------------------------------------------
    def send(self, batch: pa.RecordBatch) -> None:
        """Check one Arrow batch, route its rows and hand them to the producer.

        All checks of the batch (topic, partition range, timestamps, headers) run
        before any of its rows is produced.
        """
        n = batch.num_rows
        if n == 0:
            return
        cols = self.spec.columns
        keys = batch.column("key") if "key" in cols else None
        explicit = batch.column("partition") if "partition" in cols else None
        if explicit is not None and explicit.null_count == n:
            explicit = None
        if self.spec.topic is not None:
            topic = self.spec.topic
            partitions = self._route(topic, n, keys, explicit)
        else:
            topic, partitions = self._route_by_topic_column(batch, keys, explicit)
        timestamps = _timestamps_ms(batch.column("timestamp")) if "timestamp" in cols else None
        headers = _headers(batch.column("headers")) if "headers" in cols else None
        self._produce(
            topic,
            _as_bytes_list(batch.column("value")),
            _as_bytes_list(keys) if keys is not None else None,
            partitions.tolist(),
            timestamps,
            headers,
        )
        self.producer.poll(0)
        self._raise_on_failures()

    def _route_by_topic_column(self, batch, keys, explicit) -> tuple[str | list, np.ndarray]:
        """Route rows topic by topic; returns the single topic (or the per-row list) and partitions."""
        topics = self._topics(batch)
        encoded = pc.dictionary_encode(topics)
        names = encoded.dictionary.to_pylist()
        if len(names) == 1:
            return names[0], self._route(names[0], len(topics), keys, explicit)
        partitions = np.empty(len(topics), dtype=np.int64)
        idx = encoded.indices.to_numpy(zero_copy_only=False)
        for i, name in enumerate(names):
            rows = np.nonzero(idx == i)[0]
            take = pa.array(rows)
            partitions[rows] = self._route(
                name,
                len(rows),
                keys.take(take) if keys is not None else None,
                explicit.take(take) if explicit is not None else None,
            )
        return topics.to_pylist(), partitions

    def _topics(self, batch: pa.RecordBatch) -> pa.Array:
        topics = batch.column("topic")
        if topics.null_count:
            row = topics.is_null().to_numpy(zero_copy_only=False).argmax()
            raise RecordError(
                f"row {row} of this task's batch has a null 'topic'; fill the column or set option "
                "'topic' (.option('topic', 'name')), which then applies to every row"
            )
        return topics

    def _route(self, topic: str, n: int, keys, explicit) -> np.ndarray:
        num, available = self.partitions_of(topic)
        if explicit is not None:
            num, available = self._check_explicit(topic, explicit, num, available)
        partitions = self.router.assign(topic, n, num, keys, explicit, available)
        values, counts = np.unique(partitions, return_counts=True)
        self.routed.update({(topic, int(p)): int(c) for p, c in zip(values, counts)})
        return partitions

    def _check_explicit(self, topic, explicit, num, available):
        lo, hi = pc.min_max(explicit).values()
        lo, hi = lo.as_py(), hi.as_py()
        if lo is not None and (lo < 0 or hi >= num):
            num, available = self.partitions_of(topic, refresh=True)  # partitions may have been added
            if lo < 0 or hi >= num:
                bad = lo if lo < 0 else hi
                raise RecordError(
                    f"partition {bad} is out of range for topic '{topic}', which has {num} partitions "
                    f"(0..{num - 1}); fix the 'partition' column or add partitions to the topic"
                )
        return num, available

    # -- producing ----------------------------------------------------------------
    def _produce(self, topic, values, keys, partitions, timestamps, headers) -> None:
        """Enqueue records; ``topic`` is one name or a per-row list, the rest per-row lists.

        Rows go to librdkafka in row order. Without timestamps and headers the rows are
        handed over by ``map`` driven from C (no Python bytecode per row); a full local
        queue (``BufferError``) serves delivery reports and resumes at the refused row.
        Raises DeliveryError when librdkafka refuses a record outright (record larger
        than ``message.max.bytes``, fatal producer error such as a broker without
        idempotent-producer support).
        """
        from confluent_kafka import KafkaException

        n = len(values)
        if len(partitions) != n or (keys is not None and len(keys) != n) or (
                isinstance(topic, list) and len(topic) != n):
            raise ValueError("values, keys, partitions and topics must have one entry per row")
        values_left = iter(values)
        try:
            if timestamps is None and headers is None:
                self._produce_plain(topic, values, values_left, keys, partitions)
            else:
                self._produce_with_options(topic, values_left, keys, partitions, timestamps, headers)
        except KafkaException as e:
            err = e.args[0]
            row = n - operator.length_hint(values_left) - 1
            t = topic[row] if isinstance(topic, list) else topic
            cause = self._fatal_cause(err)
            raise DeliveryError(
                f"the producer refused a record for topic '{t}' partition {partitions[row]}: {err.str()} "
                f"({err.name()})" + cause + _hint(err)
            ) from None

    def _fatal_cause(self, err) -> str:
        """For a ``_FATAL`` refusal, the fatal error behind it, which confluent-kafka raises from
        the next ``poll`` (e.g. the InitProducerId of an idempotent producer denied
        CLUSTER_AUTHORIZATION_FAILED when the principal may WRITE no topic: KIP-679); else ""."""
        from confluent_kafka import KafkaError, KafkaException

        if err.code() != KafkaError._FATAL:
            return ""
        try:
            self.producer.poll(0)
        except KafkaException as e:
            first = e.args[0]
        except SystemError as e:  # see write_batches: the fatal KafkaException is its cause
            if not isinstance(e.__cause__, KafkaException):
                return ""
            first = e.__cause__.args[0]
        else:
            return ""
        return f"; cause: {first.str()} ({first.name()})" + _hint(first)

    def _produce_plain(self, topic, values, values_left, keys, partitions) -> None:
        """Rows without timestamp and headers: ``produce(topic, value, key, partition)`` per row, from C.

        ``values_left`` is the iterator over ``values`` the rows are taken from (its remaining
        length tells which row was refused).
        """
        produce = self.producer.produce
        n = len(partitions)
        topics = iter(topic) if isinstance(topic, list) else itertools.repeat(topic)
        keys_left = iter(keys) if keys is not None else itertools.repeat(None)
        parts_left = iter(partitions)
        while True:
            try:
                # map takes one row's arguments from every iterator, then calls produce
                collections.deque(map(produce, topics, values_left, keys_left, parts_left), maxlen=0)
                return
            except BufferError:  # the refused row's arguments are taken: retry it, then go on
                row = n - operator.length_hint(values_left) - 1
                t = topic[row] if isinstance(topic, list) else topic
                k = keys[row] if keys is not None else None
                v, p = values[row], partitions[row]
                self._when_queue_has_room(lambda: produce(t, v, k, p))

    def _produce_with_options(self, topic, values_left, keys, partitions, timestamps, headers) -> None:
        """Rows with a timestamp or headers: one keyword ``produce`` call per row."""
        produce = self.producer.produce
        n = len(partitions)
        topics = topic if isinstance(topic, list) else itertools.repeat(topic, n)
        keys = keys if keys is not None else itertools.repeat(None, n)
        timestamps = timestamps if timestamps is not None else itertools.repeat(0, n)
        headers = headers if headers is not None else itertools.repeat(None, n)
        for t, v, k, p, ts, h in zip(topics, values_left, keys, partitions, timestamps, headers):
            try:
                produce(t, v, k, partition=p, timestamp=ts, headers=h)
            except BufferError:
                self._when_queue_has_room(lambda: produce(t, v, k, partition=p, timestamp=ts, headers=h))

    def _when_queue_has_room(self, enqueue) -> None:
        """librdkafka's local queue is full: serve delivery reports until ``enqueue()`` fits.

        Bounded by ``delivery.timeout.ms``; raises DeliveryError after that.
        """
        deadline = time.monotonic() + self.spec.timeout_ms / 1000
        while time.monotonic() < deadline:
            self.producer.poll(0.05)
            self._raise_on_failures()
            try:
                enqueue()
                return
            except BufferError:
                continue
        raise DeliveryError(
            f"the producer queue stayed full for {self.spec.timeout_ms} ms (kafka.delivery.timeout.ms): "
            f"{self._servers()} is not taking records; check the brokers"
        )

    def _raise_on_failures(self) -> None:
        if self.failures.count:
            raise DeliveryError(
                f"Kafka did not acknowledge {self.failures.count} record(s) of this task: "
                f"{'; '.join(self.failures.reasons)}. "
                "The task fails so that nothing is lost; Spark may retry it "
                + ("(its transaction is aborted)" if self.spec.exactly_once else "(at-least-once)")
            )

    def finish(self) -> KafkaCommitMessage:
        """Flush (bounded by ``delivery.timeout.ms`` + margin) and check the delivery reports.

        Returns the acknowledged counts per ``(topic, partition)``: all routed records, since
        none failed and none is left in the queue (else DeliveryError).
        """
        left = self.producer.flush(self.spec.timeout_ms / 1000 + FLUSH_MARGIN_S)
        self._raise_on_failures()
        if left:
            raise DeliveryError(
                f"{left} of {sum(self.routed.values())} records were not acknowledged by {self._servers()} "
                f"within {self.spec.timeout_ms} ms (kafka.delivery.timeout.ms); the task fails so that "
                "nothing is lost"
            )
        return KafkaCommitMessage(dict(self.routed))

    def abandon(self) -> None:
        """After a failure: drop queued records so a failed task writes nothing more, and
        close the producer (its state is unknown, it is not reused)."""
        try:
            self.producer.purge()
            self.producer.poll(0)
        except Exception:  # best effort: the task is failing with the original error
            pass
        close_quietly(self.producer)


_LOST_FATAL_ERROR = ("the Kafka producer failed with a fatal error whose description confluent-kafka lost "
                     "({error}); librdkafka's FATAL log line on the Python worker's stderr names it")
_IDEMPOTENT_HINT = ("; with the idempotent producer (kafka.enable.idempotence, on by default) the usual fatal error "
                    "is CLUSTER_AUTHORIZATION_FAILED for its InitProducerId: the principal needs WRITE on the topic "
                    "(which implies IDEMPOTENT_WRITE, KIP-679) or IDEMPOTENT_WRITE on the cluster (kafka-acls)")


def _idempotent(conf: Mapping[str, object]) -> bool:
    """Whether librdkafka settings ``conf`` (the writer's, which always carry ``enable.idempotence``)
    enable the idempotent producer."""
    return str(conf.get("enable.idempotence", "false")).lower() in ("true", "1")


def _hint(err) -> str:
    """The fix for a librdkafka error that has an obvious one, else an empty string."""
    from confluent_kafka import KafkaError

    if err.code() == KafkaError._UNSUPPORTED_FEATURE:
        return ("; the brokers do not support the idempotent producer: set "
                "option kafka.enable.idempotence=false (at-least-once still holds)")
    if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return "; raise kafka.message.max.bytes (and the topic's max.message.bytes) or send smaller values"
    if err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
        return ("; the idempotent producer's InitProducerId was denied: the principal needs WRITE on the topic "
                "(which implies IDEMPOTENT_WRITE, KIP-679) or IDEMPOTENT_WRITE on the cluster (kafka-acls)")
    return ""


def _as_bytes_list(column: pa.Array) -> list:
    """Python ``bytes`` (or None) per row; a string column is viewed as its UTF-8 bytes
    (zero-copy), which is cheaper than building ``str`` objects the producer re-encodes."""
    if pa.types.is_string(column.type):
        column = column.view(pa.binary())
    return column.to_pylist()


def _timestamps_ms(column: pa.Array) -> list[int]:
    """Record timestamps in ms since the epoch; null → 0 (librdkafka: current time).

    Raises RecordError for a timestamp before the epoch (Kafka rejects negative CreateTime).
    """
    if pa.types.is_timestamp(column.type):
        us = column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
    else:  # double seconds, truncated to micros like Spark's CAST(double AS TIMESTAMP)
        us = pc.multiply(column, 1_000_000.0).cast(pa.int64(), safe=False)
    low = pc.min(us).as_py()
    if low is not None and low < 0:
        raise RecordError(
            f"timestamp {low} us is before 1970-01-01; Kafka record timestamps must be >= 0 "
            "(fix the 'timestamp' column or drop it to use the current time)"
        )
    return pc.divide(us, 1000).fill_null(0).to_pylist()


def _headers(column: pa.Array) -> list:
    """Headers per row as confluent-kafka ``[(key, value), ...]`` lists (None for null).

    Raises RecordError for a header with a null key (Kafka requires header keys).
    """
    if column.null_count < len(column):
        keys = pc.list_flatten(column).field("key")
        if keys.null_count:
            raise RecordError("a header has a null 'key'; Kafka header keys must be non-null strings")
    return [None if h is None else [(e["key"], e["value"]) for e in h] for h in column.to_pylist()]


__all__ = [
    "KafkaBatchWriter",
    "KafkaCommitMessage",
    "KafkaStreamWriter",
    "WriteSpec",
    "parse_delivery_guarantee",
    "validate_schema",
    "write_batches",
    "write_transactional",
]
