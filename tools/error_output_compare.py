"""What a user sees when a Kafka job is wrong: ``format("pykafka")`` against Spark's ``format("kafka")``.

Run it from the repository (it needs Java, the installed package and, for Spark's connector, the
reference environment of :mod:`pyspark_kafka.testing.reference`, built on first use)::

    python tools/error_output_compare.py                 # every case, every variant (about 5 min)
    python tools/error_output_compare.py --cases missing-topic --variants pykafka-plain
    python tools/error_output_compare.py --json out.json --show 12   # keep the raw outputs, print 12 lines each

Each case is one small job written to a temporary ``job.py`` and run as a user runs it
(``python job.py``, stdout and stderr into one stream, as a terminal shows them). The same mistake
runs three ways:

- ``pykafka-plain``: ``format("pykafka")`` in a plain ``SparkSession.builder.getOrCreate()`` (only
  ``PYSPARK_PYTHON`` set, as the getting-started page says), on the installed pyspark;
- ``pykafka-get_spark``: ``format("pykafka")`` in ``pyspark_kafka.spark.get_spark()``;
- ``kafka``: Spark's own connector (``spark.jars``: spark-sql-kafka-0-10 of the reference
  environment) in a plain session on the reference pyspark (4.2.0 here: Maven Central serves no
  4.3.0 connector).

The cases: a bootstrap address with nothing listening (batch read and stream), a batch
``subscribe`` of a topic that does not exist, a bad option value (``startingOffsets=bogus`` for a
batch read, ``maxOffsetsPerTrigger=-1`` for a stream) and no ``subscribe``/``assign`` at all. The
embedded broker (started here, on a free loopback port, stopped on exit) serves the cases that
need a cluster.

Only the output of the failing action counts: the job prints a marker line (removed from the
output) once the session is up, so start-up lines are counted apart. Per run: the first lines of
the failure, the line where the cause first appears (1 = the first line after the session started;
the cause is the case's ``cause`` pattern: the address and "refused"/"reach", the topic's name,
the option's name, in a line that is not a traceback frame), total lines, librdkafka lines, and seconds from the action's start to the
first line of Python's traceback (what the user waits). A run that has not failed after
``--timeout`` seconds is stopped (its process group, by pid) and reported as such.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

MARKER = "@@error-output-compare: action starts@@"
LIBRDKAFKA_LINE = re.compile(r"%\d\|\d+\.\d+\||\brdkafka\b|librdkafka")

CASES = {
    "unreachable-batch": {
        "what": "kafka.bootstrap.servers: a port with nothing listening; batch read",
        "kind": "batch", "options": {"kafka.bootstrap.servers": "{closed}", "subscribe": "t"},
        "cause": r"(?i)({closed}.*(refused|could not be established|reach))|((refused|cannot reach|could not be "
                 r"established).*{closed})",
    },
    "unreachable-stream": {
        "what": "kafka.bootstrap.servers: a port with nothing listening; readStream (AvailableNow)",
        "kind": "stream", "options": {"kafka.bootstrap.servers": "{closed}", "subscribe": "t"},
        "cause": r"(?i)({closed}.*(refused|could not be established|reach))|((refused|cannot reach|could not be "
                 r"established).*{closed})",
    },
    "missing-topic": {
        "what": "batch subscribe of a topic that does not exist",
        "kind": "batch", "options": {"kafka.bootstrap.servers": "{broker}", "subscribe": "no-such-topic"},
        "cause": r"no-such-topic",
    },
    "bad-startingOffsets": {
        "what": "startingOffsets=bogus; batch read",
        "kind": "batch",
        "options": {"kafka.bootstrap.servers": "{broker}", "subscribe": "{topic}", "startingOffsets": "bogus"},
        "cause": r"(?i)startingoffsets",
    },
    "bad-maxOffsetsPerTrigger": {
        "what": "maxOffsetsPerTrigger=-1; readStream",
        "kind": "stream",
        "options": {"kafka.bootstrap.servers": "{broker}", "subscribe": "{topic}", "maxOffsetsPerTrigger": "-1"},
        "cause": r"(?i)maxoffsetspertrigger",
    },
    "no-subscribe": {
        "what": "no subscribe, subscribePattern or assign; batch read",
        "kind": "batch", "options": {"kafka.bootstrap.servers": "{broker}"},
        "cause": r"(?i)subscribe",
    },
}

VARIANTS = ("pykafka-plain", "pykafka-get_spark", "kafka")

JOB = '''\
import os, sys
{session}
options = {options!r}
sys.stderr.write({marker!r} + "\\n"); sys.stderr.flush()
{action}
'''

PLAIN = '''\
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[2]"){jars}.getOrCreate()'''

GET_SPARK = '''\
from pyspark_kafka.spark import get_spark
spark = get_spark()'''

BATCH = 'print(spark.read.format({fmt!r}).options(**options).load().count())'
STREAM = '''\
q = (spark.readStream.format({fmt!r}).options(**options).load().writeStream.format("noop")
     .option("checkpointLocation", {checkpoint!r}).trigger(availableNow=True).start())
q.awaitTermination()'''


def closed_port() -> str:
    """``127.0.0.1:PORT`` of a port that was free a moment ago (nothing listens on it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def job_source(case: dict, variant: str, values: dict, workdir: Path, jars: str) -> str:
    """The ``job.py`` of one case run one way."""
    fmt = "kafka" if variant == "kafka" else "pykafka"
    session = GET_SPARK if variant == "pykafka-get_spark" else PLAIN.format(
        jars=f'.config("spark.jars", {jars!r})' if variant == "kafka" else "")
    options = {k: v.format(**values) for k, v in case["options"].items()}
    action = (BATCH.format(fmt=fmt) if case["kind"] == "batch"
              else STREAM.format(fmt=fmt, checkpoint=str(workdir / "checkpoint")))
    return JOB.format(session=session, options=options, marker=MARKER, action=action)


def run_job(python: str, source: str, workdir: Path, timeout_s: float, pythonpath: str = "") -> dict:
    """Run ``source`` as ``python job.py`` in ``workdir``; the output split at the marker, with timings.

    Returns ``{"startup": [lines], "failure": [lines], "exit": code or None (stopped at the timeout),
    "seconds": from the marker to the first traceback line (or the exit)}``."""
    path = workdir / "job.py"
    path.write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_HIDE"))}
    env["PYTHONUNBUFFERED"] = "1"
    if pythonpath:  # another copy of the package first (Spark's workers keep the driver's PYTHONPATH too)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen([python, str(path)], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", env=env, start_new_session=True)
    startup, failure, marks = [], [], {}

    def read():
        for line in proc.stdout:
            line = line.rstrip("\n")
            if MARKER in line:
                marks["start"] = time.monotonic()
                continue
            if "start" not in marks:
                startup.append(line)
                continue
            if "Traceback (most recent call last)" in line and "error" not in marks:
                marks["error"] = time.monotonic()
            failure.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        code = None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    ended = time.monotonic()
    reader.join(10)
    start = marks.get("start", ended)
    return {"startup": startup, "failure": failure, "exit": code,
            "seconds": round(marks.get("error", ended) - start, 1)}


def summarize(out: dict, cause: str) -> dict:
    """The figures of one run: where the cause first appears (1-based in the failure output, None:
    nowhere), total lines, librdkafka lines, the first 5 lines."""
    lines = out["failure"]
    # traceback frames and their source lines are indented: a cause is in a line of its own
    where = next((i + 1 for i, line in enumerate(lines) if line[:1].strip() and re.search(cause, line)), None)
    return {"cause_line": where, "lines": len(lines), "startup_lines": len(out["startup"]),
            "librdkafka_lines": sum(bool(LIBRDKAFKA_LINE.search(line)) for line in out["failure"] + out["startup"]),
            "seconds": out["seconds"], "exit": out["exit"], "first": lines[:5]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS))
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds before a run that has not failed is stopped")
    ap.add_argument("--show", type=int, default=5, help="failure lines printed per run")
    ap.add_argument("--pythonpath", default="", help="a folder holding another pyspark_kafka (e.g. an older "
                    "commit's, from git archive) for the pykafka runs")
    ap.add_argument("--json", help="write every run's figures and whole output to this file")
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(cases) - set(CASES)) + sorted(set(variants) - set(VARIANTS))
    if unknown:
        ap.error(f"unknown case or variant {unknown}: cases are {list(CASES)}, variants {list(VARIANTS)}")

    jars, reference_python, ref = "", sys.executable, None
    if "kafka" in variants:
        from pyspark_kafka.testing.reference import reference_spark

        ref = reference_spark()
        jars, reference_python = ",".join(map(str, ref.jars)), ref.python
    from pyspark_kafka.testing.clusters import embedded

    results = {}
    with embedded() as cluster, tempfile.TemporaryDirectory(prefix="error-output-") as tmp:
        values = {"broker": cluster.bootstrap, "topic": cluster.create_topic(1, prefix="errors"),
                  "closed": closed_port()}
        for number, name in enumerate(cases):
            case = CASES[name]
            for variant in variants:
                workdir = Path(tmp) / f"run{number}-{variants.index(variant)}"  # no case name in the paths shown
                workdir.mkdir(parents=True)
                python = reference_python if variant == "kafka" else sys.executable
                out = run_job(python, job_source(case, variant, values, workdir, jars), workdir, args.timeout,
                              "" if variant == "kafka" else args.pythonpath)
                row = summarize(out, case["cause"].format(closed=re.escape(values["closed"])))
                results.setdefault(name, {})[variant] = {**row, "output": out}
                print(f"\n== {name} / {variant}: cause at line {row['cause_line']} of {row['lines']}, "
                      f"{row['librdkafka_lines']} librdkafka lines, {row['seconds']} s"
                      + (", not failed before the timeout" if out["exit"] is None else ""), flush=True)
                for line in out["failure"][:args.show]:
                    print("   " + textwrap.shorten(line, 240, placeholder=" ..."), flush=True)
    note = f"pykafka: installed pyspark {__import__('pyspark').__version__}" + (
        f"; kafka: Spark {ref.version}'s connector on pyspark {ref.version}" if ref is not None else "")
    print(f"\n{note}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("\n| case | variant | cause at line | lines | librdkafka lines | seconds to fail |")
    print("|---|---|---|---|---|---|")
    for name, per in results.items():
        for variant, row in per.items():
            secs = f"{row['seconds']}" if row["exit"] is not None else f"no failure in {args.timeout:g}"
            print(f"| {name} | {variant} | {row['cause_line'] or 'never'} | {row['lines']} | "
                  f"{row['librdkafka_lines']} | {secs} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"note": note, "load": os.getloadavg()[0], "results": results}, indent=1))


if __name__ == "__main__":
    main()
