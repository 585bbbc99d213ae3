"""Reader options and schema of the ``pykafka`` source (Spark's ``KafkaSourceProvider`` option rules).

:func:`parse_reader_options` turns the data source options into a validated
:class:`ReaderOptions` (Spark's names, defaults and rules; see
``docs/reader.md``); :func:`kafka_schema` is the fixed schema of every read
(``KafkaRecordToRowConverter.kafkaSchema``). Consumer-group options are
checked by :func:`pyspark_kafka.read.consumer_group.parse_group_options`.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from typing import Mapping

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

from pyspark_kafka import offsets as O
from pyspark_kafka.errors import OptionError
from pyspark_kafka.options import get_option, parse_bool, parse_int, require_bootstrap
from pyspark_kafka.kafka.client_config import kafka_params
from pyspark_kafka.read.consumer_group import GroupOptions, parse_group_options

log = logging.getLogger(__name__)

FETCH_RETRY_INTERVAL_MS = 1000
"""Default of ``fetchOffset.retryIntervalMs`` (ms between driver metadata attempts): 1000, the
value in Spark's code (``KafkaOffsetReaderAdmin``/``KafkaOffsetReaderConsumer``); Spark's
integration guide says 10, its code wins."""

_UNSUPPORTED_KAFKA = {
    # auto.offset.reset: checked by pyspark_kafka.groups (allowed with startingOffsets=group / groupMembership)
    "key.deserializer": "keys are always read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": "values are always read as bytes; deserialize them with DataFrame operations",
    "enable.auto.commit": "the reader tracks offsets in Spark's checkpoint; remove it (to commit them to a "
    "consumer group, set the source option commitOffsets=true)",
    "interceptor.classes": "interceptors can change records and are not supported; remove it",
}


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
    group: GroupOptions
    read_path: str = "auto"


def parse_reader_options(options: Mapping[str, str], mode: str | None) -> ReaderOptions:
    """Parse and validate reader options (Spark's names, defaults and rules).

    ``mode``: ``"batch"``, ``"stream"`` or ``None`` (only the shared rules, at
    ``load()``). Defaults: batch starts at earliest and ends at latest;
    streaming starts at latest. Consumer-group options (``commitOffsets``,
    ``startingOffsets=group``, ``groupMembership``) are checked by
    :func:`pyspark_kafka.read.consumer_group.parse_group_options`. Raises OptionError naming
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
    group = parse_group_options(opts, sub.kind, starting, mode)
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
        fetch_retry_interval_ms=parse_int(opts, "fetchOffset.retryIntervalMs", FETCH_RETRY_INTERVAL_MS, minimum=0),
        api_timeout_ms=parse_int(opts, "kafka.default.api.timeout.ms", 60_000, minimum=1),
        group_id_prefix=get_option(opts, "groupIdPrefix"),
        group=group,
        read_path=parse_read_path(opts),
    )


READ_PATHS = ("auto", "columnar", "consumer")
"""Values of the ``readPath`` option (see ``docs/reader.md``)."""
DEFAULT_READ_PATH = "auto"
"""``readPath`` when the option is not given (the test suites set it to run each path)."""


def parse_read_path(options: Mapping[str, str]) -> str:
    """The ``readPath`` option (default :data:`DEFAULT_READ_PATH`): how executors read (columnar
    fetch path or confluent-kafka consumer). Raises OptionError for any other value."""
    value = (get_option(options, "readPath") or DEFAULT_READ_PATH).strip().lower()
    if value not in READ_PATHS:
        raise OptionError(f"option 'readPath' must be one of {', '.join(READ_PATHS)}, got {value!r}: "
                          "'auto' reads columnar when the configuration allows, 'consumer' forces the "
                          "confluent-kafka consumer, 'columnar' the columnar fetch path")
    return value


def check_schema(schema: StructType, opts: ReaderOptions) -> None:
    """Raise OptionError unless ``schema`` is None or :func:`kafka_schema` of ``opts`` (the schema is fixed)."""
    expected = kafka_schema(opts.include_headers)
    if schema is not None and schema != expected:
        raise OptionError(
            "the pykafka source has a fixed schema and cannot be read with a custom one: remove .schema(...) "
            f"(expected {expected.simpleString()})"
        )



def unique_group_id(opts: ReaderOptions, default_prefix: str) -> str:
    """Spark's unique group id: ``<groupIdPrefix or default_prefix>-<uuid4>`` (kafka.group.id wins when set)."""
    return f"{opts.group_id_prefix or default_prefix}-{uuid.uuid4()}"
