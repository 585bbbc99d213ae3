"""The reference job: every case through ``format("kafka")`` and ``format("pykafka")`` in one driver.

``python reference_job.py --cases CASES.json --jars A.jar,B.jar [--threads 3] [--workdir DIR]``

Run by :mod:`integration_tests.reference.test_reference_batch` with the interpreter of
:func:`pyspark_kafka.testing.reference.reference_spark` (a pyspark matching the jars) as its own
driver process: a SparkSession with ``spark.jars`` cannot join the suite's shared session. The
jars come from the cache (nothing is downloaded at query time).

``CASES.json`` is a list of ``{"name", "kind", "options", ...}`` (``"formats": ["pykafka"]`` runs a case
through those formats only, e.g. a ``readPath=consumer`` variant compared with its base case's
``kafka`` outcome):

- ``rows``: the batch read's rows (every column, binary as hex, timestamp as epoch µs), sorted;
- ``partitions``: ``df.rdd.getNumPartitions()`` of the batch read;
- ``error``: the read is expected to fail; the exception's class, message and the step that
  raised it (``load`` or ``count``);
- ``write``: ``rows`` (``key``/``value`` strings, optional ``partition``, ``headers`` as
  ``[[k, v], ...]``, ``timestamp_ms`` → a ``timestamp`` column, ``topic`` (``"@"``: this
  connector's topic; the ``topic`` option is then not set), any other name → a string column)
  written with ``options`` to ``topics[format]``;
- ``stream_write``: ``source`` read by Spark's own ``format("kafka")`` stream (``key``, ``value``,
  ``headers``, ``partition``) written by ``writeStream.format(<format>)`` to ``topics[format]``
  under ``Trigger.AvailableNow``; the outcome is ``"terminated"``;
- ``stream``: a ``readStream`` with ``Trigger.AvailableNow`` into ``foreachBatch``: per micro-batch
  ``[batch id, sorted [topic, partition, offset] triples]``, and the source offsets of the checkpoint's
  ``offsets/<n>`` files (``{"n": offset JSON}``); a failed query is an ``error`` outcome. With
  ``topics`` (``{format: topic}``) each connector subscribes to its own topic, named ``"@"`` in the
  outcome; with ``between`` (``{"partitions": total count or absent, "produce": [{"partition",
  "value"}, ...]}``) the query runs, the job adds partitions and produces those records (to its
  own topic, with confluent-kafka), and the query runs again from the same checkpoint: the outcome
  holds both runs' micro-batches and offsets.

- ``stream_new_topic``: a ``readStream`` subscribed to ``topics[format]`` before that topic exists,
  under a 1-second processing-time trigger; once the query has run :data:`NEW_TOPIC_TRIGGERS`
  triggers the job creates the topic (``partitions``) and produces ``produce`` (as ``between``), then
  waits until the query has read that many records: ``{"created_by_query": whether the topic
  existed before the job created it, "records": sorted [partition, offset] pairs}``; a query that
  fails (before or after the creation) is an ``error`` outcome.

A case's optional ``mentions`` (list of strings): an error outcome then says which of them its
whole text (the JVM's causes included) contains.

Every outcome is ``{"ok": value}`` or ``{"error": {"class", "message"}}``. Prints one JSON line
``{"spark": VERSION, "python", "pykafka_module", "started_ms", "seconds", "case_seconds", "cases": {name: {"kafka": outcome,
"pykafka": outcome}}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

FORMATS = ("kafka", "pykafka")
ROW_SQL = ["hex(key) AS key", "hex(value) AS value", "topic", "partition", "offset",
           "unix_micros(timestamp) AS timestamp", "timestampType"]
HEADERS_SQL = "transform(headers, h -> array(h.key, hex(h.value))) AS headers"


_RAISED = re.compile(r"^([\w.]+(?:Error|Exception)): (.*)$")
_RAISED_INSIDE = re.compile(r"([A-Za-z_]\w*(?:\.\w+)+(?:Error|Exception)): (.*)$")
"""A dotted exception name inside a line: with ``spark.sql.execution.pyspark.udf.hideTraceback.enabled``
(``get_spark``) Spark prints the Python error on its ``[PYTHON_DATA_SOURCE_ERROR]`` line, no traceback."""


def _error(exc: BaseException) -> dict:
    """Class and message of a failed case; for a Python data source the *innermost* raised
    exception of the worker's traceback (Spark wraps it in ``PYTHON_DATA_SOURCE_ERROR``)."""
    lines = str(exc).strip().splitlines()
    raised = [m for m in (_RAISED.match(ln.strip()) or _RAISED_INSIDE.search(ln) for ln in lines) if m]
    if raised:
        return {"class": type(exc).__name__, "cause": raised[-1].group(1), "message": raised[-1].group(2)[:400]}
    return {"class": type(exc).__name__, "message": lines[0][:400] if lines else ""}


