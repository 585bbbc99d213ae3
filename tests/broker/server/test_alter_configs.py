"""AlterConfigs (33) and IncrementalAlterConfigs (44) for topics: confluent-kafka and kafka-python admin
clients, DescribeConfigs reflecting the changes, runtime effect on the logs, restart, refusals."""

from __future__ import annotations

import datetime

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)

from support.topics import create_topic
from support.wire import WireClient

DEADLINE_S = 20.0
SET, DELETE, APPEND, SUBTRACT = (AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND,
                                 AlterConfigOpType.SUBTRACT)
DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_CONFIG = 5


def _incremental(admin, topic, *ops, validate_only=False):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, op, value in ops])
    return admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(DEADLINE_S)


def _described(admin, topic) -> dict[str, tuple[str, int]]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(DEADLINE_S)
    return {name: (e.value, int(e.source)) for name, e in entries.items()}


def _wire(bootstrap, resources, validate_only=False):
    request = IncrementalAlterConfigsRequest(resources=tuple(
        AlterConfigsResource(resource_type=rtype, resource_name=name, configs=tuple(
            AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in configs))
        for rtype, name, configs in resources), validate_only=validate_only)
    with WireClient(bootstrap) as client:
        response = client.request(request)
    return [(r.error_code, r.error_message) for r in response.responses]


def test_incremental_set_delete_append_subtract_and_describe(bootstrap, make_topic):
    topic = make_topic(partitions=1, config={"segment.bytes": "1048576"})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    _incremental(admin, topic, ("retention.ms", SET, "7200000"), ("segment.bytes", DELETE, None))
    described = _described(admin, topic)
    assert described["retention.ms"] == ("7200000", DYNAMIC_TOPIC_CONFIG)
    assert described["segment.bytes"] == ("1073741824", DEFAULT_CONFIG)
    _incremental(admin, topic, ("cleanup.policy", APPEND, "compact"))
    assert _described(admin, topic)["cleanup.policy"] == ("delete,compact", DYNAMIC_TOPIC_CONFIG)
    _incremental(admin, topic, ("cleanup.policy", SUBTRACT, "delete"))
    assert _described(admin, topic)["cleanup.policy"] == ("compact", DYNAMIC_TOPIC_CONFIG)
    _incremental(admin, topic, ("retention.ms", SET, "1000"), validate_only=True)
    assert _described(admin, topic)["retention.ms"] == ("7200000", DYNAMIC_TOPIC_CONFIG)


def test_legacy_alter_configs_replaces_every_override(bootstrap, make_topic):
    topic = make_topic(partitions=1, config={"retention.ms": "3600000"})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"max.message.bytes": "2000"})
    admin.alter_configs([res])[res].result(DEADLINE_S)
    described = _described(admin, topic)
    assert described["max.message.bytes"] == ("2000", DYNAMIC_TOPIC_CONFIG)
    assert described["retention.ms"] == ("604800000", DEFAULT_CONFIG)  # not given: back to the default


def test_kafka_python_alter_configs(bootstrap, make_topic):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType

    topic = make_topic(partitions=1)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "5000"})])
    finally:
        admin.close()
    assert _described(AdminClient({"bootstrap.servers": bootstrap}), topic)["retention.ms"] == (
        "5000", DYNAMIC_TOPIC_CONFIG)


