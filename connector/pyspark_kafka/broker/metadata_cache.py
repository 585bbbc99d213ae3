"""What the broker knows of the cluster: topics, partitions, leaders, replicas, ISR, live brokers
(Kafka's ``MetadataCache`` trait and its ``KRaftMetadataCache``).

Handlers and the group coordinator ask one :class:`MetadataCache`, the broker's, and never which mode
the broker runs in. It is the only place a topic id is resolved (:meth:`MetadataCache.topic_id`,
:meth:`MetadataCache.topic_name`), as in Kafka, whose ``KafkaApis`` and group coordinator read the
same metadata (``MetadataCache.getTopicId`` / ``getTopicName``; the coordinator through its
``MetadataImage``). The broker builds its cache at construction and hands it to its coordinators.

That cache is a :class:`KRaftMetadataCache` over the broker's
:class:`~pyspark_kafka.broker.controller.image.ClusterImage`, built from the metadata log (a one-node
combined cluster's too): leaders, leader epochs, replicas and ISR as the controller decided them, the unfenced
brokers as live, and the replicas on other brokers as offline replicas. :class:`MetadataCache` is the interface
(the coordinators' unit tests give an in-memory one).

It answers with plain values (:class:`TopicMetadata`, :class:`PartitionMetadata`,
:class:`BrokerEndpoint`); it never raises for an unknown topic (None or empty answers).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable

NO_LEADER = -1  # Kafka's LeaderAndIsr.NO_LEADER: the partition is offline (LEADER_NOT_AVAILABLE)


@dataclass(frozen=True)
class BrokerEndpoint:
    """A live broker as Metadata and DescribeCluster list it: node id, advertised host and port."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionMetadata:
    """One partition: its index, leader (``NO_LEADER`` when offline), leader epoch, replicas, in-sync
    replicas and the replicas on brokers that are not live (node ids)."""

    index: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicMetadata:
    """One topic: name, id, its partitions in index order and its config overrides."""

    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionMetadata, ...]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def num_partitions(self) -> int:
        """How many partitions the topic has."""
        return len(self.partitions)


@dataclass(frozen=True)
class Reassignment:
    """An ongoing partition reassignment: the partition, its replicas, those being added and removed."""

    index: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


class MetadataCache:
    """The questions handlers and coordinators ask about the cluster's metadata (Kafka's ``MetadataCache``).

    Subclasses implement :meth:`topic_names`, :meth:`topic`, :meth:`topic_name`,
    :meth:`contains_partition`, :meth:`partition_counts`, :meth:`topic_configs` and
    :meth:`alive_brokers` (the others have defaults built on these); unimplemented ones raise
    NotImplementedError. No method raises for an unknown topic: the answer is None, False or empty.
    """

    def topic_names(self) -> list[str]:
        """Every topic's name, sorted (internal topics too)."""
        raise NotImplementedError

    def topic(self, name: str) -> TopicMetadata | None:
        """Topic ``name`` with its partitions; None when no such topic exists."""
        raise NotImplementedError

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with ``topic_id``; None when unknown (Kafka's ``getTopicName``)."""
        raise NotImplementedError

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The id of topic ``name``; None when no such topic exists (Kafka's ``getTopicId``, which
        answers ``Uuid.ZERO_UUID`` there)."""
        t = self.topic(name)
        return None if t is None else t.topic_id

    def num_partitions(self, name: str) -> int | None:
        """How many partitions topic ``name`` has; None when no such topic exists (Kafka's
        ``numPartitions``)."""
        t = self.topic(name)
        return None if t is None else t.num_partitions

    def contains_topic(self, name: str) -> bool:
        """Whether topic ``name`` exists (Kafka's ``contains(topic)``)."""
        return self.topic(name) is not None

    def contains_partition(self, topic: str, partition: int) -> bool:
        """Whether ``topic``/``partition`` exists (Kafka's ``contains(TopicPartition)``)."""
        raise NotImplementedError

    def partition_counts(self) -> dict[str, int]:
        """``{topic: number of partitions}`` for every topic."""
        raise NotImplementedError

    def topic_configs(self, name: str) -> dict[str, str] | None:
        """The config overrides of topic ``name``; None when no such topic exists."""
        raise NotImplementedError

    def alive_brokers(self, listener: str | None) -> list[BrokerEndpoint]:
        """The live brokers, advertised on ``listener`` (a listener name; None: the first one)
        (Kafka's ``getAliveBrokerNodes(listenerName)``)."""
        raise NotImplementedError

    def ongoing_reassignments(self, wanted: dict[str, list[int]] | None) -> dict[str, list[Reassignment]]:
        """ListPartitionReassignments: ``{topic: [Reassignment]}`` of the ongoing reassignments among
        ``wanted`` (``{topic: [partition]}``; None: all); unknown topics and partitions are left out."""
        return {}


class KRaftMetadataCache(MetadataCache):
    """A broker's metadata: ``KRaftMetadataCache(image_of)``, ``image_of()`` returning the
    broker's current :class:`~pyspark_kafka.broker.controller.image.ClusterImage` (the broker
    lifecycle's, which the metadata log keeps up to date).

    Live brokers are the unfenced registrations, each advertised with the address it registered for the
    listener the request came in on (Kafka's ``getAliveBrokerNodes(listenerName)``; the first listener's when
    it registered no such name). Partition leaders may be ``NO_LEADER``; a replica on a broker
    that is not live is an offline replica.
    """

    def __init__(self, image_of: Callable[[], object]) -> None:
        self.image_of = image_of

    def topic_names(self) -> list[str]:
        return sorted(self.image_of().topics)

    def topic(self, name: str) -> TopicMetadata | None:
        image = self.image_of()
        t = image.topics.get(name)
        if t is None:
            return None
        live = {b.id for b in image.live_brokers()}
        partitions = tuple(
            PartitionMetadata(p, st.leader, st.leader_epoch, tuple(st.replicas), tuple(st.isr),
                              tuple(r for r in st.replicas if r not in live))
            for p, st in sorted(t.partitions.items()))
        return TopicMetadata(name, uuid.UUID(t.topic_id), partitions, t.configs)

    def contains_topic(self, name: str) -> bool:
        return name in self.image_of().topics

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self.image_of().topic_names_by_id.get(str(topic_id))

    def topic_id(self, name: str) -> uuid.UUID | None:
        t = self.image_of().topics.get(name)
        return None if t is None else uuid.UUID(t.topic_id)

    def num_partitions(self, name: str) -> int | None:
        t = self.image_of().topics.get(name)
        return None if t is None else len(t.partitions)

    def contains_partition(self, topic: str, partition: int) -> bool:
        return self.image_of().partition(topic, partition) is not None

    def partition_counts(self) -> dict[str, int]:
        return {n: len(t.partitions) for n, t in self.image_of().topics.items()}

    def topic_configs(self, name: str) -> dict[str, str] | None:
        t = self.image_of().topics.get(name)
        return None if t is None else t.configs

    def alive_brokers(self, listener: str | None) -> list[BrokerEndpoint]:
        return [BrokerEndpoint(b.id, *b.endpoint(listener)) for b in self.image_of().live_brokers()]

    def ongoing_reassignments(self, wanted: dict[str, list[int]] | None) -> dict[str, list[Reassignment]]:
        from pyspark_kafka.broker.controller.partition_admin import ongoing_reassignments

        return {n: [Reassignment(p, tuple(st.replicas), tuple(st.adding), tuple(st.removing)) for p, st in found]
                for n, found in ongoing_reassignments(self.image_of(), wanted).items()}
