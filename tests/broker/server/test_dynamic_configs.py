"""Dynamic broker configs and group configs (issue 28 item 7, librdkafka 0081): AlterConfigs / IncrementalAlterConfigs
on a BROKER resource (this broker, or the cluster default "") and on a GROUP resource, as Apache Kafka 4.3.1 answered
them (docs/compatibility.md): applied, described with source DYNAMIC_BROKER_CONFIG (2) / DYNAMIC_DEFAULT_BROKER_CONFIG
(3) / GROUP_CONFIG (8), used by the broker, kept across a restart; Kafka's refusals."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)

from support.consumer_groups import Member
from support.topics import create_topic
from support.wire import WireClient

DEADLINE_S = 20.0
SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND
BROKER, GROUP = ResourceType.BROKER, ResourceType.GROUP
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DEFAULT_CONFIG, GROUP_CONFIG = 2, 3, 5, 8


def _alter(admin, rtype, name, *ops, validate_only=False):
    """IncrementalAlterConfigs through confluent-kafka; None on success, else the KafkaError."""
    res = ConfigResource(rtype, name, incremental_configs=[
        ConfigEntry(n, v, incremental_operation=op) for n, op, v in ops])
    try:
        admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(DEADLINE_S)
    except KafkaException as e:
        return e.args[0]
    return None


def _described(admin, rtype, name) -> dict[str, tuple[str, int, bool]]:
    res = ConfigResource(rtype, name)
    entries = admin.describe_configs([res])[res].result(DEADLINE_S)
    return {n: (e.value, int(e.source), e.is_read_only) for n, e in entries.items()}


def _wire_alter(bootstrap, name, configs):
    """IncrementalAlterConfigs of broker resource ``name`` (also "", which confluent-kafka does not send)."""
    request = IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
        resource_type=4, resource_name=name, configs=tuple(
            AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in configs)),), validate_only=False)
    with WireClient(bootstrap) as client:
        (r,) = client.request(request).responses
    return r.error_code, r.error_message


def _wire_describe_default(bootstrap) -> dict[str, tuple[str, int]]:
    request = DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=4, resource_name="", configuration_keys=None),), include_synonyms=True,
        include_documentation=False)
    with WireClient(bootstrap) as client:
        (r,) = client.request(request).results
    assert r.error_code == ErrorCode.none
    return {c.name: (c.value, c.config_source) for c in r.configs}


def test_dynamic_broker_configs_apply_are_described_and_survive_a_restart(tmp_path):
    from pyspark_kafka.broker import EmbeddedBroker

    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as embedded:
        bootstrap = embedded.bootstrap_servers
        topic = create_topic(bootstrap, "dyn-defaults", 1)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # what Kafka 4.3.1 applied in librdkafka's 0081, and a name Kafka does not know (accepted, as Kafka)
        assert _alter(admin, BROKER, "0", ("background.threads", SET, "9"), ("log.cleanup.policy", APPEND, "compact"),
                      ("sasl.kerberos.min.time.before.relogin", SET, "58000"), ("my.custom.config", SET, "x"),
                      ("log.retention.ms", SET, "3600000")) is None
        described = _described(admin, BROKER, "0")
        assert described["background.threads"] == ("9", DYNAMIC_BROKER_CONFIG, False)
        assert described["log.cleanup.policy"] == ("delete,compact", DYNAMIC_BROKER_CONFIG, False)
        assert described["sasl.kerberos.min.time.before.relogin"] == ("58000", DYNAMIC_BROKER_CONFIG, False)
        assert described["num.partitions"] == ("1", DEFAULT_CONFIG, True)  # static: read-only
        assert described["my.custom.config"] == (None, DYNAMIC_BROKER_CONFIG, True)  # as Kafka: no value shown
        # the broker uses them: a topic without overrides now compacts and keeps records for an hour
        config = embedded.broker.replica_manager.logs.get_log(topic, 0).config
        assert (config.cleanup_policy, config.retention_ms) == ("delete,compact", 3600000)
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entry = admin.describe_configs([res])[res].result(DEADLINE_S)["cleanup.policy"]
        assert (entry.value, int(entry.source)) == ("delete,compact", DYNAMIC_BROKER_CONFIG)
        # the cluster default (resource ""): below the per-broker value, described with source 3
        assert _wire_alter(bootstrap, "", [("log.retention.ms", 0, "7200000"), ("num.io.threads", 0, "10")]) == (
            ErrorCode.none, None)
        assert _wire_describe_default(bootstrap) == {"log.retention.ms": ("7200000", DYNAMIC_DEFAULT_BROKER_CONFIG),
                                                     "num.io.threads": ("10", DYNAMIC_DEFAULT_BROKER_CONFIG)}
        assert _alter(admin, BROKER, "0", ("log.retention.ms", DELETE, None)) is None
        assert _described(admin, BROKER, "0")["log.retention.ms"] == ("7200000", DYNAMIC_DEFAULT_BROKER_CONFIG, False)
        assert embedded.broker.replica_manager.logs.get_log(topic, 0).config.retention_ms == 7200000
    with EmbeddedBroker(data_dir=data) as embedded:
        admin = AdminClient({"bootstrap.servers": embedded.bootstrap_servers})
        described = _described(admin, BROKER, "0")
        assert described["background.threads"] == ("9", DYNAMIC_BROKER_CONFIG, False)
        assert described["log.cleanup.policy"] == ("delete,compact", DYNAMIC_BROKER_CONFIG, False)
        assert described["log.retention.ms"] == ("7200000", DYNAMIC_DEFAULT_BROKER_CONFIG, False)
        assert embedded.broker.replica_manager.logs.get_log(topic, 0).config.compacts


def test_dynamic_broker_config_refusals_change_nothing(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    before = _described(admin, BROKER, "0")
    error = _alter(admin, BROKER, "0", ("log.dirs", SET, "/elsewhere"), ("num.partitions", SET, "3"))
    assert (error.name(), error.str()) == ("INVALID_REQUEST",
                                           "Cannot update these configs dynamically: [log.dirs, num.partitions]")
    error = _alter(admin, BROKER, "0", ("log.retention.ms", SET, "soon"))
    assert error.name() == "INVALID_REQUEST" and "log.retention.ms" in error.str()
    error = _alter(admin, BROKER, "0", ("ssl.keystore.location", SET, "/k.jks"))
    assert error.name() == "INVALID_REQUEST" and "listener prefix" in error.str()
    error = _alter(admin, BROKER, "0", ("background.threads", SET, "100"))  # more than double the current 10
    assert error.name() == "INVALID_REQUEST" and "double the current value 10" in error.str()
    error = _alter(admin, BROKER, "0", ("log.retention.ms", APPEND, "5"))
    assert error.name() == "INVALID_CONFIG" and "log.retention.ms" in error.str()
    code, message = _wire_alter(bootstrap, "7", [("log.retention.ms", 0, "5")])  # librdkafka sends it to broker 7
    assert (code, message) == (ErrorCode.invalid_request, "Unexpected broker id, expected 0 or empty string, but "
                                                           "received 7")
    code, message = _wire_alter(bootstrap, "", [("listeners", 0, "PLAINTEXT://127.0.0.1:1")])
    assert code == ErrorCode.invalid_request and "broker id must be specified" in message
    assert _alter(admin, BROKER, "0", ("log.retention.ms", SET, "1"), validate_only=True) is None
    assert _described(admin, BROKER, "0") == before


def test_group_configs_are_stored_described_and_used_by_the_consumer_group_coordinator(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = f"dyn-group-{uuid.uuid4().hex[:6]}"
    assert _alter(admin, GROUP, group, ("consumer.session.timeout.ms", SET, "50000"),
                  ("consumer.heartbeat.interval.ms", SET, "6000")) is None
    described = _described(admin, GROUP, group)
    assert described["consumer.session.timeout.ms"] == ("50000", GROUP_CONFIG, False)
    assert described["consumer.heartbeat.interval.ms"] == ("6000", GROUP_CONFIG, False)
    assert described["consumer.assignment.interval.ms"] == ("1000", DEFAULT_CONFIG, False)
    assert _described(admin, GROUP, group + "-other")["consumer.session.timeout.ms"] == (
        "45000", DEFAULT_CONFIG, False)
    topic = create_topic(bootstrap, f"dyn-group-{uuid.uuid4().hex[:6]}", 1)
    with WireClient(bootstrap) as client:  # KIP-848: the group's heartbeat interval in the coordinator's answer
        response = Member(client, group, (topic,)).join()
    assert response.error_code == 0
    assert response.heartbeat_interval == datetime.timedelta(milliseconds=6000)
    error = _alter(admin, GROUP, group, ("no.such.group.config", SET, "1"))
    assert (error.name(), error.str()) == ("INVALID_CONFIG", "Unknown group config name: no.such.group.config")
    error = _alter(admin, GROUP, group, ("consumer.session.timeout.ms", SET, "1000"))
    assert error.name() == "INVALID_CONFIG" and "group.consumer.min.session.timeout.ms" in error.str()
    error = _alter(admin, GROUP, group, ("consumer.session.timeout.ms", SET, "soon"))
    assert error.name() == "INVALID_CONFIG" and "consumer.session.timeout.ms" in error.str()
    assert _alter(admin, GROUP, group, ("consumer.heartbeat.interval.ms", DELETE, None)) is None
    assert _described(admin, GROUP, group)["consumer.heartbeat.interval.ms"] == ("5000", DEFAULT_CONFIG, False)
    assert _described(admin, GROUP, group)["consumer.session.timeout.ms"] == ("50000", GROUP_CONFIG, False)


def test_legacy_alter_configs_of_a_group_replaces_its_configs(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = f"dyn-legacy-{uuid.uuid4().hex[:6]}"
    assert _alter(admin, GROUP, group, ("consumer.session.timeout.ms", SET, "50000")) is None
    res = ConfigResource(GROUP, group, set_config={"consumer.heartbeat.interval.ms": "7000"})
    admin.alter_configs([res])[res].result(DEADLINE_S)
    described = _described(admin, GROUP, group)
    assert described["consumer.heartbeat.interval.ms"] == ("7000", GROUP_CONFIG, False)
    assert described["consumer.session.timeout.ms"] == ("45000", DEFAULT_CONFIG, False)  # not given: back to default
    with pytest.raises(KafkaException):
        bad = ConfigResource(GROUP, group, set_config={"nope": "1"})
        admin.alter_configs([bad])[bad].result(DEADLINE_S)


def observe_dynamic_configs(bootstrap: str, node: str) -> dict:
    """What a broker answers to librdkafka 0081's dynamic config steps, as comparable values (what both Kafka and the
    embedded broker must agree on). Waits (bounded) for each applied change to be described."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    seen: dict = {}

    def outcome(error):
        return None if error is None else error.name()

    seen["set"] = outcome(_alter(admin, BROKER, node, ("background.threads", SET, "9"),
                                 ("log.cleanup.policy", APPEND, "compact"),
                                 ("sasl.kerberos.min.time.before.relogin", SET, "58000"),
                                 ("my.custom.config", SET, "x")))
    names = ("background.threads", "log.cleanup.policy", "sasl.kerberos.min.time.before.relogin", "num.partitions")
    deadline = time.monotonic() + DEADLINE_S
    while True:  # Kafka applies a broker config change once its metadata has the record
        described = _described(admin, BROKER, node)
        seen["described"] = {n: described.get(n) for n in names}
        seen["described"]["num.partitions"] = described["num.partitions"][2]  # read-only (Kafka's tests set it)
        seen["custom described"] = described.get("my.custom.config")
        applied = seen["described"]["background.threads"][0] == "9" and seen["custom described"] is not None
        if applied or time.monotonic() > deadline:  # every change of the one AlterConfigs, custom one included
            break
        time.sleep(0.1)
    error = _alter(admin, BROKER, node, ("log.dirs", SET, "/elsewhere"))
    seen["static"] = (error.name(), error.str())
    seen["static num.partitions"] = outcome(_alter(admin, BROKER, node, ("num.partitions", SET, "3")))
    seen["bad value"] = outcome(_alter(admin, BROKER, node, ("log.retention.ms", SET, "soon")))
    seen["append to a non-list"] = outcome(_alter(admin, BROKER, node, ("log.retention.ms", APPEND, "5")))
    group = "dyn-observed"
    seen["group set"] = outcome(_alter(admin, GROUP, group, ("consumer.session.timeout.ms", SET, "50000")))
    deadline = time.monotonic() + DEADLINE_S
    while True:
        entry = _described(admin, GROUP, group)["consumer.session.timeout.ms"]
        if entry[0] == "50000" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    seen["group described"] = entry
    error = _alter(admin, GROUP, group, ("no.such.group.config", SET, "1"))
    seen["group unknown"] = (error.name(), error.str())
    seen["group out of bounds"] = outcome(_alter(admin, GROUP, group, ("consumer.session.timeout.ms", SET, "1000")))
    return seen


