"""Every topic config Apache Kafka 4.3.1 accepts is accepted here, with Kafka's type and range checks.

``KAFKA_TOPIC_CONFIGS`` is the DescribeConfigs (v4) answer of Apache Kafka 4.3.1 for a topic
created without overrides: name, default value, config type (1 boolean, 2 string, 3 int,
5 long, 6 double, 7 list). Two defaults differ on purpose (``DIFFERENT_DEFAULTS``, pinned in
``integration_tests/test_differential.py`` and listed in docs/testing.md).
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.static.primitive import i8

from support.wire import WireClient

KAFKA_TOPIC_CONFIGS = [  # captured from Apache Kafka 4.3.1
    ("cleanup.policy", "delete", 7),
    ("compression.gzip.level", "-1", 3),
    ("compression.lz4.level", "9", 3),
    ("compression.type", "producer", 2),
    ("compression.zstd.level", "3", 3),
    ("delete.retention.ms", "86400000", 5),
    ("file.delete.delay.ms", "60000", 5),
    ("flush.messages", "9223372036854775807", 5),
    ("flush.ms", "9223372036854775807", 5),
    ("follower.replication.throttled.replicas", "", 7),
    ("index.interval.bytes", "4096", 3),
    ("leader.replication.throttled.replicas", "", 7),
    ("local.retention.bytes", "-2", 5),
    ("local.retention.ms", "-2", 5),
    ("max.compaction.lag.ms", "9223372036854775807", 5),
    ("max.message.bytes", "1048588", 3),
    ("message.timestamp.after.max.ms", "3600000", 5),
    ("message.timestamp.before.max.ms", "9223372036854775807", 5),
    ("message.timestamp.type", "CreateTime", 2),
    ("min.cleanable.dirty.ratio", "0.5", 6),
    ("min.compaction.lag.ms", "0", 5),
    ("min.insync.replicas", "1", 3),
    ("preallocate", "false", 1),
    ("remote.log.copy.disable", "false", 1),
    ("remote.log.delete.on.disable", "false", 1),
    ("remote.storage.enable", "false", 1),
    ("retention.bytes", "-1", 5),
    ("retention.ms", "604800000", 5),
    ("segment.bytes", "1073741824", 3),
    ("segment.index.bytes", "10485760", 3),
    ("segment.jitter.ms", "0", 5),
    ("segment.ms", "604800000", 5),
    ("unclean.leader.election.enable", "false", 1),
]
DIFFERENT_DEFAULTS = {"file.delete.delay.ms": "0", "message.timestamp.after.max.ms": "9223372036854775807"}


def _describe(bootstrap: str, topic: str) -> dict:
    with WireClient(bootstrap) as client:
        response = client.request(DescribeConfigsRequest(
            resources=(DescribeConfigsResource(resource_type=i8(2), resource_name=topic, configuration_keys=None),),
            include_synonyms=False, include_documentation=False))
    (result,) = response.results
    assert result.error_code == 0
    return {c.name: (c.value, c.config_type) for c in result.configs}


def test_a_topic_describes_every_kafka_topic_config(bootstrap, make_topic):
    described = _describe(bootstrap, make_topic(1))
    assert sorted(described) == [name for name, _, _ in KAFKA_TOPIC_CONFIGS]
    for name, default, kind in KAFKA_TOPIC_CONFIGS:
        assert described[name] == (DIFFERENT_DEFAULTS.get(name, default), kind), name


@pytest.mark.parametrize("name,default,kind", KAFKA_TOPIC_CONFIGS, ids=[c[0] for c in KAFKA_TOPIC_CONFIGS])
def test_create_topics_accepts_kafkas_default(bootstrap, make_topic, name, default, kind):
    topic = make_topic(1, {name: default})
    value, config_type = _describe(bootstrap, topic)[name]
    assert (value, config_type) == (default, kind)


INVALID = [
    ("compression.gzip.level", "0"),
    ("compression.gzip.level", "10"),
    ("compression.lz4.level", "0"),
    ("compression.lz4.level", "18"),
    ("compression.zstd.level", "23"),
    ("compression.zstd.level", "fast"),
    ("local.retention.ms", "-3"),
    ("local.retention.bytes", "x"),
    ("remote.log.copy.disable", "yes"),
    ("remote.storage.enable", "true"),  # no tiered storage: Kafka refuses it too unless enabled at broker level
    ("leader.replication.throttled.replicas", "0-1"),
    ("follower.replication.throttled.replicas", "0:1,x"),
    ("min.cleanable.dirty.ratio", "half"),
    ("segment.ms", "0"),
    ("no.such.topic.config", "1"),
]


@pytest.mark.parametrize("name,value", INVALID, ids=[f"{n}={v}" for n, v in INVALID])
def test_invalid_values_are_invalid_config_naming_the_config(bootstrap, make_topic, name, value):
    with pytest.raises(KafkaException) as info:
        make_topic(1, {name: value})
    error = info.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert name in error.str()


def test_throttled_replicas_accept_kafkas_forms(bootstrap, make_topic):
    topic = make_topic(1, {"leader.replication.throttled.replicas": "*",
                           "follower.replication.throttled.replicas": "0:0, 1:0"})
    described = _describe(bootstrap, topic)
    assert described["leader.replication.throttled.replicas"][0] == "*"
    assert described["follower.replication.throttled.replicas"][0] == "0:0, 1:0"


def test_incremental_alter_configs_sets_the_new_configs(bootstrap, make_topic):
    topic = make_topic(1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry("compression.zstd.level", "7", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("leader.replication.throttled.replicas", "0:0", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("local.retention.ms", "-1", incremental_operation=AlterConfigOpType.SET),
    ])
    admin.incremental_alter_configs([resource])[resource].result(timeout=20)
    described = _describe(bootstrap, topic)
    assert described["compression.zstd.level"][0] == "7"
    assert described["leader.replication.throttled.replicas"][0] == "0:0"
    assert described["local.retention.ms"][0] == "-1"
    bad = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry("compression.lz4.level", "99", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([bad])[bad].result(timeout=20)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG and "compression.lz4.level" in info.value.args[0].str()


def _synonyms(bootstrap: str, topic: str, names: tuple[str, ...]) -> dict:
    with WireClient(bootstrap) as client:
        response = client.request(DescribeConfigsRequest(
            resources=(DescribeConfigsResource(resource_type=i8(2), resource_name=topic, configuration_keys=names),),
            include_synonyms=True, include_documentation=False))
    (result,) = response.results
    return {c.name: (int(c.config_source), [(s.name, int(s.source)) for s in c.synonyms]) for c in result.configs}


DYNAMIC_TOPIC, STATIC_BROKER, DEFAULT = 1, 4, 5


def test_topic_config_synonyms_as_kafka_lists_them(bootstrap, make_topic):
    # Apache Kafka 4.3.1 (Java admin client, integration_tests/conformance/java_observations.py):
    # retention.ms and segment.ms have no broker synonym (log.retention.ms / log.roll.ms have no
    # default; Kafka drops log.*.hours), segment.bytes lists log.segment.bytes as DEFAULT_CONFIG
    names = ("retention.ms", "segment.ms", "segment.bytes")
    assert _synonyms(bootstrap, make_topic(1), names) == {
        "retention.ms": (DEFAULT, []), "segment.ms": (DEFAULT, []),
        "segment.bytes": (DEFAULT, [("log.segment.bytes", DEFAULT)])}
    assert _synonyms(bootstrap, make_topic(1, {"retention.ms": "-1", "segment.bytes": "1048576"}), names) == {
        "retention.ms": (DYNAMIC_TOPIC, [("retention.ms", DYNAMIC_TOPIC)]), "segment.ms": (DEFAULT, []),
        "segment.bytes": (DYNAMIC_TOPIC, [("segment.bytes", DYNAMIC_TOPIC), ("log.segment.bytes", DEFAULT)])}


def test_a_broker_config_given_by_its_own_name_is_a_static_synonym(tmp_path):
    from pyspark_kafka.broker import EmbeddedBroker
    from support.topics import create_topic

    config = {"log.retention.ms": "3600000", "log.roll.hours": "2"}
    with EmbeddedBroker(data_dir=tmp_path, config=config) as broker:
        topic = create_topic(broker.bootstrap_servers, "synonyms", 1, None)
        assert _synonyms(broker.bootstrap_servers, topic, ("retention.ms", "segment.ms")) == {
            "retention.ms": (STATIC_BROKER, [("log.retention.ms", STATIC_BROKER)]),
            "segment.ms": (DEFAULT, [])}  # Kafka lists log.roll.hours for no topic config