def _reader(spark, fmt: str, options: dict):
    return spark.read.format(fmt).options(**options)


def _rows(spark, fmt: str, options: dict):
    df = _reader(spark, fmt, options).load()
    cols = ROW_SQL + ([HEADERS_SQL] if "headers" in df.columns else [])
    rows = [r.asDict() for r in df.selectExpr(*cols).collect()]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def _partitions(spark, fmt: str, options: dict):
    return _reader(spark, fmt, options).load().rdd.getNumPartitions()


def _expect_error(spark, fmt: str, options: dict):
    try:
        df = _reader(spark, fmt, options).load()
    except Exception as exc:  # noqa: BLE001
        raise _Failed("load", exc) from exc
    try:
        return f"no error: {df.count()} rows"
    except Exception as exc:  # noqa: BLE001
        raise _Failed("count", exc) from exc


class _Failed(Exception):
    """An error case's exception with the step that raised it (``load()`` or the action)."""

    def __init__(self, stage: str, exc: Exception):
        super().__init__(stage)
        self.stage, self.exc = stage, exc


TOPIC_OF_FORMAT = "@"
"""A ``topic`` column value replaced by the case's topic of the connector that writes."""


def _write(spark, fmt: str, case: dict):
    from pyspark.sql import types as T

    header = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
    types = {"partition": T.IntegerType(), "headers": T.ArrayType(header), "timestamp_ms": T.LongType()}
    rows = case["rows"]
    names = ["key", "value"] + sorted({n for r in rows for n in r} - {"key", "value"})
    topic = case["topics"][fmt]

    def cell(row, name):
        v = row.get(name)
        if name == "headers":
            return [(k, None if hv is None else hv.encode()) for k, hv in v or []]
        return topic if name == "topic" and v == TOPIC_OF_FORMAT else v

    df = spark.createDataFrame([tuple(cell(r, n) for n in names) for r in rows],
                               T.StructType([T.StructField(n, types.get(n, T.StringType())) for n in names]))
    if "timestamp_ms" in names:
        df = df.withColumn("timestamp", (df["timestamp_ms"] / 1000).cast("timestamp")).drop("timestamp_ms")
    writer = df.write.format(fmt).options(**case["options"]).mode("append")
    if "topic" not in names:
        writer = writer.option("topic", topic)
    writer.save()
    return len(rows)


STREAM_TIMEOUT_S = 120


