"""The damaged-segment job: every case read by ``format("kafka")`` and ``format("pykafka")`` (both read paths).

``python corrupt_job.py --cases CASES.json --jars A.jar,B.jar [--threads 4] [--wait-s 300]``

The SparkSession starts first; then the job waits (at most ``--wait-s`` seconds) for ``CASES.json`` to
appear, so the caller can start the job while it prepares the brokers (the file must appear whole:
written elsewhere and renamed).

Run by :mod:`integration_tests.reference.test_reference_corrupt` as its own driver process with the
interpreter of :func:`pyspark_kafka.testing.reference.reference_spark` (a pyspark matching Spark's
connector jars, which cannot join the suite's shared session), like
:mod:`integration_tests.reference.reference_job`.

``CASES.json``: a list of ``{"name", "options"}``; each case is a batch read
(``spark.read.format(...).options(**options).load()``) forced through every record's value
(``count(*)``, ``count(DISTINCT offset)``, ``min/max(offset)``, ``sum(length(value))``) by each
reader of :data:`READERS`. The outcome of one read is ``{"ok": {"rows", "distinct_offsets",
"min_offset", "max_offset", "value_bytes"}}`` or ``{"error": {"class", "first_line", "raised",
"java", "text"}}``: the Python class, the first line of its message, the innermost raised Python
exception line of a Python worker's traceback (``raised``: ``[class, message]`` or null), the Java
exceptions named in the text (``java``: ``[[class, message], ...]`` outermost first, deduplicated)
and the whole text (the JVM stack trace included; at most :data:`TEXT_LIMIT` characters). ``raised`` is the
last ``pyspark_kafka.errors.X: message`` in the text when there is one (Spark may print it inside a longer
line), else the last line that is ``some.Class(Error|Exception): message``.

Prints one JSON line ``{"spark", "pykafka_module", "seconds", "case_seconds", "cases": {name: {reader: outcome}}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

READERS = {"kafka": ("kafka", {}), "pykafka-columnar": ("pykafka", {"readPath": "columnar"}),
           "pykafka-consumer": ("pykafka", {"readPath": "consumer"})}
"""Reader name -> (format, options added to the case's)."""
TEXT_LIMIT = 20_000
_PY_RAISED = re.compile(r"^([\w.]+(?:Error|Exception)): (.*)$")
_OURS_RAISED = re.compile(r"(pyspark_kafka\.[\w.]*(?:Error|Exception)): ([^\n]*)")
_JAVA = re.compile(r"^(?:Caused by: )?((?:[a-z]\w*\.)+[A-Z][\w$]*(?:Exception|Error))(?::\s*(.*))?$")


def _error(exc: BaseException) -> dict:
    text = str(exc)
    trace = getattr(exc, "_stackTrace", None)  # pyspark's captured JVM exception: the Java causes
    if trace and trace not in text:
        text += "\n\nJVM stacktrace:\n" + trace
    lines = [ln.strip() for ln in text.splitlines()]
    raised = list(_OURS_RAISED.finditer(text)) or [m for m in (_PY_RAISED.match(ln) for ln in lines) if m]
    java, seen = [], set()
    for m in (_JAVA.match(ln) for ln in lines):
        if m and (m.group(1), m.group(2)) not in seen:
            seen.add((m.group(1), m.group(2)))
            java.append([m.group(1), (m.group(2) or "")[:400]])
    first = next((ln for ln in lines if ln), "")
    return {"class": type(exc).__name__, "first_line": first[:400],
            "raised": [raised[-1].group(1), raised[-1].group(2)[:600]] if raised else None,
            "java": java[:12], "text": text[:TEXT_LIMIT]}


WARM_MODULES = ("pyspark_kafka.source", "pyspark_kafka.read.columnar", "pyspark_kafka.read.decode_kernel",
                "pyspark_kafka.read.partition_reader", "confluent_kafka")
"""Imported by the executor's Python workers while the caller prepares the brokers (reused workers keep them)."""


def _warm(_rows) -> None:
    import importlib

    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # e.g. no numba: the reader falls back, nothing to warm
            pass


def _read(spark, case: dict, reader: str) -> dict:
    fmt, extra = READERS[reader]
    try:
        df = spark.read.format(fmt).options(**{**case["options"], **extra}).load()
        row = df.selectExpr("count(*) AS rows", "count(DISTINCT offset) AS distinct_offsets",
                            "min(offset) AS min_offset", "max(offset) AS max_offset",
                            "sum(length(value)) AS value_bytes").collect()[0]
        return {"ok": row.asDict()}
    except Exception as exc:  # noqa: BLE001 - the failure is the result
        return {"error": _error(exc)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", required=True)
    ap.add_argument("--jars", required=True)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--wait-s", type=float, default=300.0)
    args = ap.parse_args()

    from pyspark_kafka.spark import get_spark

    # local[4] on 2 cores: several cases wait out kafkaConsumer.pollTimeoutMs, and every read is one task
    spark = get_spark("pykafka-corrupt-reference", master="local[4]",
                      conf={"spark.jars": args.jars, "spark.default.parallelism": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.parallelize(range(2), 2).foreachPartition(_warm)  # workers warm while the brokers are prepared
    deadline = time.monotonic() + args.wait_s
    while not os.path.exists(args.cases):
        if time.monotonic() > deadline:
            raise SystemExit(f"{args.cases} did not appear within {args.wait_s:g} s")
        time.sleep(0.1)  # polling for the caller's file, bounded by the deadline
    cases = json.loads(open(args.cases).read())
    out, seconds, started = {}, {}, time.monotonic()

    def run(case, reader):
        t0 = time.monotonic()
        result = _read(spark, case, reader)
        seconds[f"{case['name']}/{reader}"] = round(time.monotonic() - t0, 2)
        return case["name"], reader, result

    with ThreadPoolExecutor(args.threads) as pool:  # Spark runs the threads' jobs at once
        pairs = [(c, r) for c in cases for r in c.get("readers", READERS)]
        for name, reader, result in pool.map(lambda pair: run(*pair), pairs):
            out.setdefault(name, {})[reader] = result
    import pyspark_kafka

    print(json.dumps({"spark": spark.version, "python": sys.executable, "pykafka_module": pyspark_kafka.__file__,
                      "seconds": round(time.monotonic() - started, 1), "case_seconds": seconds,
                      "cases": out}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
