"""Defects librdkafka's own test suite found on the 3-broker embedded cluster (issue 28, item 7), each pinned with an
independent client on one cluster shared by the module (every process stopped by pid by the ``with`` block; waits
are bounded polls):

- OffsetCommit for partitions led by other brokers (RF 1, three partitions on three brokers): Kafka checks the
  cluster's metadata, not whether the coordinator's broker hosts the partition (librdkafka 0099, 0140, 0137, ...).
- JoinGroup's NOT_COORDINATOR answer encodes in every version v0..v9 (protocol name "" below v7).
- A batch flagged gzip holding a zlib stream is refused by a cluster leader (item 4).
- A topic config change (IncrementalAlterConfigs ``cleanup.policy=compact``) reaches every broker through the
  controller's metadata log: a keyless record is then refused (INVALID_RECORD) by whichever broker leads, and
  DescribeConfigs on each broker shows the override (librdkafka 0011).
- Fetch (by name or topic id), Produce and ListOffsets on a broker with no replica of a partition the cluster has
  answer NOT_LEADER_OR_FOLLOWER, and UNKNOWN_TOPIC_OR_PARTITION for a partition or topic name the cluster does not
  have, per partition, as Apache Kafka 4.4.0 (``support/not_hosted.py``;
  ``integration_tests/test_not_hosted_reference.py``).
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import time
import zlib

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
from kio.static.primitive import i32Timedelta

from pyspark_kafka.broker.cluster import EmbeddedCluster
from pyspark_kafka.broker.log.record_batch import build_batch
from support.batches import encode_record
from support.malformed import produce_request
from support.not_hosted import EXPECTED, probe
from support.topics import spread_topic
from support.wire import WireClient

FAST = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "200", "replica.fetch.backoff.ms": "100"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(3, data_dir=tmp_path_factory.mktemp("fixes") / "cluster", config=FAST) as c:
        yield c


def test_offsets_commit_for_partitions_led_by_other_brokers(cluster):
    spread_topic(cluster, "commits")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "fix-commits",
                         "enable.auto.commit": False})
    try:
        offsets = [TopicPartition("commits", p, 5 + p) for p in range(3)]
        answered = consumer.commit(offsets=offsets, asynchronous=False)
        assert [(tp.partition, tp.error) for tp in answered] == [(0, None), (1, None), (2, None)]
        committed = consumer.committed([TopicPartition("commits", p) for p in range(3)], timeout=20)
        assert [tp.offset for tp in committed] == [5, 6, 7]
        with pytest.raises(KafkaException) as missing:  # a partition the cluster does not have: still refused
            consumer.commit(offsets=[TopicPartition("commits", 9, 1)], asynchronous=False)
        assert missing.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        consumer.close()


def _describe_on(cluster, node: int, topic: str) -> dict[str, tuple[str, bool]]:
    """DescribeConfigs of ``topic`` sent to broker ``node`` itself: ``{name: (value, is default)}``."""
    with WireClient(cluster.address(node)) as client:
        response = client.request(DescribeConfigsRequest(resources=(DescribeConfigsResource(
            resource_type=2, resource_name=topic, configuration_keys=None),), include_synonyms=False,
            include_documentation=False))
    result, = response.results
    assert result.error_code == 0, result.error_message
    return {c.name: (c.value, c.config_source == 5) for c in result.configs}


def test_a_topic_config_change_reaches_every_broker(cluster):
    spread_topic(cluster, "compacting")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource("topic", "compacting", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    for node in range(3):
        assert _describe_on(cluster, node, "compacting")["cleanup.policy"] == ("compact", False), f"broker {node}"
    assert _keyless_errors(cluster, "compacting") == {p: KafkaError.INVALID_RECORD for p in range(3)}
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "retries": 0, "linger.ms": 0})
    producer.produce("compacting", b"keyed", key=b"k", partition=2)  # a key is accepted on the compacted topic
    assert producer.flush(30) == 0


def _keyless_errors(cluster, topic: str) -> dict[int, int | None]:
    """The delivery error code of one keyless record to each of ``topic``'s 3 partitions."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "retries": 0, "linger.ms": 0})
    errors: dict[int, KafkaError | None] = {}
    for p in range(3):
        producer.produce(topic, b"no key", partition=p,
                         on_delivery=lambda err, msg: errors.__setitem__(msg.partition(), err))
    assert producer.flush(30) == 0
    return {p: e.code() if e else None for p, e in errors.items()}


def _join_group_request(version: int, group: str):
    module = importlib.import_module(f"kio.schema.join_group.v{version}.request")
    fields = {"group_id": group, "session_timeout": i32Timedelta.parse(datetime.timedelta(seconds=10)),
              "rebalance_timeout": i32Timedelta.parse(datetime.timedelta(seconds=10)), "member_id": "",
              "group_instance_id": None, "protocol_type": "consumer", "reason": None,
              "protocols": (module.JoinGroupRequestProtocol(name="range", metadata=b""),)}
    cls = module.JoinGroupRequest
    return cls(**{f.name: fields[f.name] for f in dataclasses.fields(cls)})


