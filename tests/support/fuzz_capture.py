"""Capture the fuzzers' seed corpus: real request frames sent by real clients.

Runs the conformance scenarios (produce with every codec, fetch, offsets by time, groups with
rebalances, idempotent and transactional producers, read_committed, ACL administration) with confluent-kafka,
kafka-python, aiokafka and kcat, plus admin calls (topics, partitions, configs, groups,
offsets) and KIP-848 consumer groups (librdkafka ``group.protocol=consumer`` and raw heartbeats), all through a recording :class:`kafka_proxy.KafkaProxy` in front of an embedded
broker, and keeps up to :data:`PER_API_VERSION` frames per (api key, version), the most
different sizes first. The result is ``fuzz_corpus/seeds.bin`` (see :mod:`fuzz_corpus`),
committed so fuzz runs are reproducible and need no clients.

Regenerate with ``python tests/broker/fuzz_capture.py`` (about a minute).
"""

from __future__ import annotations

import struct
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]  # tests/: ``support`` importable when run as a script

from support.fuzz_corpus import SEEDS_PATH, write_frames  # noqa: E402
from support.kafka_proxy import KafkaProxy  # noqa: E402

PER_API_VERSION = 6


def _admin_calls(bootstrap: str) -> None:
    """Admin requests from confluent-kafka and kafka-python (CreateTopics, CreatePartitions,
    DescribeConfigs, ListGroups, DescribeGroups, DeleteGroups, ListOffsets, DeleteTopics...)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, OffsetSpec
    from kafka.admin import KafkaAdminClient, NewTopic as KpNewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("fuzz-admin", 2, 1, config={"retention.ms": "600000"})]).values():
        f.result(30)
    for f in admin.create_partitions([NewPartitions("fuzz-admin", 3)]).values():
        f.result(30)
    for f in admin.describe_configs([ConfigResource("topic", "fuzz-admin"), ConfigResource("broker", "0")]).values():
        f.result(30)
    admin.list_consumer_groups().result(30)
    groups = [g.group_id for g in admin.list_consumer_groups().result(30).valid]
    if groups:
        for f in admin.describe_consumer_groups(groups[:3]).values():
            f.result(30)
        for f in admin.delete_consumer_groups(groups[:1]).values():
            try:
                f.result(30)
            except Exception:
                pass  # a group with members cannot be deleted; the request is what we want
    for f in admin.list_offsets({TopicPartition("fuzz-admin", 0): OffsetSpec.latest()}).values():
        f.result(30)
    try:
        admin.list_transactions().result(30)
    except Exception:
        pass
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fuzz-capture")
    calls = [
        lambda: kp.create_topics([KpNewTopic("fuzz-admin-kp", 1, 1)]),
        lambda: kp.list_groups(),
        lambda: kp.describe_topics(["fuzz-admin-kp"]),
        lambda: kp.describe_cluster(),
        lambda: kp.delete_topics(["fuzz-admin-kp"]),
    ]
    try:
        for call in calls:
            try:
                call()
            except Exception as e:  # an API the broker does not serve: the request was still captured
                print(f"kafka-python admin call failed: {type(e).__name__}: {e}")
    finally:
        kp.close()
    for f in admin.delete_topics(["fuzz-admin"]).values():
        f.result(30)


def _consumer_group_calls(bootstrap: str) -> None:
    """KIP-848 requests: librdkafka members with ``group.protocol=consumer`` (ConsumerGroupHeartbeat v1,
    OffsetCommit/OffsetFetch v9, leave), ConsumerGroupDescribe through the admin client, and raw
    heartbeats with a regex, a static member and owned partitions (v0 and v1)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from support.consumer_groups import Member
    from support.wire import WireClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("fuzz-kip848", 2, 1)]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce("fuzz-kip848", value=b"v%d" % i, partition=i % 2)
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-kip848", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["fuzz-kip848", "^fuzz-kip.*"])
    seen = 0
    for _ in range(200):
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            seen += 1
            consumer.commit(message=msg, asynchronous=False)
        if seen >= 20:
            break
    consumer.committed([tp for tp in consumer.assignment()], timeout=10)
    for f in admin.describe_consumer_groups(["fuzz-kip848"]).values():
        f.result(30)
    consumer.close()
    with WireClient(bootstrap) as c:
        regex = Member(c, "fuzz-kip848-raw", None, regex="fuzz-.*", assignor="range")
        regex.join()
        regex.beat()
        static = Member(c, "fuzz-kip848-raw", ("fuzz-kip848",), instance_id="fuzz-instance")
        static.join()
        static.beat()
        regex.beat()
        static.leave(epoch=-2)
        regex.leave()


