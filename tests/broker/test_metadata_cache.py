"""The two MetadataCache implementations answer the same questions with the same shapes (issue 29):
the single node's (its topic catalogue: this broker leads everything) and a cluster broker's (the
metadata image: leaders, epochs, replicas, ISR, offline replicas, live brokers). No broker, no socket."""

from __future__ import annotations

import uuid

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.controller.image import ClusterImage
from pyspark_kafka.broker.log.manager import LogManager
from pyspark_kafka.broker.metadata_cache import (
    BrokerEndpoint,
    KRaftMetadataCache,
    LocalMetadataCache,
    PartitionMetadata,
    Reassignment,
)


def test_the_single_node_leads_every_partition(tmp_path):
    logs = LogManager(tmp_path, BrokerConfig({"node.id": "7"}))
    logs.load()
    try:
        info = logs.create_topic("t", 2, {"retention.ms": "1000"})
        cache = LocalMetadataCache(logs, 7, lambda listener: ("h-" + str(listener), 9092))
        topic = cache.topic("t")
        assert topic.topic_id == info.topic_id and topic.configs == {"retention.ms": "1000"}
        assert topic.partitions == (PartitionMetadata(0, 7, 0, (7,), (7,)), PartitionMetadata(1, 7, 0, (7,), (7,)))
        assert cache.topic_names() == ["t"] and cache.partition_counts() == {"t": 2}
        assert cache.topic_name(info.topic_id) == "t" and cache.topic_name(uuid.uuid4()) is None
        assert cache.topic_id("t") == info.topic_id and cache.topic_id("nope") is None
        assert cache.num_partitions("t") == 2 and cache.num_partitions("nope") is None
        assert cache.contains_partition("t", 1) and not cache.contains_partition("t", 2)
        assert cache.topic("nope") is None and cache.topic_configs("nope") is None
        assert cache.alive_brokers("SSL") == [BrokerEndpoint(7, "h-SSL", 9092)]  # advertised on that listener
        assert cache.ongoing_reassignments(None) == {}
    finally:
        logs.close()


def test_a_cluster_broker_answers_from_the_metadata_image():
    image = ClusterImage()
    tid = str(uuid.uuid4())
    records = [
        {"type": "broker", "id": 1, "epoch": 5, "host": "a", "port": 1},
        {"type": "broker", "id": 2, "epoch": 6, "host": "b", "port": 2},
        {"type": "unfence", "id": 1, "epoch": 5},  # broker 2 stays fenced: not live
        {"type": "topic", "name": "t", "topic_id": tid, "configs": {"cleanup.policy": "compact"}},
        {"type": "partition", "topic": "t", "partition": 1, "replicas": [1, 2], "isr": [1], "leader": 1,
         "leader_epoch": 3, "partition_epoch": 4, "adding": [2], "removing": []},
        {"type": "partition", "topic": "t", "partition": 0, "replicas": [2], "isr": [2], "leader": -1,
         "leader_epoch": 1, "partition_epoch": 1},
    ]
    for offset, record in enumerate(records):
        image.apply(offset, record)
    cache = KRaftMetadataCache(lambda: image)
    topic = cache.topic("t")
    assert topic.topic_id == uuid.UUID(tid) and topic.configs == {"cleanup.policy": "compact"}
    assert topic.partitions == (PartitionMetadata(0, -1, 1, (2,), (2,), (2,)),  # offline leader, replica on 2
                                PartitionMetadata(1, 1, 3, (1, 2), (1,), (2,)))
    assert cache.alive_brokers(None) == [BrokerEndpoint(1, "a", 1)]
    assert cache.topic_name(uuid.UUID(tid)) == "t" and cache.contains_partition("t", 0)
    assert not cache.contains_partition("t", 2) and cache.topic("u") is None
    assert cache.partition_counts() == {"t": 2}
    assert cache.topic_id("t") == uuid.UUID(tid) and cache.topic_id("u") is None
    assert cache.num_partitions("t") == 2 and cache.num_partitions("u") is None
    assert cache.ongoing_reassignments(None) == {"t": [Reassignment(1, (1, 2), (2,), ())]}
    image.apply(len(records), {"type": "remove_topic", "name": "t", "topic_id": tid})
    assert cache.topic_names() == []  # always the image as it is now
    assert cache.topic_id("t") is None and cache.num_partitions("t") is None
    assert cache.topic_name(uuid.UUID(tid)) is None  # a deleted topic's id names nothing
    again = str(uuid.uuid4())  # re-created under the same name: a new id, the old one still names nothing
    image.apply(len(records) + 1, {"type": "topic", "name": "t", "topic_id": again, "configs": {}})
    assert cache.topic_name(uuid.UUID(again)) == "t" and cache.topic_name(uuid.UUID(tid)) is None
    newer = str(uuid.uuid4())  # a topic record replacing a live one (a replay over a snapshot) drops the old id
    image.apply(len(records) + 2, {"type": "topic", "name": "t", "topic_id": newer, "configs": {}})
    assert cache.topic_name(uuid.UUID(newer)) == "t" and cache.topic_name(uuid.UUID(again)) is None
