"""KIP-848 consumer groups: the ConsumerGroupHeartbeat state machine (Kafka's ``GroupMetadataManager``
consumer-group half, ``ConsumerGroup``, ``ConsumerGroupMember``, ``CurrentAssignmentBuilder``).

One :class:`ConsumerGroupCoordinator` (``GroupCoordinator.consumer``) owns every group created by
ConsumerGroupHeartbeat; the classic groups and it share one group-id namespace (the classic groups' dict is
handed to it, so it imports nothing of the classic protocol) and the offsets of ``__consumer_offsets``
(:class:`~pyspark_kafka.broker.coordinator.offsets.OffsetStore`). Everything runs on the broker's event loop.

Epochs, as KIP-848 names them:

- the **group epoch** is bumped whenever the inputs of the assignment change: a member joins,
  leaves or is fenced, a member's subscription (topic names, ``SubscribedTopicRegex``) or server
  assignor changes, or a subscribed topic appears or gains partitions;
- the **target assignment** is computed by the group's server assignor (``uniform`` by default,
  ``range``; the one most members ask for) when the group epoch is ahead of the **assignment
  epoch**, which then takes the group epoch — at most once per ``group.consumer.assignment.interval.ms``
  (1000, Kafka 4.3's KIP-1263): a heartbeat that comes sooner leaves the group ``Assigning`` and a
  joining member starts at the current assignment epoch with nothing; the first heartbeat after
  the interval computes it. As Kafka 4.3.1 does (observed), a new group's first member lands at
  group epoch 2 when it subscribes to something (1 with an empty subscription);
- each member's **member epoch** reaches the assignment epoch through reconciliation: partitions
  the member must give up are first put in ``pending revocation`` (the member keeps its epoch and
  is told its reduced assignment); once its heartbeat reports them no longer owned (or an empty
  owned list), the member moves to the assignment epoch and gets the new partitions that no other
  member still owns (a partition goes to a new owner only after the previous owner revoked it);
  the rest follow on later heartbeats (``unreleased partitions``).

States (:class:`~pyspark_kafka.broker.coordinator.consumer_group_model.ConsumerGroupState`): ``Empty`` (no members), ``Assigning`` (group epoch > assignment epoch), ``Reconciling``
(a member is not yet at the assignment epoch or still waits for partitions), ``Stable``, ``Dead``.

Request rules and their error codes (Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``,
``throwIfConsumerGroupMemberEpochIsInvalid``): INVALID_REQUEST for an empty group id / instance id /
rack id, an empty member id (v1+, or epoch > 0 or -1), a first heartbeat (epoch 0) without
rebalance timeout, with owned partitions, or without subscription, epoch -2 without instance id, an
epoch below -2; UNSUPPORTED_ASSIGNOR; INVALID_REGULAR_EXPRESSION; GROUP_ID_NOT_FOUND for an unknown
group with epoch != 0 and for a group id held by a classic group with members (an empty classic group
— only offsets — becomes a consumer group, its offsets kept); UNKNOWN_MEMBER_ID; FENCED_MEMBER_EPOCH
for an epoch ahead of the member's, or behind it unless it is the previous epoch with owned
partitions within the assignment (a lost response); UNRELEASED_INSTANCE_ID / FENCED_INSTANCE_ID for
static members (KIP-345 rules of KIP-848).

Timers: a member that sends no heartbeat for ``group.consumer.session.timeout.ms`` (45000) is
fenced (removed, group epoch bumped); a member that does not revoke within its rebalance timeout
is fenced too. Leaving: epoch -1 removes the member; epoch -2 (static member) keeps it, with its
assignment, until it rejoins with the same instance id or its session expires.

Durability: after every change the whole group (epochs, members, assignments, target assignment) is
written to ``__consumer_offsets`` as one record under Kafka's ``ConsumerGroupMetadataKey`` (key
version 3) with our own value layout (see :func:`pyspark_kafka.broker.coordinator.offsets.consumer_group_value`);
a restarted broker restores the group, members keep their ids and epochs and must heartbeat within
their session timeout. Kafka instead writes seven record types (group epoch, member metadata,
target assignment, current assignment, ...); see docs/consumer-groups-broker.md.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from typing import Iterable, Mapping

import re2

from pyspark_kafka.broker.clock import now_ms
from pyspark_kafka.broker.coordinator import assignors
from pyspark_kafka.broker.coordinator.consumer_group_model import (  # noqa: F401 (the model's names, re-exported)
    ASSIGNING,
    DEAD,
    EMPTY,
    LEAVE_EPOCH,
    M_STABLE,
    M_UNRELEASED,
    M_UNREVOKED,
    RECONCILING,
    STABLE,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
    HeartbeatResult,
    MemberState,
)
from pyspark_kafka.broker.coordinator.internal_topics import INTERNAL_TOPICS, TopicPartition
from pyspark_kafka.broker.coordinator.offsets import OffsetStore
from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.metadata_cache import MetadataCache

log = get_logger(__name__)

#: a group id is an int16-length string in the ``__consumer_offsets`` record keys
MAX_GROUP_ID_BYTES = 32767
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=1024)
def compile_topic_regex(pattern: str):
    """``SubscribedTopicRegex`` compiled with RE2 (Kafka uses RE2J: linear time, so a member's regex can
    never stall the broker; no backreferences or lookaround). Raises ``re2.error`` when invalid."""
    return re2.compile(pattern, _RE2_OPTIONS)


class HeartbeatError(KafkaError):
    """A refused heartbeat: ``error_code`` set per instance, the message names the cause."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def validate_heartbeat(version: int, group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
                       rack_id: str | None, rebalance_timeout_ms: int, topic_names, topic_regex: str | None,
                       server_assignor: str | None, owned, supported_assignors: Iterable[str]) -> None:
    """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid`` (and the regex check); raises HeartbeatError."""
    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.invalid_request, message)

    if (version >= 1 or member_epoch > 0 or member_epoch == LEAVE_EPOCH) and member_id == "":
        raise invalid("MemberId can't be empty.")
    if group_id == "":
        raise invalid("GroupId can't be empty.")
    if len(group_id.encode()) > MAX_GROUP_ID_BYTES:
        raise HeartbeatError(ErrorCode.invalid_group_id, f"GroupId is {len(group_id.encode())} bytes; "
                             f"__consumer_offsets keys hold at most {MAX_GROUP_ID_BYTES}.")
    if instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if rack_id == "":
        raise invalid("RackId can't be empty.")
    if member_epoch == 0:
        if rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if owned is None or len(owned) > 0:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if topic_names is None and topic_regex is None:
            raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    elif member_epoch == STATIC_LEAVE_EPOCH:
        if instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif member_epoch < STATIC_LEAVE_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    supported = list(supported_assignors)
    if server_assignor is not None and server_assignor not in supported:
        raise HeartbeatError(ErrorCode.unsupported_assignor, f"ServerAssignor {server_assignor} is not supported. "
                             f"Supported assignors: {', '.join(supported)}.")
    if topic_regex is not None:
        try:
            compile_topic_regex(topic_regex)
        except re2.error as e:
            cause = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
            raise HeartbeatError(ErrorCode.invalid_regular_expression,
                                 f"SubscribedTopicRegex {topic_regex!r} is not a valid RE2 regular expression: "
                                 f"{cause}") from None


