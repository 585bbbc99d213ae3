"""Reading Kafka into Spark on Apache Kafka: Spark's ``format("kafka")`` against ``format("pykafka")`` with
each read path (``readPath=consumer``, ``readPath=columnar`` with the numba and the numpy decoder).

How it is measured (see ``bench/read_paths_job.py`` for each figure):

- Apache Kafka (one KRaft node from the cached Maven jars, Kafka's default request threads; the
  same as ``broker_bench``'s anchor) holds one topic of ``N`` records of 100-byte values, no
  key, 2 partitions (2,000,000 full, 200,000 quick), a 1,000-record warm-up topic and a
  20,000-record topic for the small micro-batches.
- Spark's connector jars and the pyspark that runs them come from
  :func:`pyspark_kafka.testing.reference.reference_spark` (``spark_connector_bench``'s job
  environment): one driver process, one SparkSession ``local[2]``, every variant in it.
- The job runs twice: once as installed (numba decoder) with ``kafka``, ``pykafka:consumer`` and
  ``pykafka:columnar``; once with ``PYSPARK_KAFKA_DECODER=numpy`` with ``kafka`` and
  ``pykafka:columnar``. Every ratio compares figures of the same job run.
- Per variant: streaming AvailableNow → noop, batch ``count()``, batch ``sum(length(value))``:
  records/s and CPU µs per record (the whole Spark application's process tree from ``/proc``:
  driver Python, JVM, Python workers); the median ``triggerExecution`` of 20 micro-batches of
  1,000 records and the seconds to a new query's first progress.

Rows: ``project`` = the pykafka variant, ``anchor`` = Spark's connector, same run.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "read_paths_job.py")
sys.path.insert(0, HERE)

from common import REPETITIONS, Skipped, metric, rate  # noqa: E402

SKIPPED: dict[str, str] = {}
SMALL_RECORDS, PER_TRIGGER = 20_000, 1_000


def measure(count: int, repetitions: int = REPETITIONS, columnar_only: bool = False,
            session: str = "get_spark", compression: str = "none", on_installed: bool = False) -> dict:
    """``{"numba": job results, "numpy": job results | None, "label": broker label, "session": session,
    "load": [os.getloadavg() before, after each job]}`` (see the job). ``columnar_only``: one job,
    Spark's connector against ``pykafka:columnar`` (numba) only; ``session``: ``get_spark`` or ``plain``;
    ``compression``: the producer's ``compression.type`` of the ``N``-record topic (the streaming and
    batch rows; the small-trigger and warm-up topics stay uncompressed); ``on_installed``: run the job on
    this interpreter's pyspark even when it is newer than the connector jars Maven Central serves
    (Spark 4.2.0's ``spark-sql-kafka-0-10`` jar ran on pyspark 4.3.0 here: batch and streaming reads
    gave the same rows), labelled so."""
    from broker_bench import apache_kafka
    from read_bench import _fill_topic
    from spark_connector_bench import reference, run_job

    ref = reference()
    on_label = f"Spark {ref.version} format('kafka')"
    if on_installed and ref.version != ref.installed:
        import dataclasses

        ref = dataclasses.replace(ref, python=sys.executable)
        on_label = f"Spark {ref.version}'s format('kafka') jar on pyspark {ref.installed}"
    with tempfile.TemporaryDirectory(prefix="read-paths-bench-") as workdir, contextlib.ExitStack() as stack:
        started = apache_kafka(stack)
        if started is None:
            import broker_bench

            raise Skipped(broker_bench.SKIPPED.get("apache-kafka anchor", "Apache Kafka cannot run here"))
        label, cluster = started
        bootstrap = cluster.bootstrap_servers
        spec = {"bootstrap": bootstrap, "jars": [str(j) for j in ref.jars], "master": "local[2]",
                "repetitions": repetitions, "topic": _fill_topic(bootstrap, count, compression=compression),
                "count": count,
                "warmup_topic": _fill_topic(bootstrap, 1000), "warmup_count": 1000,
                "small": {"topic": _fill_topic(bootstrap, SMALL_RECORDS), "count": SMALL_RECORDS,
                          "per_trigger": PER_TRIGGER}}
        spec["session"] = session
        load = [os.getloadavg()]
        variants = ["kafka", "pykafka:columnar"] if columnar_only else ["kafka", "pykafka:consumer", "pykafka:columnar"]
        numba = run_job(ref, {**spec, "variants": variants}, workdir, JOB)["results"]
        load.append(os.getloadavg())
        numpy = None
        if not columnar_only:
            numpy = run_job(ref, {**spec, "variants": ["kafka", "pykafka:columnar"]}, workdir, JOB,
                            {"PYSPARK_KAFKA_DECODER": "numpy"})["results"]
            load.append(os.getloadavg())
    return {"numba": numba, "numpy": numpy, "label": f"{on_label} on {label}",
            "session": session, "load": load, "compression": compression}


def job_entry(entry: str) -> tuple[str, bool, dict]:
    """One ``--small-only`` entry, ``[source:]DIR[@KEY=VALUE...]``, as ``(DIR, compile_bytecode, {KEY: VALUE})``.

    Raises ValueError naming the entry when a setting has no ``=`` or an empty key (e.g.
    ``DIR@spark.ui.enabled`` instead of ``DIR@spark.ui.enabled=true``) or the directory is empty.
    """
    path, *settings = entry.split("@")
    source_only = path.startswith("source:")
    path = path.removeprefix("source:")
    if not path:
        raise ValueError(f"--small-only entry {entry!r} names no connector/ directory: write DIR[@KEY=VALUE...]")
    conf = {}
    for kv in settings:
        key, eq, value = kv.partition("=")
        if not eq or not key:
            raise ValueError(f"--small-only entry {entry!r}: setting {kv!r} is not KEY=VALUE "
                             f"(e.g. DIR@spark.ui.enabled=true)")
        conf[key] = value
    return path, not source_only, conf


def measure_small(connectors: list[str], repetitions: int = REPETITIONS, rounds: int = 1,
                  variants: tuple = ("kafka", "pykafka"), partitions: int | None = None,
                  sessions: tuple = ("get_spark",)) -> list[dict]:
    """Small micro-batches and the first micro-batch only, for comparing checkouts change by change.

    One Apache Kafka with the 20,000-record topic; per round, one job per connector directory of
    ``connectors`` (its ``connector/`` path, in order), each with Spark's connector and ``pykafka``
    (``readPath=auto``) in its own SparkSession; a directory written ``source:DIR`` runs without
    compiling its bytecode first (:func:`spark_connector_bench.run_job`); ``DIR@KEY=VALUE@...`` adds Spark
    settings to that job's SparkSession (e.g. ``@spark.python.unix.domain.socket.enabled=true``), so one run
    can compare settings on the same checkout. Returns one entry per job:
    ``{"connector", "round", "load": os.getloadavg() after it, "results": job results}``.
    ``partitions``: of the small-trigger topic (default: read_bench's 2; issue 35 measured 4).
    ``sessions``: one job per entry and connector: ``"get_spark"`` and/or ``"plain"`` (the user's own
    ``SparkSession.builder``, see ``read_paths_job``); the entry's ``"session"`` names it.
    """
    from broker_bench import apache_kafka
    from read_bench import _fill_topic
    from spark_connector_bench import reference, run_job

    ref = reference()
    out = []
    with tempfile.TemporaryDirectory(prefix="trigger-bench-") as workdir, contextlib.ExitStack() as stack:
        started = apache_kafka(stack)
        if started is None:
            raise Skipped("Apache Kafka cannot run here")
        bootstrap = started[1].bootstrap_servers
        spec = {"bootstrap": bootstrap, "jars": [str(j) for j in ref.jars], "master": "local[2]",
                "repetitions": repetitions, "topic": None, "count": 0,
                "warmup_topic": _fill_topic(bootstrap, 1000), "warmup_count": 1000,
                "small": {"topic": _fill_topic(bootstrap, SMALL_RECORDS, partitions), "count": SMALL_RECORDS,
                          "per_trigger": PER_TRIGGER}, "variants": list(variants)}
        for r in range(rounds):
            for c in connectors:
                for session in sessions:
                    path, compile_bytecode, conf = job_entry(c)
                    res = run_job(ref, {**spec, "conf": conf, "session": session}, workdir, JOB, connector=path,
                                  compile_bytecode=compile_bytecode)["results"]
                    out.append({"connector": c, "session": session, "round": r, "load": os.getloadavg(),
                                "results": res})
                    _print_small(out[-1])
    return out


def _print_small(entry: dict) -> None:
    """One job of :func:`measure_small` as a few lines (medians of its repetitions)."""
    med = statistics.median
    print(f"== {entry['connector']} {entry.get('session', 'get_spark')} round {entry['round']} "
          f"load {tuple(round(x, 2) for x in entry['load'])}", flush=True)
    res = entry["results"]
    for v, r in res.items():
        phases = {k: med(p.get(k, 0) for p in r["small_phases"]) for k in r["small_phases"][0]}
        first = {k: med(p.get(k, 0) for p in r["first_phases"]) for k in r["first_phases"][0]}
        print(f"  {v:10s} trigger {med(r['small_trigger_ms']):6.0f} ms {sorted(r['small_trigger_ms'])}  "
              f"first {med(r['first_batch_s']):.3f} s {[round(x, 3) for x in sorted(r['first_batch_s'])]}", flush=True)
        print(f"  {'':10s} phases {phases}", flush=True)
        print(f"  {'':10s} first  {first}", flush=True)
        q = r.get("query_1k", [])
        if q:
            print(f"  {'':10s} 1k query {med(m['s'] for m in q):.3f} s {[round(m['s'], 3) for m in q]}  "
                  f"cpu {med(m['cpu'] for m in q):.3f} s {[round(m['cpu'], 3) for m in q]}  "
                  f"first (cold) {r['warmup'].get('query_1k')}", flush=True)
        for st in r.get("small_stages", []):
            print(f"  {'':10s} stages {st}", flush=True)
    if "kafka" in res and "pykafka" in res:
        k, p = res["kafka"], res["pykafka"]
        print(f"  ratio (Spark's / ours, time): trigger {med(k['small_trigger_ms']) / med(p['small_trigger_ms']):.2f}  "
              f"first {med(k['first_batch_s']) / med(p['first_batch_s']):.2f}", flush=True)
        if k.get("query_1k") and p.get("query_1k"):
            print(f"  ratio (Spark's / ours): 1k query time {med(m['s'] for m in k['query_1k']) / med(m['s'] for m in p['query_1k']):.2f}  "
                  f"cpu {med(m['cpu'] for m in k['query_1k']) / med(m['cpu'] for m in p['query_1k']):.2f}", flush=True)


def rows(result: dict, count: int) -> list[dict]:
    """Benchmark rows (:func:`common.metric`): per pykafka variant and figure, against Spark's connector."""
    out = []
    variants = [("numba", "pykafka:consumer", "consumer path"), ("numba", "pykafka:columnar", "columnar numba"),
                ("numpy", "pykafka:columnar", "columnar numpy")]
    label = result["label"]
    for run, variant, name in variants:
        if not result.get(run) or variant not in result[run]:
            continue  # a columnar-only run
        ours, spark = result[run][variant], result[run]["kafka"]
        for kind, what in (("stream", "streaming read AvailableNow"), ("count", "batch count()"),
                           ("sum", "batch sum(length(value))")):
            out.append(metric(f"{what}, {name} vs Spark's connector", "records/s",
                              [rate(count, m["s"]) for m in ours[kind]], [rate(count, m["s"]) for m in spark[kind]],
                              label, note=f"{count:,} x 100 B, 2 partitions, local[2], Apache Kafka"))
            out.append(metric(f"{what}, {name}: CPU per record", "µs", [m["cpu"] / count * 1e6 for m in ours[kind]],
                              [m["cpu"] / count * 1e6 for m in spark[kind]], label, higher_is_better=False,
                              note="driver + JVM + Python workers, /proc utime+stime"))
        if ours["small_trigger_ms"]:
            out.append(metric(f"median trigger of {SMALL_RECORDS // PER_TRIGGER} micro-batches of {PER_TRIGGER}, "
                              f"{name}", "ms", ours["small_trigger_ms"], spark["small_trigger_ms"], label,
                              higher_is_better=False))
            out.append(metric(f"time to the first micro-batch, {name}", "s", ours["first_batch_s"],
                              spark["first_batch_s"], label, higher_is_better=False))
        if ours.get("query_1k"):
            out.append(metric(f"whole AvailableNow query of 1,000 records, {name}", "s",
                              [m["s"] for m in ours["query_1k"]], [m["s"] for m in spark["query_1k"]], label,
                              higher_is_better=False))
            out.append(metric(f"whole AvailableNow query of 1,000 records, {name}: CPU", "s",
                              [m["cpu"] for m in ours["query_1k"]], [m["cpu"] for m in spark["query_1k"]], label,
                              higher_is_better=False, note="driver + JVM + every Python process, runner included"))
    return out


def run(quick: bool) -> list[dict]:
    """200,000 records quick, 2,000,000 full."""
    count = 200_000 if quick else 2_000_000
    return rows(measure(count), count)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--repetitions", type=int, default=REPETITIONS)
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--small-only", metavar="CONNECTOR_DIRS",
                    help="only the small micro-batches and the first micro-batch, one job per comma-separated "
                         "connector/ directory (checkouts to compare), Spark's connector in each; DIR@KEY=VALUE adds a Spark "
                         "setting to that job")
    ap.add_argument("--rounds", type=int, default=1, help="with --small-only: rounds over the directories")
    ap.add_argument("--small-partitions", type=int, default=None,
                    help="with --small-only: partitions of the small-trigger topic (default 2)")
    ap.add_argument("--sessions", default="get_spark",
                    help="comma-separated get_spark,plain (a SparkSession the user builds); without --small-only "
                         "only the first is used")
    ap.add_argument("--compression", default="none",
                    help="the producer's compression.type of the N-record topic (e.g. lz4)")
    ap.add_argument("--on-installed-pyspark", action="store_true",
                    help="run on this interpreter's pyspark with the newest connector jars Maven Central serves "
                         "(e.g. Spark 4.2.0's jar on pyspark 4.3.0)")
    ap.add_argument("--columnar-only", action="store_true",
                    help="without --small-only: Spark's connector against readPath=columnar (numba) only")
    args = ap.parse_args()
    if args.small_only:
        try:
            for entry in args.small_only.split(","):
                job_entry(entry)  # every entry checked before Apache Kafka starts
        except ValueError as e:
            ap.error(str(e))
        raw = measure_small(args.small_only.split(","), args.repetitions, args.rounds,
                            partitions=args.small_partitions, sessions=tuple(args.sessions.split(",")))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(raw, f)
        raise SystemExit(0)
    raw = measure(args.records, args.repetitions, args.columnar_only, args.sessions.split(",")[0],
                  args.compression, args.on_installed_pyspark)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f)
    print(f"load average {os.getloadavg()}")
    for row in rows(raw, args.records):
        p, a = statistics.median(row["project"]), statistics.median(row["anchor"])
        better = p / a if row["higher_is_better"] else a / p
        print(f"{row['metric']}: {p:,.3f} {row['unit']} vs {a:,.3f}  -> {better:.2f}x")
