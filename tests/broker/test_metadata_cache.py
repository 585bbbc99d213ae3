"""The broker's MetadataCache answers from the metadata image (leaders, epochs, replicas, ISR, offline replicas,
live brokers) with plain values (issue 29). No broker, no socket."""

from __future__ import annotations

import uuid

from pyspark_kafka.broker.controller.image import ClusterImage
from pyspark_kafka.broker.metadata_cache import (
    BrokerEndpoint,
    KRaftMetadataCache,
    PartitionMetadata,
    Reassignment,
)


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
