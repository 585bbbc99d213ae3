"""What the group coordinators ask about data topics: which partitions exist (OffsetCommit), how many partitions
a subscribed topic has and which topics a regex matches (KIP-848 assignments), and topic ids.

:class:`TopicView` is that question list; :class:`LogTopicView` answers it from the broker's replica manager,
:class:`InMemoryTopicView` from a dict (unit tests). The broker's metadata (a ``MetadataCache``) can take
:class:`LogTopicView`'s place without the coordinators changing.
"""

from __future__ import annotations

import abc
import uuid


class TopicView(abc.ABC):
    """Data topics as the group coordinators see them (names, partition counts, ids)."""

    @abc.abstractmethod
    def has_partition(self, topic: str, partition: int) -> bool:
        """Whether ``topic``/``partition`` exists."""

    @abc.abstractmethod
    def partition_counts(self) -> dict[str, int]:
        """``{topic name: partition count}`` of every topic (internal ones included)."""

    @abc.abstractmethod
    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic``; None when it does not exist."""

    @abc.abstractmethod
    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The id of ``topic``; None when it does not exist."""

    @abc.abstractmethod
    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with ``topic_id``; None when unknown."""


class LogTopicView(TopicView):
    """:class:`TopicView` over the broker's :class:`~pyspark_kafka.broker.replica_manager.ReplicaManager`."""

    def __init__(self, replica_manager) -> None:
        self.replica_manager = replica_manager

    def has_partition(self, topic: str, partition: int) -> bool:
        return self.replica_manager.has_partition(topic, partition)

    def partition_counts(self) -> dict[str, int]:
        return {name: info.num_partitions for name, info in self.replica_manager.logs.topics().items()}

    def partition_count(self, topic: str) -> int | None:
        info = self.replica_manager.logs.topic(topic)
        return None if info is None else info.num_partitions

    def topic_id(self, topic: str) -> uuid.UUID | None:
        info = self.replica_manager.logs.topic(topic)
        return None if info is None else info.topic_id

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self.replica_manager.topic_name(topic_id)


class InMemoryTopicView(TopicView):
    """:class:`TopicView` of ``{name: partition count}`` (:attr:`topics`, mutable: a test adds a topic or
    partitions); each topic gets a fixed id derived from its name."""

    def __init__(self, topics: dict[str, int] | None = None) -> None:
        self.topics: dict[str, int] = dict(topics or {})

    def has_partition(self, topic: str, partition: int) -> bool:
        return 0 <= partition < self.topics.get(topic, 0)

    def partition_counts(self) -> dict[str, int]:
        return dict(self.topics)

    def partition_count(self, topic: str) -> int | None:
        return self.topics.get(topic)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        return uuid.uuid5(uuid.NAMESPACE_OID, topic) if topic in self.topics else None

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return next((t for t in self.topics if self.topic_id(t) == topic_id), None)
