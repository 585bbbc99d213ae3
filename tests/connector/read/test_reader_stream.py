"""Structured Streaming reads (spark.readStream.format("pykafka")) against the embedded broker.

Reader-level tests call KafkaStreamReader's methods directly (real broker, no Spark) for the
admission-control rules; a few Spark queries check the engine sees the same.
"""

from __future__ import annotations

import json
import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from support.streams import add_partition, Collector, produce, start, stream_reader
from support.waiting import wait_until


# --------------------------------------------------------------------------- reader level (no Spark)


def test_max_offsets_per_trigger_is_spread_by_backlog(bootstrap, make_topic):
    topic = make_topic(partitions=2)
    produce(bootstrap, topic, 90, partition=0, prefix="p0")
    produce(bootstrap, topic, 10, partition=1, prefix="p1")
    reader = stream_reader(bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="50")
    try:
        start = reader.initialOffset()
        assert start == {topic: {"0": 0, "1": 0}}
        assert reader.getDefaultReadLimit() == ReadMaxRows(50)
        end = reader.latestOffset(start, ReadMaxRows(50))
        assert end == {topic: {"0": 45, "1": 5}}  # 50 * 90/100 and 50 * 10/100
        assert reader.reportLatestOffset() == {topic: {"0": 90, "1": 10}}  # the backlog, for query progress
        # ReadAllAvailable (e.g. Trigger.Once) ignores the option
        assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 90, "1": 10}}
        (group,) = reader.partitions(start, end)  # a small micro-batch: one task reads both ranges
        assert [(p.range.partition, p.range.from_offset, p.range.until_offset) for p in group.parts] == [
            (0, 0, 45), (1, 0, 5)]
        rows = [r for batch in reader.read(group) for r in batch.to_pylist()]
        assert len({r["value"] for r in rows}) == 50
        assert [(r["partition"], r["offset"]) for r in rows] == [(0, o) for o in range(45)] + [(1, o) for o in range(5)]
    finally:
        reader.stop()


def test_only_small_micro_batches_over_several_partitions_are_read_by_one_task(bootstrap, make_topic, monkeypatch):
    """pack_small_trigger: one task for a small micro-batch; one per range when the micro-batch is
    larger than SMALL_TRIGGER_RECORDS or the user asks for parallelism (minPartitions)."""
    from pyspark_kafka.read import planning

    topic = make_topic(partitions=2)
    produce(bootstrap, topic, 30, partition=0)
    produce(bootstrap, topic, 30, partition=1)
    for options, limit, tasks in [({}, 60, 1), ({}, 59, 2), ({"minPartitions": "2"}, 60, 2)]:
        monkeypatch.setattr(planning, "SMALL_TRIGGER_RECORDS", limit)
        reader = stream_reader(bootstrap, subscribe=topic, startingOffsets="earliest", **options)
        try:
            start = reader.initialOffset()
            parts = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
            assert len(parts) == tasks, (options, limit)
            assert sum(b.num_rows for p in parts for b in reader.read(p)) == 60
        finally:
            reader.stop()


