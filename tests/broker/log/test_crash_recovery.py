"""SIGKILL the broker process, damage the tail of the active segment, restart: nothing acknowledged
before the damage is lost, indexes are rebuilt, and appends continue at the right offset."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from support.broker_process import BrokerProcess
from support.topics import create_topic

DEADLINE_S = 60.0
BATCHES = 30
BASE_TS = 1_700_000_000_000


def produce_batches(bootstrap: str, topic: str, first: int, count: int) -> list[int]:
    """One acks=all batch per call (flush after each); returns the acknowledged offsets."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": False})
    offsets = []

    def delivered(err, msg):
        assert err is None, err
        offsets.append(msg.offset())

    for i in range(first, first + count):
        p.produce(topic, key=b"k%d" % i, value=b"value-%d-" % i + b"." * 200, partition=0,
                  timestamp=BASE_TS + i * 1000, on_delivery=delivered)
        assert p.flush(DEADLINE_S) == 0
    return offsets


def read_all(bootstrap: str, topic: str, count: int, start: int = 0) -> list[tuple[int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "recovery", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, start)])
        out = []
        for _ in range(int(DEADLINE_S * 10)):
            if len(out) >= count:
                break
            for m in c.consume(num_messages=count - len(out), timeout=0.1):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key()))
        return out
    finally:
        c.close()


def active_segment(data_dir: Path, topic: str) -> Path:
    logs = sorted((data_dir / f"{topic}-0").glob("*.log"), key=lambda p: int(p.stem))
    assert len(logs) > 1, "the test wants several segments"
    return logs[-1]


def tear_last_batch(segment: Path) -> None:
    """Cut the last batch in the middle (a write torn by the crash)."""
    size = segment.stat().st_size
    data = segment.read_bytes()
    pos = 0
    last = 0
    while pos < size:
        last = pos
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    os.truncate(segment, last + (size - last) // 2)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbage-tail", "torn-last-batch"])
def test_sigkill_then_damaged_tail_recovers_acknowledged_batches(tmp_path, damage):
    data_dir = tmp_path / "data"
    topic = "crash"
    broker = BrokerProcess(data_dir)
    try:
        create_topic(broker.bootstrap, topic, partitions=1)
        assert produce_batches(broker.bootstrap, topic, 0, BATCHES) == list(range(BATCHES))
    finally:
        broker.kill()

    segment = active_segment(data_dir, topic)
    if damage == "garbage-tail":
        with open(segment, "ab") as f:
            f.write(os.urandom(777))
        survivors = BATCHES
    else:
        tear_last_batch(segment)
        survivors = BATCHES - 1
    for index in segment.parent.glob(f"{segment.stem}.*index"):
        index.unlink()  # the indexes of the active segment must be rebuilt

    broker = BrokerProcess(data_dir)
    try:
        assert read_all(broker.bootstrap, topic, survivors) == [(i, b"k%d" % i) for i in range(survivors)]
        # Offset index: a fetch from the middle of the active segment starts at the right batch.
        mid = survivors - 2
        assert read_all(broker.bootstrap, topic, 2, start=mid) == [(mid, b"k%d" % mid), (mid + 1, b"k%d" % (mid + 1))]
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "recovery-ts"})
        try:
            assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S) == (0, survivors)
            # Time index: lookup by timestamp inside the rebuilt segment.
            ts = BASE_TS + (survivors - 1) * 1000
            found = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=DEADLINE_S)[0]
            assert found.offset == survivors - 1
        finally:
            c.close()
        # New appends continue right after the surviving batches.
        assert produce_batches(broker.bootstrap, topic, 100, 3) == [survivors, survivors + 1, survivors + 2]
        assert read_all(broker.bootstrap, topic, survivors + 3)[-1] == (survivors + 2, b"k102")
    finally:
        broker.kill()


def test_sigterm_closes_the_logs_and_exits_cleanly(tmp_path):
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir)
    try:
        create_topic(broker.bootstrap, "clean", partitions=1)
        assert produce_batches(broker.bootstrap, "clean", 0, 3) == [0, 1, 2]
        broker.proc.send_signal(signal.SIGTERM)
        assert broker.proc.wait(DEADLINE_S) == 0
    finally:
        broker.kill()
    output = []
    while (line := broker.lines.get(timeout=DEADLINE_S)) != "":
        output.append(line)
    assert any("logs closed" in line for line in output), "".join(output)

    broker = BrokerProcess(data_dir)
    try:
        assert read_all(broker.bootstrap, "clean", 3) == [(0, b"k0"), (1, b"k1"), (2, b"k2")]
    finally:
        broker.kill()
