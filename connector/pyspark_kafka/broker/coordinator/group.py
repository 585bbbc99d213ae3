"""The group coordinator of one broker (Kafka's ``GroupCoordinatorService`` / ``GroupCoordinatorShard`` with the
partition ownership of its ``CoordinatorRuntime``): it owns the ``__consumer_offsets`` partitions this broker
coordinates, loads and unloads their state, and composes the parts that serve the group APIs.

- :class:`~pyspark_kafka.broker.coordinator.classic_group.ClassicGroupCoordinator` (``.classic``): JoinGroup,
  SyncGroup, Heartbeat, LeaveGroup;
- :class:`~pyspark_kafka.broker.coordinator.consumer_group.ConsumerGroupCoordinator` (``.consumer``): KIP-848
  ConsumerGroupHeartbeat; both share one group-id namespace;
- :class:`~pyspark_kafka.broker.coordinator.group_offsets.OffsetManager` (``.offset_manager``): OffsetCommit,
  OffsetFetch, OffsetDelete, offset expiry;
- :class:`~pyspark_kafka.broker.coordinator.offsets.OffsetStore` (``.offsets``): the cache of
  ``__consumer_offsets``, written and loaded through a
  :class:`~pyspark_kafka.broker.coordinator.partition_writer.PartitionWriter`.

**Ownership.** A broker coordinates the ``__consumer_offsets`` partitions it leads (``owned``; on a one-node
cluster every partition, once its leadership is applied):
:meth:`~GroupCoordinator.load_partition` on election replays one partition and takes over its groups,
:meth:`~GroupCoordinator.unload_partition` on resignation forgets them (Kafka's ``onElection`` /
``onResignation``); a request for a group of another partition is answered NOT_COORDINATOR by the handlers
(:meth:`~GroupCoordinator.owns`).
"""

from __future__ import annotations

import asyncio
from typing import Iterable

from pyspark_kafka.broker.clock import now_ms
from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.coordinator.classic_group import (  # noqa: F401 (re-exported for the handlers)
    CONSUMER_PROTOCOL,
    DEAD,
    EMPTY,
    STABLE,
    ClassicGroupCoordinator,
    ClassicGroupState,
    Group,
    JoinResult,
    SyncResult,
    select_protocol,
    subscribed_topics,
)
from pyspark_kafka.broker.coordinator.consumer_group import ConsumerGroupCoordinator
from pyspark_kafka.broker.coordinator.group_offsets import OffsetManager
from pyspark_kafka.broker.coordinator.offsets import OffsetStore
from pyspark_kafka.broker.coordinator.partition_writer import PartitionWriter
from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.metadata_cache import MetadataCache

log = get_logger(__name__)