def test_min_offsets_per_trigger_waits_for_records_or_max_trigger_delay(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    produce(bootstrap, topic, 10)
    reader = stream_reader(
        bootstrap, subscribe=topic, startingOffsets="earliest", minOffsetsPerTrigger="30", maxTriggerDelay="1h"
    )
    try:
        assert reader.getDefaultReadLimit() == ReadMinRows(30)
        start = reader.initialOffset()
        # the first trigger always runs (Spark's delayBatch: maxTriggerDelay since the epoch has passed)
        first = reader.latestOffset(start, ReadMinRows(30))
        assert first == {topic: {"0": 10}}
        produce(bootstrap, topic, 10)
        assert reader.latestOffset(first, ReadMinRows(30)) == first  # 10 < 30 available: skip this trigger
        produce(bootstrap, topic, 25)
        assert reader.latestOffset(first, ReadMinRows(30)) == {topic: {"0": 45}}
    finally:
        reader.stop()
    impatient = stream_reader(
        bootstrap, subscribe=topic, startingOffsets="earliest", minOffsetsPerTrigger="1000", maxTriggerDelay="0s"
    )
    try:
        assert impatient.latestOffset({topic: {"0": 40}}, ReadMinRows(1000)) == {topic: {"0": 45}}
    finally:
        impatient.stop()


def test_available_now_fixes_the_target_at_the_first_trigger(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    produce(bootstrap, topic, 20)
    reader = stream_reader(bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="15")
    try:
        reader.prepareForTriggerAvailableNow()
        start = reader.initialOffset()
        first = reader.latestOffset(start, ReadMaxRows(15))
        assert first == {topic: {"0": 15}}
        produce(bootstrap, topic, 50)  # arrives after the target: not part of this run
        second = reader.latestOffset(first, ReadMaxRows(15))
        assert second == {topic: {"0": 20}}
        assert reader.latestOffset(second, ReadMaxRows(15)) == second  # done: the engine stops
    finally:
        reader.stop()


def test_initial_offsets_are_resolved_once(bootstrap, make_topic):
    """Spark asks ``initialOffset`` again when it plans the first micro-batch; like Spark's
    ``KafkaMicroBatchStream`` (its ``initialPartitionOffsets``) the reader answers with the offsets
    it resolved first, not with a later ``latest``."""
    topic = make_topic(partitions=1)
    produce(bootstrap, topic, 5)
    reader = stream_reader(bootstrap, subscribe=topic)  # streaming default: latest
    try:
        assert reader.initialOffset() == {topic: {"0": 5}}
        produce(bootstrap, topic, 3)
        assert reader.initialOffset() == {topic: {"0": 5}}
        assert reader.latestOffset({topic: {"0": 5}}, ReadAllAvailable()) == {topic: {"0": 8}}
    finally:
        reader.stop()


def test_new_partitions_start_from_earliest(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    produce(bootstrap, topic, 5)
    reader = stream_reader(bootstrap, subscribe=topic)  # streaming default: latest
    try:
        start = reader.initialOffset()
        assert start == {topic: {"0": 5}}
        add_partition(bootstrap, topic, 2)
        produce(bootstrap, topic, 3, partition=1)
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {topic: {"0": 5, "1": 3}}
        parts = reader.partitions(start, end)
        assert [(p.range.partition, p.range.from_offset, p.range.until_offset) for p in parts] == [(1, 0, 3)]
    finally:
        reader.stop()


# --------------------------------------------------------------------------- Spark queries


def test_available_now_with_max_offsets_runs_several_batches_and_stops(spark, bootstrap, make_topic, checkpoint_dir, read_path):
    topic = make_topic(partitions=2)
    produced = produce(bootstrap, topic, 150, partition=0, prefix="p0") + produce(bootstrap, topic, 150, partition=1, prefix="p1")
    collector = Collector()
    query = start(
        spark, bootstrap, collector, checkpoint_dir, {"availableNow": True},
        subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="100",
    )
    try:
        assert query.awaitTermination(180), "AvailableNow query did not stop by itself"
        assert query.exception() is None
    finally:
        query.stop()
    sizes = [len(rows) for _, rows in collector.batches if rows]
    assert sizes == [100, 100, 100]
    assert sorted(r[2] for r in collector.rows) == sorted(produced)
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in progress] == [100, 100, 100]
    assert json.loads(progress[-1]["sources"][0]["latestOffset"]) == {topic: {"0": 150, "1": 150}}  # the backlog


def test_min_and_max_offsets_per_trigger_through_the_engine(spark, bootstrap, make_topic, checkpoint_dir):
    # the engine gets ReadMaxRows from getDefaultReadLimit; AvailableNow ignores the minimum, so the
    # last, smaller batch still runs
    topic = make_topic(partitions=1)
    produce(bootstrap, topic, 100)
    collector = Collector()
    query = start(
        spark, bootstrap, collector, checkpoint_dir, {"availableNow": True},
        subscribe=topic, startingOffsets="earliest", minOffsetsPerTrigger="20", maxOffsetsPerTrigger="30",
    )
    try:
        assert query.awaitTermination(180)
        assert query.exception() is None
    finally:
        query.stop()
    assert [len(rows) for _, rows in collector.batches if rows] == [30, 30, 30, 10]


@pytest.mark.slow
def test_restart_from_checkpoint_continues_without_loss_or_repeat(spark, bootstrap, make_topic, checkpoint_dir, read_path):
    topic = make_topic(partitions=2)
    produced = produce(bootstrap, topic, 60, prefix="a")
    options = dict(subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="10")
    first = Collector()
    q = start(spark, bootstrap, first, checkpoint_dir, {"processingTime": "200 milliseconds"}, **options)
    try:  # stop a running query part way through the backlog
        wait_until(lambda: len([b for b in first.batches if b[1]]) >= 2, "two micro-batches", 120)
    finally:
        q.stop()
    produced += produce(bootstrap, topic, 30, prefix="b")
    second = Collector()
    # startingOffsets only applies to a new query: the checkpoint decides where a restart begins
    q = start(spark, bootstrap, second, checkpoint_dir, {"availableNow": True}, **options)
    try:
        assert q.awaitTermination(180)
        assert q.exception() is None
    finally:
        q.stop()
    assert second.batches and min(b for b, _ in second.batches) <= max(b for b, _ in first.batches) + 1
    batches: dict = {}
    for batch_id, rows in first.batches + second.batches:
        # a batch that was running when the query stopped is replayed with exactly the same offsets
        assert sorted(batches.setdefault(batch_id, rows)) == sorted(rows), f"batch {batch_id} replayed differently"
    keys = [(r[0], r[1]) for rows in batches.values() for r in rows]
    assert len(keys) == len(set(keys)), "a record was delivered in two micro-batches"
    assert sorted(r[2] for rows in batches.values() for r in rows) == sorted(produced)


@pytest.mark.slow
def test_running_query_picks_up_new_partitions_and_pattern_topics(spark, bootstrap, make_topic, checkpoint_dir):
    prefix = f"pat-{time.monotonic_ns()}"
    topic_a = make_topic(partitions=1, name=f"{prefix}-a")
    produce(bootstrap, topic_a, 10, prefix="a0")
    collector = Collector()
    query = start(
        spark, bootstrap, collector, checkpoint_dir, {"processingTime": "1 second"},
        subscribePattern=f"{prefix}-.*", startingOffsets="earliest",
    )
    try:
        wait_until(lambda: len(collector.rows) >= 10, "the first 10 records", 120)
        add_partition(bootstrap, topic_a, 2)
        produce(bootstrap, topic_a, 5, partition=1, prefix="a1")
        topic_b = make_topic(partitions=1, name=f"{prefix}-b")
        produce(bootstrap, topic_b, 5, prefix="b0")
        wait_until(lambda: len(collector.rows) >= 20, "records of the new partition and the new topic", 120)
        assert query.exception() is None
    finally:
        query.stop()
    seen = sorted((r[3], r[0], r[2]) for r in collector.rows)
    expected = sorted(
        [(topic_a, 0, f"a0-{i}".encode()) for i in range(10)]
        + [(topic_a, 1, f"a1-{i}".encode()) for i in range(5)]
        + [(topic_b, 0, f"b0-{i}".encode()) for i in range(5)]
    )
    assert seen == expected


def test_offsets_behind_latest_as_spark_reports_them(spark, bootstrap, make_topic, checkpoint_dir):
    """Spark's Kafka source metrics (min/max/avgOffsetsBehindLatest), computed from progress by
    pyspark_kafka.progress (pyspark's Python source API has no custom-metrics hook)."""
    from pyspark_kafka.progress import OffsetLagListener, offsets_behind_latest

    topic = make_topic(partitions=2)
    produce(bootstrap, topic, 150, partition=0)
    produce(bootstrap, topic, 150, partition=1)
    listener = OffsetLagListener()
    spark.streams.addListener(listener)
    try:
        query = start(spark, bootstrap, Collector(), checkpoint_dir, {"availableNow": True},
                      subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="100")
        try:
            assert query.awaitTermination(180), "AvailableNow query did not stop by itself"
        finally:
            query.stop()
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        lags = [offsets_behind_latest(p) for p in progress]
        assert [(m["minOffsetsBehindLatest"], m["maxOffsetsBehindLatest"]) for m in lags] == [
            ("100", "100"), ("50", "50"), ("0", "0")]
        assert lags[0]["avgOffsetsBehindLatest"] == "100.0"
        wait_until(lambda: len(listener.history.get(str(query.id), [])) >= 3, "three progress events", 60)
        assert listener.history[str(query.id)][:3] == lags
    finally:
        spark.streams.removeListener(listener)


def test_latest_initial_offsets_are_kept_across_a_stop_as_spark_does(spark, bootstrap, make_topic, checkpoint_dir):
    """``startingOffsets=latest``: records produced between a first run that read nothing and a
    restart from the same checkpoint are read, as with Spark's source. Spark plans micro-batch 0
    (writing ``offsets/0`` with the initial offsets) at the query's first trigger even with no new
    record, so pyspark keeps them; only a driver dying between ``initialOffset()`` and that write
    loses them (Spark's source writes them to ``sources/0`` first; a Python source never sees the
    checkpoint path): docs/reader.md."""
    import os

    topic = make_topic(partitions=1)
    produce(bootstrap, topic, 3, partition=0, prefix="before")

    def run_once() -> Collector:
        collector = Collector()
        query = start(spark, bootstrap, collector, checkpoint_dir, {"availableNow": True}, subscribe=topic)
        try:
            assert query.awaitTermination(120), "AvailableNow query did not stop by itself"
        finally:
            query.stop()
        return collector

    assert run_once().rows == []  # latest: the 3 earlier records are not read
    assert os.path.exists(os.path.join(checkpoint_dir, "offsets", "0"))
    between = produce(bootstrap, topic, 4, partition=0, prefix="between")
    assert sorted(r[2] for r in run_once().rows) == sorted(between)
