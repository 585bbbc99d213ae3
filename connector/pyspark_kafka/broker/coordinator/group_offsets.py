"""Committed offsets of the groups (Kafka's ``OffsetMetadataManager``): OffsetCommit, OffsetFetch, OffsetDelete
and the expiry of offsets, for classic and KIP-848 groups alike.

- **Commit**: accepted from the current generation's members of a classic group (also during
  PreparingRebalance, so a consumer can commit in its revoke callback), and from non-members with
  generation -1 when the group is Empty (manual ``assign()`` consumers); refused with
  REBALANCE_IN_PROGRESS while CompletingRebalance (:meth:`ClassicGroupCoordinator.validate_offset_commit`).
  A KIP-848 group checks the member epoch instead (:meth:`ConsumerGroupCoordinator.validate_offset_commit`).
- **Expiry** (KIP-211): offsets of an Empty group expire after ``offsets.retention.minutes``
  (:func:`~pyspark_kafka.broker.coordinator.group_records.is_expired`); the owner runs
  :meth:`OffsetManager.expire_offsets` every ``offsets.retention.check.interval.ms``.

The offsets themselves live in the :class:`~pyspark_kafka.broker.coordinator.offsets.OffsetStore`.
"""

from __future__ import annotations

from typing import Mapping

from pyspark_kafka.broker.clock import now_ms
from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.coordinator.classic_group import (
    CONSUMER_PROTOCOL,
    DEAD,
    EMPTY,
    ClassicGroupCoordinator,
    Group,
    subscribed_topics,
)
from pyspark_kafka.broker.coordinator.consumer_group import ConsumerGroupCoordinator
from pyspark_kafka.broker.coordinator.internal_topics import TopicPartition
from pyspark_kafka.broker.coordinator.offsets import OffsetAndMetadata, OffsetStore
from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.metadata_cache import MetadataCache

log = get_logger(__name__)


