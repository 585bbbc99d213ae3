"""Broker/topic configs with Kafka's names and defaults, and Kafka's topic name rules."""

from __future__ import annotations

import pytest

from pyspark_kafka.broker.config import BROKER_DEFAULTS, LONG_MAX, TOPIC_CONFIG_TO_BROKER, BrokerConfig
from pyspark_kafka.broker.topic_config import LogConfig, validate_topic_name
from pyspark_kafka.broker.errors import ConfigError, InvalidConfigError, InvalidTopicError


def test_defaults_are_kafkas():
    config = BrokerConfig()
    assert config.get_int("log.segment.bytes") == 1073741824
    assert config.get_int("log.retention.ms") == 604800000
    assert config.get_int("log.retention.bytes") == -1
    assert config.get_int("log.index.interval.bytes") == 4096
    assert config.get("log.flush.interval.ms") is None
    assert config.get("log.message.timestamp.type") == "CreateTime"
    assert config.get_bool("auto.create.topics.enable") is True
    assert set(TOPIC_CONFIG_TO_BROKER.values()) <= set(BROKER_DEFAULTS)


def test_unknown_and_malformed_broker_configs_name_the_key():
    with pytest.raises(ConfigError, match="log.segmnt.bytes"):
        BrokerConfig({"log.segmnt.bytes": "1"})
    with pytest.raises(ConfigError, match="log.segment.bytes='big'.*whole number"):
        BrokerConfig({"log.segment.bytes": "big"})
    with pytest.raises(ConfigError, match="auto.create.topics.enable.*true or false"):
        BrokerConfig({"auto.create.topics.enable": "yes"})
    with pytest.raises(ConfigError, match="at least 14"):
        BrokerConfig({"log.segment.bytes": "10"})


def test_unit_synonyms_and_node_id_alias():
    config = BrokerConfig({"log.retention.hours": "1", "node.id": 3, "auto.create.topics.enable": False})
    assert config.get_int("log.retention.ms") == 3_600_000
    assert config.get_int("broker.id") == 3
    assert config.get_bool("auto.create.topics.enable") is False
    assert BrokerConfig({"log.retention.hours": "1", "log.retention.ms": "5"}).get_int("log.retention.ms") == 5
    names = {name: (value, default) for name, value, default in config.items()}
    assert names["log.retention.ms"] == ("3600000", False) and names["log.segment.bytes"][1] is True


def test_log_config_topic_overrides_beat_broker_defaults():
    broker = BrokerConfig({"log.retention.ms": "1000", "log.segment.bytes": "5000"})
    config = LogConfig.from_configs(broker, {"segment.bytes": "2048", "message.timestamp.type": "logappendtime"})
    assert (config.segment_bytes, config.retention_ms) == (2048, 1000)
    assert config.log_append_time and config.flush_ms == LONG_MAX and config.deletes
    both = LogConfig.from_configs(broker, {"cleanup.policy": "Compact, Delete"})
    assert both.cleanup_policy == "compact,delete" and both.deletes


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"segment.bytez": "1"}, "Unknown topic config name"),
        ({"retention.ms": "soon"}, "retention.ms"),
        ({"cleanup.policy": "shred"}, "use one of delete, compact"),
        ({"compression.type": "brotli"}, "use one of uncompressed, zstd, lz4, snappy, gzip, producer"),
        ({"segment.bytes": "1"}, "at least 14"),
    ],
)
def test_bad_topic_configs_are_invalid_config(overrides, match):
    with pytest.raises(InvalidConfigError, match=match) as info:
        LogConfig.from_configs(BrokerConfig(), overrides)
    assert info.value.error_code == 40


@pytest.mark.parametrize("name", ["a", "A.b_c-1", "__consumer_offsets", "x" * 249, "..."])
def test_legal_topic_names(name):
    validate_topic_name(name)


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "x" * 250, "a/b", "../etc", "..\\x", "a b", "tab\t", "new\nline", "ok\n", "é", "a:b", "/abs"],
)
def test_illegal_topic_names_including_path_escapes(name):
    with pytest.raises(InvalidTopicError) as info:
        validate_topic_name(name)
    assert info.value.error_code == 17