#: What Apache Kafka 4.3.1 (one node) answered to :func:`observe_dynamic_configs` (the slow test below re-observes it)
KAFKA_DYNAMIC_CONFIGS = {
    "set": None,
    "described": {"background.threads": ("9", DYNAMIC_BROKER_CONFIG, False),
                  "log.cleanup.policy": ("delete,compact", DYNAMIC_BROKER_CONFIG, False),
                  "sasl.kerberos.min.time.before.relogin": ("58000", DYNAMIC_BROKER_CONFIG, False),
                  "num.partitions": True},
    "custom described": (None, DYNAMIC_BROKER_CONFIG, True),  # listed without its value (Kafka knows no type)
    "static": ("INVALID_REQUEST", "Cannot update these configs dynamically: [log.dirs]"),
    "static num.partitions": "INVALID_REQUEST",
    "bad value": "INVALID_REQUEST",
    "append to a non-list": "INVALID_CONFIG",
    "group set": None,
    "group described": ("50000", GROUP_CONFIG, False),
    "group unknown": ("INVALID_CONFIG", "Unknown group config name: no.such.group.config"),
    "group out of bounds": "INVALID_CONFIG",
}


def test_embedded_broker_answers_the_dynamic_config_steps_as_kafka(tmp_path):
    from pyspark_kafka.broker import EmbeddedBroker

    with EmbeddedBroker(data_dir=tmp_path / "data") as embedded:
        assert observe_dynamic_configs(embedded.bootstrap_servers, "0") == KAFKA_DYNAMIC_CONFIGS


@pytest.mark.slow
def test_apache_kafka_answers_the_pinned_dynamic_config_steps():
    """:data:`KAFKA_DYNAMIC_CONFIGS` is what Apache Kafka (one node) answers."""
    from pyspark_kafka.testing import maven
    from pyspark_kafka.testing.apache_kafka import ApacheKafka, KafkaStartError

    try:
        with ApacheKafka(nodes=1) as kafka:
            observed = observe_dynamic_configs(kafka.bootstrap_servers, str(kafka.node_ids[0]))
    except (KafkaStartError, maven.MavenUnavailable) as e:
        pytest.skip(f"Apache Kafka cannot run here: {e}")
    assert observed == KAFKA_DYNAMIC_CONFIGS