def test_join_group_not_coordinator_answers_encode_in_every_version(cluster):
    """librdkafka's JoinGroup v5 at a broker that is not the group's coordinator got no answer at all ("built a
    response that cannot be encoded": protocol name null below v7). Kafka answers NOT_COORDINATOR in every version."""
    with WireClient(cluster.address(0)) as client:
        found = client.request(FindCoordinatorRequest(key="join-errors", key_type=0))
    assert found.error_code == 0
    other = next(n for n in range(3) if n != found.node_id)
    with WireClient(cluster.address(other)) as client:
        for version in range(10):
            answer = client.request(_join_group_request(version, "join-errors"))
            assert (version, answer.error_code) == (version, ErrorCode.not_coordinator)
            assert answer.generation_id == -1 and answer.member_id == "" and list(answer.members) == []
            assert answer.protocol_name == ("" if version < 7 else None)


def test_a_gzip_flagged_zlib_batch_is_refused_by_a_cluster_leader_and_real_gzip_is_stored(cluster):
    """Issue 28 item 4 on the cluster: the leader (broker 1 here) refuses a zlib stream flagged gzip
    (CORRUPT_MESSAGE); librdkafka's own gzip batches are stored."""
    spread_topic(cluster, "gzipped")
    now = int(time.time() * 1000)
    records = encode_record(0, 0, b"k", b"v")
    with WireClient(cluster.address(1)) as client:
        response = client.request(produce_request("gzipped", build_batch(
            zlib.compress(records), record_count=1, last_offset_delta=0, base_timestamp=now, max_timestamp=now,
            attributes=1), partition=1))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "compression.codec": "gzip", "acks": "all"})
    for p in range(3):
        producer.produce("gzipped", b"x" * 1000, key=b"k", partition=p)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "gz", "enable.auto.commit": False})
    try:
        lows_highs = [consumer.get_watermark_offsets(TopicPartition("gzipped", p), timeout=10) for p in range(3)]
    finally:
        consumer.close()
    assert lows_highs == [(0, 1)] * 3  # the refused batch stored nothing on partition 1


def _alter_on(cluster, node: int, resource_type: int, name: str, configs) -> tuple[int, str | None]:
    """IncrementalAlterConfigs sent to broker ``node`` itself (``configs``: (name, op, value))."""
    from kio.schema.incremental_alter_configs.v1.request import (
        AlterableConfig, AlterConfigsResource, IncrementalAlterConfigsRequest)

    request = IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
        resource_type=resource_type, resource_name=name, configs=tuple(
            AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in configs)),), validate_only=False)
    with WireClient(cluster.address(node)) as client:
        (r,) = client.request(request).responses
    return r.error_code, r.error_message


def _described_on(cluster, node: int, resource_type: int, name: str) -> dict[str, tuple[str, int]]:
    with WireClient(cluster.address(node)) as client:
        (r,) = client.request(DescribeConfigsRequest(resources=(DescribeConfigsResource(
            resource_type=resource_type, resource_name=name, configuration_keys=None),), include_synonyms=False,
            include_documentation=False)).results
    assert r.error_code == 0, r.error_message
    return {c.name: (c.value, c.config_source) for c in r.configs}


def test_dynamic_broker_and_group_configs_reach_the_brokers_through_the_metadata_log(cluster):
    """Issue 28 item 7 (librdkafka 0081) on the cluster: a cluster-default broker config (resource "") reaches every
    broker (a topic without override then compacts on each leader), a per-broker one only its broker, a group config
    every broker (whichever coordinates the group)."""
    spread_topic(cluster, "dyn-default")
    assert _alter_on(cluster, 0, 4, "", [("log.cleanup.policy", 0, "compact")]) == (0, None)
    assert _alter_on(cluster, 1, 4, "1", [("background.threads", 0, "9")]) == (0, None)
    assert _alter_on(cluster, 2, 32, "dyn-group", [("consumer.session.timeout.ms", 0, "50000")]) == (0, None)
    try:
        for node in range(3):
            cluster.wait_for(lambda: _describe_on(cluster, node, "dyn-default")["cleanup.policy"] == (
                "compact", False), 10, f"broker {node} to apply the cluster default")
            assert _described_on(cluster, node, 4, str(node))["log.cleanup.policy"] == ("compact", 3)
            assert _described_on(cluster, node, 4, str(node)).get("background.threads") == (
                ("9", 2) if node == 1 else None)
            cluster.wait_for(lambda: _described_on(cluster, node, 32, "dyn-group")[
                "consumer.session.timeout.ms"] == ("50000", 8), 10, f"broker {node} to apply the group config")
        assert _keyless_errors(cluster, "dyn-default") == {p: KafkaError.INVALID_RECORD for p in range(3)}
        cluster.restart(1)  # the metadata log is replayed: the configs are back
        cluster.wait_for(lambda: _described_on(cluster, 1, 4, "1").get("background.threads") == ("9", 2), 20,
                         "broker 1's dynamic config after its restart")
        assert _described_on(cluster, 1, 4, "1")["log.cleanup.policy"] == ("compact", 3)
        code, message = _alter_on(cluster, 0, 4, "0", [("log.dirs", 0, "/x")])
        assert (code, message) == (ErrorCode.invalid_request, "Cannot update these configs dynamically: [log.dirs]")
    finally:
        assert _alter_on(cluster, 0, 4, "", [("log.cleanup.policy", 1, None)]) == (0, None)


def test_fetch_and_produce_on_a_broker_without_the_replica_answer_as_kafka(cluster):
    addresses = {n: cluster.address(n) for n in cluster.broker_ids}
    served = probe(cluster.bootstrap_servers, addresses)
    assert served == {k: v for k, v in EXPECTED.items() if k in served} and len(served) >= 6  # Produce v13: if served
