"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup (Kafka's ``ClassicGroup`` and the
classic half of ``GroupMetadataManager``; KIP-62/345/394).

One :class:`ClassicGroupCoordinator` (``GroupCoordinator.classic``) holds the classic groups of the
``__consumer_offsets`` partitions this broker coordinates (those it leads; ``coordinator/group.py`` loads and
unloads them). It runs on the broker's event
loop thread; JoinGroup and SyncGroup handlers await futures that the state machine completes, and timers
(session timeout, rebalance timeout, initial rebalance delay) are ``loop.call_later`` handles.

A group moves through Kafka's states (:class:`ClassicGroupState`)::

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
- **A generation becomes Stable once its record is written**: the leader's SyncGroup appends the group's
  metadata record (with every member's assignment); the group stays CompletingRebalance until that write is
  complete (:attr:`ClassicGroupCoordinator.write_done`: in a cluster, the ISR of the group's
  ``__consumer_offsets`` partition has it, acks=all), and only then becomes Stable and answers the waiting
  SyncGroups with their assignments. A member joining meanwhile starts a rebalance that answers every waiting
  SyncGroup, the leader's too, REBALANCE_IN_PROGRESS, and the completed write then changes nothing (Kafka's
  ``GroupMetadataManager.classicGroupSyncToClassicGroup``: its append future, a write's future of
  ``CoordinatorRuntime``, completes once the high watermark passes the record). A write that fails answers
  the SyncGroups its error and rebalances.
- **Offsets** are validated here (:meth:`ClassicGroupCoordinator.validate_offset_commit`) and kept by
  ``coordinator/group_offsets.py``.

The group's metadata (generation, protocol, leader, members and assignments) is written to
``__consumer_offsets`` (:class:`~pyspark_kafka.broker.coordinator.offsets.OffsetStore`) whenever a
generation becomes Stable or the group becomes Empty, and restored on load (:meth:`~ClassicGroupCoordinator.restore`):
members of a restored Stable group keep their ids and must heartbeat within their session timeout.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription as SubscriptionV0
from kio.schema.consumer_protocol_subscription.v1 import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v2 import ConsumerProtocolSubscription as SubscriptionV2
from kio.schema.consumer_protocol_subscription.v3 import ConsumerProtocolSubscription as SubscriptionV3
from kio.serial import entity_reader

from pyspark_kafka.broker.clock import now_ms
from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.coordinator.group_records import GroupRecord, Member
from pyspark_kafka.broker.coordinator.offsets import OffsetStore
from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger(__name__)


class ClassicGroupState(enum.StrEnum):
    """Kafka's ``ClassicGroupState`` (the names DescribeGroups / ListGroups show)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD = ClassicGroupState

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
class Group:
    """One group's state (see the module docstring)."""

    group_id: str
    state: ClassicGroupState = EMPTY
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


async def _written(group_id: str) -> int:
    """The default :attr:`ClassicGroupCoordinator.write_done`: a write is complete once appended (NONE)."""
    return ErrorCode.none


def _set(future: asyncio.Future | None, value: Any) -> None:
    if future is not None and not future.done():
        future.set_result(value)


