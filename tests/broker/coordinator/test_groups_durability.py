"""Committed offsets live in ``__consumer_offsets``: they survive a SIGKILL of the broker process."""

from __future__ import annotations

import pytest

import time

from confluent_kafka import Consumer, Producer, TopicPartition

from support.topics import create_topic
from support.broker_process import BrokerProcess

DEADLINE_S = 60.0
TOPIC = "resume-after-kill"
GROUP = "resume-group"


def consumer(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "heartbeat.interval.ms": 200})


def poll_records(c: Consumer, count: int) -> list[tuple[int, int]]:
    out = []
    deadline = time.monotonic() + DEADLINE_S
    while len(out) < count:
        assert time.monotonic() < deadline, f"only {len(out)} of {count} records within {DEADLINE_S} s"
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            out.append((msg.partition(), msg.offset()))
    return out


@pytest.mark.slow
def test_group_resumes_from_committed_offsets_after_sigkill(tmp_path):
    data = tmp_path / "data"
    first = BrokerProcess(data)
    try:
        create_topic(first.bootstrap, TOPIC, 3)
        p = Producer({"bootstrap.servers": first.bootstrap})
        try:
            for i in range(30):
                p.produce(TOPIC, value=b"%d" % i, partition=i % 3)
            assert p.flush(30) == 0
        finally:
            p.close()
        c = consumer(first.bootstrap)
        c.subscribe([TOPIC])
        poll_records(c, 30)
        c.commit(offsets=[TopicPartition(TOPIC, 0, 4, metadata="batch-7"), TopicPartition(TOPIC, 1, 10),
                          TopicPartition(TOPIC, 2, 10)], asynchronous=False)
        c.close()
    finally:
        first.kill()  # SIGKILL: no clean shutdown, no flush
    second = BrokerProcess(data)
    try:
        c = consumer(second.bootstrap)
        try:
            got = c.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=20)
            assert [(tp.offset, tp.metadata) for tp in got] == [(4, "batch-7"), (10, None), (10, None)]
            c.subscribe([TOPIC])
            records = poll_records(c, 6)
            assert sorted(records) == [(0, o) for o in range(4, 10)]
            assert c.poll(1.0) is None  # nothing from the fully committed partitions
        finally:
            c.close()
    finally:
        second.kill()
