"""The controller's admin changes of topics and partitions, as pure functions of the :class:`ClusterImage`
(Kafka's ``ReplicationControlManager`` with ``PartitionChangeBuilder``, ``PartitionReassignmentReplicas`` and
``PartitionReassignmentRevert``). Each returns per-partition (or per-topic) results and the metadata records to
append; nothing here does I/O.

- :func:`elect_leaders` (ElectLeaders, KIP-460): PREFERRED (0) makes the first replica leader when it is unfenced
  and in the ISR; UNCLEAN (1) elects a leader for a partition that has none, from the ISR first, else from any
  unfenced replica (data loss). Answers ELECTION_NOT_NEEDED (84) when the partition already has its preferred
  leader (PREFERRED) or a leader (UNCLEAN), PREFERRED_LEADER_NOT_AVAILABLE (80) / ELIGIBLE_LEADERS_NOT_AVAILABLE
  (83) when no valid leader exists, UNKNOWN_TOPIC_OR_PARTITION (3). ``partitions`` None = every partition, and
  then ELECTION_NOT_NEEDED partitions are left out of the answer (Kafka's rule).
- :func:`alter_reassignment` (AlterPartitionReassignments, KIP-455): ``replicas`` = the target; the partition's
  replicas become target + removing, ``adding`` = target - current; the ISR and leader stay until the adding
  replicas join the ISR (:func:`complete_reassignment`, called on every ISR change). ``replicas`` None cancels
  (:func:`revert_reassignment`): NO_REASSIGNMENT_IN_PROGRESS (85) when none is ongoing. A target that is empty,
  names a broker twice or an unregistered broker: INVALID_REPLICA_ASSIGNMENT (39).
- :func:`create_partitions` (CreatePartitions): new partitions placed like the topic's first ones (the
  rack-unaware assignment continued from the current count) or as given; INVALID_PARTITIONS (37) for a count
  that is not an increase, INVALID_REPLICA_ASSIGNMENT (39) for wrong assignments.
- :func:`delete_topics` (DeleteTopics): a ``remove_topic`` record per topic (Kafka's ``RemoveTopicRecord``).
"""

from __future__ import annotations

import random
from dataclasses import replace

from pyspark_kafka.broker.controller.assignment import assign_replicas
from pyspark_kafka.broker.controller.image import NO_LEADER, ClusterImage, PartitionState
from pyspark_kafka.broker.errors import ErrorCode

PREFERRED, UNCLEAN = 0, 1  # ElectLeadersRequest.ElectionType


def _live(image: ClusterImage) -> set[int]:
    return {b.id for b in image.live_brokers()}


def _change(st: PartitionState, **fields) -> PartitionState:
    """``st`` with ``fields`` changed, the partition epoch + 1 and the leader epoch + 1 when the leader changed."""
    new = replace(st, **fields, partition_epoch=st.partition_epoch + 1)
    if new.leader != st.leader:
        new = replace(new, leader_epoch=st.leader_epoch + 1)
    return new


# --- elections --------------------------------------------------------------------------------


def elect_one(image: ClusterImage, topic: str, partition: int, election: int) -> tuple[int, str | None, PartitionState | None]:
    """``(error code, message, new state or None)`` of one partition's election (Kafka's ``electLeader``)."""
    t = image.topics.get(topic)
    if t is None:
        return int(ErrorCode.unknown_topic_or_partition), f"No such topic as {topic}", None
    st = t.partitions.get(partition)
    if st is None:
        return int(ErrorCode.unknown_topic_or_partition), f"No such partition as {topic}-{partition}", None
    if (election == PREFERRED and st.replicas and st.leader == st.replicas[0]) or (
            election == UNCLEAN and st.leader != NO_LEADER):
        return int(ErrorCode.election_not_needed), "Leader election not needed for topic partition.", None
    live = _live(image)
    if election == PREFERRED:
        preferred = st.replicas[0]
        if preferred in st.isr and preferred in live:
            return 0, None, _change(st, leader=preferred)
        return (int(ErrorCode.preferred_leader_not_available),
                f"Failed to elect leader for partition {topic}-{partition} under strategy PreferredReplicaPartitionLeaderElectionStrategy", None)
    leader = next((r for r in st.replicas if r in st.isr and r in live), NO_LEADER)
    isr = st.isr
    if leader == NO_LEADER:
        leader = next((r for r in st.replicas if r in live), NO_LEADER)
        isr = (leader,)
    if leader == NO_LEADER:
        return (int(ErrorCode.eligible_leaders_not_available),
                f"Failed to elect leader for partition {topic}-{partition} under strategy UncleanLeaderElectionStrategy", None)
    return 0, None, _change(st, leader=leader, isr=isr)