def _acl_calls(bootstrap: str) -> None:
    """CreateAcls, DescribeAcls and DeleteAcls from confluent-kafka and kafka-python (literal, prefixed,
    deny, MATCH and ANY filters, an invalid CLUSTER name)."""
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePattern, ResourcePatternFilter)
    from kafka.admin import ResourceType as KpResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    bindings = [
        AclBinding(ResourceType.TOPIC, "fuzz-acl", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, "fuzz-", ResourcePatternType.PREFIXED, "User:bob", "127.0.0.1",
                   AclOperation.ALL, AclPermissionType.DENY),
        AclBinding(ResourceType.TRANSACTIONAL_ID, "*", ResourcePatternType.LITERAL, "User:*", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.BROKER, "not-kafka-cluster", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.ALTER, AclPermissionType.ALLOW),
    ]
    for f in admin.create_acls(bindings).values():
        try:
            f.result(30)
        except Exception:
            pass  # the invalid CLUSTER name: INVALID_REQUEST, the request is what we want
    for pattern, name in ((ResourcePatternType.ANY, None), (ResourcePatternType.MATCH, "fuzz-acl")):
        admin.describe_acls(AclBindingFilter(ResourceType.ANY, name, pattern, None, None, AclOperation.ANY,
                                             AclPermissionType.ANY)).result(30)
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fuzz-capture-acl")
    try:
        kp.create_acls([ACL("User:carol", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                            ResourcePattern(KpResourceType.TOPIC, "fuzz-", ACLResourcePatternType.PREFIXED))])
        kp.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                   ResourcePatternFilter(KpResourceType.TOPIC, None, ACLResourcePatternType.ANY)))
    finally:
        kp.close()
    for f in admin.delete_acls([AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                 AclOperation.ANY, AclPermissionType.ANY)]).values():
        f.result(30)


#: The capture broker authorizes (so the ACL APIs answer) but lets PLAINTEXT clients do everything.
CAPTURE_CONFIG = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                  "super.users": "User:ANONYMOUS"}


def _select(frames: list[bytes]) -> list[bytes]:
    """Up to PER_API_VERSION frames per (api key, version): the smallest, the largest, and sizes between."""
    by_key: dict[tuple[int, int], dict[int, bytes]] = {}
    for frame in frames:
        api_key, version = struct.unpack_from(">hh", frame)
        by_key.setdefault((api_key, version), {}).setdefault(len(frame), frame)
    out = []
    for key in sorted(by_key):
        sizes = sorted(by_key[key])
        if len(sizes) > PER_API_VERSION:
            step = (len(sizes) - 1) / (PER_API_VERSION - 1)
            sizes = sorted({sizes[round(i * step)] for i in range(PER_API_VERSION)})
        out.extend(by_key[key][s] for s in sizes)
    return out


def capture() -> list[bytes]:
    """Run every client through the recording proxy; return the selected frames."""
    from integration_tests import clusters as C
    from integration_tests.conformance.matrix import run_matrix
    from pyspark_kafka.broker import EmbeddedBroker

    frames: list[bytes] = []
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(data_dir=tmp, config=CAPTURE_CONFIG) as broker, \
            KafkaProxy(broker.bootstrap_servers, on_request=frames.append) as proxy:
        cluster = C.Cluster("embedded", proxy.bootstrap, C.api_versions(broker.bootstrap_servers), broker)
        run_matrix(cluster, log=lambda line: print(line, flush=True))
        _admin_calls(proxy.bootstrap)
        _consumer_group_calls(proxy.bootstrap)
        _acl_calls(proxy.bootstrap)
    return _select(frames)


if __name__ == "__main__":
    selected = capture()
    write_frames(SEEDS_PATH, selected)
    keys = sorted({struct.unpack_from(">hh", f) for f in selected})
    print(f"wrote {len(selected)} frames ({len(keys)} api key/version pairs) to {SEEDS_PATH}")
