"""The ``pykafka`` reader: batch (``spark.read``) and micro-batch streaming (``spark.readStream``).

Options, schema and offset JSON are those of Spark's built-in Kafka source (see
``docs/reader.md``). The shape of a read:

- **driver**: :class:`OffsetReader` (one confluent-kafka AdminClient) lists the
  subscribed topic-partitions and their earliest / latest / by-timestamp
  offsets; :mod:`pyspark_kafka.offsets` turns them into offset ranges and splits
  the ranges into Spark input partitions (:class:`KafkaInputPartition`);
- **executors**: :func:`read_partition` reads exactly one offset range with an
  *assigned* consumer borrowed from the per-worker pool
  (:func:`pyspark_kafka.clients.pooled_consumer`) and yields
  ``pyarrow.RecordBatch`` es of at most :data:`BATCH_ROWS` rows / about
  :data:`BATCH_BYTES` bytes, so memory stays bounded whatever the range length.

Executors never commit to Kafka (``enable.auto.commit=false``). Consumer-group
commits, ``startingOffsets=group`` and group membership are driver-side and
live in :mod:`pyspark_kafka.groups`.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass
from typing import Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyspark_kafka import groups as G
from pyspark_kafka import offsets as O
from pyspark_kafka.clients import check_consumer_config, client_params, consumer_config, new_admin, pooled_consumer
from pyspark_kafka.errors import DataLossError, OptionError, PySparkKafkaError
from pyspark_kafka.options import get_option, kafka_params, parse_bool, parse_int, require_bootstrap

log = logging.getLogger(__name__)

BATCH_ROWS = 10_000
"""Most rows in one ``pyarrow.RecordBatch`` yielded by :func:`read_partition`."""
BATCH_BYTES = 8 * 1024 * 1024
"""A record batch is yielded once its keys and values reach about this many bytes."""
CONSUME_MESSAGES = 5_000
"""``num_messages`` of one ``Consumer.consume`` call."""

_UNSUPPORTED_KAFKA = {
    # auto.offset.reset: checked by pyspark_kafka.groups (allowed with startingOffsets=group / groupMembership)
    "key.deserializer": "keys are always read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": "values are always read as bytes; deserialize them with DataFrame operations",
    "enable.auto.commit": "the reader tracks offsets in Spark's checkpoint; remove it (to commit them to a "
    "consumer group, set the source option commitOffsets=true)",
    "interceptor.classes": "interceptors can change records and are not supported; remove it",
}

_DATA_LOSS_FIX = (
    "If this is expected (retention deleted the records, or the topic was deleted/recreated), "
    "set the source option failOnDataLoss=false to skip the missing offsets"
)


# --------------------------------------------------------------------------- schema + options


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (``KafkaRecordToRowConverter.kafkaSchema``).

    ``key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int`` plus
    ``headers array<struct<key:string,value:binary>>`` when ``include_headers``.
    """
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def read_schema(options: Mapping[str, str]) -> StructType:
    """Schema of a ``pykafka`` read; validates the options shared by batch and streaming reads.

    Raises OptionError (at ``load()``) for any option error that does not depend
    on batch vs streaming.
    """
    opts = parse_reader_options(options, mode=None)
    return kafka_schema(opts.include_headers)


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions a query reads: exactly one of Spark's three strategies.

    ``kind`` is ``"assign"`` (``partitions``: fixed list), ``"subscribe"``
    (``topics``: every partition of these topics) or ``"subscribePattern"``
    (``pattern``: every partition of the topics whose whole name matches; Python
    ``re`` syntax, internal topics ``__*`` excluded as the Java consumer does).
    """

    kind: str
    topics: tuple = ()
    pattern: str | None = None
    partitions: tuple = ()

    def select(self, cluster: Mapping[str, list]) -> list:
        """Subscribed topic-partitions given ``cluster`` = ``{topic: [partition, ...]}``, sorted.

        Raises OptionError when ``assign`` names a topic or partition the cluster lacks.
        """
        if self.kind == "assign":
            for t, p in self.partitions:
                if t not in cluster:
                    raise OptionError(
                        f"option 'assign' names topic {t!r}, which does not exist; create it or fix the option"
                    )
                if p not in cluster[t]:
                    raise OptionError(
                        f"option 'assign' names partition {t}-{p}, but topic {t!r} has partitions "
                        f"{sorted(cluster[t])}; fix the option"
                    )
            return sorted(self.partitions)
        if self.kind == "subscribe":
            names = [t for t in self.topics if t in cluster]
        else:
            rx = re.compile(self.pattern)
            names = [t for t in cluster if rx.fullmatch(t) and not t.startswith("__")]
        return sorted((t, p) for t in names for p in cluster[t])


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    """Exactly one of ``subscribe``, ``subscribePattern``, ``assign`` (Spark's ``validateGeneralOptions``).

    Raises OptionError when none or several are given, or the value is empty or malformed.
    """
    given = {n: get_option(options, n) for n in ("subscribe", "subscribePattern", "assign")}
    given = {n: v for n, v in given.items() if v is not None}
    if len(given) != 1:
        what = "none" if not given else "options " + ", ".join(f"'{n}'" for n in given)
        raise OptionError(
            f"exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be set, got {what}: "
            f"e.g. .option('subscribe', 'topicA,topicB')"
        )
    (name, value), = given.items()
    if name == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"option 'subscribe' names no topic (got {value!r}); use e.g. 'topicA,topicB'")
        return Subscription("subscribe", topics=topics)
    if name == "subscribePattern":
        pattern = value.strip()
        if not pattern:
            raise OptionError(f"option 'subscribePattern' is empty (got {value!r}); use a regex such as 'events-.*'")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regular expression ({exc}): {value!r}") from None
        return Subscription("subscribePattern", pattern=pattern)
    if not value.strip().startswith("{"):
        raise OptionError(f"option 'assign' must be JSON like {{\"topicA\":[0,1]}}, got {value!r}")
    return Subscription("assign", partitions=tuple(O.parse_assign(value)))


_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {"us": 0.001, "ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str, option: str) -> int:
    """Spark time string → ms (``Utils.timeStringAsMs``): ``"15m"``, ``"30s"``, ``"500ms"``, ``"500"`` (ms).

    Raises OptionError naming ``option`` for anything else.
    """
    m = _DURATION.match(str(text))
    if not m:
        raise OptionError(f"option '{option}' must be a duration such as '30s', '15m' or '500ms', got {text!r}")
    unit = m.group(2).lower() if m.group(2) else None
    return int(int(m.group(1)) * _DURATION_MS[unit])


@dataclass(frozen=True)
class ReaderOptions:
    """The parsed, validated reader options. Times are ms; limits are numbers of offsets."""

    options: dict
    subscription: Subscription
    starting: object
    ending: object
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    poll_timeout_ms: int
    fetch_attempts: int
    fetch_retry_interval_ms: int
    api_timeout_ms: int
    group_id_prefix: str | None
    group: G.GroupOptions


def parse_reader_options(options: Mapping[str, str], mode: str | None) -> ReaderOptions:
    """Parse and validate reader options (Spark's names, defaults and rules).

    ``mode``: ``"batch"``, ``"stream"`` or ``None`` (only the shared rules, at
    ``load()``). Defaults: batch starts at earliest and ends at latest;
    streaming starts at latest. Consumer-group options (``commitOffsets``,
    ``startingOffsets=group``, ``groupMembership``) are checked by
    :func:`pyspark_kafka.groups.parse_group_options`. Raises OptionError naming
    the option and the fix.
    """
    opts = dict(options)
    require_bootstrap(opts)
    sub = parse_subscription(opts)
    for key in kafka_params(opts):
        if key in _UNSUPPORTED_KAFKA:
            raise OptionError(f"Kafka option 'kafka.{key}' is not supported: {_UNSUPPORTED_KAFKA[key]}")
    min_parts = parse_int(opts, "minPartitions", None, minimum=1)
    max_recs = parse_int(opts, "maxRecordsPerPartition", None, minimum=1)
    max_per_trigger = parse_int(opts, "maxOffsetsPerTrigger", None, minimum=1)
    min_per_trigger = parse_int(opts, "minOffsetsPerTrigger", None, minimum=1)
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise OptionError(
            f"option 'minOffsetsPerTrigger' ({min_per_trigger}) is higher than 'maxOffsetsPerTrigger' "
            f"({max_per_trigger}); lower the minimum or raise the maximum"
        )
    delay = get_option(opts, "maxTriggerDelay")
    starting_default = O.LatestLimit() if mode == "stream" else O.EarliestLimit()
    starting = O.offset_limit(opts, "starting", starting_default)
    ending = O.offset_limit(opts, "ending", O.LatestLimit())
    if mode == "stream":
        for name in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
            if get_option(opts, name) is not None:
                raise OptionError(
                    f"option '{name}' is not valid in streaming queries: remove it (to stop after the data "
                    f"present at start, use .trigger(availableNow=True))"
                )
        ending = None
    elif mode == "batch":
        O.check_batch_limits(starting, ending)
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if get_option(opts, name) is not None:
                log.warning("option %s is ignored in batch queries", name)
    group = G.parse_group_options(opts, sub.kind, starting, mode)
    if get_option(opts, "kafka.group.id") is not None and not group.active:
        log.warning(
            "option kafka.group.id is set: concurrent queries with the same group id interfere with each "
            "other; groupIdPrefix is ignored"
        )
    return ReaderOptions(
        options=opts,
        subscription=sub,
        starting=starting,
        ending=ending,
        fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
        include_headers=parse_bool(opts, "includeHeaders", False),
        min_partitions=min_parts,
        max_records_per_partition=max_recs,
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=parse_duration_ms(delay, "maxTriggerDelay") if delay is not None else 15 * 60_000,
        poll_timeout_ms=parse_int(opts, "kafkaConsumer.pollTimeoutMs", 120_000, minimum=1),
        fetch_attempts=parse_int(opts, "fetchOffset.numRetries", 3, minimum=1),
        fetch_retry_interval_ms=parse_int(opts, "fetchOffset.retryIntervalMs", 10, minimum=0),
        api_timeout_ms=parse_int(opts, "kafka.default.api.timeout.ms", 60_000, minimum=1),
        group_id_prefix=get_option(opts, "groupIdPrefix"),
        group=group,
    )


def _check_schema(schema: StructType, opts: ReaderOptions) -> None:
    expected = kafka_schema(opts.include_headers)
    if schema is not None and schema != expected:
        raise OptionError(
            "the pykafka source has a fixed schema and cannot be read with a custom one: remove .schema(...) "
            f"(expected {expected.simpleString()})"
        )


# --------------------------------------------------------------------------- driver metadata


class OffsetReader:
    """Driver-side metadata through one confluent-kafka AdminClient (created lazily).

    Lists the subscribed topic-partitions (Metadata) and their offsets
    (ListOffsets: earliest = log start offset, latest = high watermark, or last
    stable offset under ``kafka.isolation.level=read_committed``, by timestamp).
    Each call is retried ``fetchOffset.numRetries`` times,
    ``fetchOffset.retryIntervalMs`` apart, each attempt bounded by
    ``kafka.default.api.timeout.ms``. Raises PySparkKafkaError naming the
    brokers when the cluster does not answer. Not picklable state: the admin
    client is dropped when pickled and on :meth:`close`.
    """

    def __init__(self, opts: ReaderOptions):
        self._opts = opts
        self._conf = client_params(opts.options)
        self._read_committed = str(self._conf.get("isolation.level", "read_uncommitted")).lower() == "read_committed"
        self._admin = None

    def __getstate__(self):
        return {**self.__dict__, "_admin": None}

    @property
    def _client(self):
        if self._admin is None:
            self._admin = new_admin(self._conf)
        return self._admin

    def close(self) -> None:
        """Drop the admin client (librdkafka closes it when it is released)."""
        self._admin = None

    def _retry(self, what: str, fn):
        """Call ``fn`` up to ``fetchOffset.numRetries`` times. After a failed attempt the admin
        client is dropped and made anew (Spark's KafkaOffsetReaderAdmin ``resetAdmin``): during
        a leader change librdkafka's cached metadata keeps sending ListOffsets with a stale
        leader epoch (FENCED_LEADER_EPOCH) to the old leader, found on a 3-node Apache Kafka."""
        last = None
        for attempt in range(self._opts.fetch_attempts):
            try:
                return fn()
            except OptionError:
                raise
            except Exception as exc:  # confluent-kafka raises KafkaException, futures may raise others
                last = exc
                log.warning("attempt %d to %s failed: %s", attempt + 1, what, exc)
                self.close()
                if attempt + 1 < self._opts.fetch_attempts:
                    time.sleep(self._opts.fetch_retry_interval_ms / 1000)
        raise PySparkKafkaError(
            f"could not {what} from kafka.bootstrap.servers={self._conf.get('bootstrap.servers')!r} after "
            f"{self._opts.fetch_attempts} attempts: {last}. Check that the brokers are reachable, or raise "
            f"fetchOffset.numRetries / kafka.default.api.timeout.ms"
        )

    def topic_partitions(self) -> list:
        """The subscribed topic-partitions, sorted (re-listed on every call: new topics/partitions appear)."""
        timeout = self._opts.api_timeout_ms / 1000

        def fetch():
            md = self._client.list_topics(timeout=timeout)
            return {name: sorted(t.partitions) for name, t in md.topics.items() if t.partitions}

        cluster = self._retry("list topics", fetch)
        return self._opts.subscription.select(cluster)

    def list_offsets(self, specs: Mapping) -> dict:
        """``{(topic, partition): OffsetSpec}`` → ``{(topic, partition): offset}`` (-1 when a timestamp has no match)."""
        if not specs:
            return {}
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        by_timestamp = type(OffsetSpec.for_timestamp(0))

        level = IsolationLevel.READ_COMMITTED if self._read_committed else IsolationLevel.READ_UNCOMMITTED
        timeout = self._opts.api_timeout_ms / 1000

        def fetch():
            futures = self._client.list_offsets(
                {TopicPartition(t, p): spec for (t, p), spec in specs.items()},
                isolation_level=level,
                request_timeout=timeout,
            )
            out = {}
            for tp, f in futures.items():
                offset = f.result(timeout=timeout + 5).offset
                spec = specs[(tp.topic, tp.partition)]
                if offset < -1 or (offset < 0 and not isinstance(spec, by_timestamp)):
                    # librdkafka answers OFFSET_INVALID (-1001) without an error while the
                    # partition's leader changes; never let it reach an offset log.
                    raise PySparkKafkaError(f"ListOffsets answered no offset ({offset}) for "
                                            f"{tp.topic}-{tp.partition} (its leader may be changing)")
                out[(tp.topic, tp.partition)] = offset
            return out

        return self._retry("list offsets", fetch)

    def earliest(self, tps) -> dict:
        """Log start offset of each topic-partition in ``tps``."""
        from confluent_kafka.admin import OffsetSpec

        return self.list_offsets({tp: OffsetSpec.earliest() for tp in tps})

    def latest(self, tps) -> dict:
        """Latest offset (high watermark, or last stable offset under read_committed) of each of ``tps``."""
        from confluent_kafka.admin import OffsetSpec

        return self.list_offsets({tp: OffsetSpec.latest() for tp in tps})

    def resolve(self, limit, which: str, tps: list | None = None) -> dict:
        """Resolve an offset limit (:mod:`pyspark_kafka.offsets`) to real offsets for the subscription.

        ``which`` is ``"starting"`` or ``"ending"`` (names the options in errors,
        and decides what a timestamp without match means). Raises OptionError
        when explicit offsets/timestamps do not name exactly the subscribed
        partitions, or a starting timestamp has no match under strategy ``error``.
        """
        from confluent_kafka.admin import OffsetSpec

        tps = self.topic_partitions() if tps is None else tps
        if isinstance(limit, O.EarliestLimit):
            return self.earliest(tps)
        if isinstance(limit, O.LatestLimit):
            return self.latest(tps)
        if isinstance(limit, O.SpecificOffsets):
            O.check_covers_partitions(limit.offsets, tps, f"{which}Offsets")
            wanted = dict(limit.offsets)
        else:
            if isinstance(limit, O.SpecificTimestamps):
                O.check_covers_partitions(limit.timestamps, tps, f"{which}OffsetsByTimestamp")
                stamps = dict(limit.timestamps)
            else:
                stamps = {tp: limit.timestamp for tp in tps}
            found = self.list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in stamps.items()})
            wanted = {
                tp: O.resolve_timestamp_offset(tp, found[tp], stamps[tp], which == "starting", limit.strategy)
                for tp in stamps
            }
        early = self.earliest([tp for tp, o in wanted.items() if o == O.EARLIEST])
        late = self.latest([tp for tp, o in wanted.items() if o == O.LATEST])
        return {tp: early.get(tp, late.get(tp, o)) for tp, o in wanted.items()}


# --------------------------------------------------------------------------- executor read path


class KafkaInputPartition(InputPartition):
    """One offset range ``[from_offset, until_offset)`` of one topic-partition, plus how to read it.

    ``conf``: consumer configuration (secrets included: never print it, use
    ``redact``); ``poll_timeout_ms``: longest wait without progress;
    ``fail_on_data_loss`` / ``include_headers``: the source options.
    """

    def __init__(self, rng: O.OffsetRange, conf: dict, poll_timeout_ms: int, fail_on_data_loss: bool, include_headers: bool):
        super().__init__(str(rng))
        self.range = rng
        self.conf = conf
        self.poll_timeout_ms = poll_timeout_ms
        self.fail_on_data_loss = fail_on_data_loss
        self.include_headers = include_headers

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.range})"


def executor_conf(options: Mapping[str, str], group_id: str) -> dict:
    """Consumer configuration of executors (Spark's ``kafkaParamsForExecutors``).

    ``group_id`` is used unless ``kafka.group.id`` is set; no auto commit, no
    automatic offset reset (an out-of-range offset is reported, see
    ``failOnDataLoss``) and partition-EOF events (a range ending on control
    records or compacted-away offsets completes at the partition end).
    ``fetch.wait.max.ms`` defaults to 20 (librdkafka: 500): ranges end at or
    below the high watermark, so long polls only delay the next range of a
    reused consumer.
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
    return {"fetch.wait.max.ms": 20, **conf}


class _ColumnBuilder:
    """Accumulates consumed messages column-wise and emits ``pyarrow.RecordBatch`` es."""

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
        from confluent_kafka import Message

        # map over the unbound C methods: about twice as fast as comprehensions calling m.key()
        self._keys += map(Message.key, msgs)
        self._values += map(Message.value, msgs)
        self._offsets += map(Message.offset, msgs)
        self._ts += map(Message.timestamp, msgs)
        if self._headers:
            self._hdrs += map(Message.headers, msgs)
        self.rows += len(msgs)
        self.bytes += sum(map(len, msgs))

    def flush(self) -> pa.RecordBatch:
        n = self.rows
        ts_type, ts_ms = zip(*self._ts) if n else ((), ())
        columns = [
            pa.array(self._keys, pa.binary()),
            pa.array(self._values, pa.binary()),
            pa.repeat(pa.scalar(self._topic, pa.string()), n),
            pa.repeat(pa.scalar(self._partition, pa.int32()), n),
            pa.array(self._offsets, pa.int64()),
            # confluent-kafka timestamp types are 0 none / 1 create / 2 log append; Kafka's ids are -1 / 0 / 1
            pc.multiply(pa.array(ts_ms, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC")),
            pc.subtract(pa.array(ts_type, pa.int32()), 1),
        ]
        if self._headers:
            columns.append(pa.array([h or None for h in self._hdrs], self._schema.field("headers").type))
        batch = pa.RecordBatch.from_arrays(columns, schema=self._schema)
        self._reset()
        return batch


def _arrow_schema(include_headers: bool) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")


class ReadTimeoutError(PySparkKafkaError):
    """An executor made no progress on its offset range within ``kafkaConsumer.pollTimeoutMs``."""


def read_partition(part: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """Read exactly ``part.range`` and yield it as record batches (Spark's schema).

    Raises DataLossError when offsets of the range are gone and
    ``failOnDataLoss`` is true (else skips them with a warning), and
    ReadTimeoutError naming the range when no record arrives for
    ``kafkaConsumer.pollTimeoutMs``.
    """
    if not isinstance(part, KafkaInputPartition) or part.range.size <= 0:
        return  # Spark passes a bare InputPartition(None) when partitions() is empty (nothing to read)
    with pooled_consumer(part.conf) as consumer:
        yield from _read_range(consumer, part)
        consumer.unassign()


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
        elif err.retriable():
            log.warning("reading %s: %s (retrying until kafkaConsumer.pollTimeoutMs)", rng, err.str())
        else:
            raise PySparkKafkaError(f"reading {rng} failed at offset {next_offset}: {err.str()}")
    builder.add(kept)
    return next_offset


def _on_out_of_range(consumer, part: KafkaInputPartition, next_offset: int) -> int:
    """``next_offset`` is no longer in the log: raise DataLossError, or skip to what is left."""
    from confluent_kafka import TopicPartition

    rng = part.range
    tp = TopicPartition(rng.topic, rng.partition)
    low, high = consumer.get_watermark_offsets(tp, timeout=part.poll_timeout_ms / 1000)
    resume = low if next_offset < low else rng.until_offset  # before the log start, or past its end
    missing_end = min(resume, rng.until_offset)
    message = (
        f"offsets [{next_offset}, {missing_end}) of {rng.topic}-{rng.partition} are no longer available "
        f"(log start offset {low}, log end offset {high}) while reading {rng}"
    )
    if part.fail_on_data_loss:
        raise DataLossError(f"{message}. {_DATA_LOSS_FIX}")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)
    if resume >= rng.until_offset:
        return rng.until_offset
    consumer.assign([TopicPartition(rng.topic, rng.partition, resume)])
    return resume


# --------------------------------------------------------------------------- batch reader


def _group_id(opts: ReaderOptions, default_prefix: str) -> str:
    """Spark's unique group id: ``<groupIdPrefix or default>-<uuid>`` (kafka.group.id wins when set)."""
    return f"{opts.group_id_prefix or default_prefix}-{uuid.uuid4()}"


def _report_data_loss(fail: bool):
    def report(message: str) -> None:
        if fail:
            raise DataLossError(f"{message}. {_DATA_LOSS_FIX}")
        log.warning("%s (failOnDataLoss=false)", message)

    return report


class KafkaBatchReader(DataSourceReader):
    """``spark.read.format("pykafka")``: reads the offsets between starting and ending offsets once.

    ``options``: the data source options; ``schema``: must be :func:`kafka_schema`.
    Raises OptionError for bad options (when Spark creates the reader).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType):
        self._opts = parse_reader_options(options, mode="batch")
        _check_schema(schema, self._opts)
        self._conf = executor_conf(self._opts.options, _group_id(self._opts, "spark-kafka-relation") + "-executor")

    def partitions(self) -> list:
        """Resolve starting/ending offsets on the driver and split them into input partitions."""
        check_consumer_config(self._conf)
        meta = OffsetReader(self._opts)
        try:
            tps = meta.topic_partitions()
            start = self._starting_offsets(meta, tps)
            end = meta.resolve(self._opts.ending, "ending", tps)
        finally:
            meta.close()
        ranges = []
        for tp in tps:
            if start[tp] > end[tp]:
                raise OptionError(
                    f"the starting offset of {tp[0]}-{tp[1]} ({start[tp]}) is after its ending offset ({end[tp]}); "
                    f"fix startingOffsets/endingOffsets (or the timestamps)"
                )
            ranges.append(O.OffsetRange(tp[0], tp[1], start[tp], end[tp]))
        split = O.split_ranges(ranges, self._opts.min_partitions, self._opts.max_records_per_partition)
        return [self._input_partition(r) for r in split]

    def _starting_offsets(self, meta: OffsetReader, tps: list) -> dict:
        o = self._opts
        if not isinstance(o.starting, O.GroupLimit):
            return meta.resolve(o.starting, "starting", tps)
        with G.group_offsets(o.options, o.group.group_id, o.api_timeout_ms / 1000) as offsets:
            return G.resolve_start(offsets, meta, tps, o.group.offset_reset, _report_data_loss(o.fail_on_data_loss))

    def _input_partition(self, rng: O.OffsetRange) -> KafkaInputPartition:
        o = self._opts
        return KafkaInputPartition(rng, self._conf, o.poll_timeout_ms, o.fail_on_data_loss, o.include_headers)

    def read(self, partition: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the records of one offset range as record batches."""
        return read_partition(partition)


# --------------------------------------------------------------------------- stream reader


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("pykafka")``: micro-batches over Kafka offsets.

    Offsets are Spark's JSON form, ``{"topic": {"0": 5, "1": 7}}`` (next offset
    to read per partition). Admission control: ``maxOffsetsPerTrigger`` (spread
    over partitions by backlog), ``minOffsetsPerTrigger`` + ``maxTriggerDelay``;
    ``Trigger.AvailableNow`` stops at the offsets that were latest when the
    query started. New partitions (and, with ``subscribePattern``, new topics)
    join from their earliest offset. Raises OptionError for bad options (at
    query start) and DataLossError for missing offsets when ``failOnDataLoss``.

    Consumer groups (:class:`pyspark_kafka.groups.StreamGroup`): with
    ``commitOffsets`` the offsets Spark has finished (``start`` of
    :meth:`latestOffset`, ``end`` of :meth:`commit`) are committed to
    ``kafka.group.id``; with ``groupMembership`` the offsets name only the
    partitions assigned to this query, and a partition enters them at the
    group's committed offset.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType):
        self._opts = parse_reader_options(options, mode="stream")
        _check_schema(schema, self._opts)
        self._conf = executor_conf(self._opts.options, _group_id(self._opts, "spark-kafka-source") + "-executor")
        self._meta = OffsetReader(self._opts)
        self._latest: dict | None = None
        self._available_now = False
        self._available_now_target: dict | None = None
        self._last_trigger_ms = 0
        o = self._opts
        self._group = G.StreamGroup(o.group, o.options, o.subscription, o.api_timeout_ms) if o.group.active else None

    def initialOffset(self) -> dict:
        """Offsets of ``startingOffsets`` / ``startingTimestamp`` / ``startingOffsetsByTimestamp`` (default latest).

        ``startingOffsets=group``: the group's committed offsets; with
        ``groupMembership`` no partition (they come with the assignment).
        """
        check_consumer_config(self._conf)
        o = self._opts
        if o.group.membership:
            initial = {}
        elif isinstance(o.starting, O.GroupLimit):
            initial = self._group.start_offsets(self._meta, self._meta.topic_partitions(),
                                                _report_data_loss(o.fail_on_data_loss))
        else:
            initial = self._meta.resolve(o.starting, "starting")
        if self._group is not None:
            self._group.set_initial(initial)
        return O.offsets_to_json_dict(initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)``, else ``ReadMinRows(minOffsetsPerTrigger)``, else all available.

        When both are set Spark 4.3's Python API has no composite limit: the
        limit carries the maximum and :meth:`latestOffset` applies the minimum
        (with ``maxTriggerDelay``) from the options.
        """
        if self._opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._opts.max_offsets_per_trigger)
        if self._opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self._opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: the first :meth:`latestOffset` fixes the target offsets of the run.

        Raises OptionError with ``groupMembership`` (a member's partitions change while it runs).
        """
        if self._opts.group.membership:
            raise OptionError(
                "option groupMembership=true needs a continuously running query, not Trigger.AvailableNow: use "
                "startingOffsets=group with commitOffsets=true instead (or another trigger)"
            )
        self._available_now = True

    def _fetch_latest(self) -> dict:
        return self._meta.resolve(O.LatestLimit(), "latest")

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """End offsets of the next micro-batch (Spark's ``KafkaMicroBatchStream.latestOffset``).

        ``start``: the previous end (JSON dict); ``limit``: the engine's read
        limit (``ReadAllAvailable`` ignores the options' limits). Returns
        ``start`` to skip the trigger when ``minOffsetsPerTrigger`` is not met.
        """
        begin = O.offsets_from_json_dict(start)
        if self._group is not None:
            self._group.processed(begin)  # Spark asks for the next batch once the one ending at start is done
            if self._opts.group.membership:
                return self._member_latest_offset(begin, limit)
        if self._available_now:
            if self._available_now_target is None:
                self._available_now_target = self._fetch_latest()
            latest = self._available_now_target
        else:
            latest = self._fetch_latest()
        self._latest = latest
        if isinstance(limit, ReadAllAvailable):
            return O.offsets_to_json_dict(latest)
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self._opts.min_offsets_per_trigger
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self._opts.max_offsets_per_trigger
        if min_rows is not None and not self._available_now:
            now = int(time.time() * 1000)
            available = O.available_records(begin, latest)
            if O.should_delay_batch(available, min_rows, now, self._last_trigger_ms, self._opts.max_trigger_delay_ms):
                return start
            self._last_trigger_ms = now
        if max_rows is None:
            return O.offsets_to_json_dict(latest)
        new = [tp for tp in latest if tp not in begin]
        known = {**self._meta.earliest(new), **begin} if new else begin
        return O.offsets_to_json_dict(O.rate_limit(max_rows, known, latest))

    def _member_latest_offset(self, begin: dict, limit: ReadLimit) -> dict:
        """``latestOffset`` of a group member: its assigned partitions only (``maxOffsetsPerTrigger`` applies)."""
        adopted, reading = self._group.member_end_offsets(begin, self._meta, _report_data_loss(self._opts.fail_on_data_loss))
        latest = self._meta.latest(reading) if reading else {}
        self._latest = {**adopted, **latest}
        if isinstance(limit, ReadMaxRows):
            latest = O.rate_limit(limit.max_rows, {tp: begin[tp] for tp in reading}, latest)
        return O.offsets_to_json_dict({**adopted, **latest})

    def reportLatestOffset(self) -> dict | None:
        """The latest offsets seen by the last :meth:`latestOffset` (shown in query progress), or None."""
        return O.offsets_to_json_dict(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> list:
        """Input partitions of the micro-batch ``(start, end]`` (new partitions read from their earliest offset)."""
        begin, until = O.offsets_from_json_dict(start), O.offsets_from_json_dict(end)
        if self._opts.group.membership:  # adopted partitions (only in end) and released ones (only in start): no range
            begin, until = {tp: o for tp, o in begin.items() if tp in until}, {tp: o for tp, o in until.items() if tp in begin}
        new = [tp for tp in until if tp not in begin]
        went_back = [tp for tp in until if tp in begin and until[tp] < begin[tp]]
        earliest = self._meta.earliest(new + went_back) if new or went_back else {}
        ranges = O.plan_ranges(
            begin,
            until,
            {tp: earliest[tp] for tp in new if tp in earliest},
            _report_data_loss(self._opts.fail_on_data_loss),
            earliest=earliest,
        )
        split = O.split_ranges(ranges, self._opts.min_partitions, self._opts.max_records_per_partition)
        o = self._opts
        return [KafkaInputPartition(r, self._conf, o.poll_timeout_ms, o.fail_on_data_loss, o.include_headers) for r in split]

    def read(self, partition: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the records of one offset range as record batches."""
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        """Spark finished every offset before ``end``: commit it to the group with ``commitOffsets``."""
        if self._group is not None:
            self._group.processed(O.offsets_from_json_dict(end))

    def stop(self) -> None:
        """Leave the consumer group (a member commits its processed offsets first); close the admin client."""
        if self._group is not None:
            self._group.close()
        self._meta.close()
