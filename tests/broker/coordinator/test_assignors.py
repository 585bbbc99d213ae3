"""The server-side assignors of KIP-848 groups (``coordinator/assignors.py``), table-driven.

The invariants are Kafka's (``UniformAssignor``: every subscribed partition assigned exactly once,
balance within one, sticky; ``RangeAssignor``: contiguous ranges per topic over the members sorted by
member id, the first ``count % members`` getting one more, so co-subscribed topics are co-partitioned).
"""

from __future__ import annotations

import random

import pytest

from pyspark_kafka.broker.coordinator.assignors import assign, range_assign, uniform


def _check_complete(result, members, partitions):
    """Every partition of a subscribed topic exactly once, only to members subscribed to its topic."""
    seen = {}
    for member, tps in result.items():
        for tp in tps:
            assert tp[0] in members[member], f"{member} got {tp} without subscribing to {tp[0]}"
            assert tp not in seen, f"{tp} assigned twice: {seen[tp]} and {member}"
            seen[tp] = member
    subscribed = {t for s in members.values() for t in s}
    assert set(seen) == {(t, p) for t in subscribed if t in partitions for p in range(partitions[t])}
    assert set(result) == set(members)


def _sizes(result):
    return sorted(len(v) for v in result.values())


@pytest.mark.parametrize("n_members,n_partitions", [(1, 1), (3, 7), (4, 4), (5, 3), (2, 12), (7, 100)])
def test_uniform_homogeneous_balance_within_one(n_members, n_partitions):
    members = {f"m{i}": frozenset({"a", "b"}) for i in range(n_members)}
    partitions = {"a": n_partitions, "b": n_partitions // 2 + 1}
    result = uniform(members, partitions, {})
    _check_complete(result, members, partitions)
    sizes = _sizes(result)
    assert sizes[-1] - sizes[0] <= 1


def test_uniform_is_sticky_when_a_member_joins():
    members = {"m1": frozenset({"t"}), "m2": frozenset({"t"})}
    before = uniform(members, {"t": 6}, {})
    members3 = {**members, "m3": frozenset({"t"})}
    after = uniform(members3, {"t": 6}, before)
    _check_complete(after, members3, {"t": 6})
    assert _sizes(after) == [2, 2, 2]
    # m1 and m2 only give up partitions, they get none they did not have
    for m in ("m1", "m2"):
        assert after[m] <= before[m]


def test_uniform_is_sticky_when_a_member_leaves():
    members = {f"m{i}": frozenset({"t"}) for i in range(3)}
    before = uniform(members, {"t": 9}, {})
    del members["m2"]
    after = uniform(members, {"t": 9}, before)
    _check_complete(after, members, {"t": 9})
    for m in members:
        assert before[m] <= after[m]


def test_uniform_heterogeneous_subscriptions():
    # Kafka's GeneralUniformAssignmentBuilder case: m1 alone on "x", all three on "y"
    members = {"m1": frozenset({"x", "y"}), "m2": frozenset({"y"}), "m3": frozenset({"y"})}
    partitions = {"x": 3, "y": 3}
    result = uniform(members, partitions, {})
    _check_complete(result, members, partitions)
    # m1 alone can take "x"; the best balance gives all of "y" to m2 and m3 (2 + 1)
    assert result["m1"] == {("x", 0), ("x", 1), ("x", 2)}
    assert sorted((len(result["m2"]), len(result["m3"]))) == [1, 2]


@pytest.mark.parametrize("seed", range(20))
def test_uniform_random_invariants(seed):
    rng = random.Random(seed)
    topics = [f"t{i}" for i in range(rng.randint(1, 4))]
    partitions = {t: rng.randint(1, 8) for t in topics}
    members = {f"m{i}": frozenset(rng.sample(topics, rng.randint(1, len(topics)))) for i in range(rng.randint(1, 6))}
    previous = uniform(members, partitions, {})
    members.pop(rng.choice(sorted(members)), None) if len(members) > 1 else None
    members[f"new{seed}"] = frozenset(rng.sample(topics, 1))
    result = uniform(members, partitions, previous)
    _check_complete(result, members, partitions)
    if len({s for s in members.values()}) == 1:
        assert _sizes(result)[-1] - _sizes(result)[0] <= 1


def test_range_contiguous_ranges_sorted_by_member_id():
    members = {"c": frozenset({"t"}), "a": frozenset({"t"}), "b": frozenset({"t"})}
    result = range_assign(members, {"t": 7})
    assert result == {"a": {("t", 0), ("t", 1), ("t", 2)}, "b": {("t", 3), ("t", 4)}, "c": {("t", 5), ("t", 6)}}


def test_range_puts_static_members_first_by_instance_id():
    # Kafka's RangeAssignor.sortMemberIds: static members (by instance id) before dynamic ones (by member id)
    members = {"a": frozenset({"t"}), "b": frozenset({"t"}), "z": frozenset({"t"})}
    result = range_assign(members, {"t": 5}, {"a": None, "b": "instance-2", "z": "instance-1"})
    assert result == {"z": {("t", 0), ("t", 1)}, "b": {("t", 2), ("t", 3)}, "a": {("t", 4)}}


def test_range_co_partitions_topics_of_the_same_size():
    members = {"m1": frozenset({"a", "b"}), "m2": frozenset({"a", "b"})}
    result = range_assign(members, {"a": 4, "b": 4})
    _check_complete(result, members, {"a": 4, "b": 4})
    for m, tps in result.items():
        assert {p for t, p in tps if t == "a"} == {p for t, p in tps if t == "b"}


def test_range_more_members_than_partitions_and_partial_subscriptions():
    members = {"m1": frozenset({"a"}), "m2": frozenset({"a", "b"}), "m3": frozenset({"b"})}
    result = range_assign(members, {"a": 1, "b": 3})
    _check_complete(result, members, {"a": 1, "b": 3})
    assert result["m1"] == {("a", 0)}
    assert result["m2"] == {("b", 0), ("b", 1)} and result["m3"] == {("b", 2)}


def test_missing_topics_are_ignored_and_unknown_assignor_refused():
    members = {"m1": frozenset({"gone", "t"})}
    assert assign("uniform", members, {"t": 2}) == {"m1": {("t", 0), ("t", 1)}}
    assert assign("range", members, {}) == {"m1": set()}
    with pytest.raises(ValueError, match="unknown assignor 'sticky'"):
        assign("sticky", members, {"t": 1})
