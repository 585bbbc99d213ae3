"""Kill test: a streaming Kafka → Kafka query with deliveryGuarantee=exactly-once, killed with SIGKILL.

The query (``eos_kill_driver.py``, its own process group: Python driver, JVM, Python workers)
reads an input topic of 3 partitions in micro-batches and writes to an output topic. It is
killed three times: twice while a task's transaction is open (the output's high watermark is
above its last stable offset, after the run has committed something itself) and once between
transactions; after each kill it restarts from its checkpoint. At the end the output topic,
read with a read_committed confluent-kafka consumer, holds every input record exactly once,
while a read_uncommitted reader also sees the aborted records of the killed transactions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.eos_check import read_topic

DRIVER = os.path.join(os.path.dirname(__file__), "..", "..", "support", "eos_kill_driver.py")
PARTITIONS = 3
PER_PARTITION = 1000
MAX_PER_TRIGGER = 600
RUN_TIMEOUT_S = 240


class Offsets:
    """Per-partition end offsets of the output topic under both isolation levels (independent consumers)."""

    def __init__(self, bootstrap, topic):
        self.topic = topic
        self.clients = {iso: Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-kill-{iso}",
                                       "isolation.level": iso})
                        for iso in ("read_committed", "read_uncommitted")}

    def ends(self, isolation) -> list[int]:
        c = self.clients[isolation]
        return [c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10, cached=False)[1]
                for p in range(PARTITIONS)]

    def stable(self) -> int:
        """Sum of the last stable offsets: grows when transactions commit."""
        return sum(self.ends("read_committed"))

    def open_transaction(self) -> bool:
        """True when some partition has records of a transaction not yet ended (LSO < high watermark)."""
        high = self.ends("read_uncommitted")  # first: a commit between the two reads cannot look open
        return any(h > s for h, s in zip(high, self.ends("read_committed")))

    def close(self):
        for c in self.clients.values():
            c.close()


class DriverRun:
    """One driver process in its own process group; the whole group is killed when done."""

    def __init__(self, args, log_path):
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, DRIVER, *args], stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def tail(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-3000:]

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the JVM and the Python workers too
        except ProcessLookupError:
            pass
        self.proc.wait(60)
        self.log.close()


def kill_when(args, log_path, condition) -> None:
    """Start a run and SIGKILL it as soon as ``condition()`` holds; fail if it ends or times out first."""
    run = DriverRun(args, log_path)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not condition():
            assert run.proc.poll() is None, f"the run ended before the kill point:\n{run.tail()}"
            assert time.monotonic() < deadline, f"kill point not reached in {RUN_TIMEOUT_S} s:\n{run.tail()}"
            time.sleep(0.05)
    finally:
        run.stop()


def produce_input(bootstrap, topic) -> list[bytes]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    sent = []
    for i in range(PER_PARTITION):
        for part in range(PARTITIONS):
            value = f"{part}:{i}".encode()
            p.produce(topic, value=value, key=f"k{i}".encode(), partition=part)
            sent.append(value)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    return sent


@pytest.mark.slow
def test_killed_streaming_query_writes_each_record_once(bootstrap, make_topic, tmp_path):
    source, sink = make_topic(PARTITIONS), make_topic(PARTITIONS)
    sent = produce_input(bootstrap, source)
    args = ["--bootstrap", bootstrap, "--source", source, "--sink", sink,
            "--checkpoint", str(tmp_path / "checkpoint"), "--max-per-trigger", str(MAX_PER_TRIGGER),
            "--slow-ms", "100"]
    out = Offsets(bootstrap, sink)
    try:
        total = len(sent)
        # 1: inside a transaction, after some micro-batches are committed
        kill_when(args, tmp_path / "run1.log", lambda: out.stable() >= total // 5 and out.open_transaction())
        # 2: between transactions, once this run has committed something of its own
        floor = out.stable()
        kill_when(args, tmp_path / "run2.log", lambda: out.stable() > floor and not out.open_transaction())
        # 3: inside a transaction again (the one left open by run 1 was aborted when run 2 started)
        floor = out.stable()
        kill_when(args, tmp_path / "run3.log", lambda: out.stable() > floor and out.open_transaction())
        final = DriverRun(args, tmp_path / "final.log")
        try:
            assert final.proc.wait(RUN_TIMEOUT_S) == 0, final.tail()
        finally:
            final.stop()
        assert not out.open_transaction()
    finally:
        out.close()

    committed = Counter(v for *_, v in read_topic(bootstrap, sink, "read_committed"))
    duplicates = {v: n for v, n in committed.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} records written more than once, e.g. {list(duplicates.items())[:5]}"
    assert set(committed) == set(sent) and sum(committed.values()) == total
    # the killed transactions' records are in the log, aborted: only read_uncommitted shows them
    assert len(read_topic(bootstrap, sink, "read_uncommitted")) > total
