"""Executor side of a read (Spark's ``KafkaBatchPartitionReader`` + ``KafkaRecordToRowConverter``).

:func:`read_partition` reads exactly one offset range (:class:`KafkaInputPartition`)
with an *assigned* consumer borrowed from the per-worker pool
(:func:`pyspark_kafka.kafka.clients.pooled_consumer`) and yields
``pyarrow.RecordBatch`` es of at most :data:`BATCH_ROWS` rows / about
:data:`BATCH_BYTES` bytes, so memory stays bounded whatever the range length.
Executors never commit to Kafka (``enable.auto.commit=false``).
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import time
from contextlib import contextmanager
from itertools import chain
from typing import Iterator, Mapping

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from pyspark_kafka import offsets as O
from pyspark_kafka.kafka.clients import consumer_config, pooled_consumer
from pyspark_kafka.errors import (
    DATA_LOSS_FIX,
    DataLossError,
    PySparkKafkaError,
    ReadTimeoutError,
    authorization_hint,
    corrupt_record_error,
)
from pyspark_kafka.read.options import kafka_schema

log = logging.getLogger(__name__)

BATCH_ROWS = 10_000
"""Most rows in one ``pyarrow.RecordBatch`` yielded by :func:`read_partition`."""
BATCH_BYTES = 8 * 1024 * 1024
"""A record batch is yielded once its keys and values reach about this many bytes."""
CONSUME_MESSAGES = 5_000
"""``num_messages`` of one ``Consumer.consume`` call."""


class KafkaInputPartition(InputPartition):
    """One offset range ``[from_offset, until_offset)`` of one topic-partition, plus how to read it.

    ``conf``: consumer configuration (secrets included: never print it, use
    ``redact``); ``poll_timeout_ms``: longest wait without progress;
    ``fail_on_data_loss`` / ``include_headers``: the source options; ``read_path``: the
    ``readPath`` option (``auto``, ``columnar`` or ``consumer``, see
    :func:`pyspark_kafka.read.columnar.choose_path`).
    """

    def __init__(self, rng: O.OffsetRange, conf: dict, poll_timeout_ms: int, fail_on_data_loss: bool,
                 include_headers: bool, read_path: str = "auto"):
        super().__init__(str(rng))
        self.range = rng
        self.conf = conf
        self.poll_timeout_ms = poll_timeout_ms
        self.fail_on_data_loss = fail_on_data_loss
        self.include_headers = include_headers
        self.read_path = read_path

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.range})"


class KafkaInputPartitionGroup(InputPartition):
    """Several :class:`KafkaInputPartition` s read one after the other by one Spark task.

    A streaming micro-batch with few records is planned as one task (see
    :func:`pyspark_kafka.read.planning.pack_small_trigger`): a Python task costs far more to launch
    than a JVM task (worker hand-over, pickled reader, Arrow stream), so four tasks of 250 records
    each spent most of a small trigger's time starting up. Rows keep their own ``partition`` column.
    """

    def __init__(self, parts: list):
        super().__init__(";".join(str(p.range) for p in parts))
        self.parts = parts

    def __repr__(self) -> str:
        return f"KafkaInputPartitionGroup({self.parts})"


def executor_conf(options: Mapping[str, str], group_id: str) -> dict:
    """Consumer configuration of executors (Spark's ``kafkaParamsForExecutors``).

    ``group_id`` is used unless ``kafka.group.id`` is set; no auto commit, no
    automatic offset reset (an out-of-range offset is reported, see
    ``failOnDataLoss``) and partition-EOF events (a range ending on control
    records or compacted-away offsets completes at the partition end).
    ``fetch.wait.max.ms`` defaults to 20 (librdkafka: 500): ranges end at or
    below the high watermark, so long polls only delay the next range of a
    reused consumer. ``fetch.queue.backoff.ms`` defaults to 10 (librdkafka: 1000):
    with 1000 a partition's fetcher pauses a second whenever its local queue is
    above ``queued.min.messages``, which capped one partition near 220k records/s
    here (a bare consume loop reached 1.9M/s with 10; issue 26). ``check.crcs`` defaults to true
    (librdkafka: false), as in Kafka's Java client and so in Spark's connector: a damaged record
    batch fails the read instead of returning wrong values (``kafka.check.crcs=false`` turns it off,
    on both read paths).
    """
    conf = consumer_config(
        options,
        group_id,
        **{
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
        },
    )
    return {"fetch.wait.max.ms": 20, "fetch.queue.backoff.ms": 10, "check.crcs": True, **conf}


class _ColumnBuilder:
    """Accumulates consumed messages column-wise and emits ``pyarrow.RecordBatch`` es.

    Each :meth:`add` (one ``Consumer.consume`` result, up to :data:`CONSUME_MESSAGES`
    messages) becomes Arrow / numpy chunks at once: one C-level pass per field over the
    ``Message`` objects (``map`` over the unbound methods), no Python bytecode per record and
    no Python object kept per record between calls. :meth:`flush` concatenates the chunks.
    ``rows`` counts the records added since the last flush, ``bytes`` their key and value
    bytes (Arrow data buffers).
    """

    def __init__(self, rng: O.OffsetRange, include_headers: bool):
        self._topic, self._partition = rng.topic, rng.partition
        self._headers = include_headers
        self._schema = _arrow_schema(include_headers)
        self._reset()

    def _reset(self):
        self.rows = 0
        self.bytes = 0
        self._keys, self._values, self._offsets, self._ts, self._hdrs = [], [], [], [], []

    def add(self, msgs: list) -> None:
        """Append ``msgs`` (confluent-kafka ``Message`` objects without error, in offset order)."""
        from confluent_kafka import Message

        n = len(msgs)
        if not n:
            return
        keys = pa.array(list(map(Message.key, msgs)), pa.binary())
        values = pa.array(list(map(Message.value, msgs)), pa.binary())
        self._keys.append(keys)
        self._values.append(values)
        self._offsets.append(np.fromiter(map(Message.offset, msgs), np.int64, n))
        # timestamp() is a (type, ms) tuple: flatten them into one int64 array, shape (n, 2)
        self._ts.append(np.fromiter(chain.from_iterable(map(Message.timestamp, msgs)), np.int64, 2 * n).reshape(n, 2))
        if self._headers:
            self._hdrs += map(Message.headers, msgs)
        self.rows += n
        self.bytes += _data_bytes(keys) + _data_bytes(values)

    def flush(self) -> pa.RecordBatch:
        """The records added since the last flush as one batch of the Kafka source schema; resets."""
        n = self.rows
        ts = np.concatenate(self._ts) if n else np.zeros((0, 2), np.int64)
        columns = [
            pa.concat_arrays(self._keys) if n else pa.array([], pa.binary()),
            pa.concat_arrays(self._values) if n else pa.array([], pa.binary()),
            pa.repeat(pa.scalar(self._topic, pa.string()), n),
            pa.repeat(pa.scalar(self._partition, pa.int32()), n),
            pa.array(np.concatenate(self._offsets) if n else np.zeros(0, np.int64), pa.int64()),
            pa.array(ts[:, 1] * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            # confluent-kafka timestamp types are 0 none / 1 create / 2 log append; Kafka's ids are -1 / 0 / 1
            pa.array((ts[:, 0] - 1).astype(np.int32), pa.int32()),
        ]
        if self._headers:
            columns.append(pa.array([h or None for h in self._hdrs], self._schema.field("headers").type))
        batch = pa.RecordBatch.from_arrays(columns, schema=self._schema)
        self._reset()
        return batch


def _data_bytes(column: pa.Array) -> int:
    """Bytes of the values of a (non-sliced) binary Arrow array: its data buffer's size."""
    data = column.buffers()[2]
    return data.size if data is not None else 0


@functools.lru_cache(maxsize=2)
def _arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of the Kafka source (built once per worker process: a task of a small
    micro-batch spent a fifth of its CPU rebuilding it)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")


@contextmanager
def no_cyclic_gc():
    """Python's cyclic garbage collector off while the block runs (back on after, if it was on).

    The read loop allocates many short-lived objects without reference cycles (consumer
    ``Message`` objects, Arrow chunks), which trigger generation-0 collections that find
    nothing: 0.38 µs of the 0.94 µs per record the consumer path spent in librdkafka plus its
    ``Message`` objects (issue 26's profile). Reference counting still frees them at once.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def read_partition(part: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """Read exactly ``part.range`` (every range of a :class:`KafkaInputPartitionGroup`, in order) and
    yield it as record batches (Spark's schema).

    The columnar fetch path (:mod:`pyspark_kafka.read.columnar`) reads it when ``part.read_path``
    and the configuration allow (:func:`~pyspark_kafka.read.columnar.choose_path`), else the
    pooled confluent-kafka consumer. Raises DataLossError when offsets of the range are gone and
    ``failOnDataLoss`` is true (else skips them with a warning), and
    ReadTimeoutError naming the range when no record arrives for
    ``kafkaConsumer.pollTimeoutMs``.
    """
    if isinstance(part, KafkaInputPartitionGroup):
        for one in part.parts:
            yield from read_partition(one)
        return
    if not isinstance(part, KafkaInputPartition) or part.range.size <= 0:
        return  # Spark passes a bare InputPartition(None) when partitions() is empty (nothing to read)
    from pyspark_kafka.read.columnar import choose_path, read_range_columnar

    config, _ = choose_path(getattr(part, "read_path", "auto"), part.conf)
    if config is not None:
        with no_cyclic_gc():
            yield from read_range_columnar(part, config, _arrow_schema(part.include_headers),
                                           lambda at, low, high: _out_of_range_resume(part, at, low, high),
                                           BATCH_ROWS)
        freeze_worker_heap("columnar")
    else:
        with pooled_consumer(part.conf) as consumer, no_cyclic_gc():
            yield from _read_range(consumer, part)
            consumer.unassign()
        freeze_worker_heap("consumer")


_HEAP_FROZEN: list[str] = []
"""The read paths after whose first read this process froze its heap."""


def freeze_worker_heap(path: str) -> None:
    """Once per process and read path (``"columnar"``, ``"consumer"``): collect, then move every
    object alive (the imported modules: pyspark, pyarrow, numba and its compiled kernels, kio,
    confluent-kafka; pooled clients) out of the cyclic garbage collector's reach (``gc.freeze``).

    Spark's Python worker daemon runs a full ``gc.collect()`` after every task of a reused worker
    (``pyspark/daemon.py``, when ``SPARK_REUSE_WORKER`` is set); its cost grows with the objects
    alive in the worker, which numba and kio make many (about 40–90 ms per task here), and it ran
    on every task of every micro-batch, after the task, beside the JVM's commit-log write. Each
    path's first read brings its own objects (the columnar path's first read compiles the numba
    kernels), so a worker that read through one path first freezes again after the other's first
    read (a session that read with ``readPath=consumer`` before ``columnar`` paid 20 ms more per
    small trigger, in ``commitOffsets``). Frozen objects are still freed by reference counting;
    only cycles among them would stay (none are made after the first read). Does nothing outside a
    reused Spark worker (``SPARK_REUSE_WORKER`` unset), e.g. in a test process.
    """
    if path not in _HEAP_FROZEN and os.environ.get("SPARK_REUSE_WORKER"):
        _HEAP_FROZEN.append(path)
        gc.collect()
        gc.freeze()


def _read_range(consumer, part: KafkaInputPartition, clock=time.monotonic) -> Iterator[pa.RecordBatch]:
    from confluent_kafka import TopicPartition

    rng = part.range
    until = rng.until_offset
    timeout_s = part.poll_timeout_ms / 1000
    builder = _ColumnBuilder(rng, part.include_headers)
    next_offset = rng.from_offset
    consumer.assign([TopicPartition(rng.topic, rng.partition, next_offset)])
    deadline = clock() + timeout_s
    while next_offset < until:
        # consume(n, t) waits until n messages or t: drain what is queued, else wait for one message
        msgs = consumer.consume(min(CONSUME_MESSAGES, BATCH_ROWS - builder.rows), timeout=0) or consumer.consume(
            1, timeout=max(0.0, min(1.0, deadline - clock()))
        )
        if msgs:
            next_offset = _take(consumer, part, msgs, next_offset, builder)
            deadline = clock() + timeout_s
            if builder.rows >= BATCH_ROWS or builder.bytes >= BATCH_BYTES:
                yield builder.flush()
            continue
        position = consumer.position([TopicPartition(rng.topic, rng.partition)])[0].offset
        if position >= until:
            break
        if clock() >= deadline:
            raise ReadTimeoutError(
                f"no record of {rng} arrived for {part.poll_timeout_ms} ms (waiting at offset {next_offset}) "
                f"from kafka.bootstrap.servers={part.conf.get('bootstrap.servers')!r}: check the brokers, or raise "
                f"kafkaConsumer.pollTimeoutMs"
            )
    if builder.rows:
        yield builder.flush()


def _take(consumer, part: KafkaInputPartition, msgs: list, next_offset: int, builder: _ColumnBuilder) -> int:
    """Add the messages of ``msgs`` inside the range to ``builder``; return the next offset to read.

    Returns ``until`` once the range is complete: a record at or past the end,
    or a partition-EOF event at or past the end (the last offsets were control
    records or compacted away — gaps, not data loss).
    """
    from confluent_kafka import KafkaError, Message

    rng = part.range
    until = rng.until_offset
    if not any(map(Message.error, msgs)):
        first, last = msgs[0].offset(), msgs[-1].offset()
        if first >= next_offset and last < until:
            builder.add(msgs)
            return last + 1
    kept = []
    for m in msgs:
        err = m.error()
        if err is None:
            off = m.offset()
            if off >= until:
                next_offset = until
                break
            if off >= next_offset:
                kept.append(m)
                next_offset = off + 1
            continue
        code = err.code()
        if code == KafkaError._PARTITION_EOF:
            if m.offset() >= until:
                next_offset = until
                break
        elif code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            builder.add(kept)
            kept = []
            next_offset = _on_out_of_range(consumer, part, next_offset)
            break
        elif code == KafkaError._BAD_MSG:  # librdkafka's check.crcs (or a batch it cannot parse)
            if m.offset() >= until:  # a damaged batch past the range, fetched along: not read, as on Spark's
                next_offset = until
                break
            raise corrupt_record_error(rng.topic, rng.partition, m.offset(), None, err.str())
        elif code == KafkaError.GROUP_AUTHORIZATION_FAILED and m.topic() is None:
            _group_denied_once(err)
        elif err.retriable():
            log.warning("reading %s: %s (retrying until kafkaConsumer.pollTimeoutMs)", rng, err.str())
        else:
            raise PySparkKafkaError(f"reading {rng} failed at offset {next_offset}: {err.str()} ({err.name()})"
                                    + authorization_hint(err.name(), "READ", rng.topic))
    builder.add(kept)
    return next_offset


_GROUP_DENIED_WARNED: list[bool] = []


def _group_denied_once(err) -> None:
    """librdkafka looks up the coordinator of the consumer's ``group.id`` even for assigned
    partitions (confluent-kafka refuses a consumer without one); executors never commit nor read
    committed offsets, so a denied group (FindCoordinator: GROUP_AUTHORIZATION_FAILED) does not
    stop the read. Kafka's Java consumer never asks with manual assignment, so Spark's connector
    needs no group ACL to read either. Logged once per worker process."""
    if not _GROUP_DENIED_WARNED:
        _GROUP_DENIED_WARNED.append(True)
        log.warning("reading goes on without the consumer group: %s (executors assign partitions and "
                    "never commit, so no group ACL is needed)", err.str())


def _on_out_of_range(consumer, part: KafkaInputPartition, next_offset: int) -> int:
    """``next_offset`` is no longer in the log: raise DataLossError, or skip to what is left."""
    from confluent_kafka import TopicPartition

    rng = part.range
    tp = TopicPartition(rng.topic, rng.partition)
    low, high = consumer.get_watermark_offsets(tp, timeout=part.poll_timeout_ms / 1000)
    resume = _out_of_range_resume(part, next_offset, low, high)
    if resume < rng.until_offset:
        consumer.assign([TopicPartition(rng.topic, rng.partition, resume)])
    return resume


def _out_of_range_resume(part: KafkaInputPartition, next_offset: int, low: int, high: int) -> int:
    """``failOnDataLoss`` for an out-of-range ``next_offset`` given the log start ``low`` and end ``high``:
    raise DataLossError, or log and return the offset to go on from (``until_offset``: range done)."""
    rng = part.range
    resume = low if next_offset < low else rng.until_offset  # before the log start, or past its end
    missing_end = min(resume, rng.until_offset)
    message = (
        f"offsets [{next_offset}, {missing_end}) of {rng.topic}-{rng.partition} are no longer available "
        f"(log start offset {low}, log end offset {high}) while reading {rng}"
    )
    if part.fail_on_data_loss:
        raise DataLossError(f"{message}. {DATA_LOSS_FIX}")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)
    return min(resume, rng.until_offset)
