"""Two of three replicas killed together under an idempotent ``acks=all`` librdkafka producer (issue 28, item 6).

The fault: a producer sends numbered records (``b"<n>"``) to a topic with replication factor 3 and
``min.insync.replicas=2``; the leader of partition 0 and one follower are SIGKILLed a few milliseconds apart,
kept down 6 s, restarted together; :data:`KILLS` times under one producer, which then goes on until every
record is acknowledged or has failed. Then every stored record is read back (read_uncommitted) and counted: none
acknowledged may be missing, and a value stored twice is a duplicate.

The same scenario runs on two backends (the ``fault_cluster`` fixture's parameter): the replicated embedded
cluster (a dedicated controller and three brokers) and Apache Kafka 4.4.0 with a dedicated controller
(``ApacheKafka(nodes=3, controllers=1)``: one ``process.roles=controller`` node and three broker-only nodes, so
killing two brokers leaves the quorum alone, as on the embedded cluster). Each runs with librdkafka's default
``max.in.flight.requests.per.connection=5`` and with 1. Asserted on both: nothing lost, no delivery failure,
every stored record acknowledged (stored = acknowledged + duplicates), and no duplicate with 1 in flight.
With 5 in flight the duplicates issue 28 found (460 over 115 kills in its own fault runs, after librdkafka
bumped its epoch and renumbered a batch an earlier attempt had stored, librdkafka issue 4953) are printed, not
asserted: in the hand runs of 2026-11-26 neither backend stored one (docs/replication-admin.md, "Two replicas
killed at once", has the figures). Kill rounds per backend: :data:`KILLS` (one on Apache Kafka, whose broker
restarts take about 10 s each, to keep each parametrization near 25 s).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from integration_tests import clusters

pytestmark = pytest.mark.slow

STEP_TIMEOUT_S = 90
ISR_TIMEOUT_S = 180


def _wait(condition, what: str, timeout_s: float = STEP_TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def _partition(bootstrap: str, topic: str):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "two-kill-md"})
    try:
        return c.list_topics(topic, timeout=10).topics[topic].partitions[0]
    except Exception:  # noqa: BLE001 - a cluster without quorum: no answer yet
        return None
    finally:
        c.close()


class Sender(threading.Thread):
    """Produce ``b"<n>"`` to partition 0 until :meth:`finish`, at most ``rate`` records/s; collect outcomes."""

    def __init__(self, bootstrap: str, topic: str, in_flight: int, rate: int = 2000):
        super().__init__(daemon=True, name=f"sender-{topic}")
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "max.in.flight.requests.per.connection": in_flight, "linger.ms": 5,
                                  "message.timeout.ms": 120000, "log_level": 0})
        self.topic, self.rate = topic, rate
        self.acked: list[int] = []
        self.failed: Counter = Counter()
        self.sent = 0
        self._halt = threading.Event()

    def _report(self, err, msg) -> None:
        if err is None:
            self.acked.append(int(msg.value()))
        else:
            self.failed[err.name()] += 1

    def run(self) -> None:
        started = time.monotonic()
        while not self._halt.is_set():
            while self.sent < (time.monotonic() - started) * self.rate:
                try:
                    self.producer.produce(self.topic, str(self.sent).encode(), partition=0, on_delivery=self._report)
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0.01)

    def finish(self) -> None:
        self._halt.set()
        self.join(10)
        left = self.producer.flush(150)
        assert left == 0, f"{left} records neither acknowledged nor failed after 150 s"


def _stored(bootstrap: str, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"two-kill-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": "read_uncommitted"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        values, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return values
                continue
            values.append(int(m.value()))
        raise AssertionError("end of partition not reached within 60 s")
    finally:
        c.close()


def _kill_two(cluster, topic: str, down_s: float) -> dict:
    """SIGKILL the leader of ``topic``-0 and one follower at the same moment, keep them down ``down_s`` s,
    restart both, wait until the partition's ISR is full again. Returns ``victims`` (the two node ids),
    ``down`` ((leader, ISR) seen while they were down) and ``recover_s`` (seconds from both restarted to
    the ISR full again)."""
    part = _wait(lambda: (lambda p: p if p is not None and p.leader >= 0 else None)(
        _partition(cluster.bootstrap, topic)), "a leader")
    victims = [part.leader, next(r for r in part.replicas if r != part.leader)]
    for node in victims:  # SIGKILL both, a few ms apart
        cluster.kafka.kill(node)
    killed = time.monotonic()
    time.sleep(down_s - 1)  # the fault's duration: both stay down this long (the state read 1 s before the end,
    # after both brokers' sessions expired: 3 s on both backends)
    down = _partition(cluster.bootstrap, topic)
    down = None if down is None else (down.leader, sorted(down.isrs))
    time.sleep(max(0.0, down_s - (time.monotonic() - killed)))
    restarts = [threading.Thread(target=cluster.kafka.restart, args=(n,)) for n in victims]
    for t in restarts:  # together, as they died (on combined Kafka nodes each also needs the other for a quorum)
        t.start()
    for t in restarts:
        t.join()
    restarted = time.monotonic()
    seen = []

    def full():
        p = _partition(cluster.bootstrap, topic)
        seen.append(None if p is None else (p.leader, list(p.isrs)))
        return p is not None and p.leader >= 0 and len(p.isrs) == 3

    try:
        _wait(full, "the partition's ISR full again", timeout_s=ISR_TIMEOUT_S)
    except AssertionError as e:
        raise AssertionError(f"{e}; (leader, ISR) seen: {seen[-5:]}") from None
    return {"victims": victims, "down": down, "recover_s": round(time.monotonic() - restarted, 1)}


def run_two_broker_kill(cluster, in_flight: int, kills: int = 3, down_s: float = 6.0) -> dict:
    """``kills`` times the fault on ``cluster`` (clusters.Cluster with ``kafka``: kill/restart) under one
    producer; returns the counts (``lost``, ``duplicates``, ``failed`` by error name...) and one
    :func:`_kill_two` result per kill in ``kills``."""
    topic = cluster.create_topic(1, prefix="twokill")
    sender = Sender(cluster.bootstrap, topic, in_flight)
    sender.start()
    faults = []
    try:
        for _ in range(kills):
            acked = len(sender.acked)
            _wait(lambda: len(sender.acked) > acked + 2000, "2,000 more records acknowledged")
            faults.append(_kill_two(cluster, topic, down_s))
        acked = len(sender.acked)
        _wait(lambda: len(sender.acked) > acked + 2000, "2,000 more records acknowledged")
    finally:
        sender.finish()
    stored = _stored(cluster.bootstrap, topic)
    counts = Counter(stored)
    return {"sent": sender.sent, "acked": len(sender.acked), "failed": dict(sender.failed),
            "stored": len(stored), "duplicates": sum(n - 1 for n in counts.values() if n > 1),
            "lost": len(set(sender.acked) - set(counts)), "kills": faults}


KILLS = {"embedded-cluster": 2, "apache-kafka-dedicated-controller": 1}
"""Kill rounds per backend under one producer: two on the embedded cluster (three took about 25-28 s per setting;
cut for CI time on 2026-11-26), one on Apache Kafka (three took 55-59 s per setting, its brokers restarting in
about 10 s each)."""


@pytest.fixture(scope="module", params=list(KILLS))
def fault_cluster(request, tmp_path_factory):
    try:
        with clusters.start(request.param, tmp_path_factory.mktemp("two-kill")) as cluster:
            yield cluster
    except clusters.BackendUnavailable as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("in_flight", [5, 1])
def test_two_replicas_killed_together_lose_nothing(fault_cluster, in_flight):
    result = run_two_broker_kill(fault_cluster, in_flight, kills=KILLS[fault_cluster.name])
    print(f"{fault_cluster.name} in_flight={in_flight}: {result}", flush=True)
    assert result["lost"] == 0 and result["failed"] == {}, result
    assert result["stored"] == result["acked"] + result["duplicates"], result
    if in_flight == 1:  # one request in flight: librdkafka never re-sends a persisted batch under a new epoch
        assert result["duplicates"] == 0, result
