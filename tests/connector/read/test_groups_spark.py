"""Consumer-group semantics through Spark: lag tools see a committing query, scheduled batch jobs
consume like a consumer, and two streaming queries share a topic as members of one group.

The group's state is checked with independent tools: ``pyspark-kafka groups describe`` (the CLI,
confluent-kafka AdminClient underneath) and AdminClient directly.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient

from pyspark_kafka.cli import main
from pyspark_kafka.groups import read_batch
from support.groups import group_offsets
from support.streams import Collector, produce, start
from support.waiting import wait_until

DEADLINE_S = 120.0


def describe_lag(bootstrap: str, group: str, topic: str, capsys) -> dict:
    """``groups describe --group``: ``{partition: (current offset, log end offset, lag)}`` ('-' kept as None)."""
    capsys.readouterr()
    if main(["groups", "describe", "--group", group, "--bootstrap-server", bootstrap]) != 0:
        assert "does not exist" in capsys.readouterr().err  # not created yet: nothing committed so far
        return {}
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines() if line.startswith(topic + "\t")]
    as_int = lambda x: None if x == "-" else int(x)  # noqa: E731
    return {int(r[1]): (as_int(r[2]), int(r[3]), as_int(r[4])) for r in rows}


@pytest.mark.slow
def test_lag_drops_to_zero_once_a_committing_query_catches_up(spark, bootstrap, make_topic, checkpoint_dir, capsys):
    topic, group = make_topic(partitions=3), f"lag-{uuid.uuid4().hex[:8]}"
    sent = [v for p in range(3) for v in produce(bootstrap, topic, 10, partition=p, prefix=f"p{p}")]
    collector = Collector()
    query = start(spark, bootstrap, collector, checkpoint_dir, {"processingTime": "500 milliseconds"},
                  subscribe=topic, startingOffsets="earliest", commitOffsets="true", **{"kafka.group.id": group})
    try:
        caught_up = {0: (10, 10, 0), 1: (10, 10, 0), 2: (10, 10, 0)}
        wait_until(lambda: describe_lag(bootstrap, group, topic, capsys) == caught_up, "lag 0 at offset 10",
                   DEADLINE_S, interval_s=0.2)
        sent += [v for p in range(3) for v in produce(bootstrap, topic, 5, partition=p, prefix=f"q{p}")]
        caught_up = {0: (15, 15, 0), 1: (15, 15, 0), 2: (15, 15, 0)}
        wait_until(lambda: describe_lag(bootstrap, group, topic, capsys) == caught_up, "lag 0 at offset 15",
                   DEADLINE_S, interval_s=0.2)
        assert sorted(r[2] for r in collector.rows) == sorted(sent)
    finally:
        query.stop()


@pytest.mark.slow
def test_batch_job_from_the_group_reads_each_record_once_across_runs(spark, bootstrap, make_topic, tmp_path):
    topic, group = make_topic(partitions=2), f"batch-{uuid.uuid4().hex[:8]}"
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "kafka.group.id": group,
            "kafka.auto.offset.reset": "earliest"}
    expected = produce(bootstrap, topic, 10, prefix="before")
    for run in range(3):
        batch = read_batch(spark, opts)
        expected += produce(bootstrap, topic, 4, prefix=f"during{run}")  # after the offsets were fixed: next run
        out = str(tmp_path / f"run{run}")
        batch.df.selectExpr("CAST(value AS STRING) AS v").write.parquet(out)
        if run == 0:  # a run whose write fails commits nothing: the next run reads the same records again
            failed = read_batch(spark, opts)
            with pytest.raises(Exception, match="already exists"):
                failed.df.selectExpr("CAST(value AS STRING) AS v").write.mode("error").parquet(out)
            assert failed.start == batch.start
        batch.commit()
        if run < 2:
            expected += produce(bootstrap, topic, 3, prefix=f"between{run}")
    got = [r.v.encode() for r in spark.read.parquet(*(str(tmp_path / f"run{i}") for i in range(3))).collect()]
    last_during = {v for v in expected if v.startswith(b"during2-")}
    assert sorted(got) == sorted(v for v in expected if v not in last_during)  # each record exactly once
    assert sum(group_offsets(bootstrap, group).values()) == len(expected) - len(last_during)


def group_members(bootstrap: str, group: str) -> list:
    """``[sorted partitions of each member]`` from DescribeGroups (AdminClient)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(20)
    return sorted(sorted(tp.partition for tp in m.assignment.topic_partitions) for m in desc.members)


@pytest.mark.slow
def test_two_streaming_queries_in_one_group_split_partitions_and_take_over(spark, bootstrap, make_topic, tmp_path):
    topic, group = make_topic(partitions=6), f"members-{uuid.uuid4().hex[:8]}"
    # a session timeout longer than every wait below: b can only take over because a left the group cleanly
    opts = {"subscribe": topic, "groupMembership": "true", "kafka.group.id": group,
            "kafka.auto.offset.reset": "earliest", "kafka.heartbeat.interval.ms": "500",
            "kafka.session.timeout.ms": "200000"}
    trigger = {"processingTime": "500 milliseconds"}
    out_a, out_b = Collector(), Collector()
    query_a = start(spark, bootstrap, out_a, str(tmp_path / "a"), trigger, **opts)
    query_b = start(spark, bootstrap, out_b, str(tmp_path / "b"), trigger, **opts)
    try:
        wait_until(lambda: group_members(bootstrap, group) in ([[0, 1, 2], [3, 4, 5]],),
                   "both queries to own 3 of the 6 partitions", DEADLINE_S, interval_s=0.2)
        sent = [v for p in range(6) for v in produce(bootstrap, topic, 10, partition=p, prefix=f"r1p{p}")]
        wait_until(lambda: len(out_a.rows) + len(out_b.rows) >= 60, "the first 60 records", DEADLINE_S, interval_s=0.2)
        parts_a, parts_b = {r[0] for r in out_a.rows}, {r[0] for r in out_b.rows}
        assert parts_a.isdisjoint(parts_b) and parts_a | parts_b == set(range(6)) and len(parts_a) == 3

        wait_until(lambda: group_offsets(bootstrap, group) == {p: 10 for p in range(6)},
                   "both queries to commit what they processed", DEADLINE_S, interval_s=0.2)
        query_a.stop()
        sent += [v for p in range(6) for v in produce(bootstrap, topic, 10, partition=p, prefix=f"r2p{p}")]
        try:
            wait_until(lambda: group_offsets(bootstrap, group) == {p: 20 for p in range(6)},
                       "query b to take over query a's partitions and commit", DEADLINE_S, interval_s=0.2)
        except AssertionError as exc:  # say where it stuck: a still a member, or b not committing
            raise AssertionError(f"{exc}; members {group_members(bootstrap, group)}, committed "
                                 f"{group_offsets(bootstrap, group)}") from None
        assert group_members(bootstrap, group) == [[0, 1, 2, 3, 4, 5]]
        got = [r[2] for r in out_a.rows + out_b.rows]
        assert sorted(got) == sorted(sent)  # across both outputs: nothing lost, nothing processed twice
        assert {r[0] for r in out_b.rows if r[2].startswith(b"r2")} == set(range(6))
    finally:
        query_a.stop()
        query_b.stop()