def test_invalid_configs_and_resources_are_refused(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(KafkaException) as info:
        _incremental(admin, topic, ("no.such.config", SET, "1"))
    assert info.value.args[0].name() == "INVALID_CONFIG" and "no.such.config" in info.value.args[0].str()
    with pytest.raises(KafkaException) as info:
        _incremental(admin, topic, ("retention.ms", SET, "soon"))
    assert info.value.args[0].name() == "INVALID_CONFIG" and "retention.ms" in info.value.args[0].str()
    (code, message), = _wire(bootstrap, [(2, topic, [("retention.ms", 2, "1")])])  # APPEND to a non-list
    assert code == ErrorCode.invalid_config and "retention.ms" in message
    assert _wire(bootstrap, [(2, topic, [("retention.ms", 0, None)])])[0][0] == ErrorCode.invalid_request
    assert _wire(bootstrap, [(2, topic, [("retention.ms", 0, "1"), ("retention.ms", 0, "2")])])[0][0] == (
        ErrorCode.invalid_request)
    assert _wire(bootstrap, [(2, "no-such-topic-xyz", [("retention.ms", 0, "1")])])[0][0] == (
        ErrorCode.unknown_topic_or_partition)
    (code, message), = _wire(bootstrap, [(4, "0", [("log.dirs", 0, "/x")])])  # static: Kafka refuses it so
    assert (code, message) == (ErrorCode.invalid_request, "Cannot update these configs dynamically: [log.dirs]")
    assert _wire(bootstrap, [(8, "0", [("kafka", 0, "DEBUG")])])[0][0] == ErrorCode.invalid_request
    assert _described(admin, topic)["retention.ms"] == ("604800000", DEFAULT_CONFIG)  # nothing changed


def test_changes_apply_to_the_logs_at_once_and_survive_a_restart(tmp_path):
    from pyspark_kafka.broker import EmbeddedBroker

    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as broker:
        topic = create_topic(broker.bootstrap_servers, "alter-restart", 1)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        _incremental(admin, topic, ("max.message.bytes", SET, "200"), ("retention.ms", SET, "60000"),
                     ("segment.bytes", SET, "4096"))
        config = broker.broker.replica_manager.logs.get_log(topic, 0).config
        assert (config.max_message_bytes, config.retention_ms, config.segment_bytes) == (200, 60000, 4096)
        p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0, "retries": 0,
                      "compression.type": "none"})
        results = []
        p.produce(topic, b"x" * 1000, partition=0, on_delivery=lambda err, msg: results.append(err))
        p.flush(DEADLINE_S)
        assert results[0] is not None and results[0].name() == "MSG_SIZE_TOO_LARGE"
    with EmbeddedBroker(data_dir=data) as broker:
        described = _described(AdminClient({"bootstrap.servers": broker.bootstrap_servers}), topic)
        assert described["max.message.bytes"] == ("200", DYNAMIC_TOPIC_CONFIG)
        assert described["retention.ms"] == ("60000", DYNAMIC_TOPIC_CONFIG)
        assert broker.broker.replica_manager.logs.get_log(topic, 0).config.segment_bytes == 4096


def test_deleting_unset_dynamic_broker_throttles_is_a_no_op_success(bootstrap):
    # kafka-reassign-partitions --verify/--cancel clears these on every broker (dynamic configs: tests in
    # test_dynamic_configs.py); deleting one that is not set succeeds, as in Kafka
    throttles = [("leader.replication.throttled.rate", 1, None), ("follower.replication.throttled.rate", 1, None)]
    assert _wire(bootstrap, [(4, "0", throttles)]) == [(ErrorCode.none, None)]


#: What Apache Kafka 4.3.1 answered (one node, confluent-kafka 2.16.1) to DescribeConfigs of a group without overrides,
#: known or never seen: (name, value, source DEFAULT_CONFIG 5, read-only False)
KAFKA_GROUP_CONFIGS = [
    ("consumer.assignment.interval.ms", "1000"), ("consumer.heartbeat.interval.ms", "5000"),
    ("consumer.session.timeout.ms", "45000"), ("share.assignment.interval.ms", "1000"),
    ("share.auto.offset.reset", "latest"), ("share.delivery.count.limit", "5"), ("share.heartbeat.interval.ms", "5000"),
    ("share.isolation.level", "read_uncommitted"), ("share.partition.max.record.locks", "2000"),
    ("share.record.lock.duration.ms", "30000"), ("share.renew.acknowledge.enable", "true"),
    ("share.session.timeout.ms", "45000"), ("streams.assignment.interval.ms", "1000"),
    ("streams.heartbeat.interval.ms", "5000"), ("streams.initial.rebalance.delay.ms", "3000"),
    ("streams.num.standby.replicas", "0"), ("streams.session.timeout.ms", "45000")]


def test_describe_configs_of_a_group_lists_kafkas_group_configs(bootstrap):
    """Issue 28 item 7 (librdkafka 0081): DescribeConfigs on a GROUP resource (type 32) was refused; Kafka lists
    every group config at its default for any group id."""
    from confluent_kafka.admin import ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, "never-seen-group")
    configs = admin.describe_configs([resource])[resource].result(20)
    assert sorted((e.name, e.value) for e in configs.values()) == KAFKA_GROUP_CONFIGS
    assert {(e.source, e.is_read_only) for e in configs.values()} == {(5, False)}
