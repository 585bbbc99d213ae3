"""Writer benchmark: Spark ``df.write.format("pykafka")`` against a plain produce loop.

How it is measured:

- The embedded broker runs in its own process (``python -m pyspark_kafka broker``), so
  neither side shares a GIL with it. Both sides write to it, in the same run, with the
  same producer settings (``acks=all``, idempotent, ``linger.ms=5``, no compression), the same number of
  records of 100-byte values and no key, to a topic with 2 partitions.
- **project**: ``spark.range(n)`` mapped to a 100-byte string ``value`` and written by
  ``local[2]`` (two tasks, so up to two Python workers), timed from ``save()`` to its
  return, which is after every record was acknowledged. A small write before the timing
  starts the Python workers.
- **anchor**: one Python thread in this process calling ``Producer.produce`` in a loop
  (explicit partitions, round robin) and ``flush()``: what a hand-written job would do.
- Reported: rows/s of both and their ratio; and the project's rows/s per core used
  (Spark's two tasks) against the anchor's single thread. On a 2-core machine the broker,
  the Spark JVM and the workers share the cores, so the per-core figure is pessimistic.
- Every run is checked: the topic's end offsets must grow by exactly ``n``.
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

from common import REPETITIONS, ServerProcess, metric, rate, ratio  # noqa: E402

VALUE_BYTES = 100
PARTITIONS = 2
SPARK_CORES = 2
PRODUCER = {"acks": "all", "enable.idempotence": "true", "linger.ms": "5", "compression.type": "none"}
ANCHOR = "plain confluent-kafka produce loop (1 thread)"


def _create_topic(bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"write-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    futures = admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)],
                                  operation_timeout=10)
    futures[name].result(timeout=30)
    return name


def _end_offsets(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "write-bench"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS))
    finally:
        c.close()


def _checked(bootstrap: str, topic: str, count: int, write) -> float:
    """Run ``write()``; its rows/s. Raises RuntimeError unless exactly ``count`` records landed."""
    before = _end_offsets(bootstrap, topic)
    started = time.perf_counter()
    write()
    seconds = time.perf_counter() - started
    landed = _end_offsets(bootstrap, topic) - before
    if landed != count:
        raise RuntimeError(f"{landed} records landed, expected {count}")
    return rate(count, seconds)


def _spark_write(spark, bootstrap: str, topic: str, count: int) -> None:
    df = spark.range(count, numPartitions=SPARK_CORES).selectExpr(
        f"concat(lpad(CAST(id AS STRING), 10, '0'), repeat('x', {VALUE_BYTES - 10})) AS value")
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic,
               **{f"kafka.{k}": v for k, v in PRODUCER.items()}}
    df.write.format("pykafka").options(**options).mode("append").save()


def _plain_loop(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    producer.list_topics(topic, timeout=10)
    values = [b"%010d" % i + b"x" * (VALUE_BYTES - 10) for i in range(count)]
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    produce = producer.produce
    for i, v in enumerate(values):
        while True:
            try:
                produce(topic, v, None, i % PARTITIONS, on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) or errors:
        raise RuntimeError(f"plain loop: {len(errors)} delivery errors, e.g. {errors[:1]}")


def run(quick: bool) -> list[dict]:
    """Measure both sides ``REPETITIONS`` times, alternating; one row for rows/s, one per core."""
    from pyspark_kafka.spark import get_spark

    count = 100_000 if quick else 1_000_000
    spark = get_spark("write-bench", master=f"local[{SPARK_CORES}]")
    project, anchor = [], []
    with tempfile.TemporaryDirectory() as data_dir, ServerProcess.embedded_broker(data_dir) as broker:
        topic = _create_topic(broker.bootstrap)
        _spark_write(spark, broker.bootstrap, topic, min(count, 50_000))  # start workers, warm the JVM
        for _ in range(REPETITIONS):
            project.append(_checked(broker.bootstrap, topic, count,
                                    lambda: _spark_write(spark, broker.bootstrap, topic, count)))
            anchor.append(_checked(broker.bootstrap, topic, count,
                                   lambda: _plain_loop(broker.bootstrap, topic, count)))
    note = f"{count:,} records of {VALUE_BYTES} B, no key, {PARTITIONS} partitions, embedded broker in its own process"
    rows = [
        metric("spark write (local[2])", "records/s", project, anchor, ANCHOR, note=note),
        metric("spark write per core used", "records/s/core", [p / SPARK_CORES for p in project], anchor, ANCHOR,
               note="target >= 0.8 of the single-thread loop"),
    ]
    return [{**row, "ratio": ratio(row["project"], row["anchor"])} for row in rows]


if __name__ == "__main__":
    import statistics

    quick = "--quick" in sys.argv
    for row in run(quick):
        p, a = statistics.median(row["project"]), statistics.median(row["anchor"])
        print(f"{row['metric']}: {p:,.0f} {row['unit']}  vs  {a:,.0f} ({row['anchor_label']})  ratio {row['ratio']:.2f}")