def elect_leaders(image: ClusterImage, election: int, partitions: dict[str, list[int]] | None
                  ) -> tuple[dict[str, list[dict]], list[dict]]:
    """ElectLeaders over ``partitions`` ({topic: [partition]}; None: all) → ({topic: [{partition, error_code,
    error_message}]}, records). Raises nothing; per-partition errors as :func:`elect_one`."""
    results: dict[str, list[dict]] = {}
    records: list[dict] = []
    everything = partitions is None
    wanted = {n: sorted(t.partitions) for n, t in sorted(image.topics.items())} if everything else partitions
    for topic, indexes in wanted.items():
        out = results.setdefault(topic, [])
        for p in indexes:
            code, message, new = elect_one(image, topic, p, election)
            if new is not None:
                records.append(new.record(topic, p))
            if not (everything and code == ErrorCode.election_not_needed):
                out.append({"partition": p, "error_code": code, "error_message": message})
    return results, records


def imbalanced_elections(image: ClusterImage) -> list[dict]:
    """Records moving leadership back to every partition's preferred replica where it is valid (Kafka's
    ``auto.leader.rebalance.enable``: the controller's periodic preferred election of imbalanced partitions)."""
    return elect_leaders(image, PREFERRED, None)[1]


# --- reassignment -----------------------------------------------------------------------------


def invalid_target(image: ClusterImage, target: list[int]) -> str | None:
    """Kafka's ``validateManualPartitionAssignment`` message (INVALID_REPLICA_ASSIGNMENT) for a bad replica list
    (empty, a broker twice, a broker that is not registered), or None."""
    if not target:
        return "The manual partition assignment includes an empty replica list."
    seen = set()
    for r in target:
        if r in seen:
            return f"The manual partition assignment includes the broker {r} more than once."
        seen.add(r)
        if r not in image.brokers:
            return f"The manual partition assignment includes broker {r}, but no such broker is registered."
    return None


def _leader_among(st: PartitionState, replicas: tuple[int, ...], isr: tuple[int, ...], live: set[int]) -> int:
    """The current leader when still valid, else the first replica in the ISR and unfenced (-1: none)."""
    if st.leader in replicas and st.leader in isr and st.leader in live:
        return st.leader
    return next((r for r in replicas if r in isr and r in live), NO_LEADER)


def complete_reassignment(st: PartitionState, live: set[int]) -> PartitionState:
    """``st`` with its reassignment completed when every adding replica is in the ISR (Kafka's
    ``PartitionReassignmentReplicas.maybeCompleteReassignment``): replicas = the target, the removing replicas
    leave the ISR, a removed leader is replaced (the leader epoch is bumped whenever replicas are removed, which
    fences them). ``st`` itself when not reassigning or not complete."""
    if not st.reassigning or not set(st.adding) <= set(st.isr):
        return st
    replicas = tuple(r for r in st.replicas if r not in st.removing)
    isr = tuple(r for r in st.isr if r not in st.removing)
    if not isr:
        return st
    leader = _leader_among(st, replicas, isr, live)
    if leader == NO_LEADER:
        return st
    new = _change(st, replicas=replicas, isr=isr, leader=leader, adding=(), removing=())
    if st.removing and new.leader_epoch == st.leader_epoch:
        new = replace(new, leader_epoch=st.leader_epoch + 1)
    return new


