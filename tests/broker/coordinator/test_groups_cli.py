"""``pyspark-kafka groups list|describe``: groups, committed offsets, log end offsets and lag."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from support.topics import create_topic
from pyspark_kafka.cli import main

DEADLINE_S = 30.0


def test_groups_list_and_describe_show_offsets_lag_and_members(bootstrap, capsys):
    topic = create_topic(bootstrap, f"cli-groups-{uuid.uuid4().hex[:8]}", 2)
    group = f"cli-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        p.produce(topic, value=b"x", partition=i % 2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "client.id": "cli-test-client"})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        assert main(["groups", "list", "--bootstrap-server", bootstrap]) == 0
        assert group in capsys.readouterr().out.split()
        assert main(["groups", "describe", "--group", group, "--bootstrap-server", bootstrap]) == 0
        out = capsys.readouterr().out
        assert f"GROUP {group}  STATE EMPTY  MEMBERS 0" in out
        assert f"{topic}\t0\t2\t5\t3\t-\t-\t-" in out
        c.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while len(c.assignment()) < 2:
            assert time.monotonic() < deadline, "the consumer was not assigned both partitions"
            c.poll(0.2)
        assert main(["groups", "describe", "--group", group, "--bootstrap-server", bootstrap]) == 0
        rows = [line.split("\t") for line in capsys.readouterr().out.splitlines() if line.startswith(topic)]
        assert [(r[1], r[2], r[3], r[4], r[7]) for r in rows] == [("0", "2", "5", "3", "cli-test-client"),
                                                                   ("1", "-", "5", "-", "cli-test-client")]
    finally:
        c.close()
    assert main(["groups", "describe", "--group", "no-such-group", "--bootstrap-server", bootstrap]) == 1
    assert "does not exist" in capsys.readouterr().err
