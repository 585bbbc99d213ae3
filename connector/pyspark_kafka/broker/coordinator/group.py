"""The classic consumer-group coordinator (Kafka's ``GroupCoordinator`` / ``GroupMetadata``, KIP-62/345/394).

One :class:`GroupCoordinator` per broker (``Broker.group_coordinator``) owns every group, since this
single broker is the coordinator of every ``__consumer_offsets`` partition. It runs on the
broker's event loop thread; JoinGroup and SyncGroup handlers await futures that the state
machine completes, and timers (session timeout, rebalance timeout, initial rebalance delay)
are ``loop.call_later`` handles.

A group moves through Kafka's states::

    Empty ──join──▶ PreparingRebalance ──all members joined / rebalance timeout──▶ CompletingRebalance
      ▲                    ▲    │                                                   │ leader's SyncGroup
      │                    │    └─ no member left ─▶ Empty                           ▼
      └── last member leaves/expires ◀── member joins, leaves, expires, changes ── Stable
    Dead: deleted (DeleteGroups) or expired (offsets retention)

Rules kept from Kafka:

- **Members and generations**: JoinGroup v4+ with an empty member id gets MEMBER_ID_REQUIRED and
  a new id (KIP-394); each completed join phase increments the **generation**; the first member
  to join is the **leader** and alone receives the member list (with each member's metadata for
  the chosen protocol); the leader's SyncGroup carries every member's **assignment**. The
  assignors (range, round-robin, cooperative-sticky) run in the clients: the coordinator only
  picks the protocol all members support, by vote of their preference order.
- **Timeouts**: a member that sends no Heartbeat/SyncGroup/commit for ``session.timeout.ms`` is
  removed (not while it waits for a JoinGroup/SyncGroup answer), and the group rebalances; the
  join phase ends at the latest after the largest ``rebalance.timeout.ms`` of the members (the
  client's ``max.poll.interval.ms``), removing dynamic members that did not rejoin. The first
  join of an Empty group waits ``group.initial.rebalance.delay.ms`` for more members, and ends by that
  timer only (Kafka's ``prepareRebalance``): with a delay of 0, members joining together still share
  the first generation.
- **Static membership** (``group.instance.id``, KIP-345): a known instance rejoining with a new
  member id takes over the old id's place and assignment without a rebalance when the group is
  Stable; the old member id then gets FENCED_INSTANCE_ID.
- **Offsets**: OffsetCommit is accepted from the current generation's members (also during
  PreparingRebalance, so a consumer can commit in its revoke callback), and from non-members
  with generation -1 when the group is Empty (manual ``assign()`` consumers); it is refused with
  REBALANCE_IN_PROGRESS while CompletingRebalance. Offsets of an Empty group expire after
  ``offsets.retention.minutes`` (KIP-211), checked every ``offsets.retention.check.interval.ms``.

The group's metadata (generation, protocol, leader, members and assignments) is written to
``__consumer_offsets`` whenever a generation becomes Stable or the group becomes Empty, and
restored on load: members of a restored Stable group keep their ids and must heartbeat within
their session timeout.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription as SubscriptionV0
from kio.schema.consumer_protocol_subscription.v1 import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v2 import ConsumerProtocolSubscription as SubscriptionV2
from kio.schema.consumer_protocol_subscription.v3 import ConsumerProtocolSubscription as SubscriptionV3
from kio.serial import entity_reader

from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.clock import now_ms
from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.coordinator.consumer_group import ConsumerGroupCoordinator
from pyspark_kafka.broker.coordinator.offsets import (
    GroupRecord,
    MemberRecord,
    OffsetAndMetadata,
    OffsetStore,
    TopicPartition,
)
from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.replica_manager import ReplicaManager

log = get_logger(__name__)

# Kafka error codes used by the coordinator (org.apache.kafka.common.protocol.Errors).
EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

CONSUMER_PROTOCOL = "consumer"
_SUBSCRIPTION_SCHEMAS = (SubscriptionV0, SubscriptionV1, SubscriptionV2, SubscriptionV3)


# --- pure rules ---------------------------------------------------------------------------------


def select_protocol(preferences: list[list[str]]) -> str:
    """The protocol every member supports with the most first-choice votes (Kafka's ``selectProtocol``).

    ``preferences`` holds each member's protocol names in preference order. Each member votes
    for its most preferred protocol among those all members support; ties go to the first
    member's order. Raises ValueError when no protocol is common to all.
    """
    candidates = set(preferences[0]).intersection(*map(set, preferences[1:]))
    if not candidates:
        raise ValueError("no protocol is supported by every member")
    votes: dict[str, int] = {}
    for prefs in preferences:
        choice = next(p for p in prefs if p in candidates)
        votes[choice] = votes.get(choice, 0) + 1
    order = [p for p in preferences[0] if p in candidates]
    return max(order, key=lambda p: (votes.get(p, 0), -order.index(p)))


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """Topics of a consumer protocol subscription (``version int16`` + ConsumerProtocolSubscription);
    None when the bytes cannot be parsed. Newer versions are read as v3 (Kafka's rule)."""
    try:
        version = int.from_bytes(metadata[:2], "big", signed=True)
        schema = _SUBSCRIPTION_SCHEMAS[max(0, min(version, len(_SUBSCRIPTION_SCHEMAS) - 1))]
        subscription, _ = entity_reader(schema)(metadata, 2)
        return set(subscription.topics)
    except Exception:
        return None


# --- state ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer: error, generation, protocol, leader, the member's id and (leader only) the members."""

    error_code: int
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # (member_id, group_instance_id, metadata)
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncResult:
    """A SyncGroup answer: error, protocol type and name, the member's assignment bytes."""

    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class Member:
    """One group member (timeouts in ms; ``protocols`` = [(name, metadata)] in preference order)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None
    heartbeat_timer: asyncio.TimerHandle | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for n, m in self.protocols if n == protocol), b"")

    def record(self, protocol: str | None) -> MemberRecord:
        return MemberRecord(self.member_id, self.group_instance_id, self.client_id, self.client_host,
                            self.rebalance_timeout_ms, self.session_timeout_ms, self.metadata(protocol),
                            self.assignment)


@dataclass
class Group:
    """One group's state (see the module docstring)."""

    group_id: str
    state: str = EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: dict[str, asyncio.TimerHandle] = field(default_factory=dict)  # KIP-394
    state_timestamp_ms: int = -1
    join_timer: asyncio.TimerHandle | None = None
    initial_delay_pending: bool = False
    new_member_added: bool = False

    def awaiting_join(self) -> list[Member]:
        return [m for m in self.members.values() if m.join_future is not None]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's ``supportsProtocols``: same protocol type and at least one protocol in common."""
        names = {n for n, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        common = set.intersection(*({n for n, _ in m.protocols} for m in self.members.values()))
        return protocol_type == self.protocol_type and bool(common & names)


def _set(future: asyncio.Future | None, value: Any) -> None:
    if future is not None and not future.done():
        future.set_result(value)


class GroupCoordinator:
    """All consumer groups of one broker, with their offsets in an :class:`OffsetStore` (``.offsets``).

    ``GroupCoordinator(replica_manager, config)``; :meth:`ensure_loaded` replays
    ``__consumer_offsets`` (once) and starts the offsets-retention timer. Methods return Kafka error codes (ints) in their results rather
    than raising; see each method. Must be used from the broker's event loop.
    """

    def __init__(self, replica_manager: ReplicaManager, config: BrokerConfig) -> None:
        self.replica_manager = replica_manager
        #: ``(topic, partition) -> bool``: whether the partition exists for OffsetCommit (Kafka checks the cluster's
        #: metadata, not this broker's replicas); a replicated broker's lifecycle sets it to its metadata image
        self.partition_exists: Callable[[str, int], bool] = replica_manager.has_partition
        self.config = config
        self.offsets = OffsetStore(replica_manager.logs, config)
        self.groups: dict[str, Group] = {}
        self.loaded = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: ``__consumer_offsets`` partitions this broker coordinates: None on the single node (all of them); in a
        #: replicated cluster the partitions it leads (:meth:`load_partition` / :meth:`unload_partition`)
        self.owned: set[int] | None = None
        #: KIP-848 groups (ConsumerGroupHeartbeat); they share the group ids and offsets with the classic ones
        self.consumer = ConsumerGroupCoordinator(self)

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
        """Replay ``__consumer_offsets``: groups with metadata come back with their generation and
        members (Stable when they had members, each on a fresh session timer), groups with only
        offsets come back Empty. Raises KafkaError when the topic cannot be read."""
        self._loop = asyncio.get_running_loop()
        if self.owned is None:
            self.offsets.load()
            self._build_groups(None)
        self._schedule_retention()

    def owns(self, group_id: str) -> bool:
        """Whether this broker coordinates ``group_id`` (always on the single node; in a replicated cluster when it
        leads the group's ``__consumer_offsets`` partition and has loaded it)."""
        return self.owned is None or self.offsets.partition_of(group_id) in self.owned

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
        if self.owned is None:
            return
        self.owned.discard(partition)
        for group_id in [g for g in self.groups if self.offsets.partition_of(g) == partition]:
            group = self.groups.pop(group_id)
            group.state = DEAD
            if group.join_timer is not None:
                group.join_timer.cancel()
            for member in group.members.values():
                if member.heartbeat_timer is not None:
                    member.heartbeat_timer.cancel()
                _set(member.join_future, JoinResult(ErrorCode.not_coordinator, member.member_id))
                _set(member.sync_future, SyncResult(ErrorCode.not_coordinator))
        for group_id in [g for g in self.consumer.groups if self.offsets.partition_of(g) == partition]:
            group = self.consumer.groups.pop(group_id)
            for member in group.members.values():
                for timer in (member.session_timer, member.revocation_timer):
                    if timer is not None:
                        timer.cancel()
        self.offsets.unload(partition)

    def _build_groups(self, partition: int | None) -> None:
        """Groups from the replayed records: all of them (``partition`` None) or those of one partition."""
        def mine(group_id: str) -> bool:
            return partition is None or self.offsets.partition_of(group_id) == partition

        now = now_ms()
        for group_id, record in self.offsets.loaded_groups.items():
            if not mine(group_id):
                continue
            group = Group(group_id, protocol_type=record.protocol_type or None, generation=record.generation,
                          protocol_name=record.protocol, leader_id=record.leader,
                          state_timestamp_ms=record.state_timestamp_ms)
            for m in record.members:
                member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                m.rebalance_timeout_ms, m.session_timeout_ms,
                                [(record.protocol or "", m.subscription)], m.assignment)
                group.members[m.member_id] = member
                if m.group_instance_id:
                    group.static_members[m.group_instance_id] = m.member_id
                self._schedule_heartbeat(group, member)
            group.state = STABLE if group.members else EMPTY
            self.groups[group_id] = group
        self.consumer.load({g: v for g, v in self.offsets.consumer_groups.items() if mine(g)},
                           clear=partition is None)
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

    # -- timers ------------------------------------------------------------------------------
    def _schedule_heartbeat(self, group: Group, member: Member) -> None:
        """(Re)arm the member's session timer: it expires ``session.timeout.ms`` after its last sign of life."""
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        member.heartbeat_timer = self._loop.call_later(
            member.session_timeout_ms / 1000, self._on_session_expired, group, member.member_id)

    def _on_session_expired(self, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or group.state == DEAD:
            return
        if member.join_future is not None or member.sync_future is not None:
            return  # waiting for our answer: the rebalance timeout governs it (Kafka's hasSatisfiedHeartbeat)
        log.info("group %s: member %s expired after session.timeout.ms=%d; rebalancing", group.group_id,
                 member_id, member.session_timeout_ms)
        self._remove_member(group, member)

    # -- join ----------------------------------------------------------------------------------
    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                         client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                         protocol_type: str, protocols: list[tuple[str, bytes]],
                         require_known_member_id: bool) -> JoinResult:
        """JoinGroup: wait until the join phase completes and return this member's :class:`JoinResult`.

        Errors: INVALID_GROUP_ID (empty id), INVALID_SESSION_TIMEOUT (outside
        ``group.min.session.timeout.ms``..``group.max.session.timeout.ms``),
        INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, MEMBER_ID_REQUIRED
        (v4+, with the new member id), COORDINATOR_NOT_AVAILABLE (group being deleted).
        """
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, member_id)
        low = self.config.get_int("group.min.session.timeout.ms")
        high = self.config.get_int("group.max.session.timeout.ms")
        if not low <= session_timeout_ms <= high:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:  # a classic member cannot join a KIP-848 group here (no mixed groups)
                return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
            del self.consumer.groups[group_id]  # an empty consumer group becomes a classic one (offsets kept)
            self.offsets.store_consumer_group(group_id, None, now_ms())
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            group = self.groups[group_id] = Group(group_id, state_timestamp_ms=now_ms())
        if group.state == DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        if not group.supports(protocol_type, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        if group_instance_id and member_id and group.static_members.get(group_instance_id, member_id) != member_id:
            return JoinResult(ErrorCode.fenced_instance_id, member_id)
        args = (group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocols)
        if not member_id:
            new_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
            if group_instance_id and group_instance_id in group.static_members:
                return await self._replace_static_member(group, new_id, *args)
            if require_known_member_id and not group_instance_id:
                self._add_pending_member(group, new_id, session_timeout_ms)
                return JoinResult(ErrorCode.member_id_required, new_id)
            return await self._add_member_and_rebalance(group, new_id, protocol_type, *args)
        if member_id in group.pending_members:
            group.pending_members.pop(member_id).cancel()
            return await self._add_member_and_rebalance(group, member_id, protocol_type, *args)
        member = group.members.get(member_id)
        if member is None:
            return JoinResult(ErrorCode.unknown_member_id, member_id)
        return await self._rejoin(group, member, protocols, session_timeout_ms, rebalance_timeout_ms)

    def _add_pending_member(self, group: Group, member_id: str, session_timeout_ms: int) -> None:
        def expire() -> None:
            if group.pending_members.pop(member_id, None) is not None:
                self._maybe_complete_join(group)

        group.pending_members[member_id] = self._loop.call_later(session_timeout_ms / 1000, expire)

    async def _add_member_and_rebalance(self, group: Group, member_id: str, protocol_type: str,
                                        group_instance_id, client_id, client_host, session_timeout_ms,
                                        rebalance_timeout_ms, protocols) -> JoinResult:
        member = Member(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                        session_timeout_ms, list(protocols))
        future = member.join_future = self._loop.create_future()
        if not group.members:
            group.protocol_type = protocol_type
        group.members[member_id] = member
        if group_instance_id:
            group.static_members[group_instance_id] = member_id
        if group.leader_id is None:
            group.leader_id = member_id
        group.new_member_added = True
        if group.state == PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, f"member {member_id} joined")
        return await future

    async def _rejoin(self, group: Group, member: Member, protocols, session_timeout_ms: int,
                      rebalance_timeout_ms: int) -> JoinResult:
        changed = [n for n, _ in member.protocols] != [n for n, _ in protocols] or \
            member.metadata(group.protocol_name) != dict(protocols).get(group.protocol_name)
        if group.state == EMPTY:
            return JoinResult(ErrorCode.unknown_member_id, member.member_id)
        if group.state in (COMPLETING_REBALANCE, STABLE) and not changed and not (
                group.state == STABLE and member.member_id == group.leader_id):
            self._schedule_heartbeat(group, member)
            return self._join_result(group, member)
        member.protocols = list(protocols)
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        _set(member.join_future, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))  # a duplicate join
        future = member.join_future = self._loop.create_future()
        if group.state == PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, f"member {member.member_id} rejoined")
        return await future

    async def _replace_static_member(self, group: Group, new_id: str, group_instance_id, client_id, client_host,
                                     session_timeout_ms, rebalance_timeout_ms, protocols) -> JoinResult:
        """KIP-345: a known ``group.instance.id`` joins with an empty member id (it restarted)."""
        old_id = group.static_members[group_instance_id]
        member = group.members.pop(old_id)
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        _set(member.join_future, JoinResult(ErrorCode.fenced_instance_id, old_id))
        _set(member.sync_future, SyncResult(ErrorCode.fenced_instance_id))
        member.join_future = member.sync_future = None
        old_protocols = member.protocols
        member.member_id = new_id
        member.client_id, member.client_host = client_id, client_host
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        member.protocols = list(protocols)
        group.members[new_id] = member
        group.static_members[group_instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        log.info("group %s: static member %s replaced member id %s by %s", group.group_id, group_instance_id,
                 old_id, new_id)
        unchanged = member.metadata(group.protocol_name) == dict(old_protocols).get(group.protocol_name) and \
            [n for n, _ in old_protocols] == [n for n, _ in protocols]
        if group.state == STABLE and unchanged:
            self._store_group(group)
            self._schedule_heartbeat(group, member)
            result = self._join_result(group, member)
            # KIP-814: a returning leader gets the members but need not assign again.
            return JoinResult(**{**result.__dict__, "skip_assignment": member.member_id == group.leader_id})
        future = member.join_future = self._loop.create_future()
        if group.state == PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, f"static member {group_instance_id} rejoined with new metadata")
        return await future

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members: tuple = ()
        if member.member_id == group.leader_id:
            members = tuple((m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                            for m in group.members.values())
        return JoinResult(ErrorCode.none, member.member_id, group.generation, group.protocol_type, group.protocol_name,
                          group.leader_id or "", members)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        """Enter PreparingRebalance: cancel waiting SyncGroups, arm the join timer (or the initial delay)."""
        if group.state == COMPLETING_REBALANCE:
            for m in group.members.values():
                _set(m.sync_future, SyncResult(ErrorCode.rebalance_in_progress))
                m.sync_future = None
        initial = group.state == EMPTY
        group.state = PREPARING_REBALANCE
        log.info("group %s: preparing rebalance (generation %d): %s", group.group_id, group.generation, reason)
        if group.join_timer is not None:
            group.join_timer.cancel()
        delay = self.config.get_int("group.initial.rebalance.delay.ms")
        timeout = group.rebalance_timeout_ms()
        if initial:  # Kafka's prepareRebalance: an Empty group's first join ends by the timer only, even at delay 0
            group.initial_delay_pending = True
            group.new_member_added = False
            self._initial_delay(group, min(delay, timeout), timeout - min(delay, timeout))
        else:
            group.join_timer = self._loop.call_later(timeout / 1000, self._complete_join, group)
            self._maybe_complete_join(group)

    def _initial_delay(self, group: Group, delay_ms: int, remaining_ms: int) -> None:
        """Kafka's InitialDelayedJoin: wait while new members keep arriving, up to the rebalance timeout."""

        def fire() -> None:
            if group.state != PREPARING_REBALANCE:
                return
            if group.new_member_added and remaining_ms > 0:
                group.new_member_added = False
                step = min(delay_ms, remaining_ms)
                self._initial_delay(group, step, remaining_ms - step)
                return
            group.initial_delay_pending = False
            self._complete_join(group)

        group.join_timer = self._loop.call_later(delay_ms / 1000, fire)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state != PREPARING_REBALANCE or group.initial_delay_pending:
            return
        if all(m.join_future is not None for m in group.members.values()) and not group.pending_members:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """End the join phase: drop dynamic members that did not rejoin, bump the generation, answer the joins."""
        if group.state != PREPARING_REBALANCE:
            return
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_delay_pending = False
        for member in list(group.members.values()):
            if member.join_future is None and not member.group_instance_id:
                log.info("group %s: member %s did not rejoin within the rebalance timeout; removed",
                         group.group_id, member.member_id)
                self._drop(group, member)
        group.generation += 1
        if not group.members:
            self._become_empty(group)
            return
        joined = group.awaiting_join()
        if not joined:  # only static members that did not rejoin: wait for them
            group.generation -= 1
            group.join_timer = self._loop.call_later(group.rebalance_timeout_ms() / 1000, self._complete_join, group)
            return
        group.protocol_name = select_protocol([[n for n, _ in m.protocols] for m in group.members.values()])
        if group.leader_id not in group.members or group.members[group.leader_id].join_future is None:
            group.leader_id = joined[0].member_id
        group.state = COMPLETING_REBALANCE
        group.state_timestamp_ms = now_ms()
        log.info("group %s: generation %d with %d members, protocol %s, leader %s", group.group_id,
                 group.generation, len(group.members), group.protocol_name, group.leader_id)
        for member in joined:
            future, member.join_future = member.join_future, None
            _set(future, self._join_result(group, member))
            self._schedule_heartbeat(group, member)

    def _become_empty(self, group: Group) -> None:
        group.state = EMPTY
        group.protocol_name = None
        group.leader_id = None
        group.state_timestamp_ms = now_ms()
        log.info("group %s: empty at generation %d", group.group_id, group.generation)
        try:
            self._store_group(group)
        except KafkaError as e:  # the in-memory state is right; a restart would restore the last stable one
            log.warning("group %s: cannot store the empty group (%s)", group.group_id, e)

    def _store_group(self, group: Group) -> None:
        record = GroupRecord(group.protocol_type or "", group.generation, group.protocol_name, group.leader_id,
                             group.state_timestamp_ms,
                             tuple(m.record(group.protocol_name) for m in group.members.values()))
        self.offsets.store_group(group.group_id, record, now_ms())

    # -- sync ---------------------------------------------------------------------------------
    def _check_member(self, group: Group | None, member_id: str, group_instance_id: str | None,
                      generation: int) -> int:
        """Kafka's ``validateCurrentMember`` plus group presence: the error code, or NONE."""
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state == DEAD:
            return ErrorCode.coordinator_not_available
        if group_instance_id:
            known = group.static_members.get(group_instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            if known != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    async def sync_group(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: Mapping[str, bytes]) -> SyncResult:
        """SyncGroup: the leader hands in ``{member_id: assignment}``; every member waits for its assignment.

        Errors: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL
        (v5 protocol type/name differ), REBALANCE_IN_PROGRESS (a new join phase began),
        COORDINATOR_NOT_AVAILABLE (group metadata could not be written).
        """
        group = self.groups.get(group_id)
        error = self._check_member(group, member_id, group_instance_id, generation)
        if error:
            return SyncResult(error)
        if (protocol_type and protocol_type != group.protocol_type) or (
                protocol_name and protocol_name != group.protocol_name):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        member = group.members[member_id]
        if group.state == PREPARING_REBALANCE:
            return SyncResult(ErrorCode.rebalance_in_progress)
        if group.state == STABLE:
            self._schedule_heartbeat(group, member)
            return SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment)
        if group.state != COMPLETING_REBALANCE:
            return SyncResult(ErrorCode.unknown_member_id)
        _set(member.sync_future, SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_future = future = self._loop.create_future()
        self._schedule_heartbeat(group, member)
        if member_id == group.leader_id:
            self._complete_sync(group, assignments)
        return await future

    def _complete_sync(self, group: Group, assignments: Mapping[str, bytes]) -> None:
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        try:
            self._store_group(group)
        except KafkaError as e:
            log.warning("group %s: cannot store generation %d (%s); rebalancing", group.group_id, group.generation, e)
            for m in group.members.values():
                m.assignment = b""
                _set(m.sync_future, SyncResult(e.error_code))
                m.sync_future = None
            self._prepare_rebalance(group, "group metadata could not be stored")
            return
        group.state = STABLE
        group.state_timestamp_ms = now_ms()
        for m in group.members.values():
            future, m.sync_future = m.sync_future, None
            _set(future, SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, m.assignment))

    # -- heartbeat and leave -----------------------------------------------------------------
    def heartbeat(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None) -> int:
        """Heartbeat: refresh the member's session; REBALANCE_IN_PROGRESS tells it to rejoin.

        Errors: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION, COORDINATOR_NOT_AVAILABLE.
        """
        group = self.groups.get(group_id)
        error = self._check_member(group, member_id, group_instance_id, generation)
        if error:
            return error
        if group.state == EMPTY:
            return ErrorCode.unknown_member_id
        self._schedule_heartbeat(group, group.members[member_id])
        return ErrorCode.rebalance_in_progress if group.state == PREPARING_REBALANCE else ErrorCode.none

    def leave_group(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """LeaveGroup for ``[(member_id, group_instance_id)]``: ``(top-level error, per-member errors)``.

        A static member may leave by instance id alone (empty member id, KIP-345); a wrong member
        id for a known instance gets FENCED_INSTANCE_ID; unknown members UNKNOWN_MEMBER_ID.
        """
        members = list(members)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(members)
        if group.state == DEAD:
            return ErrorCode.coordinator_not_available, []
        errors = []
        for member_id, instance_id in members:
            if instance_id:
                known = group.static_members.get(instance_id)
                if known is None:
                    errors.append(ErrorCode.unknown_member_id)
                    continue
                if member_id and member_id != known:
                    errors.append(ErrorCode.fenced_instance_id)
                    continue
                member_id = known
            if member_id in group.pending_members:
                group.pending_members.pop(member_id).cancel()
                self._maybe_complete_join(group)
                errors.append(ErrorCode.none)
            elif member_id in group.members:
                log.info("group %s: member %s left", group.group_id, member_id)
                self._remove_member(group, group.members[member_id])
                errors.append(ErrorCode.none)
            else:
                errors.append(ErrorCode.unknown_member_id)
        return ErrorCode.none, errors

    def _drop(self, group: Group, member: Member) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        _set(member.join_future, JoinResult(ErrorCode.unknown_member_id, member.member_id))
        _set(member.sync_future, SyncResult(ErrorCode.unknown_member_id))
        del group.members[member.member_id]
        if member.group_instance_id and group.static_members.get(member.group_instance_id) == member.member_id:
            del group.static_members[member.group_instance_id]
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)

    def _remove_member(self, group: Group, member: Member) -> None:
        self._drop(group, member)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} left")
        elif group.state == PREPARING_REBALANCE:
            self._maybe_complete_join(group)

    # -- offsets ------------------------------------------------------------------------------
    def _commit_error(self, group: Group, generation: int, member_id: str, group_instance_id: str | None) -> int:
        """Kafka's ``validateOffsetCommit`` (after the group exists)."""
        if group.state == DEAD:
            return ErrorCode.coordinator_not_available
        if generation < 0 and not member_id and not group_instance_id:
            return ErrorCode.none if group.state == EMPTY else ErrorCode.unknown_member_id
        error = self._check_member(group, member_id, group_instance_id, generation)
        if error:
            return error
        if group.state == COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        self._schedule_heartbeat(group, group.members[member_id])
        return ErrorCode.none

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
        group = self.groups.get(group_id)
        committable = None  # KIP-1251: the partitions a commit with an older member epoch may carry
        if consumer_group is not None:
            error, committable = self.consumer.validate_offset_commit(consumer_group, member_id, generation,
                                                                      api_version)
        else:
            if group is None:
                if generation >= 0:
                    return {tp: ErrorCode.illegal_generation for tp in offsets}
                group = Group(group_id, state_timestamp_ms=now_ms())
            error = self._commit_error(group, generation, member_id, group_instance_id)
        if error:
            return {tp: error for tp in offsets}
        max_metadata = self.config.get_int("offset.metadata.max.bytes")
        errors: dict[TopicPartition, int] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for (topic, partition), value in offsets.items():
            if not self.partition_exists(topic, partition):
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
            self.groups.setdefault(group_id, group)
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
        group = self.groups.get(group_id)
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
        for group in list(self.groups.values()):
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
                del self.groups[group.group_id]
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