def revert_reassignment(st: PartitionState, live: set[int]) -> PartitionState:
    """Cancel ``st``'s reassignment (Kafka's ``PartitionReassignmentRevert``): the original replicas (without the
    adding ones, in their order), the ISR without the adding ones (kept whole if that empties it)."""
    replicas = tuple(r for r in st.replicas if r not in st.adding)
    isr = tuple(r for r in st.isr if r not in st.adding) or st.isr
    leader = _leader_among(st, replicas, isr, live) if st.leader != NO_LEADER else NO_LEADER
    new = _change(st, replicas=replicas, isr=isr, leader=leader, adding=(), removing=())
    if st.adding and new.leader_epoch == st.leader_epoch:
        new = replace(new, leader_epoch=st.leader_epoch + 1)
    return new


def alter_reassignment(image: ClusterImage, topic: str, partition: int, target: list[int] | None,
                       allow_replication_factor_change: bool = True) -> tuple[int, str | None, PartitionState | None]:
    """``(error code, message, new state or None)`` for one partition of AlterPartitionReassignments; with
    ``allow_replication_factor_change`` False (v1, KIP-860) a target of another size is INVALID_REPLICATION_FACTOR."""
    t = image.topics.get(topic)
    st = None if t is None else t.partitions.get(partition)
    if st is None:
        return int(ErrorCode.unknown_topic_or_partition), f"Unable to find partition {topic}:{partition}.", None
    live = _live(image)
    if target is None:
        if not st.reassigning:
            return (int(ErrorCode.no_reassignment_in_progress),
                    f"No ongoing reassignment for partition {topic}-{partition}.", None)
        return 0, None, revert_reassignment(st, live)
    message = invalid_target(image, target)
    if message is not None:
        return int(ErrorCode.invalid_replica_assignment), message, None
    base = revert_reassignment(st, live) if st.reassigning else st  # a new target replaces an ongoing one
    if not allow_replication_factor_change and len(target) != len(base.replicas):
        return (int(ErrorCode.invalid_replication_factor),
                f"The replication factor is changed from {len(base.replicas)} to {len(target)} but "
                "allowReplicationFactorChange is false.", None)
    current = base.replicas
    removing = tuple(r for r in current if r not in target)
    adding = tuple(r for r in target if r not in current)
    merged = replace(base, replicas=tuple(target) + removing, adding=adding, removing=removing,
                     partition_epoch=st.partition_epoch + 1, leader_epoch=max(base.leader_epoch, st.leader_epoch))
    return 0, None, complete_reassignment(merged, live) if merged.reassigning else merged


def ongoing_reassignments(image: ClusterImage, wanted: dict[str, list[int]] | None) -> dict[str, list[PartitionState | int]]:
    """ListPartitionReassignments: {topic: [(partition, state)]} of ongoing reassignments among ``wanted`` (None:
    all); unknown topics and partitions are left out (Kafka answers only ongoing ones)."""
    out: dict[str, list] = {}
    names = sorted(image.topics) if wanted is None else list(wanted)
    for name in names:
        t = image.topics.get(name)
        if t is None:
            continue
        indexes = sorted(t.partitions) if wanted is None else wanted[name]
        found = [(p, t.partitions[p]) for p in indexes if p in t.partitions and t.partitions[p].reassigning]
        if found:
            out[name] = found
    return out


# --- topics -----------------------------------------------------------------------------------


