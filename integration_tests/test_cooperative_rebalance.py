"""Incremental cooperative rebalancing (KIP-429) on the classic protocol converges under repeated
joins and leaves, with librdkafka's, kafka-python's and Kafka's Java cooperative-sticky assignors,
on the embedded broker and, result by result, on Apache Kafka.

Each run: a 12-partition topic, a producer writing all along, and rounds of members joining and
leaving (up to 6 members). After every round, within a bounded time: every partition is owned by
exactly one member, the counts are balanced, and DescribeGroups answers Stable with the expected
members. Over the whole run: no partition was owned by two members at once (the members' event
logs, :func:`rebalance.overlaps`), and every produced record was consumed exactly once (each member
commits what it consumed before a revoke is logged and before it leaves).
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time

import pytest

from integration_tests import helpers
from integration_tests.conformance import rebalance as R
from integration_tests.conformance.scenarios import wait_until
from integration_tests.test_differential import apache_cluster, embedded_cluster  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow

PARTITIONS = 12
ROUNDS = (3, 6, 4, 6, 2)
"""Members after each round: joins (3 -> 6, 4 -> 6) and leaves (6 -> 4, 6 -> 2), several at once."""
KAFKA_PYTHON_HANG = pytest.mark.xfail(strict=False, reason=(
    "kafka-python 3.0.12 bug, about 1 run in 3 on the embedded broker and seen on Apache Kafka 4.4.0 too "
    "(2026-11-26): join_group_async loops only while "
    "need_rejoin(); a leader rejoining only for a changed metadata snapshot sees it turn False once its "
    "assignment copies the snapshot; when poll's timeout ends the wait before SyncGroup's answer, the next "
    "poll never collects the finished join, "
    "never applies its assignment nor re-enables the heartbeat, and the session expires (Java's loop also "
    "runs while a join is pending: rejoinNeededOrPending). The broker answered every request (DEBUG logs of "
    "two failing runs, 2026-11-25). docs/testing.md, 'Known open bugs'"))
"""The one known failure of this test (kafka-python, on either broker), kept visible: xfail, not skip."""
RUNS = [pytest.param(backend, client, id=f"{backend}-{client}",
                     marks=[KAFKA_PYTHON_HANG] if client == "kafka-python" else [])
        for backend in ("embedded", "apache-kafka") for client in R.CLIENTS
        if (backend, client) != ("apache-kafka", "kafka-python")]
"""Every client on the embedded broker; librdkafka and Java on Apache Kafka too. kafka-python's run on Apache Kafka
is left out: its known hang (:data:`KAFKA_PYTHON_HANG`) was seen there too, so the run is an xfail that mostly
waited out a session timeout (40 s of the suite, 2026-11-26) and compared nothing result by result."""


class _Producer:
    """Produces keyed records round-robin over the partitions until stopped (what the members consume)."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Producer

        self._p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.sent, self._stop = topic, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(PARTITIONS):
                self._p.produce(self.topic, value=b"%d" % self.sent, partition=self.sent % PARTITIONS)
                self.sent += 1
            self._p.poll(0)
            self._stop.wait(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        assert self._p.flush(30) == 0, "records not acknowledged"
        return self.sent


def _described(bootstrap: str, group: str):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(20)
    return str(desc.state).rsplit(".", 1)[-1], len(desc.members), desc.partition_assignor


@pytest.mark.parametrize("backend,client", RUNS)
def test_cooperative_rebalance_converges(backend, client, request):
    cluster = request.getfixturevalue("embedded_cluster" if backend == "embedded" else "apache_cluster")
    if client == "java":
        from integration_tests.conformance.drivers import java_client

        why = java_client.unavailable()
        if why:
            pytest.skip(f"Kafka's Java client cannot run here: {why}")
    topic, group = cluster.create_topic(PARTITIONS, prefix="cooperative"), R.new_group()
    make = R.CLIENTS[client]
    producer = _Producer(cluster.bootstrap, topic)
    everyone: list = []  # every member that ever joined, in order
    timings = []
    with contextlib.ExitStack() as stack:
        active: list = []  # (member, its exit stack)
        try:
            for size in ROUNDS:
                started = time.monotonic()
                while len(active) > size:  # leaves: the oldest members, all at once
                    member, exits = active.pop(0)
                    member.stop()
                while len(active) < size:
                    exits = contextlib.ExitStack()
                    member = exits.enter_context(make(cluster.bootstrap, topic, group))
                    stack.push(exits.__exit__)
                    active.append((member, exits))
                    everyone.append(member)
                members = [m for m, _ in active]

                def settled() -> bool:
                    if not R.converged(members, PARTITIONS):
                        return False
                    state, count, assignor = _described(cluster.bootstrap, group)
                    return state == "STABLE" and count == size

                wait_until(settled, f"{size} {client} members to converge", R.WAIT_S, every_s=0.2)
                timings.append(round(time.monotonic() - started, 1))
                assert _described(cluster.bootstrap, group)[2] == "cooperative-sticky"
        finally:
            sent = producer.stop()
        members = [m for m, _ in active]

        def drained() -> int:
            return sum(len(m.records) for m in everyone)

        wait_until(lambda: drained() >= sent, f"the group to consume the {sent} records", R.WAIT_S)
        for member, _ in active:
            member.stop()
    print(f"{backend} {client}: rounds converged in {timings} s, {sent} records")
    assert R.overlaps(everyone) == [], "a partition owned by two members at once"
    assert R.incremental_revocations(everyone) > 0, "no member kept partitions through a revocation (eager?)"
    assert not any(kind == "lost" for m in everyone for _, kind, _ in m.events), "partitions lost (session expired?)"
    consumed = collections.Counter(r for m in everyone for r in m.records)
    duplicates = {r: n for r, n in consumed.items() if n > 1}
    assert duplicates == {}, f"{len(duplicates)} records consumed twice or more, e.g. {sorted(duplicates)[:5]}"
    expected = {(p, o) for p in range(PARTITIONS) for o in range(helpers.watermarks(cluster.bootstrap, topic, p)[1])}
    assert set(consumed) == expected and len(expected) == sent


def test_the_checks_catch_double_ownership_and_eager_revocation():
    a, b = R.Member(), R.Member()
    a.events = [(100, "assigned", {0, 1}), (200, "revoked", {1})]
    b.events = [(200, "assigned", {1})]  # at the revoke's ms: allowed
    assert R.overlaps([a, b]) == [] and R.incremental_revocations([a, b]) == 1
    b.events = [(150, "assigned", {1})]  # before a revoked it
    assert R.overlaps([a, b]) == ["partition 1: member 0 owned it until 200, member 1 from 150"]
    a.events = [(100, "assigned", {0, 1}), (200, "revoked", {0, 1}), (300, "assigned", {0})]  # eager
    assert R.incremental_revocations([a]) == 0
    a._owned, b._owned = {0, 1}, {1}
    assert not R.converged([a, b], 2)
    a._owned = {0}
    assert R.converged([a, b], 2)
