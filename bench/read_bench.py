"""Reader benchmark: Spark ``readStream.format("pykafka")`` against a plain consume loop.

How it is measured:

- The embedded broker runs in its own process (``python -m pyspark_kafka broker``), so
  neither side shares a GIL with it. One topic with 2 partitions is filled once with ``n``
  records of 100-byte values and no key; both sides read all of it, in the same run.
- **project**: a streaming query ``readStream.format("pykafka")``, ``startingOffsets=earliest``,
  ``Trigger.AvailableNow``, ``noop`` sink, ``local[2]`` (two tasks, one per partition), timed
  from ``start()`` to the query's end. A small query before the timing starts the Python
  workers. Every run is checked: the query's progress must count exactly ``n`` input rows.
- **anchor**: one Python thread in this process with an assigned confluent-kafka Consumer
  calling ``consume(5000, ...)`` and touching every message's value until ``n`` records:
  what a hand-written job would do, minus any columnar conversion.
- Reported: rows/s of both and their ratio; the project's rows/s per core used (Spark's
  two tasks) against the anchor's single thread (target >= 0.8); and the project's
  *marginal* rate, ``(n - 1000) / (t(n) - t(1000))`` from a 1000-record query timed in the
  same repetition, which removes the fixed cost of a streaming query (several seconds
  here: query start, offset and commit logs, planning) that dominates small runs (a
  repetition where the n-record query was not the slower one gives no marginal figure). The
  marginal rate is measured in the full run only: with ``--quick``'s 100,000 records the
  difference between the two queries is within the run-to-run noise. On a 2-core machine
  the broker, the Spark JVM and the workers share the cores, so the per-core figure is
  pessimistic.
Nothing is asserted; the figures are printed by ``bench/run.py``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import REPETITIONS, ServerProcess, metric, rate  # noqa: E402

VALUE_BYTES = 100
SMALL = 1000
PARTITIONS = 2
SPARK_CORES = 2
ANCHOR = "plain confluent-kafka consume loop (1 thread)"


def _fill_topic(bootstrap: str, count: int, partitions: int = None, compression: str = "none") -> str:
    """A new topic of ``count`` 100-byte records spread round robin over ``partitions`` (default
    :data:`PARTITIONS`); returns its name. ``compression`` (the producer's ``compression.type``, e.g.
    ``lz4``): the values are then 100 hex digits of random bytes (about 2:1 compressible; ``x`` * 100
    would compress to almost nothing), else 100 ``x``."""
    partitions = partitions or PARTITIONS
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"read-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": compression})
    value = b"x" * VALUE_BYTES
    randoms = [os.urandom(VALUE_BYTES // 2).hex().encode() for _ in range(1024)] if compression != "none" else None
    for i in range(count):
        while True:
            try:
                producer.produce(name, randoms[i % 1024] if randoms else value, None, i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("could not fill the benchmark topic")
    return name


def _spark_read(spark, bootstrap: str, topic: str, expected: int) -> float:
    """One AvailableNow query over the whole topic; its seconds. Raises unless it read ``expected`` rows."""
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.perf_counter()
        query = (
            spark.readStream.format("pykafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination()
            seconds = time.perf_counter() - started
            rows = sum(p["numInputRows"] for p in query.recentProgress)
        finally:
            query.stop()
    if rows != expected:
        raise RuntimeError(f"spark read {rows} rows, expected {expected}")
    return seconds


def _plain_loop(bootstrap: str, topic: str, count: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-bench-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    try:
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got = size = 0
        deadline = time.monotonic() + 600
        while got < count and time.monotonic() < deadline:
            msgs = consumer.consume(5000, timeout=0) or consumer.consume(1, timeout=1.0)
            for m in msgs:
                if m.error() is None:
                    size += len(m.value())
                    got += 1
        seconds = time.perf_counter() - started
    finally:
        consumer.close()
    if got != count:
        raise RuntimeError(f"plain loop read {got} records, expected {count}")
    return rate(count, seconds)


def run(quick: bool) -> list[dict]:
    """Measure both sides ``REPETITIONS`` times, alternating; rows for rows/s, per core, and (full run
    only) marginal rows/s."""
    from pyspark_kafka.spark import get_spark

    count = 100_000 if quick else 1_000_000
    spark = get_spark("read-bench", master=f"local[{SPARK_CORES}]")
    project, marginal, anchor = [], [], []
    with tempfile.TemporaryDirectory() as data_dir, ServerProcess.embedded_broker(data_dir) as broker:
        small = _fill_topic(broker.bootstrap, SMALL)
        _spark_read(spark, broker.bootstrap, small, SMALL)  # start the Python workers
        topic = _fill_topic(broker.bootstrap, count)
        for _ in range(REPETITIONS):
            fixed = None if quick else _spark_read(spark, broker.bootstrap, small, SMALL)
            seconds = _spark_read(spark, broker.bootstrap, topic, count)
            project.append(rate(count, seconds))
            if fixed is not None and seconds > fixed:  # else lost in run-to-run noise: no figure
                marginal.append(rate(count - SMALL, seconds - fixed))
            anchor.append(_plain_loop(broker.bootstrap, topic, count))
    note = f"{count:,} records of {VALUE_BYTES} B, no key, {PARTITIONS} partitions, embedded broker in its own process"
    rows = [
        metric("spark streaming read, AvailableNow (local[2])", "records/s", project, anchor, ANCHOR, note=note),
        metric("spark streaming read per core used", "records/s/core", [p / SPARK_CORES for p in project], anchor,
               ANCHOR, note="target >= 0.8 of the single-thread loop"),
        metric("spark streaming read, marginal (local[2])", "records/s", marginal, anchor, ANCHOR,
               note=f"(n - {SMALL}) / (time of n records - time of a {SMALL}-record query): the per-record rate "
                    f"without the fixed cost of starting and committing a streaming query; a repetition where "
                    f"the n-record query was not slower is left out (noise)"),
    ]
    return rows[:2] if quick else rows


if __name__ == "__main__":
    import statistics

    quick = "--quick" in sys.argv
    for row in run(quick):
        p, a = statistics.median(row["project"]), statistics.median(row["anchor"])
        print(f"{row['metric']}: {p:,.0f} {row['unit']}  vs  {a:,.0f} ({row['anchor_label']})  ratio {p / a:.2f}")
