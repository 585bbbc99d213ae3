"""The driver of ``bench/spark_connector_bench.py``: ``format("pykafka")`` and Spark's own
``format("kafka")`` timed in ONE SparkSession, repetitions alternating.

    python bench/spark_connector_job.py --spec SPEC.json

Run by :mod:`spark_connector_bench` with the interpreter of
:func:`pyspark_kafka.testing.reference.reference_spark` (a pyspark matching the
``spark-sql-kafka-0-10`` jars, given in ``spark.jars``) and this checkout's connector on
``PYTHONPATH``. The topics already hold their data (the parent filled them); this process
only runs Spark. ``SPEC.json``::

    {"bootstrap": "127.0.0.1:P", "jars": [...], "master": "local[2]", "repetitions": 3,
     "read": {"topic": T, "count": N, "warmup_topic": W, "warmup_count": n,
              "variants": ["pykafka", "pykafka-nocrc", "kafka"] (optional; default the two formats),
              "full_warmup": false (optional: true = each variant also reads T once, untimed, first)},
     "write": {"topics": {"kafka": T1, "pykafka": T2}, "count": N, "partitions": 2,
               "value_bytes": 100, "producer": {"acks": "all", ...}} | null,
     "flights": {"topic": F, "rows": R, "max_offsets_per_trigger": 50000, "workdir": DIR,
                 "warmup": {"topic": F2, "rows": r}} | null}

A read variant is a format, or one of :data:`READ_VARIANTS`: a format with source options
(``pykafka-nocrc``: ``format("pykafka")`` with ``kafka.check.crcs=false``, issue 34's
checks-off side). The write and the flights job run only the two formats; ``"write": null``
leaves the write out (``"flights": null`` the flights job).

Measured per format and repetition (every figure is checked, else the job exits 1):

- ``read``: ``readStream.format(fmt)`` (``subscribe``, ``startingOffsets=earliest``),
  ``Trigger.AvailableNow`` into the ``noop`` sink; seconds from ``start()`` to the end of the
  query; the query's progress must count exactly ``count`` input rows. ``read_cpu``: its CPU
  seconds (utime + stime of this process and every descendant, exited ones included:
  ``read_paths_job.tree_cpu_seconds``, before and after).
- ``batch_read``: ``spark.read.format(fmt)`` of the same topic and ``count()``; exactly ``count``;
  ``batch_read_cpu`` likewise.
- ``write``: ``spark.range(count)`` as a ``value_bytes`` string, ``df.write.format(fmt)`` with
  the ``producer`` settings as ``kafka.*`` options; seconds to the return of ``save()``; the
  topic's end offsets (read with confluent-kafka) must grow by exactly ``count``.
- ``flights``: the stream phase of ``examples/flights_pipeline.py`` with ``fmt`` as its source
  (``enriched_stream(..., source_format=fmt)`` → ``pykafka-sql`` sink into a fresh SQLite file,
  fresh checkpoint, ``Trigger.AvailableNow``); seconds from building the query to its end, and
  the sum of its micro-batch durations; ``flights_report.check`` must find every flight once.

Before the timing each read variant reads, each format writes and (with ``flights``) runs the
flights query once on small topics of their own; with ``full_warmup`` each read variant also reads
the measured topic once (stream and batch, untimed): without it the first repetition is the slowest
for every variant (the JVM's JIT and heap still growing: 1.4-3.5x the CPU per record of the later ones
on 2,000,000 records), which hits the variant measured first. The variants take turns within every repetition
(one of each, never all repetitions of one then the other), their order reversed every other
repetition (:func:`orders`). Prints one JSON line: ``{"spark", "python", "pykafka_module", "seconds",
"read": {variant: [s, ...]}, "read_cpu": {...}, "batch_read": {...}, "batch_read_cpu": {...},
"write": {fmt: [s, ...]}, "write_cpu": {...}, "flights": {fmt: [{"stream": s, "batches": s}, ...]},
"flights_cpu": {...}, "order": [[variant, ...] per repetition], "load": [[1, 5, 15 min] per repetition]}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

FORMATS = ("pykafka", "kafka")
READ_VARIANTS = {"pykafka-nocrc": ("pykafka", {"kafka.check.crcs": "false"})}
"""Read variants that are a format with source options: ``name -> (format, options)``."""
QUERY_TIMEOUT_S = 900  # bound on one streaming query
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def orders(repetitions: int, variants=FORMATS) -> list[tuple[str, ...]]:
    """The order of ``variants`` per repetition: as given, then reversed, and so on (two formats:
    pykafka first, then kafka first; three: a b c, c b a, a b c, ...: every pair alternates which
    goes first, and neighbours stay neighbours)."""
    variants = tuple(variants)
    return [variants if rep % 2 == 0 else variants[::-1] for rep in range(repetitions)]


def variant_reader(reader, variant: str):
    """``reader`` (``spark.read`` or ``spark.readStream``) with the format and options of read ``variant``."""
    fmt, options = READ_VARIANTS.get(variant, (variant, {}))
    return reader.format(fmt).options(**options)


def _await(query) -> None:
    """Wait for an AvailableNow query to end (bounded); raise its exception or a TimeoutError."""
    try:
        if not query.awaitTermination(QUERY_TIMEOUT_S):
            raise TimeoutError(f"query did not finish within {QUERY_TIMEOUT_S} s")
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def read_seconds(spark, fmt: str, bootstrap: str, topic: str, expected: int) -> float:
    """One AvailableNow query of ``topic`` into ``noop`` by read variant ``fmt`` (a format or a name
    of :data:`READ_VARIANTS`); its seconds. Raises RuntimeError unless the query counted exactly
    ``expected`` input rows."""
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.perf_counter()
        query = (variant_reader(spark.readStream, fmt).option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest").load()
                 .writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        _await(query)
        seconds = time.perf_counter() - started
        rows = sum(p.numInputRows for p in query.recentProgress)
    if rows != expected:
        raise RuntimeError(f"format({fmt!r}) read {rows} rows of {topic}, expected {expected}")
    return seconds


def batch_read_seconds(spark, fmt: str, bootstrap: str, topic: str, expected: int) -> float:
    """``spark.read.format(fmt)`` (read variant ``fmt``) of the whole topic (default ``earliest`` to
    ``latest``) and ``count()``; seconds from ``load()`` to the count. Raises RuntimeError unless it
    is ``expected``. (Neither connector pushes the count down: both read every record.)"""
    started = time.perf_counter()
    rows = (variant_reader(spark.read, fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .load().count())
    seconds = time.perf_counter() - started
    if rows != expected:
        raise RuntimeError(f"format({fmt!r}) batch read {rows} rows of {topic}, expected {expected}")
    return seconds


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    """Sum of the log end offsets of ``topic``'s partitions (confluent-kafka)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-connector-bench", "log_level": 0})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions))
    finally:
        consumer.close()