class OffsetManager:
    """OffsetCommit / OffsetFetch / OffsetDelete and offset expiry over ``offsets`` (an :class:`OffsetStore`),
    checking members against ``classic`` and ``consumer`` groups.

    ``metadata`` (the broker's :class:`~pyspark_kafka.broker.metadata_cache.MetadataCache`) says whether
    OffsetCommit may name a partition (Kafka checks the cluster's metadata, not this broker's replicas). Methods return Kafka error codes; used from the
    broker's event loop only.
    """

    def __init__(self, config: BrokerConfig, offsets: OffsetStore, classic: ClassicGroupCoordinator,
                 consumer: ConsumerGroupCoordinator, metadata: MetadataCache) -> None:
        self.config = config
        self.offsets = offsets
        self.classic = classic
        self.consumer = consumer
        self.metadata = metadata

    def commit_offsets(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None,
                       offsets: Mapping[TopicPartition, OffsetAndMetadata],
                       api_version: int = 9) -> dict[TopicPartition, int]:
        """OffsetCommit: ``{(topic, partition): error code}``; the accepted ones are written in one batch.

        Per partition: UNKNOWN_TOPIC_OR_PARTITION (no such partition), OFFSET_METADATA_TOO_LARGE
        (metadata over ``offset.metadata.max.bytes``). For all: INVALID_GROUP_ID, ILLEGAL_GENERATION
        (unknown group with generation >= 0, or a stale generation), UNKNOWN_MEMBER_ID,
        FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS, INVALID_COMMIT_OFFSET_SIZE,
        COORDINATOR_NOT_AVAILABLE. For a KIP-848 group ``generation`` is the member epoch
        (:meth:`ConsumerGroupCoordinator.validate_offset_commit`: UNKNOWN_MEMBER_ID,
        UNSUPPORTED_VERSION below v9, STALE_MEMBER_EPOCH; with an older epoch, per partition as KIP-1251).
        Nothing of another group is touched in any case.
        """
        if not group_id:
            return {tp: ErrorCode.invalid_group_id for tp in offsets}
        consumer_group = self.consumer.groups.get(group_id)
        group = self.classic.groups.get(group_id)
        committable = None  # KIP-1251: the partitions a commit with an older member epoch may carry
        if consumer_group is not None:
            error, committable = self.consumer.validate_offset_commit(consumer_group, member_id, generation,
                                                                      api_version)
        else:
            if group is None:
                if generation >= 0:
                    return {tp: ErrorCode.illegal_generation for tp in offsets}
                group = Group(group_id, state_timestamp_ms=now_ms())
            error = self.classic.validate_offset_commit(group, generation, member_id, group_instance_id)
        if error:
            return {tp: error for tp in offsets}
        max_metadata = self.config.get_int("offset.metadata.max.bytes")
        errors: dict[TopicPartition, int] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for (topic, partition), value in offsets.items():
            if not self.metadata.contains_partition(topic, partition):
                errors[(topic, partition)] = ErrorCode.unknown_topic_or_partition
            elif committable is not None and (topic, partition) not in committable:
                errors[(topic, partition)] = ErrorCode.stale_member_epoch
            elif len((value.metadata or "").encode()) > max_metadata:
                errors[(topic, partition)] = ErrorCode.offset_metadata_too_large
            else:
                accepted[(topic, partition)] = value
                errors[(topic, partition)] = ErrorCode.none
        try:
            self.offsets.commit(group_id, accepted, now_ms())
        except KafkaError as e:
            errors.update({tp: e.error_code for tp in accepted})
            return errors
        if accepted and consumer_group is None:
            self.classic.groups.setdefault(group_id, group)
        return errors

    def fetch_error(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9+ member check: for a KIP-848 group, UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH when the
        request names a member (epoch >= 0); NONE otherwise."""
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is None:
            return ErrorCode.none
        return self.consumer.validate_offset_fetch(consumer_group, member_id, member_epoch)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None,
                      require_stable: bool) -> list[tuple[TopicPartition, OffsetAndMetadata | None, int]]:
        """OffsetFetch: ``[(tp, committed or None, error)]`` for ``partitions`` (None: all committed).

        A partition with an offset staged by an open transaction gets UNSTABLE_OFFSET_COMMIT
        when ``require_stable`` (KIP-447). Unknown groups and partitions give None (offset -1).
        """
        committed = self.offsets.committed(group_id)
        if partitions is None:
            partitions = sorted(committed)
        out = []
        for tp in partitions:
            if require_stable and self.offsets.has_pending(group_id, tp):
                out.append((tp, None, ErrorCode.unstable_offset_commit))
            else:
                out.append((tp, committed.get(tp), ErrorCode.none))
        return out

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete (KIP-496): ``(top-level error, {tp: error})``.

        GROUP_ID_NOT_FOUND for an unknown group; NON_EMPTY_GROUP for an active group that does not
        use the consumer protocol; GROUP_SUBSCRIBED_TO_TOPIC for topics an active consumer group
        subscribes to (the others are deleted).
        """
        consumer_group = self.consumer.groups.get(group_id)
        group = self.classic.groups.get(group_id)
        subscribed: set[str] = set()
        if consumer_group is not None:
            subscribed = set().union(*self.consumer.subscriptions(consumer_group)[0].values())
        elif group is None or group.state == DEAD:
            return ErrorCode.group_id_not_found, {}
        elif group.state != EMPTY:
            if group.protocol_type != CONSUMER_PROTOCOL:
                return ErrorCode.non_empty_group, {}
            for m in group.members.values():
                topics = subscribed_topics(m.metadata(group.protocol_name))
                if topics is None:
                    return ErrorCode.non_empty_group, {}
                subscribed |= topics
        errors = {tp: ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else ErrorCode.none for tp in partitions}
        try:
            self.offsets.delete_offsets(group_id, [tp for tp, e in errors.items() if e == ErrorCode.none], now_ms())
        except KafkaError as e:
            return e.error_code, {}
        return ErrorCode.none, errors

    def expire_offsets(self, now: int) -> int:
        """Delete the expired offsets of Empty groups (KIP-211); an Empty group left without offsets is
        removed (Dead). Returns the number of offsets expired."""
        retention_ms = self.config.get_int("offsets.retention.minutes") * 60_000
        expired = 0
        for group in list(self.classic.groups.values()):
            if group.state != EMPTY:
                continue
            doomed = self.offsets.expired(group.group_id, now, retention_ms, group.state_timestamp_ms)
            if doomed:
                self.offsets.delete_offsets(group.group_id, doomed, now)
                expired += len(doomed)
                log.info("group %s: %d offsets expired (offsets.retention.minutes)", group.group_id, len(doomed))
            if not self.offsets.committed(group.group_id) and group.state_timestamp_ms + retention_ms <= now:
                self.offsets.delete_group(group.group_id, now)
                group.state = DEAD
                del self.classic.groups[group.group_id]
        for cgroup in list(self.consumer.groups.values()):
            if cgroup.members:
                continue
            doomed = self.offsets.expired(cgroup.group_id, now, retention_ms, cgroup.state_timestamp_ms)
            if doomed:
                self.offsets.delete_offsets(cgroup.group_id, doomed, now)
                expired += len(doomed)
            if not self.offsets.committed(cgroup.group_id) and cgroup.state_timestamp_ms + retention_ms <= now:
                self.consumer.delete(cgroup.group_id)
        return expired

