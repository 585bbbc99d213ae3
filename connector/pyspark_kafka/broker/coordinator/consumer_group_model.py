"""The KIP-848 consumer group model (Kafka's ``ConsumerGroup``, ``ConsumerGroupMember``, ``MemberState``):
the group and member dataclasses with their persisted (JSON) form, their states as enums, and the heartbeat
answer. The state machine that moves them is :mod:`~pyspark_kafka.broker.coordinator.consumer_group`.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

from pyspark_kafka.broker.coordinator.internal_topics import TopicPartition

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class ConsumerGroupState(enum.StrEnum):
    """Kafka's ``ConsumerGroupState`` (the names DescribeGroups / ListGroups show)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.StrEnum):
    """Kafka's ``MemberState`` of a member's reconciliation (the values persisted in the group's record)."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD = ConsumerGroupState
M_STABLE, M_UNREVOKED, M_UNRELEASED = MemberState


@dataclass
class ConsumerMember:
    """One KIP-848 member: identity, subscription, epochs, and its current assignment.

    ``assigned``: partitions it may consume now; ``pending_revocation``: partitions it must give up
    (still owned until its heartbeat says otherwise). Timeouts in ms.
    """

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    topic_names: tuple[str, ...] = ()
    topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = M_STABLE
    assigned: set[TopicPartition] = field(default_factory=set)
    pending_revocation: set[TopicPartition] = field(default_factory=set)
    #: KIP-1251: the member epoch at which each owned partition was given to the member
    assignment_epochs: dict[TopicPartition, int] = field(default_factory=dict)
    session_timer: asyncio.TimerHandle | None = None
    revocation_timer: asyncio.TimerHandle | None = None

    def owned(self) -> set[TopicPartition]:
        """Partitions the member may still hold: assigned plus pending revocation."""
        return self.assigned | self.pending_revocation

    def as_dict(self) -> dict:
        """The persisted form (see ``offsets.consumer_group_value``)."""
        return {"member_id": self.member_id, "instance_id": self.instance_id, "rack_id": self.rack_id,
                "client_id": self.client_id, "client_host": self.client_host,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "topic_names": list(self.topic_names),
                "topic_regex": self.topic_regex, "server_assignor": self.server_assignor,
                "member_epoch": self.member_epoch, "previous_member_epoch": self.previous_member_epoch,
                "state": self.state, "assigned": sorted(self.assigned),
                "pending_revocation": sorted(self.pending_revocation),
                "assignment_epochs": sorted([t, p, e] for (t, p), e in self.assignment_epochs.items())}

    @classmethod
    def from_dict(cls, d: dict) -> "ConsumerMember":
        """The member of an :meth:`as_dict` dict (KeyError/TypeError/ValueError when malformed)."""
        return cls(d["member_id"], d.get("instance_id"), d.get("rack_id"), d.get("client_id", ""),
                   d.get("client_host", ""), int(d.get("rebalance_timeout_ms", 300_000)),
                   tuple(d.get("topic_names", ())), d.get("topic_regex"), d.get("server_assignor"),
                   int(d["member_epoch"]), int(d.get("previous_member_epoch", -1)), MemberState(d.get("state", M_STABLE)),
                   {(t, int(p)) for t, p in d.get("assigned", ())},
                   {(t, int(p)) for t, p in d.get("pending_revocation", ())},
                   {(t, int(p)): int(e) for t, p, e in d.get("assignment_epochs", ())})


@dataclass
class ConsumerGroup:
    """One KIP-848 group: epochs, members, target assignment and the partition counts it was computed for."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, set[TopicPartition]] = field(default_factory=dict)
    subscribed_partitions: dict[str, int] = field(default_factory=dict)  # topic -> count seen by the last epoch
    state_timestamp_ms: int = -1
    last_assignment_ms: int = -1  # when the target assignment was last computed (not persisted)
    dead: bool = False

    @property
    def state(self) -> ConsumerGroupState:
        """Kafka's ``ConsumerGroupState`` name: Empty, Assigning, Reconciling, Stable or Dead."""
        if self.dead:
            return DEAD
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state != M_STABLE
               for m in self.members.values() if m.member_epoch != STATIC_LEAVE_EPOCH):
            return RECONCILING
        return STABLE

    def assignor(self, default: str) -> str:
        """Kafka's ``preferredServerAssignor``: the assignor most members ask for, else ``default``."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return default
        return max(sorted(counts), key=lambda a: counts[a])

    def as_dict(self) -> dict:
        """The persisted, JSON-able form (without timers and the assignment interval's clock)."""
        return {"group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
                "members": [m.as_dict() for m in self.members.values()],
                "target": {m: sorted(tps) for m, tps in self.target.items()},
                "subscribed_partitions": self.subscribed_partitions, "state_timestamp_ms": self.state_timestamp_ms}

    @classmethod
    def from_dict(cls, group_id: str, d: dict) -> "ConsumerGroup":
        """The group of an :meth:`as_dict` dict (KeyError/TypeError/ValueError when malformed)."""
        group = cls(group_id, int(d["group_epoch"]), int(d["assignment_epoch"]),
                    target={m: {(t, int(p)) for t, p in tps} for m, tps in d.get("target", {}).items()},
                    subscribed_partitions={t: int(n) for t, n in d.get("subscribed_partitions", {}).items()},
                    state_timestamp_ms=int(d.get("state_timestamp_ms", -1)))
        for md in d.get("members", ()):
            member = ConsumerMember.from_dict(md)
            group.members[member.member_id] = member
            if member.instance_id:
                group.static_members[member.instance_id] = member.member_id
        return group


@dataclass(frozen=True)
class HeartbeatResult:
    """A ConsumerGroupHeartbeat answer; ``assignment`` None means "not sent" (unchanged)."""

    error_code: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: frozenset[TopicPartition] | None = None