class GroupCoordinator:
    """All groups of the ``__consumer_offsets`` partitions this broker coordinates (see the module docstring).

    ``GroupCoordinator(writer, metadata, config)``: the :class:`PartitionWriter` of ``__consumer_offsets``, the
    broker's :class:`~pyspark_kafka.broker.metadata_cache.MetadataCache` (which data topics and partitions
    exist, topic ids; the cluster's in a replicated cluster, as Kafka's coordinator reads the metadata image),
    the BrokerConfig. :meth:`ensure_loaded` replays ``__consumer_offsets``
    (once) and starts the offsets-retention timer. The group APIs (``join_group``, ``sync_group``, ``heartbeat``,
    ``leave_group``, ``commit_offsets``, ``fetch_offsets``, ``fetch_error``, ``delete_offsets``,
    ``expire_offsets``) are those of :attr:`classic` and :attr:`offset_manager`; they return Kafka error codes
    (ints) in their results rather than raising. Must be used from the broker's event loop.
    """

    def __init__(self, writer: PartitionWriter, metadata: MetadataCache, config: BrokerConfig) -> None:
        self.config = config
        self.offsets = OffsetStore(writer, config)
        self.loaded = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: ``__consumer_offsets`` partitions this broker coordinates: the partitions it leads and has loaded
        #: (:meth:`load_partition` / :meth:`unload_partition`, called by ``cluster/coordinators.py``)
        self.owned: set[int] = set()
        consumer_groups: dict = {}
        self.classic = ClassicGroupCoordinator(config, self.offsets, consumer_groups)
        #: the classic groups by id
        self.groups = self.classic.groups
        #: KIP-848 groups (ConsumerGroupHeartbeat); they share the group ids and offsets with the classic ones
        self.consumer = ConsumerGroupCoordinator(config, self.offsets, metadata, self.classic.groups)
        self.consumer.groups = consumer_groups
        self.offset_manager = OffsetManager(config, self.offsets, self.classic, self.consumer, metadata)
        self.join_group = self.classic.join_group
        self.sync_group = self.classic.sync_group
        self.heartbeat = self.classic.heartbeat
        self.leave_group = self.classic.leave_group
        self.commit_offsets = self.offset_manager.commit_offsets
        self.fetch_offsets = self.offset_manager.fetch_offsets
        self.fetch_error = self.offset_manager.fetch_error
        self.delete_offsets = self.offset_manager.delete_offsets
        self.expire_offsets = self.offset_manager.expire_offsets

    def ensure_loaded(self) -> "GroupCoordinator":
        """This coordinator, loaded (:meth:`load`) on the first call: the server calls it at start;
        when that failed, the next group request tries again (from the event loop).

        Raises KafkaError when ``__consumer_offsets`` cannot be loaded (handlers answer
        COORDINATOR_NOT_AVAILABLE).
        """
        if not self.loaded:
            self.load()
            self.loaded = True
        return self

    # -- loading -----------------------------------------------------------------------------
    def load(self) -> None:
        """Bind the coordinator to the running event loop and start the offsets-retention timer; the partitions
        are replayed one by one as this broker comes to lead them (:meth:`load_partition`)."""
        self._loop = self.classic.loop = self.consumer.loop = asyncio.get_running_loop()
        self._schedule_retention()

    def owns(self, group_id: str) -> bool:
        """Whether this broker coordinates ``group_id``: it leads the group's ``__consumer_offsets`` partition and
        has loaded it."""
        return self.offsets.partition_of(group_id) in self.owned

    def load_partition(self, partition: int) -> None:
        """This broker became the leader of ``__consumer_offsets`` partition ``partition``: replay it and take over
        its groups (Kafka's ``GroupCoordinator.onElection``). Raises KafkaError when the log cannot be read."""
        self.unload_partition(partition)
        self.offsets.load([partition])
        self._build_groups(partition)
        self.owned.add(partition)

    def unload_partition(self, partition: int) -> None:
        """This broker no longer leads ``__consumer_offsets`` partition ``partition``: forget its groups; members
        waiting in a JoinGroup / SyncGroup are answered NOT_COORDINATOR (Kafka's ``onResignation``)."""
        self.owned.discard(partition)
        for group_id in [g for g in self.groups if self.offsets.partition_of(g) == partition]:
            self.classic.forget(group_id)
        for group_id in [g for g in self.consumer.groups if self.offsets.partition_of(g) == partition]:
            group = self.consumer.groups.pop(group_id)
            for member in group.members.values():
                for timer in (member.session_timer, member.revocation_timer):
                    if timer is not None:
                        timer.cancel()
        self.offsets.unload(partition)

    def _build_groups(self, partition: int) -> None:
        """The groups of ``__consumer_offsets`` partition ``partition`` from its replayed records."""
        def mine(group_id: str) -> bool:
            return self.offsets.partition_of(group_id) == partition

        now = now_ms()
        for group_id, record in self.offsets.loaded_groups.items():
            if mine(group_id):
                self.classic.restore(group_id, record)
        self.consumer.load({g: v for g, v in self.offsets.consumer_groups.items() if mine(g)}, clear=False)
        for group_id in set(self.consumer.groups) & set(self.groups):  # the later record type wins
            del self.groups[group_id]
        for group_id in self.offsets.group_ids() - set(self.groups) - set(self.consumer.groups):
            if mine(group_id):
                self.groups[group_id] = Group(group_id, state_timestamp_ms=now)

    def _schedule_retention(self) -> None:
        interval = self.config.get_int("offsets.retention.check.interval.ms")

        def run() -> None:
            try:
                self.expire_offsets(now_ms())
            except Exception:
                log.exception("offsets retention check failed")
            self._schedule_retention()

        self._loop.call_later(interval / 1000, run)

    # -- admin --------------------------------------------------------------------------------
    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[tuple[str, str, str, str]]:
        """``[(group_id, protocol_type, state, group_type)]`` of the groups not Dead, filtered by state names and
        group types (``classic``, ``consumer``; case-insensitive). A KIP-848 group's protocol type is ``consumer``."""
        states = {s.lower() for s in states}
        types = {t.lower() for t in types}
        out = []
        if not types or "classic" in types:
            out += [(g.group_id, g.protocol_type or "", g.state, "classic") for g in self.groups.values()
                    if g.state != DEAD and (not states or g.state.lower() in states)]
        if not types or "consumer" in types:
            out += [(g.group_id, CONSUMER_PROTOCOL, g.state, "consumer") for g in self.consumer.groups.values()
                    if not states or g.state.lower() in states]
        return sorted(out)

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """DeleteGroups: ``{group_id: error}``; GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP or NONE (offsets and
        metadata tombstoned)."""
        results = {}
        for group_id in group_ids:
            if group_id in self.consumer.groups:
                results[group_id] = self.consumer.delete(group_id)
                continue
            group = self.groups.get(group_id)
            if group is None or group.state == DEAD:
                results[group_id] = ErrorCode.group_id_not_found
            elif group.state != EMPTY:
                results[group_id] = ErrorCode.non_empty_group
            else:
                try:
                    self.offsets.delete_group(group_id, now_ms())
                except KafkaError as e:
                    results[group_id] = e.error_code
                    continue
                group.state = DEAD
                del self.groups[group_id]
                results[group_id] = ErrorCode.none
        return results


