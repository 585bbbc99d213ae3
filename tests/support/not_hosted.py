"""Error codes of Fetch, Produce and ListOffsets sent to a broker that holds no replica of the partition
(3-node clusters).

Used by ``tests/broker/cluster/test_cluster_client_fixes.py`` (the embedded cluster) and
``integration_tests/test_not_hosted_reference.py`` (Apache Kafka's three nodes), so both run the same
requests and compare them with :data:`EXPECTED`.

Kafka's rule (``ReplicaManager.getPartitionOrError``): a partition the cluster has but this broker does not host
answers NOT_LEADER_OR_FOLLOWER (6), so the client refreshes its metadata; a partition the cluster does not have
answers UNKNOWN_TOPIC_OR_PARTITION (3); a topic id no topic has answers UNKNOWN_TOPIC_ID (100).
"""

from __future__ import annotations

import datetime
import time
import uuid

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v12 import request as fetch12
from kio.schema.fetch.v16 import request as fetch16
from kio.schema.list_offsets.v7 import request as list_offsets7
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v11 import request as produce11
from kio.schema.produce.v13 import request as produce13
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from pyspark_kafka.testing.clusters import api_versions
from support.batches import make_batch
from support.wire import WireClient

EXPECTED = {
    "fetch v16 by topic id": [(0, 6), (5, 3)],
    "fetch v16 unknown topic id": [(0, 100)],
    "fetch v12 by name": [(0, 6), (5, 3)],
    "fetch v12 unknown name": [(0, 3)],
    "produce v11 by name": [(0, 6), (5, 3)],
    "produce v11 unknown name": [(0, 3)],
    "list offsets v7 by name": [(0, 6), (5, 3)],
    "list offsets v7 unknown name": [(0, 3)],
    "produce v13 by topic id": [(0, 6), (5, 3)],
    "produce v13 unknown topic id": [(0, 100)],
}
"""``{request: [(partition, error code)]}`` measured on Apache Kafka 4.4.0's three nodes: partition 0 exists with
its only replica on another broker, partition 5 does not exist. Produce v13 (topic ids) only where the broker
advertises it (Apache Kafka 4.4.0 does, the embedded broker serves Produce up to v11)."""

_WAIT = i32Timedelta.parse(datetime.timedelta(milliseconds=10))
_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=5))


def _codes(topics, partitions: str, index: str) -> list[tuple[int, int]]:
    """``[(partition, error code)]`` of a response's topics, sorted (Kafka may answer in another order)."""
    return sorted((int(getattr(p, index)), int(p.error_code)) for t in topics for p in getattr(t, partitions))


def probe(bootstrap: str, addresses: dict[int, str], timeout_s: float = 30.0) -> dict[str, list[tuple[int, int]]]:
    """Create a one-partition topic whose only replica is on the lowest node id of ``addresses``
    (``{node id: "host:port"}``), then send the next node Fetch and Produce for its partitions 0 (exists,
    not hosted there) and 5 (does not exist), and for an unknown topic name and topic id; ListOffsets
    (LATEST) the same by name.

    Returns ``{request: [(partition, error code)]}`` with the keys of :data:`EXPECTED` (the Produce v13
    ones only when the node's ApiVersions advertises Produce v13). Raises AssertionError when the topic does
    not reach the other node's metadata within ``timeout_s`` seconds.
    """
    owner, other = sorted(addresses)[:2]
    produce_max_version = api_versions(addresses[other])[0][1]
    name = f"not-hosted-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, replica_assignment=[[owner]])])[name].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    with WireClient(addresses[other]) as client:
        while True:  # the other node's metadata names the topic and its leader
            topic = client.request(MetadataRequest(topics=(MetadataRequestTopic(name=name, topic_id=None),),
                                                   allow_auto_topic_creation=False,
                                                   include_topic_authorized_operations=False)).topics[0]
            if topic.error_code == 0 and topic.partitions and topic.partitions[0].leader_id == owner:
                break
            assert time.monotonic() < deadline, f"{name} not in node {other}'s metadata within {timeout_s} s"
            time.sleep(0.05)
        topic_id, missing = topic.topic_id, f"missing-{name}"

        def fetch(module, topics):
            return _codes(client.request(module.FetchRequest(
                max_wait=_WAIT, min_bytes=i32(1), forgotten_topics_data=(), topics=tuple(
                    module.FetchTopic(**key, partitions=tuple(module.FetchPartition(
                        partition=i32(p), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)) for p in parts))
                    for key, parts in topics))).responses, "partitions", "partition_index")

        def produce(module, topics):
            return _codes(client.request(module.ProduceRequest(acks=i16(1), timeout=_TIMEOUT, topic_data=tuple(
                module.TopicProduceData(**key, partition_data=tuple(module.PartitionProduceData(
                    index=i32(p), records=make_batch(1)) for p in parts))
                for key, parts in topics))).responses, "partition_responses", "index")

        def list_offsets(topics):
            return _codes(client.request(list_offsets7.ListOffsetsRequest(
                replica_id=BrokerId(-1), isolation_level=i8(0), topics=tuple(list_offsets7.ListOffsetsTopic(
                    name=topic, partitions=tuple(list_offsets7.ListOffsetsPartition(
                        partition_index=i32(p), timestamp=i64(-1)) for p in parts))
                    for topic, parts in topics))).topics,
                "partitions", "partition_index")

        out = {
            "fetch v16 by topic id": fetch(fetch16, [({"topic_id": topic_id}, (0, 5))]),
            "fetch v16 unknown topic id": fetch(fetch16, [({"topic_id": uuid.uuid4()}, (0,))]),
            "fetch v12 by name": fetch(fetch12, [({"topic": name}, (0, 5))]),
            "fetch v12 unknown name": fetch(fetch12, [({"topic": missing}, (0,))]),
            "produce v11 by name": produce(produce11, [({"name": name}, (0, 5))]),
            "produce v11 unknown name": produce(produce11, [({"name": missing}, (0,))]),
            "list offsets v7 by name": list_offsets([(name, (0, 5))]),
            "list offsets v7 unknown name": list_offsets([(missing, (0,))]),
        }
        if produce_max_version >= 13:
            out["produce v13 by topic id"] = produce(produce13, [({"topic_id": topic_id}, (0, 5))])
            out["produce v13 unknown topic id"] = produce(produce13, [({"topic_id": uuid.uuid4()}, (0,))])
    return out