def _stream(spark, fmt: str, case: dict, workdir: str) -> dict:
    checkpoint = tempfile.mkdtemp(prefix=f"{case['name']}-{fmt}-", dir=workdir)
    batches, lock = [], threading.Lock()
    own_topic = case.get("topics", {}).get(fmt)
    options = {**case["options"], **({"subscribe": own_topic} if own_topic else {})}

    def record(df, batch_id):
        records = sorted([TOPIC_OF_FORMAT if r.topic == own_topic else r.topic, r.partition, r.offset]
                         for r in df.select("topic", "partition", "offset").collect())
        with lock:
            batches.append([batch_id, records])

    def run_once():
        df = spark.readStream.format(fmt).options(**options).load()
        query = (df.writeStream.foreachBatch(record).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        try:
            if not query.awaitTermination(STREAM_TIMEOUT_S):
                raise TimeoutError(f"query did not finish in {STREAM_TIMEOUT_S} s")
        finally:
            query.stop()

    run_once()
    if "between" in case:
        _change_topic(options["kafka.bootstrap.servers"], own_topic, case["between"])
        run_once()
    log = os.path.join(checkpoint, "offsets")
    offsets = {}
    for n in sorted((f for f in os.listdir(log) if f.isdigit()), key=int) if os.path.isdir(log) else []:
        lines = open(os.path.join(log, n)).read().splitlines()
        offset = json.loads(lines[2]) if len(lines) > 2 else None  # v1, batch metadata, the source's offset
        if own_topic and offset and own_topic in offset:
            offset[TOPIC_OF_FORMAT] = offset.pop(own_topic)
        offsets[n] = offset
    return {"batches": sorted(batches), "offsets": offsets}


NEW_TOPIC_TRIGGERS = 2
"""Triggers a ``stream_new_topic`` query runs (without failing) before the job creates its topic."""


def _stream_new_topic(spark, fmt: str, case: dict, workdir: str) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap, topic = case["options"]["kafka.bootstrap.servers"], case["topics"][fmt]
    checkpoint = tempfile.mkdtemp(prefix=f"{case['name']}-{fmt}-", dir=workdir)
    records, lock = [], threading.Lock()

    def record(df, _batch_id):
        rows = [[r.partition, r.offset] for r in df.select("partition", "offset").collect()]
        with lock:
            records.extend(rows)

    def wait(done, what: str) -> None:
        deadline = time.monotonic() + STREAM_TIMEOUT_S
        while not done():
            if not query.isActive:
                query.awaitTermination()  # raises the query's exception
                raise RuntimeError(f"query stopped without an error while waiting for {what}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} within {STREAM_TIMEOUT_S} s")
            time.sleep(0.1)  # polling the query's progress, bounded by the deadline

    df = spark.readStream.format(fmt).options(**case["options"]).option("subscribe", topic).load()
    query = (df.writeStream.foreachBatch(record).option("checkpointLocation", checkpoint)
             .trigger(processingTime="1 second").start())
    try:
        wait(lambda: len(query.recentProgress) >= NEW_TOPIC_TRIGGERS, f"{NEW_TOPIC_TRIGGERS} triggers")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        created_by_query = topic in admin.list_topics(timeout=10).topics
        if not created_by_query:
            admin.create_topics([NewTopic(topic, case["partitions"], 1)])[topic].result(60)
        _change_topic(bootstrap, topic, {"produce": case["produce"]})
        wait(lambda: len(records) >= len(case["produce"]), f"{len(case['produce'])} records")
    finally:
        query.stop()
    return {"created_by_query": created_by_query, "records": sorted(records)}


def _change_topic(bootstrap: str, topic: str, between: dict) -> None:
    """Between a stream case's two runs: grow ``topic`` to ``between["partitions"]`` partitions
    and produce ``between["produce"]`` (``{"partition", "value"}`` dicts), every record acknowledged."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewPartitions

    if between.get("partitions"):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions(topic, between["partitions"])])[topic].result(60)
        deadline = time.monotonic() + 60
        while len(admin.list_topics(topic, timeout=10).topics[topic].partitions) < between["partitions"]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} did not reach {between['partitions']} partitions in 60 s")
            time.sleep(0.1)  # polling the metadata, bounded by the deadline
    failures = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for r in between.get("produce", []):
        producer.produce(topic, r["value"].encode(), partition=r["partition"],
                         on_delivery=lambda err, _msg: err and failures.append(err))
    if producer.flush(60) or failures:
        raise RuntimeError(f"records not acknowledged: {failures or 'flush timed out'}")


def _stream_write(spark, fmt: str, case: dict, workdir: str) -> str:
    checkpoint = tempfile.mkdtemp(prefix=f"{case['name']}-{fmt}-", dir=workdir)
    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", case["options"]["kafka.bootstrap.servers"])
              .option("subscribe", case["source"]).option("startingOffsets", "earliest")
              .option("includeHeaders", "true").load().select("key", "value", "headers", "partition"))
    query = (source.writeStream.format(fmt).options(**case["options"]).option("topic", case["topics"][fmt])
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        if not query.awaitTermination(STREAM_TIMEOUT_S):
            raise TimeoutError(f"query did not finish in {STREAM_TIMEOUT_S} s")
    finally:
        query.stop()
    return "terminated"


def _run(spark, case: dict, fmt: str, workdir: str = ".") -> dict:
    try:
        if case["kind"] == "rows":
            return {"ok": _rows(spark, fmt, case["options"])}
        if case["kind"] == "partitions":
            return {"ok": _partitions(spark, fmt, case["options"])}
        if case["kind"] == "error":
            return {"ok": _expect_error(spark, fmt, case["options"])}
        if case["kind"] == "stream":
            return {"ok": _stream(spark, fmt, case, workdir)}
        if case["kind"] == "stream_new_topic":
            return {"ok": _stream_new_topic(spark, fmt, case, workdir)}
        if case["kind"] == "stream_write":
            return {"ok": _stream_write(spark, fmt, case, workdir)}
        return {"ok": _write(spark, fmt, case)}
    except _Failed as failed:
        return {"error": {**_error(failed.exc), "stage": failed.stage}}
    except Exception as exc:  # noqa: BLE001 - an error is a result to compare
        error = _error(exc)
        if case.get("mentions"):  # whether the whole error text (Java causes included) names these
            text = f"{exc}\n{getattr(exc, 'stackTrace', '')}"
            error["mentions"] = {needle: needle in text for needle in case["mentions"]}
        return {"error": error}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", required=True)
    ap.add_argument("--jars", required=True)
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--workdir", default=".")
    args = ap.parse_args()
    cases = json.loads(open(args.cases).read())

    from pyspark_kafka.spark import get_spark

    # a trigger that reads nothing is reported in recentProgress at most every noDataProgressEventInterval (Spark's
    # default 10 s): stream_new_topic waits for two such triggers before it creates its topic
    spark = get_spark("pykafka-reference", conf={"spark.jars": args.jars, "spark.default.parallelism": "2",
                                                 "spark.sql.streaming.noDataProgressEventInterval": "500ms"})
    spark.sparkContext.setLogLevel("ERROR")
    out, started, started_ms = {}, time.monotonic(), int(time.time() * 1000)
    seconds = {}

    def run(case, fmt):
        t0 = time.monotonic()
        result = _run(spark, case, fmt, args.workdir)
        seconds[f"{case['name']}/{fmt}"] = round(time.monotonic() - t0, 2)
        return case["name"], fmt, result

    # Spark runs jobs of several threads at once; most of a case is waiting (Kafka round trips,
    # Python workers), so a few threads shorten the job without changing any result.
    with ThreadPoolExecutor(args.threads) as pool:
        pairs = [(c, f) for c in cases for f in c.get("formats", FORMATS)]
        for name, fmt, result in pool.map(lambda pair: run(*pair), pairs):
            out.setdefault(name, {})[fmt] = result
    import pyspark_kafka

    print(json.dumps({"spark": spark.version, "python": sys.executable, "cases": out,
                      "pykafka_module": pyspark_kafka.__file__,
                      "started_ms": started_ms, "case_seconds": seconds,
                      "seconds": round(time.monotonic() - started, 1)}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