def create_partitions(image: ClusterImage, name: str, count: int, assignments: list[list[int]] | None,
                      rng: random.Random | None = None) -> tuple[int, str | None, list[dict]]:
    """``(error code, message, partition records)`` growing ``name`` to ``count`` partitions (Kafka's
    ``ReplicationControlManager.createPartitions``)."""
    t = image.topics.get(name)
    if t is None:
        return int(ErrorCode.unknown_topic_or_partition), f"Topic '{name}' not found.", []
    current = len(t.partitions)
    if count < current:
        return (int(ErrorCode.invalid_partitions),
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.", [])
    if count == current:
        return int(ErrorCode.invalid_partitions), f"Topic already has {current} partition(s).", []
    added = count - current
    factor = len(t.partitions[0].replicas) if 0 in t.partitions else 1
    if assignments is not None:
        if len(assignments) != added:
            return (int(ErrorCode.invalid_replica_assignment),
                    f"Attempted to add {added} additional partition(s), but only {len(assignments)} assignment(s) "
                    "were specified.", [])
        for a in assignments:
            message = invalid_target(image, a)
            if message is None and len(a) != factor:
                message = (f"The manual partition assignment includes a partition with {len(a)} replica(s), but "
                           f"this is not consistent with previous partitions, which have {factor} replica(s).")
            if message is not None:
                return int(ErrorCode.invalid_replica_assignment), message, []
        new = [list(a) for a in assignments]
    else:
        live = sorted(_live(image))
        if factor > len(live):
            return (int(ErrorCode.invalid_replication_factor),
                    f"Unable to replicate the partition {factor} time(s): The target replication factor of "
                    f"{factor} cannot be reached because only {len(live)} broker(s) are registered.", [])
        first = t.partitions[0].replicas[0] if 0 in t.partitions else live[0]
        start = live.index(first) if first in live else 0
        shift = (rng or random).randrange(len(live))
        new = assign_replicas(live, count, factor, start=start, shift=shift)[current:]
    live = _live(image)
    for p, replicas in enumerate(new, start=current):
        if not any(r in live for r in replicas):
            return (int(ErrorCode.invalid_replica_assignment), "All brokers specified in the manual partition "
                    f"assignment for partition {p} are fenced or in controlled shutdown.", [])
    return 0, None, [new_partition(image, replicas).record(name, p) for p, replicas in enumerate(new, start=current)]


def new_partition(image: ClusterImage, replicas: list[int]) -> PartitionState:
    """A new partition on ``replicas``: ISR = its unfenced replicas, leader = the first of them (Kafka's
    ``ReplicationControlManager.createTopic``/``createPartitions``)."""
    live = _live(image)
    isr = tuple(r for r in replicas if r in live) or tuple(replicas)
    return PartitionState(tuple(replicas), isr, isr[0] if isr else NO_LEADER, 0, 0)


def manual_topic_assignment(image: ClusterImage, topic: dict) -> list[list[int]]:
    """The replica lists of a CreateTopics topic with ``assignments`` ([[broker]] by partition index, as the
    request's ``{partition: brokers}`` pairs sorted); raises InvalidRequestError when ``partitions`` or
    ``replication_factor`` is also set, InvalidReplicaAssignmentError for partitions that are not 0..N-1, lists of
    different sizes, bad lists (:func:`invalid_target`) or lists whose brokers are all fenced."""
    from pyspark_kafka.broker.errors import InvalidReplicaAssignmentError, InvalidRequestError

    if topic.get("partitions", -1) not in (-1, None) or topic.get("replication_factor", -1) not in (-1, None):
        raise InvalidRequestError("Both numPartitions or replicationFactor and replicasAssignments were set. "
                                  "Both cannot be used at the same time.")
    pairs = sorted((int(p), list(r)) for p, r in topic["assignments"])
    if [p for p, _ in pairs] != list(range(len(pairs))):
        raise InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence")
    live = _live(image)
    for p, replicas in pairs:
        message = invalid_target(image, replicas)
        if message is None and len(replicas) != len(pairs[0][1]):
            message = "All partitions should have the same number of replicas"
        if message is None and not any(r in live for r in replicas):
            message = (f"All brokers specified in the manual partition assignment for partition {p} are fenced "
                       "or in controlled shutdown.")
        if message is not None:
            raise InvalidReplicaAssignmentError(message)
    return [r for _, r in pairs]


def delete_topic(image: ClusterImage, name: str) -> tuple[int, str | None, str | None, list[dict]]:
    """``(error code, message, topic id, records)`` deleting ``name``: UNKNOWN_TOPIC_OR_PARTITION when absent."""
    t = image.topics.get(name)
    if t is None:
        return int(ErrorCode.unknown_topic_or_partition), "This server does not host this topic-partition.", None, []
    return 0, None, t.topic_id, [{"type": "remove_topic", "name": name, "topic_id": t.topic_id}]
