"""The broker's topic catalogue: ``__topics.json`` in the data directory (the single node's topic metadata).

For each topic its name, id (a UUID, as in Kafka's metadata), partition count and config overrides
(:class:`TopicInfo`). :class:`TopicCatalog` reads the file on load, answers lookups by name and by id,
checks a new name (exists, ``.``/``_`` collision), and rewrites the file atomically on every change
before the change is visible. It keeps no logs: :class:`~pyspark_kafka.broker.log.manager.LogManager`
opens, closes and deletes the partition logs of what the catalogue holds (the catalogue is written
first, so a crash in between leaves at most a directory the next load removes).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_kafka.broker.errors import (
    InvalidTopicError,
    KafkaStorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from pyspark_kafka.broker.log.checkpoint import atomic_write
from pyspark_kafka.broker.topic_config import validate_topic_name

TOPICS_FILE = "__topics.json"


@dataclass(frozen=True)
class TopicInfo:
    """A topic: name, id (UUID, as in Kafka's metadata), partition count and its config overrides."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)


def _collision_key(name: str) -> str:
    """Kafka's ``Topic.unifyCollisionChars``: ``.`` and ``_`` collide in metric names."""
    return name.replace(".", "_")


def _collision_key(name: str) -> str:
    """Kafka's ``Topic.unifyCollisionChars``: ``.`` and ``_`` collide in metric names."""
    return name.replace(".", "_")


class TopicCatalog:
    """``TopicCatalog(data_dir)``: the topics of ``data_dir/__topics.json``; call :meth:`load` first.
    Used from one asyncio thread; no locking."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}

    def load(self) -> None:
        """Read the file (no file: no topics). Raises KafkaStorageError when it is unreadable (the data
        is left untouched)."""
        self._set_topics(self._read_topics())

    def topics(self) -> dict[str, TopicInfo]:
        """Every topic by name (a copy)."""
        return dict(self._topics)

    def topic(self, name: str) -> TopicInfo | None:
        """Topic ``name``, or None."""
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        """The topic with ``topic_id``, or None."""
        return self._by_id.get(topic_id)

    def require(self, name: str) -> TopicInfo:
        """Topic ``name``; UnknownTopicOrPartitionError when there is none."""
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"This server does not host this topic: {name!r}")
        return info

    def partition_count(self) -> int:
        """Partitions of all topics."""
        return sum(info.num_partitions for info in self._topics.values())

    def check_new_name(self, name: str) -> None:
        """Raise InvalidTopicError (name rules, or a ``.``/``_`` collision with an existing topic, as Kafka)
        or TopicExistsError when ``name`` cannot be created."""
        validate_topic_name(name)
        if name in self._topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        collides = [t for t in self._topics if _collision_key(t) == _collision_key(name)]
        if collides:
            raise InvalidTopicError(
                f"Topic '{name}' collides with existing topic: {collides[0]} ('.' and '_' are interchangeable in "
                "Kafka's metric names); pick another name"
            )

    def put(self, info: TopicInfo) -> None:
        """Add or replace ``info`` (persisted first). Raises KafkaStorageError."""
        self._write_topics({**self._topics, info.name: info})

    def remove(self, name: str) -> None:
        """Remove topic ``name`` (persisted first). Raises KafkaStorageError."""
        self._write_topics({k: v for k, v in self._topics.items() if k != name})

    def _read_topics(self) -> dict[str, TopicInfo]:
        path = self.data_dir / TOPICS_FILE
        if not path.exists():
            return {}
        try:
            doc = json.loads(path.read_text())
            return {
                name: TopicInfo(name, uuid.UUID(t["topic_id"]), int(t["partitions"]), dict(t.get("configs", {})))
                for name, t in doc["topics"].items()
            }
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise KafkaStorageError(
                f"cannot read topic metadata {path}: {e}. Restore the file from a backup or move the data "
                "directory aside; the broker does not start on unreadable metadata, to keep the logs safe"
            ) from e

    def _set_topics(self, topics: dict[str, TopicInfo]) -> None:
        self._topics = topics
        self._by_id = {info.topic_id: info for info in topics.values()}

    def _write_topics(self, topics: dict[str, TopicInfo]) -> None:
        """Persist ``topics`` (atomically), then make them the current topics."""
        doc = {
            "version": 1,
            "topics": {
                t.name: {"topic_id": str(t.topic_id), "partitions": t.num_partitions, "configs": t.configs}
                for t in sorted(topics.values(), key=lambda t: t.name)
            },
        }
        try:
            atomic_write(self.data_dir / TOPICS_FILE, json.dumps(doc, indent=1).encode())
        except OSError as e:
            raise KafkaStorageError(f"cannot write topic metadata in {self.data_dir}: {e}") from e
        self._set_topics(topics)