def write_seconds(spark, fmt: str, bootstrap: str, spec: dict, topic: str, count: int) -> float:
    """``df.write.format(fmt)`` of ``count`` rows; its seconds. Raises RuntimeError unless the
    topic's end offsets grew by exactly ``count``."""
    before = end_offsets(bootstrap, topic, spec["partitions"])
    df = spark.range(count, numPartitions=spec["partitions"]).selectExpr(
        f"concat(lpad(CAST(id AS STRING), 10, '0'), repeat('x', {spec['value_bytes'] - 10})) AS value")
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic,
               **{f"kafka.{k}": v for k, v in spec["producer"].items()}}
    started = time.perf_counter()
    df.write.format(fmt).options(**options).mode("append").save()
    seconds = time.perf_counter() - started
    landed = end_offsets(bootstrap, topic, spec["partitions"]) - before
    if landed != count:
        raise RuntimeError(f"format({fmt!r}) wrote {landed} records to {topic}, expected {count}")
    return seconds


def flights_seconds(spark, fmt: str, bootstrap: str, spec: dict, rep: int) -> dict:
    """The flights job's stream phase with source ``fmt``: ``{"stream": s, "batches": s}``.
    Raises RuntimeError unless every flight is in the SQLite table exactly once."""
    sys.path.insert(0, EXAMPLES)
    import flights_pipeline
    import flights_report
    from pathlib import Path

    work = Path(spec["workdir"], f"{fmt}-{rep}")
    work.mkdir(parents=True)
    db_path = work / "flights.db"
    started = time.perf_counter()
    df = flights_pipeline.enriched_stream(spark, bootstrap, spec["topic"], spec["max_offsets_per_trigger"],
                                          source_format=fmt)
    query = flights_pipeline.start_query(df, db_path, work / "checkpoint", spec["topic"], continuous=False)
    _await(query)
    seconds = time.perf_counter() - started
    batches = sum(p.batchDuration for p in query.recentProgress) / 1000
    chk = flights_report.check(db_path, expected=spec["rows"])
    if not chk.ok:
        raise RuntimeError(f"flights job with format({fmt!r}): {flights_report.format_check(chk)}")
    return {"stream": seconds, "batches": batches}


