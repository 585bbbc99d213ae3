"""Consumer-group helpers of the broker's group tests: confluent-kafka members, a member in a child process
(``ChildConsumer``), polling until a condition holds."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient



DEADLINE_S = 45.0


PARTITIONS = 6


# Fast group timing for tests; everything else is Kafka's default.
BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


def wait_for_group_coordinator(bootstrap: str, deadline_s: float = DEADLINE_S, key_type: int = 0) -> None:
    """Ask FindCoordinator (v4; ``key_type`` 0 a group, 1 a transactional id) until it answers NONE, as every client
    does before its first group or transaction request: on a KRaft node (Apache Kafka's, and the embedded broker's
    combined node) ``__consumer_offsets`` / ``__transaction_state`` is created by the first FindCoordinator and
    those requests answer NOT_COORDINATOR until it is loaded.
    Raises AssertionError when it does not within ``deadline_s`` s."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    from support.wire import WireClient

    end = time.monotonic() + deadline_s
    while True:
        with WireClient(bootstrap) as client:
            found = client.request(FindCoordinatorRequest(key_type=key_type, coordinator_keys=("probe",))).coordinators[0]
        if found.error_code == 0:
            return
        # retriable: COORDINATOR_LOAD_IN_PROGRESS (14), COORDINATOR_NOT_AVAILABLE (15), NOT_COORDINATOR (16)
        assert found.error_code in (14, 15, 16), f"FindCoordinator refused: {found}"
        assert time.monotonic() < end, f"no coordinator within {deadline_s} s: {found}"
        time.sleep(0.05)


def new_group() -> str:
    return f"group-{uuid.uuid4().hex[:10]}"


def make_consumer(bootstrap: str, group: str, **extra) -> Consumer:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "heartbeat.interval.ms": 200, "session.timeout.ms": 6000, "enable.partition.eof": False}
    config.update(extra)
    return Consumer(config)


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    """Round-robin over the partitions (explicit partition per record); waits for every ack."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def assigned(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def poll_until(consumers: list[Consumer], done, deadline_s: float = DEADLINE_S) -> list[list]:
    """Poll every consumer in turn until ``done(received)`` holds; received[i] = [(partition, offset, value)]."""
    received: list[list] = [[] for _ in consumers]
    deadline = time.monotonic() + deadline_s
    while not done(received):
        assert time.monotonic() < deadline, f"condition not reached within {deadline_s} s; received {received}"
        for i, c in enumerate(consumers):
            msg = c.poll(0.05)
            if msg is not None:
                assert msg.error() is None, msg.error()
                received[i].append((msg.partition(), msg.offset(), msg.value().decode()))
    return received


CHILD = r"""
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "auto.offset.reset": "earliest",
              "heartbeat.interval.ms": 200, "session.timeout.ms": 2000,
              "enable.auto.commit": sys.argv[4] == "auto", "auto.commit.interval.ms": 600000})
c.subscribe([sys.argv[3]])
seen = 0
while True:
    msg = c.poll(0.1)
    if msg is not None and msg.error() is None:
        seen += 1
        print("record", msg.partition(), msg.offset(), msg.value().decode(), flush=True)
    print("assigned", ",".join(str(tp.partition) for tp in c.assignment()), flush=True)
"""


class ChildConsumer:
    """A consumer in another process (so it can die without a LeaveGroup); killed by :meth:`kill`."""

    def __init__(self, bootstrap: str, group: str, topic: str, commit: str = "manual"):
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, bootstrap, group, topic, commit],
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.assignment: set[int] = set()
        self.records: list[tuple[int, int, str]] = []
        self._partial = ""

    def read(self, wait_s: float = 0.0) -> None:
        """Consume the child's report lines available now (waiting up to ``wait_s`` for the first)."""
        select.select([self.proc.stdout], [], [], wait_s)
        while True:
            line = self._partial + self.proc.stdout.readline()
            if not line.endswith("\n"):
                self._partial = line  # the rest of the line is not written yet
                return
            self._partial = ""
            kind, _, rest = line.strip().partition(" ")
            if kind == "assigned":
                self.assignment = {int(p) for p in rest.split(",") if p}
            elif kind == "record":
                p, o, v = rest.split(" ", 2)
                self.records.append((int(p), int(o), v))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(DEADLINE_S)
        self.proc.stdout.close()


def group_offsets(bootstrap: str, group: str) -> dict:
    """The group's committed offsets ``{partition: offset}`` through AdminClient (an independent client)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=10)[group]
    return {tp.partition: tp.offset for tp in fut.result(20).topic_partitions if tp.offset >= 0}
