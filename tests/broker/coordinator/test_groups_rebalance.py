"""The rebalance hazard and its cure, on the embedded broker with confluent-kafka consumers.

- A member that dies between two auto-commits leaves its last records uncommitted: the member
  that takes its partitions over reads them again (at-least-once: nothing lost, some twice).
- In a rebalance, a member that gives partitions away without committing makes the new owner
  re-read what it already processed; committing in the revoke callback (Kafka's
  ``onPartitionsRevoked`` advice) hands over exactly where it stopped.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaException

from support.groups import DEADLINE_S, PARTITIONS, ChildConsumer, assigned, make_consumer, poll_until, produce


def test_member_dying_between_auto_commits_causes_redelivery(gbroker, topic):
    bootstrap = gbroker.bootstrap_servers
    group = f"rb-{uuid.uuid4().hex[:8]}"
    values = [f"v{i}" for i in range(60)]
    produce(bootstrap, topic, values)
    child = ChildConsumer(bootstrap, group, topic, commit="auto")  # auto.commit.interval.ms = 10 min
    survivor = make_consumer(bootstrap, group)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(child.records) < len(values):
            assert time.monotonic() < deadline, f"the child consumer read only {len(child.records)} records"
            child.read(wait_s=0.2)
        child.kill()  # dies before its first auto-commit
        survivor.subscribe([topic])
        got = poll_until([survivor], lambda r: len(r[0]) >= len(values))
    finally:
        child.kill()
        survivor.close()
    again = sorted(v for _, _, v in got[0])
    assert sorted(v for _, _, v in child.records) == sorted(values)
    assert again == sorted(values)  # every record delivered twice overall, none lost


@pytest.mark.parametrize("commit_on_revoke", [False, True], ids=["no-commit", "commit-in-revoke"])
def test_commit_in_the_revoke_callback_hands_over_without_redelivery(gbroker, topic, commit_on_revoke):
    bootstrap = gbroker.bootstrap_servers
    group = f"rb-{uuid.uuid4().hex[:8]}"
    old = [f"old{i}" for i in range(60)]
    produce(bootstrap, topic, old)
    revoked = []

    def on_revoke(consumer, partitions):
        revoked.append(partitions)
        if commit_on_revoke:
            try:
                consumer.commit(asynchronous=False)  # the offsets of the records processed so far
            except KafkaException as e:  # nothing new to commit
                assert "NO_OFFSET" in str(e)

    c1 = make_consumer(bootstrap, group, **{"enable.auto.commit": False})
    c2 = make_consumer(bootstrap, group, **{"enable.auto.commit": False})
    try:
        c1.subscribe([topic], on_revoke=on_revoke)
        first = poll_until([c1], lambda r: len(r[0]) >= len(old))
        assert sorted(v for _, _, v in first[0]) == sorted(old)
        c2.subscribe([topic])

        def split(_):
            a, b = assigned(c1), assigned(c2)
            return revoked and a and b and not (a & b) and len(a | b) == PARTITIONS

        got = poll_until([c1, c2], split)
        new = [f"new{i}" for i in range(60)]
        produce(bootstrap, topic, new)
        more = poll_until([c1, c2], lambda r: len({v for x in r for _, _, v in x} & set(new)) >= len(new))
    finally:
        c1.close()
        c2.close()
    c2_values = [v for _, _, v in got[1] + more[1]]
    redelivered = [v for v in c2_values if v.startswith("old")]
    if commit_on_revoke:
        assert redelivered == []
    else:  # c2 re-reads, from the start, the old records of the partitions it took over
        assert len(redelivered) == 10 * len(assigned_partitions(got[1] + more[1]))
    new_seen = [v for x in (got[0] + more[0], got[1] + more[1]) for _, _, v in x if v.startswith("new")]
    assert sorted(new_seen) == sorted(new)


def assigned_partitions(records) -> set[int]:
    return {p for p, _, _ in records}