class ClassicGroupCoordinator:
    """The classic groups of one broker (see the module docstring).

    ``ClassicGroupCoordinator(config, offsets, consumer_groups)``: the broker config, the
    :class:`OffsetStore` group metadata is written to, and the KIP-848 groups by id (a dict shared with
    :class:`~pyspark_kafka.broker.coordinator.consumer_group.ConsumerGroupCoordinator`: an empty consumer
    group becomes a classic one on JoinGroup). :attr:`groups` maps group ids to :class:`Group`; :attr:`loop`
    is set by the owner before the first request; :attr:`write_done` ``async (group_id) -> error code`` waits
    until the group's last ``__consumer_offsets`` write is complete (set by the cluster's coordinators to their
    acks=all wait, which answers NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE when the write did not get
    there; by default complete at once). Methods return Kafka error codes in their results rather than
    raising. Must be used from the broker's event loop.
    """

    def __init__(self, config: BrokerConfig, offsets: OffsetStore, consumer_groups: dict) -> None:
        self.config = config
        self.offsets = offsets
        self.consumer_groups = consumer_groups
        self.groups: dict[str, Group] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.write_done = _written
        self._sync_writes: set[asyncio.Task] = set()  # the leaders' group writes being waited for

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        return self.loop or asyncio.get_running_loop()

    def restore(self, group_id: str, record: GroupRecord) -> Group:
        """A group as a ``__consumer_offsets`` load found it: its generation and members (Stable when it had
        members, each on a fresh session timer), else Empty; it replaces any group of that id."""
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
        return group

    def forget(self, group_id: str) -> None:
        """Drop the group (this broker no longer coordinates it): its timers stop, members waiting in a
        JoinGroup / SyncGroup are answered NOT_COORDINATOR (Kafka's ``onResignation``)."""
        group = self.groups.pop(group_id)
        group.state = DEAD
        if group.join_timer is not None:
            group.join_timer.cancel()
        for member in group.members.values():
            if member.heartbeat_timer is not None:
                member.heartbeat_timer.cancel()
            _set(member.join_future, JoinResult(ErrorCode.not_coordinator, member.member_id))
            _set(member.sync_future, SyncResult(ErrorCode.not_coordinator))

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
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:  # a classic member cannot join a KIP-848 group here (no mixed groups)
                return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
            del self.consumer_groups[group_id]  # an empty consumer group becomes a classic one (offsets kept)
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
        return await self._await_join(group, member, f"member {member.member_id} rejoined")

    async def _await_join(self, group: Group, member: Member, reason: str) -> JoinResult:
        """``member`` waits in the join phase: the group's current one, or a new one for ``reason``."""
        future = member.join_future = self._loop.create_future()
        if group.state == PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, reason)
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
        return await self._await_join(group, member, f"static member {group_instance_id} rejoined with new metadata")

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members: tuple = ()
        if member.member_id == group.leader_id:
            members = tuple((m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                            for m in group.members.values())
        return JoinResult(ErrorCode.none, member.member_id, group.generation, group.protocol_type, group.protocol_name,
                          group.leader_id or "", members)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        """Enter PreparingRebalance: cancel waiting SyncGroups, arm the join timer (or the initial delay)."""
        if group.state == COMPLETING_REBALANCE:  # Kafka's resetAndPropagateAssignmentWithError
            for m in group.members.values():
                m.assignment = b""
            self._answer_syncs(group, lambda m: SyncResult(ErrorCode.rebalance_in_progress))
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

    def _store_group(self, group: Group, assignments: Mapping[str, bytes] | None = None) -> None:
        """Append the group's metadata record; ``assignments`` ``{member_id: bytes}`` instead of the members' own
        (the leader's SyncGroup: they are the members' only once the write is complete). Raises KafkaError."""
        members = tuple(m.persisted(group.protocol_name) for m in group.members.values())
        if assignments is not None:
            members = tuple(replace(m, assignment=assignments.get(m.member_id, b"")) for m in members)
        record = GroupRecord(group.protocol_type or "", group.generation, group.protocol_name, group.leader_id,
                             group.state_timestamp_ms, members)
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
        """The leader's SyncGroup: write the generation's record with ``assignments``, and once that write is
        complete make the group Stable and answer the waiting SyncGroups (see the module docstring)."""
        assignments = {m: assignments.get(m, b"") for m in group.members}
        try:
            self._store_group(group, assignments)
        except KafkaError as e:
            self._sync_write_failed(group, e.error_code, str(e))
            return
        task = self._loop.create_task(self._after_sync_write(group, group.generation, assignments))
        self._sync_writes.add(task)
        task.add_done_callback(self._sync_writes.discard)

    async def _after_sync_write(self, group: Group, generation: int, assignments: dict[str, bytes]) -> None:
        """Kafka's append-future callback of ``classicGroupSyncToClassicGroup``: act only if the group is still
        CompletingRebalance at ``generation`` (a join, a leave or an unload meanwhile has answered the SyncGroups)."""
        error = await self.write_done(group.group_id)
        if group.state != COMPLETING_REBALANCE or group.generation != generation:
            return
        if error:
            self._sync_write_failed(group, error, f"the write did not complete ({ErrorCode(error).name})")
            return
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        group.state = STABLE
        group.state_timestamp_ms = now_ms()
        self._answer_syncs(group, lambda m: SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                                                       m.assignment))

    def _answer_syncs(self, group: Group, result) -> None:
        """Answer every waiting SyncGroup with ``result(member)`` and re-arm every member's session timer (Kafka's
        ``propagateAssignment``: a member waiting for the leader's SyncGroup or for the generation's write has no
        session expiry, :meth:`_on_session_expired`, so its timer starts again from the answer)."""
        for m in group.members.values():
            future, m.sync_future = m.sync_future, None
            _set(future, result(m))
            self._schedule_heartbeat(group, m)

    def _sync_write_failed(self, group: Group, error: int, cause: str) -> None:
        """The generation's record was not written: answer the SyncGroups ``error`` and rebalance (Kafka's
        ``resetAndPropagateAssignmentWithError`` and ``maybePrepareRebalanceOrCompleteJoin``)."""
        log.warning("group %s: cannot store generation %d (%s); rebalancing", group.group_id, group.generation, cause)
        for m in group.members.values():
            m.assignment = b""
        self._answer_syncs(group, lambda m: SyncResult(error))
        self._prepare_rebalance(group, "group metadata could not be stored")

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
    def validate_offset_commit(self, group: Group, generation: int, member_id: str,
                               group_instance_id: str | None) -> int:
        """Kafka's ``ClassicGroup.validateOffsetCommit`` (after the group exists): the error code, or NONE.
        A member's commit refreshes its session."""
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

