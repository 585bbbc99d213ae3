"""Coordinators over an in-memory partition writer, for unit tests of their state machines: no broker, no
socket, no log directory (``coordinator/partition_writer.py``'s :class:`InMemoryPartitionWriter`).

A "restart" is a new coordinator over the same writer: it replays what the old one wrote, as a restarted
broker replays its ``__consumer_offsets`` / ``__transaction_state`` logs. Build them inside a running event
loop (the group coordinator's timers use it).
"""

from __future__ import annotations

import asyncio
import uuid

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.coordinator.group import GroupCoordinator
from pyspark_kafka.broker.coordinator.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from pyspark_kafka.broker.coordinator.partition_writer import InMemoryPartitionWriter
from pyspark_kafka.broker.coordinator.txn import TransactionCoordinator
from pyspark_kafka.broker.metadata_cache import BrokerEndpoint, MetadataCache, PartitionMetadata, TopicMetadata

#: fast group timing, three partitions per internal topic (so groups spread over partitions)
FAST = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "10",
        "group.consumer.assignment.interval.ms": "0", "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "3"}

CONSUMER = "consumer"


def config(**overrides: str) -> BrokerConfig:
    """:data:`FAST` with ``overrides`` (dots as underscores: ``offsets_retention_minutes="1"``)."""
    return BrokerConfig({**FAST, **{k.replace("_", "."): v for k, v in overrides.items()}})


class InMemoryMetadataCache(MetadataCache):
    """A :class:`~pyspark_kafka.broker.metadata_cache.MetadataCache` of one broker (node 0 on
    127.0.0.1:9092) leading every partition: ``InMemoryMetadataCache({name: partition count})``.

    :attr:`topics` is mutable (a test adds a topic or partitions); each topic's id is derived from its
    name (uuid5), so it is the same in every cache. No config overrides, no reassignments.
    """

    def __init__(self, topics: dict[str, int] | None = None) -> None:
        self.topics: dict[str, int] = dict(topics or {})

    @staticmethod
    def id_of(name: str) -> uuid.UUID:
        """The id a topic named ``name`` gets here."""
        return uuid.uuid5(uuid.NAMESPACE_OID, name)

    def topic_names(self) -> list[str]:
        return sorted(self.topics)

    def topic(self, name: str) -> TopicMetadata | None:
        if name not in self.topics:
            return None
        return TopicMetadata(name, self.id_of(name), tuple(PartitionMetadata(p, 0, 0, (0,), (0,))
                                                           for p in range(self.topics[name])))

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return next((t for t in self.topics if self.id_of(t) == topic_id), None)

    def contains_partition(self, topic: str, partition: int) -> bool:
        return 0 <= partition < self.topics.get(topic, 0)

    def partition_counts(self) -> dict[str, int]:
        return dict(self.topics)

    def topic_configs(self, name: str) -> dict[str, str] | None:
        return {} if name in self.topics else None

    def alive_brokers(self, listener: str | None) -> list[BrokerEndpoint]:
        return [BrokerEndpoint(0, "127.0.0.1", 9092)]


def groups(writer: InMemoryPartitionWriter | None = None, topics: InMemoryMetadataCache | None = None,
           **overrides: str) -> GroupCoordinator:
    """A :class:`GroupCoordinator` over ``writer`` (a new one when None) and ``topics`` (``t`` with 3
    partitions when None), leading and loaded with every ``__consumer_offsets`` partition (created in the writer
    when missing), as a broker that leads them all."""
    writer = writer if writer is not None else InMemoryPartitionWriter()
    topics = topics if topics is not None else InMemoryMetadataCache({"t": 3})
    coordinator = GroupCoordinator(writer, topics, config(**overrides)).ensure_loaded()
    count = writer.create_topic(OFFSETS_TOPIC, coordinator.config.get_int("offsets.topic.num.partitions"), 1 << 20)
    for partition in range(count):  # this broker leads every partition: it loads each, as on its election
        coordinator.load_partition(partition)
    return coordinator


def replayed_by_load(writer: InMemoryPartitionWriter, **overrides: str) -> int:
    """How many ``__consumer_offsets`` records a new group coordinator over ``writer`` replays (after its
    snapshots) when it loads every partition, summed over the partitions."""
    coordinator = GroupCoordinator(writer, InMemoryMetadataCache({"t": 3}), config(**overrides)).ensure_loaded()
    total = 0
    for partition in range(writer.partition_count(OFFSETS_TOPIC) or 0):
        coordinator.load_partition(partition)
        total += coordinator.offsets.replayed_records
    return total


class MarkerLog:
    """The transaction coordinator's marker writer for unit tests: records the data-partition markers of each
    prepared transaction as ``written`` (``[(topic, partition, pid, epoch, commit)]``), completes staged offsets
    on a ``__consumer_offsets`` partition, then reports the markers written (as the broker's WriteTxnMarkers do).
    ``fail`` set to an exception makes the next writes fail before any marker (the transaction stays prepared).
    :func:`transactions` gives it its coordinator (``txn``)."""

    def __init__(self) -> None:
        self.written: list[tuple[str, int, int, int, bool]] = []
        self.fail: Exception | None = None
        self.txn: TransactionCoordinator | None = None

    async def __call__(self, meta, commit: bool) -> None:
        if self.fail is not None:
            raise self.fail
        now = meta.last_update_ms
        for topic, partition in sorted(meta.partitions):
            if topic == OFFSETS_TOPIC:
                self.txn.groups.offsets.complete_txn(meta.producer_id, commit, now)
            else:
                self.written.append((topic, partition, meta.producer_id, meta.producer_epoch, commit))
        self.txn.markers_written(meta, commit, now)


async def markers_settled(txn: TransactionCoordinator) -> None:
    """Wait until every marker writer ``txn`` started has ended (at most 5 s)."""
    await asyncio.wait_for(asyncio.gather(*txn.pending_markers, return_exceptions=True), 5)


def transactions(data_dir, group_coordinator: GroupCoordinator, markers: MarkerLog, now_ms: int = 0,
                 **overrides: str) -> TransactionCoordinator:
    """A :class:`TransactionCoordinator` over ``group_coordinator``'s writer, leading and loaded with every
    ``__transaction_state`` partition (created in the writer when missing)."""
    writer = group_coordinator.offsets.writer
    txn = TransactionCoordinator(writer, config(**overrides), data_dir, group_coordinator, markers)
    markers.txn = txn
    txn.ensure_loaded(now_ms)
    count = writer.create_topic(TRANSACTION_STATE_TOPIC, txn.config.get_int("transaction.state.log.num.partitions"),
                                1 << 20)
    for partition in range(count):  # this broker leads every partition: it loads each, as on its election
        txn.load_partition(partition, now_ms)
    return txn


async def settle(*awaitables, timeout_s: float = 5.0):
    """Gather ``awaitables`` within ``timeout_s`` (a hung join fails the test instead of hanging it)."""
    return await asyncio.wait_for(asyncio.gather(*awaitables), timeout_s)