class ConsumerGroupCoordinator:
    """KIP-848 groups of one broker; created by :class:`~pyspark_kafka.broker.coordinator.group.GroupCoordinator`.

    ``ConsumerGroupCoordinator(config, offsets, metadata, classic_groups)``: the broker config, the
    :class:`OffsetStore` its groups are persisted in, the broker's
    :class:`~pyspark_kafka.broker.metadata_cache.MetadataCache` subscriptions resolve against (Kafka's
    coordinator reads the metadata image), and the classic groups by id (a dict shared with the classic
    protocol: a group id is one or the other).

    ``heartbeat(...)`` answers ConsumerGroupHeartbeat; ``describe``, ``delete``, ``validate_offset_commit``
    and ``validate_offset_fetch`` serve the shared APIs. Errors come back as Kafka error codes.
    """

    def __init__(self, config, offsets: OffsetStore, metadata: MetadataCache, classic_groups: dict) -> None:
        self.config = config
        self.offsets = offsets
        self.metadata = metadata
        self.classic_groups = classic_groups
        self.groups: dict[str, ConsumerGroup] = {}
        #: the event loop the timers run on (set when the coordinator loads; else the running loop)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.group_configs = None  # the broker's DynamicConfigs: per-group consumer.* configs (IncrementalAlterConfigs)

    # -- configuration ----------------------------------------------------------------------
    @property
    def assignor_names(self) -> list[str]:
        """``group.consumer.assignors`` (Kafka's default ``uniform,range``; the first is the default)."""
        names = [n.strip() for n in (self.config.get("group.consumer.assignors") or "").split(",") if n.strip()]
        return [n for n in names if n in assignors.ASSIGNORS] or list(assignors.ASSIGNORS)

    @property
    def session_timeout_ms(self) -> int:
        """``group.consumer.session.timeout.ms`` (ms; Kafka's default 45000)."""
        return self.config.get_int("group.consumer.session.timeout.ms")

    @property
    def heartbeat_interval_ms(self) -> int:
        """``group.consumer.heartbeat.interval.ms`` (ms; Kafka's default 5000), sent in every answer."""
        return self.config.get_int("group.consumer.heartbeat.interval.ms")

    def group_config_ms(self, group_id: str, name: str) -> int:
        """Group config ``name`` (``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms``) of
        ``group_id``: the group's own value (source GROUP_CONFIG), else the broker's ``group.<name>``."""
        if self.group_configs is not None:
            return int(self.group_configs.group_value(group_id, name))
        return self.config.get_int("group." + name)

    @property
    def assignment_interval_ms(self) -> int:
        """``group.consumer.assignment.interval.ms`` (ms; Kafka 4.3's default 1000, KIP-1263)."""
        return self.config.get_int("group.consumer.assignment.interval.ms")

    # -- loading ------------------------------------------------------------------------------
    def load(self, records: Mapping[str, dict], clear: bool = True) -> None:
        """Restore the groups persisted in ``__consumer_offsets``; each member gets a fresh session timer
        (and a member still revoking a fresh rebalance timer). ``clear`` False keeps the groups already loaded
        (a replicated cluster loads one partition at a time)."""
        if clear:
            self.groups.clear()
        for group_id, data in records.items():
            try:
                group = ConsumerGroup.from_dict(group_id, data)
            except (KeyError, TypeError, ValueError) as e:
                log.warning("skipping unreadable consumer group record of %s: %s", group_id, e)
                continue
            self.groups[group_id] = group
            for member in group.members.values():
                self._arm_session(group, member)
                if member.state == M_UNREVOKED:
                    self._arm_revocation(group, member)

    # -- topics -------------------------------------------------------------------------------
    def _topic_partitions(self, member: ConsumerMember) -> dict[str, int]:
        out = {}
        for name in member.topic_names:
            count = self.metadata.num_partitions(name)
            if count is not None:
                out[name] = count
        if member.topic_regex is not None:
            pattern = compile_topic_regex(member.topic_regex)
            for name, count in self.metadata.partition_counts().items():
                if name not in INTERNAL_TOPICS and pattern.fullmatch(name):
                    out[name] = count
        return out

    def subscriptions(self, group: ConsumerGroup) -> tuple[dict[str, frozenset[str]], dict[str, int]]:
        """``({member_id: subscribed topics that exist}, {topic: partition count})``, regexes resolved now."""
        members: dict[str, frozenset[str]] = {}
        partitions: dict[str, int] = {}
        for m in group.members.values():
            counts = self._topic_partitions(m)
            members[m.member_id] = frozenset(counts)
            partitions.update(counts)
        return members, partitions

    # -- timers ---------------------------------------------------------------------------------
    def _loop(self) -> asyncio.AbstractEventLoop:
        return self.loop or asyncio.get_running_loop()

    def _arm_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self._loop().call_later(self.group_config_ms(group.group_id, "consumer.session.timeout.ms") / 1000,
                                                       self._expire, group.group_id,
                                                       member.member_id, "session.timeout.ms")

    def _arm_revocation(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.revocation_timer is None:
            member.revocation_timer = self._loop().call_later(
                member.rebalance_timeout_ms / 1000, self._expire, group.group_id, member.member_id, "rebalance timeout")

    def _cancel_revocation(self, member: ConsumerMember) -> None:
        if member.revocation_timer is not None:
            member.revocation_timer.cancel()
            member.revocation_timer = None

    def _expire(self, group_id: str, member_id: str, why: str) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return
        log.info("consumer group %s: member %s fenced (%s expired)", group_id, member_id, why)
        self._remove(group, group.members[member_id])
        self._store(group)

    # -- membership -----------------------------------------------------------------------------
    def _remove(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        for timer in (member.session_timer, member.revocation_timer):
            if timer is not None:
                timer.cancel()
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        if member.instance_id and group.static_members.get(member.instance_id) == member.member_id:
            del group.static_members[member.instance_id]
        group.group_epoch += 1
        group.state_timestamp_ms = now_ms()

    def _store(self, group: ConsumerGroup) -> None:
        try:
            self.offsets.store_consumer_group(group.group_id, None if group.dead else group.as_dict(), now_ms())
        except KafkaError as e:  # the in-memory state stays right; a restart restores the last stored one
            log.warning("consumer group %s: cannot store its state (%s)", group.group_id, e)

    def _group_for(self, group_id: str, create: bool) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.classic_groups.get(group_id)
        if classic is not None and classic.members:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if not create:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        if classic is not None:  # an empty classic group (offsets only) becomes a consumer group
            self.classic_groups.pop(group_id, None)
            if self.offsets.loaded_groups.get(group_id) is not None:
                self.offsets.store_group(group_id, None, now_ms())
        group = self.groups[group_id] = ConsumerGroup(group_id, state_timestamp_ms=now_ms())
        return group

    def heartbeat(self, version: int, group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
                  rack_id: str | None, rebalance_timeout_ms: int, topic_names, topic_regex: str | None,
                  server_assignor: str | None, owned: list[TopicPartition] | None, client_id: str,
                  client_host: str) -> HeartbeatResult:
        """ConsumerGroupHeartbeat: join (epoch 0), heartbeat (member epoch), leave (-1) or static leave (-2).

        ``owned``: the partitions the member reports owning (None: unchanged since the last heartbeat).
        Returns the member's id and epoch, the heartbeat interval (ms) and, when it changed, the
        partitions it may consume. Errors as in the module docstring.
        """
        interval = self.group_config_ms(group_id, "consumer.heartbeat.interval.ms")
        try:
            validate_heartbeat(version, group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                               topic_names, topic_regex, server_assignor, owned, self.assignor_names)
            if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(group_id, member_id, member_epoch, instance_id)
            if version == 0 and member_epoch == 0 and not member_id:
                member_id = str(uuid.uuid4())
            group = self._group_for(group_id, create=member_epoch == 0)
            new_group = group.group_epoch == 0 and not group.members
            member, joined = self._member_for(group, member_id, member_epoch, instance_id, owned)
        except HeartbeatError as e:
            return HeartbeatResult(e.error_code, str(e), member_epoch=0, heartbeat_interval_ms=0)
        before = (set(member.assigned), member.member_epoch, member.state)
        changed = joined
        updates = {"client_id": client_id, "client_host": client_host}
        if rack_id is not None:
            updates["rack_id"] = rack_id
        if rebalance_timeout_ms != -1:
            updates["rebalance_timeout_ms"] = rebalance_timeout_ms
        for name, value in updates.items():
            setattr(member, name, value)
        for name, value in (("topic_names", None if topic_names is None else tuple(sorted(set(topic_names)))),
                            ("topic_regex", topic_regex), ("server_assignor", server_assignor)):
            if value is not None and getattr(member, name) != value:
                setattr(member, name, value)
                changed = True
        if topic_regex == "" and member.topic_regex == "":  # an empty regex clears the regex subscription
            member.topic_regex = None
        members, partitions = self.subscriptions(group)
        if changed or partitions != group.subscribed_partitions:
            # Kafka 4.3.1 (observed): the first member of a new group that subscribes to something lands at
            # group epoch 2, one with an empty subscription at 1; later changes bump by one
            group.group_epoch += 2 if new_group and (member.topic_names or member.topic_regex) else 1
            group.subscribed_partitions = partitions
            group.state_timestamp_ms = now_ms()
        now = now_ms()
        if group.group_epoch > group.assignment_epoch and (
                group.last_assignment_ms < 0 or now - group.last_assignment_ms >= self.assignment_interval_ms):
            group.last_assignment_ms = now
            previous = {m: set(tps) for m, tps in group.target.items()}
            group.target = assignors.assign(group.assignor(self.assignor_names[0]), members, partitions, previous,
                                            {m.member_id: m.instance_id for m in group.members.values()})
            group.assignment_epoch = group.group_epoch
            log.info("consumer group %s: target assignment at epoch %d: %s", group_id, group.assignment_epoch,
                     {m: len(t) for m, t in group.target.items()})
        self._reconcile(group, member, None if owned is None else set(owned))
        self._arm_session(group, member)
        after = (set(member.assigned), member.member_epoch, member.state)
        if joined or changed or after != before:
            self._store(group)
        send = joined or member_epoch == 0 or after[0] != before[0] or (owned is not None and set(owned) != member.assigned)
        return HeartbeatResult(ErrorCode.none, None, member.member_id, member.member_epoch, interval,
                               frozenset(member.assigned) if send else None)

    def _member_for(self, group: ConsumerGroup, member_id: str, member_epoch: int, instance_id: str | None,
                    owned) -> tuple[ConsumerMember, bool]:
        """The member the heartbeat is about, created on a join; raises HeartbeatError."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if member_epoch != 0:
                    raise HeartbeatError(ErrorCode.unknown_member_id,
                                         f"Member {member_id} is not a member of group {group.group_id}.")
                member = group.members[member_id] = ConsumerMember(member_id)
                return member, True
            if member_epoch == 0:  # a rejoin by a known member: it lost its partitions
                self._release(group, member)
                return member, False
            self._check_epoch(member, member_epoch, owned)
            return member, False
        existing_id = group.static_members.get(instance_id)
        existing = group.members.get(existing_id) if existing_id else None
        if member_epoch == 0:
            if existing is None:
                member = group.members[member_id] = ConsumerMember(member_id, instance_id)
                group.static_members[instance_id] = member_id
                return member, True
            if existing.member_id == member_id:
                self._release(group, existing)
                return existing, False
            if existing.member_epoch != STATIC_LEAVE_EPOCH:
                raise HeartbeatError(ErrorCode.unreleased_instance_id,
                                     f"Static member {member_id} with instance id {instance_id} cannot join the group "
                                     f"because the instance id is owned by {existing.member_id} member.")
            # the static member came back: the new member id takes over the assignment
            del group.members[existing.member_id]
            if existing.session_timer is not None:
                existing.session_timer.cancel()
            self._cancel_revocation(existing)
            existing.member_id = member_id
            existing.member_epoch = group.assignment_epoch
            group.members[member_id] = existing
            group.static_members[instance_id] = member_id
            if existing_id in group.target:
                group.target[member_id] = group.target.pop(existing_id)
            return existing, False
        if existing is None:
            raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise HeartbeatError(ErrorCode.fenced_instance_id, f"Static member {member_id} with instance id "
                                 f"{instance_id} was fenced by member {existing.member_id}.")
        self._check_epoch(existing, member_epoch, owned)
        return existing, False

    @staticmethod
    def _check_epoch(member: ConsumerMember, received: int, owned) -> None:
        """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``."""
        if received > member.member_epoch:
            raise HeartbeatError(ErrorCode.fenced_member_epoch, f"The consumer group member has a greater member "
                                 f"epoch ({received}) than the one known by the group coordinator "
                                 f"({member.member_epoch}). The member must abandon all its partitions and rejoin.")
        if received < member.member_epoch and (
                received != member.previous_member_epoch or owned is None or not set(owned) <= member.assigned):
            raise HeartbeatError(ErrorCode.fenced_member_epoch, f"The consumer group member has a smaller member "
                                 f"epoch ({received}) than the one known by the group coordinator "
                                 f"({member.member_epoch}). The member must abandon all its partitions and rejoin.")

    def _release(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """A member rejoining with epoch 0 owns nothing any more."""
        member.assigned.clear()
        member.pending_revocation.clear()
        member.assignment_epochs.clear()
        member.state = M_STABLE
        member.previous_member_epoch, member.member_epoch = member.member_epoch, 0
        self._cancel_revocation(member)

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: set[TopicPartition] | None) -> None:
        """Move ``member`` towards its target (Kafka's ``CurrentAssignmentBuilder``): revoke first, then assign
        only partitions no other member still owns."""
        target = group.target.get(member.member_id, set())
        if member.state == M_UNREVOKED:
            if owned is None or owned & member.pending_revocation:
                return  # still revoking
            member.pending_revocation = set()
            self._cancel_revocation(member)
        elif member.state == M_STABLE and member.member_epoch == group.assignment_epoch and member.assigned == target:
            return
        revoke = member.assigned - target
        if revoke:
            member.assigned -= revoke
            member.pending_revocation = revoke
            member.state = M_UNREVOKED
            self._arm_revocation(group, member)
            return
        busy: set[TopicPartition] = set()
        for other in group.members.values():
            if other is not member:
                busy |= other.owned()
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
        member.assigned = target - busy
        member.state = M_UNRELEASED if target - member.assigned else M_STABLE
        for tp in member.assigned:
            member.assignment_epochs.setdefault(tp, member.member_epoch)
        for tp in set(member.assignment_epochs) - member.owned():
            del member.assignment_epochs[tp]

    def _leave(self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None) -> HeartbeatResult:
        group = self._group_for(group_id, create=False)
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.unknown_member_id,
                                     f"Member {member_id} is not a member of group {group_id}.")
        else:
            existing_id = group.static_members.get(instance_id)
            member = group.members.get(existing_id) if existing_id else None
            if member is None:
                raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
            if member.member_id != member_id:
                raise HeartbeatError(ErrorCode.fenced_instance_id, f"Static member {member_id} with instance id "
                                     f"{instance_id} was fenced by member {member.member_id}.")
        if member_epoch == STATIC_LEAVE_EPOCH:
            member.member_epoch = STATIC_LEAVE_EPOCH  # keeps its assignment until it rejoins or expires
            log.info("consumer group %s: static member %s (%s) left temporarily", group_id, member_id, instance_id)
        else:
            log.info("consumer group %s: member %s left", group_id, member_id)
            self._remove(group, member)
        self._store(group)
        return HeartbeatResult(ErrorCode.none, None, member_id, member_epoch, 0, None)

    # -- shared APIs ----------------------------------------------------------------------------
    def validate_offset_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                               api_version: int, transactional: bool = False
                               ) -> tuple[int, dict[TopicPartition, int] | None]:
        """Kafka 4.3's ``ConsumerGroup.validateOffsetCommit``: ``(error, partition epochs)``; the error is
        NONE, UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION (a KIP-848 member must use OffsetCommit v9+) or
        STALE_MEMBER_EPOCH (an epoch ahead of the member's). For an epoch behind the member's, the
        partition epochs are returned: a partition may be committed only when the member still owns
        it and got it at that epoch or before (KIP-1251), else STALE_MEMBER_EPOCH for that partition;
        None means every partition may be committed."""
        if member_epoch < 0 and not group.members:
            return ErrorCode.none, None  # admin / manual-assignment commits into an empty group
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id, None
        if not transactional and api_version < 9:
            return ErrorCode.unsupported_version, None
        if member_epoch > member.member_epoch:
            return ErrorCode.stale_member_epoch, None
        self._arm_session(group, member)
        if member_epoch < member.member_epoch:
            return ErrorCode.none, {tp: e for tp, e in member.assignment_epochs.items() if e <= member_epoch}
        return ErrorCode.none, None

    def validate_offset_fetch(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> int:
        """Kafka's ``ConsumerGroup.validateOffsetFetch`` (OffsetFetch v9+ with a member): NONE,
        UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH. A request without member epoch (-1) is not checked."""
        if member_epoch < 0:
            return ErrorCode.none
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def delete(self, group_id: str) -> int:
        """DeleteGroups for a consumer group: NON_EMPTY_GROUP while it has members, else its offsets and
        state are tombstoned (NONE)."""
        group = self.groups[group_id]
        if group.members:
            return ErrorCode.non_empty_group
        try:
            self.offsets.delete_group(group_id, now_ms())
            self.offsets.store_consumer_group(group_id, None, now_ms())
        except KafkaError as e:
            return e.error_code
        group.dead = True
        del self.groups[group_id]
        return ErrorCode.none