def main(argv: list[str] | None = None) -> int:
    """Run the spec (module docstring); print the JSON line; exit 1 on a wrong result."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", required=True)
    spec = json.loads(open(ap.parse_args(argv).spec).read())
    variants = tuple(spec["read"].get("variants") or FORMATS)
    unknown = [v for v in variants if v not in FORMATS and v not in READ_VARIANTS]
    if unknown:
        print(f"spark_connector_job: unknown read variants {unknown}", file=sys.stderr, flush=True)
        return 1
    from pyspark_kafka.spark import get_spark

    began = time.monotonic()
    spark = get_spark("spark-connector-bench", master=spec["master"],
                      conf={"spark.jars": ",".join(spec["jars"]), "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    bootstrap, read, write, flights = spec["bootstrap"], spec["read"], spec.get("write"), spec.get("flights")
    from read_paths_job import tree_cpu_seconds  # imports this module: not at the top

    out = {"read": {v: [] for v in variants}, "batch_read": {v: [] for v in variants},
           "read_cpu": {v: [] for v in variants}, "batch_read_cpu": {v: [] for v in variants},
           "write": {f: [] for f in FORMATS} if write else None,
           "flights": {f: [] for f in FORMATS} if flights else None,
           "write_cpu": {f: [] for f in FORMATS}, "flights_cpu": {f: [] for f in FORMATS},
           "order": [], "load": []}

    def timed(fn, seconds: dict, cpu_seconds: dict, key: str) -> None:
        cpu = tree_cpu_seconds()
        seconds[key].append(fn())
        cpu_seconds[key].append(tree_cpu_seconds() - cpu)

    try:
        for v in variants:  # start the Python workers and load each connector's classes
            read_seconds(spark, v, bootstrap, read["warmup_topic"], read["warmup_count"])
            batch_read_seconds(spark, v, bootstrap, read["warmup_topic"], read["warmup_count"])
        for v in variants if read.get("full_warmup") else ():  # and the JVM's JIT and heap at full size
            read_seconds(spark, v, bootstrap, read["topic"], read["count"])
            batch_read_seconds(spark, v, bootstrap, read["topic"], read["count"])
        for fmt in FORMATS:
            if write:
                write_seconds(spark, fmt, bootstrap, write, write["topics"][fmt], min(write["count"], 20_000))
            if flights:  # and the flights query's sink, join and JSON parsing
                flights_seconds(spark, fmt, bootstrap, {**flights, **flights["warmup"]}, "warmup")
        for rep, order in enumerate(orders(spec["repetitions"], variants)):
            out["order"].append(list(order))
            out["load"].append(os.getloadavg())  # 1/5/15-minute load average as the repetition starts
            for v in order:
                print(f"[spark_connector] repetition {rep + 1}: {v}", file=sys.stderr, flush=True)
                timed(lambda: read_seconds(spark, v, bootstrap, read["topic"], read["count"]),
                      out["read"], out["read_cpu"], v)
                timed(lambda: batch_read_seconds(spark, v, bootstrap, read["topic"], read["count"]),
                      out["batch_read"], out["batch_read_cpu"], v)
                if v not in FORMATS:  # a read-only variant
                    continue
                if write:
                    timed(lambda: write_seconds(spark, v, bootstrap, write, write["topics"][v], write["count"]),
                          out["write"], out["write_cpu"], v)
                if flights:
                    timed(lambda: flights_seconds(spark, v, bootstrap, flights, rep),
                          out["flights"], out["flights_cpu"], v)
        import pyspark_kafka

        print(json.dumps({"spark": spark.version, "python": sys.executable,
                          "pykafka_module": pyspark_kafka.__file__,
                          "seconds": round(time.monotonic() - began, 1), **out}), flush=True)
    except Exception as exc:  # noqa: BLE001 - the parent shows this line
        print(f"spark_connector_job: {type(exc).__name__}: {exc}"[:4000], file=sys.stderr, flush=True)
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
