"""Server-side partition assignors of KIP-848 consumer groups: ``uniform`` (the default) and ``range``.

Kafka runs these in the group coordinator (``org.apache.kafka.coordinator.group.assignor``:
``UniformAssignor``, ``RangeAssignor``); the group's **target assignment** is their result. Both
are pure functions here::

    assign(name, members, partitions, previous) -> {member_id: {(topic, partition), ...}}

- ``members``: ``{member_id: frozenset of subscribed topic names}`` (regex subscriptions already
  resolved to names by the caller);
- ``partitions``: ``{topic: partition count}`` of the topics that exist;
- ``previous``: the previous target assignment ``{member_id: {(topic, partition)}}`` (for stickiness).

Rules kept (the invariants Kafka's assignors guarantee, checked by ``tests/broker/coordinator/test_assignors.py``):

- every partition of a subscribed topic goes to exactly one member subscribed to that topic; no
  member gets a partition of a topic it does not subscribe to; every member appears in the result
  (possibly with nothing);
- **uniform**: the members' partition counts differ by at most one whenever the subscriptions
  allow it (always when all members subscribe to the same topics); a partition stays with its
  previous owner when that keeps the balance (sticky, as Kafka's ``OptimizedUniformAssignmentBuilder``
  and ``GeneralUniformAssignmentBuilder``);
- **range** (Kafka's server-side ``RangeAssignor``): per topic, the partitions are cut into
  contiguous ranges over the subscribed members in Kafka's order — static members first, by
  instance id, then the others by member id; the first ``count % members`` of them get one more, so
  members subscribed to the same topics get the same partition numbers of each (co-partitioning).
  Like Kafka's, it is not sticky.

Differences from Kafka: the exact choice of which partitions move in a uniform rebalance may differ
(Kafka orders by topic id and rack); racks are ignored by both assignors here.
"""

from __future__ import annotations

from typing import Mapping

from pyspark_kafka.broker.coordinator.internal_topics import TopicPartition

Assignment = dict[str, set[TopicPartition]]

UNIFORM = "uniform"
RANGE = "range"
#: Assignor names in Kafka's default order of ``group.consumer.assignors`` (the first is the default).
ASSIGNORS = (UNIFORM, RANGE)
DEFAULT_ASSIGNOR = UNIFORM


def assign(name: str, members: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
           previous: Mapping[str, set[TopicPartition]] | None = None,
           instance_ids: Mapping[str, str | None] | None = None) -> Assignment:
    """The target assignment by assignor ``name`` (``uniform`` or ``range``); see the module docstring.
    ``instance_ids``: ``{member_id: group.instance.id or None}`` (the range assignor's member order).

    Raises ValueError for an unknown assignor name (the handler answers UNSUPPORTED_ASSIGNOR before).
    """
    if name == UNIFORM:
        return uniform(members, partitions, previous or {})
    if name == RANGE:
        return range_assign(members, partitions, instance_ids)
    raise ValueError(f"unknown assignor {name!r}; supported: {', '.join(ASSIGNORS)}")


def member_order(member_ids, instance_ids: Mapping[str, str | None] | None = None) -> list[str]:
    """Kafka's ``RangeAssignor.sortMemberIds``: static members first by instance id, then the others by member id."""
    instance_ids = instance_ids or {}
    return sorted(member_ids, key=lambda m: (0, instance_ids[m], m) if instance_ids.get(m) else (1, "", m))


def range_assign(members: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
                 instance_ids: Mapping[str, str | None] | None = None) -> Assignment:
    """Per topic: contiguous partition ranges over the subscribed members in :func:`member_order`."""
    result: Assignment = {m: set() for m in members}
    order = member_order(members, instance_ids)
    for topic in sorted(partitions):
        subscribed = [m for m in order if topic in members[m]]
        if not subscribed:
            continue
        count = partitions[topic]
        quota, extra = divmod(count, len(subscribed))
        start = 0
        for i, member in enumerate(subscribed):
            size = quota + (1 if i < extra else 0)
            result[member].update((topic, p) for p in range(start, start + size))
            start += size
    return result


def uniform(members: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
            previous: Mapping[str, set[TopicPartition]]) -> Assignment:
    """Balanced and sticky: keep previous owners, hand out the rest to the least loaded subscribed
    member, then move partitions from the most to the least loaded members while that is allowed."""
    result: Assignment = {m: set() for m in members}
    valid = {(t, p) for t in partitions if any(t in s for s in members.values()) for p in range(partitions[t])}
    owner: dict[TopicPartition, str] = {}
    # 1. stickiness: previous owners keep what they may still own, up to the balanced quota
    total = len(valid)
    quota_high = -(-total // len(members)) if members else 0
    for member in sorted(members):
        kept = sorted(tp for tp in previous.get(member, ()) if tp in valid and tp[0] in members[member]
                      and tp not in owner)
        for tp in kept[:quota_high]:
            owner[tp] = member
            result[member].add(tp)
    # 2. unassigned partitions to the least loaded subscribed member (ties: member id)
    for tp in sorted(valid - owner.keys()):
        candidates = [m for m in members if tp[0] in members[m]]
        member = min(candidates, key=lambda m: (len(result[m]), m))
        owner[tp] = member
        result[member].add(tp)
    # 3. balance: move from the most to a less loaded member subscribed to the topic (bounded)
    for _ in range(total * max(1, len(members))):
        moved = False
        for donor in sorted(members, key=lambda m: (-len(result[m]), m)):
            for tp in sorted(result[donor]):
                takers = [m for m in members if tp[0] in members[m] and len(result[m]) < len(result[donor]) - 1]
                if takers:
                    taker = min(takers, key=lambda m: (len(result[m]), m))
                    result[donor].discard(tp)
                    result[taker].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    return result
