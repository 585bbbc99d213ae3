"""Topic-level configuration: one override's check, the effective log settings of a topic, topic names.

- :func:`validate_topic_config`: one topic config override, checked with its broker synonym's type and
  range (Kafka's ``LogConfig.validate``).
- :class:`LogConfig`: the effective per-topic log settings (topic overrides over broker defaults);
  :func:`topic_config_values`: every topic config with its value and whether it is the default
  (DescribeConfigs).
- :func:`validate_topic_name`: Kafka's topic name rules (``org.apache.kafka.common.internals.Topic``).

The broker-level tables these rest on (:data:`~pyspark_kafka.broker.config.TOPIC_CONFIG_TO_BROKER`,
:data:`~pyspark_kafka.broker.config.TOPIC_ONLY_DEFAULTS`) are in :mod:`pyspark_kafka.broker.config`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from pyspark_kafka.broker.config import (
    LONG_MAX,
    TOPIC_CONFIG_NAMES,
    TOPIC_CONFIG_TO_BROKER,
    TOPIC_ONLY_DEFAULTS,
    BrokerConfig,
    _check_value,
)
from pyspark_kafka.broker.errors import InvalidConfigError, InvalidTopicError


def topic_config_values(config: BrokerConfig, overrides: Mapping[str, str]) -> list[tuple[str, str | None, bool]]:
    """``(name, value, is_default)`` for every topic config (name order): the override in ``overrides``,
    else the broker default from ``config``."""
    return [(name, overrides[name], False) if name in overrides else (name, config.topic_default(name), True)
            for name in TOPIC_CONFIG_NAMES]


def validate_topic_config(name: str, value: object) -> str | None:
    """Check one topic-level config override; return its canonical string value.

    Raises :class:`InvalidConfigError` for an unknown topic config name (Kafka: "Unknown topic
    config name") or a value of the wrong type/range.
    """
    broker_name = TOPIC_CONFIG_TO_BROKER.get(name) or (name if name in TOPIC_ONLY_DEFAULTS else None)
    if broker_name is None:
        raise InvalidConfigError(
            f"Unknown topic config name: {name!r}. Known topic configs: {', '.join(TOPIC_CONFIG_NAMES)}"
        )
    if value is None:
        return None
    checked = _check_value(broker_name, value if isinstance(value, str) else str(value), where="topic config " + name)
    if name == "remote.storage.enable" and checked == "true":
        # Kafka with remote.log.storage.system.enable=false (its default) refuses it the same way
        raise InvalidConfigError("topic config remote.storage.enable=true: you have to enable remote storage "
                                 "system at broker level first (this broker has no tiered storage)")
    return checked


@dataclass(frozen=True)
class LogConfig:
    """Effective log settings of one topic (topic overrides over broker defaults).

    All sizes in bytes, all durations in ms. ``retention_ms``/``retention_bytes`` of -1 mean
    unlimited; ``flush_messages``/``flush_ms`` of ``LONG_MAX`` mean "leave flushing to the OS"
    (Kafka's default).
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    retention_ms: int = 604800000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    max_index_size: int = 10485760
    max_message_bytes: int = 1048588
    cleanup_policy: str = "delete"
    message_timestamp_type: str = "CreateTime"
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    compression_type: str = "producer"
    compression_level: int | None = None  # compression.<codec>.level of the topic's codec; None for snappy/producer
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    producer_id_expiration_ms: int = 86400000  # broker-wide producer.id.expiration.ms

    @property
    def compacts(self) -> bool:
        """True when the log cleaner compacts this topic (``cleanup.policy`` includes ``compact``)."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def max_segment_ms(self) -> int:
        """Age (ms) at which the active segment rolls: ``segment.ms``, or ``max.compaction.lag.ms`` when
        smaller on a compacted topic, so that no record waits longer to become cleanable (KIP-354,
        Kafka's ``LogConfig.maxSegmentMs``)."""
        if self.compacts and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def deletes(self) -> bool:
        """True when retention may delete segments (``cleanup.policy`` includes ``delete``)."""
        return "delete" in self.cleanup_policy.split(",")

    def timestamp_bounds(self, now_ms: int) -> tuple[int, int] | None:
        """``(low, high)`` a CreateTime record's timestamp must be in at ``now_ms``
        (``message.timestamp.before/after.max.ms``, Kafka's ``LogValidator.validateTimestamp``);
        None when nothing is refused (LogAppendTime, or both unlimited)."""
        if self.log_append_time or (self.message_timestamp_before_max_ms >= LONG_MAX
                                    and self.message_timestamp_after_max_ms >= LONG_MAX):
            return None
        return (now_ms - self.message_timestamp_before_max_ms, now_ms + self.message_timestamp_after_max_ms)

    @property
    def log_append_time(self) -> bool:
        """True when the broker stamps batches with its own clock (``LogAppendTime``)."""
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_configs(cls, broker: BrokerConfig, topic_overrides: Mapping[str, object] | None = None) -> "LogConfig":
        """Resolve the topic's settings: each field from the topic override, else the broker default.

        Raises :class:`InvalidConfigError` for unknown topic config names or bad values.
        """
        overrides = {k: validate_topic_config(k, v) for k, v in (topic_overrides or {}).items()}

        def value(topic_name: str) -> str | None:
            if overrides.get(topic_name) is not None:
                return overrides[topic_name]
            return broker.get(TOPIC_CONFIG_TO_BROKER[topic_name])

        def integer(topic_name: str, default: int = LONG_MAX) -> int:
            v = value(topic_name)
            return default if v is None else int(v)

        codec = value("compression.type") or "producer"
        return cls(
            segment_bytes=integer("segment.bytes"),
            segment_ms=integer("segment.ms"),
            retention_ms=integer("retention.ms"),
            retention_bytes=integer("retention.bytes"),
            index_interval_bytes=integer("index.interval.bytes"),
            max_index_size=integer("segment.index.bytes"),
            max_message_bytes=integer("max.message.bytes"),
            cleanup_policy=value("cleanup.policy") or "delete",
            message_timestamp_type=value("message.timestamp.type") or "CreateTime",
            flush_messages=integer("flush.messages"),
            flush_ms=integer("flush.ms"),
            delete_retention_ms=integer("delete.retention.ms"),
            min_compaction_lag_ms=integer("min.compaction.lag.ms"),
            max_compaction_lag_ms=integer("max.compaction.lag.ms"),
            min_cleanable_dirty_ratio=float(value("min.cleanable.dirty.ratio") or 0.5),
            compression_type=codec,
            compression_level=integer(f"compression.{codec}.level") if codec in ("gzip", "lz4", "zstd") else None,
            message_timestamp_before_max_ms=integer("message.timestamp.before.max.ms"),
            message_timestamp_after_max_ms=integer("message.timestamp.after.max.ms"),
            producer_id_expiration_ms=broker.get_int("producer.id.expiration.ms"),
        )


_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME_LENGTH = 249


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules: 1..249 chars of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``.

    These rules also keep every partition directory ``<topic>-<partition>`` inside the data
    directory (no ``/``, no ``..``). Internal topics (``__consumer_offsets``) are legal.
    Raises :class:`InvalidTopicError` naming the rule broken.
    """
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"Topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
            f"topic name: {name[:40]}... ({len(name)} characters)"
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f"Topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
