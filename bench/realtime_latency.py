"""End-to-end latency, produce to sink, of Spark's Real-time Mode against micro-batches (issue 35, item 3).

What is measured: a record's time from ``produce()`` on topic A to its arrival on topic B, through
one streaming query that copies ``value`` from A to B. A producer thread sends 100-byte-ish values
at a steady rate (default 100 records/s; each value carries its send time, ``time.time()``), a
consumer thread reads B and takes ``time.time()`` at arrival; both threads live in the job process,
so one clock serves both ends. The first ``--warmup`` seconds (default 20) are not counted; the next
``--measure`` seconds (default 60) are; the job then waits (bounded, 30 s) until every measured
record has arrived and reports any missing. Per run: p50, p90, p99 and max in ms, the records
measured, the 1-minute load average (``/proc/loadavg``) at the start and at the end of the measured
window, and the CPU seconds of the job's process tree (JVM, Python workers, the two client threads)
in that window.

Variants (one fresh pair of 1-partition topics each run; sink topic B on the same broker):

- ``kafka-rtm``: ``format("kafka")`` source, Spark's Kafka sink, ``trigger(realTime=...)``
  (``--rtm-batch``, default ``5 seconds``), output mode ``update`` (Real-time Mode refuses append);
- ``kafka-mb``: ``format("kafka")`` source, Spark's Kafka sink, default trigger (micro-batches
  back to back, processingTime 0);
- ``pykafka-mb``: ``format("pykafka")`` source and ``format("pykafka")`` sink, default trigger;
- ``pykafka-mb-pt0``: the same with ``trigger(processingTime="0 seconds")`` (Spark's documented
  equivalent of the default; an A/A control of the noise);
- ``pykafka-kafkasink`` (not in the default list): ``format("pykafka")`` source, Spark's Kafka sink.

Both sinks send with ``linger.ms=0``. Spark's connector exists on Maven Central for 4.2.0, not for
the installed 4.3.0, so every variant runs on pyspark 4.2.0 with ``spark-sql-kafka-0-10`` 4.2.0
(:func:`pyspark_kafka.testing.reference.reference_spark`), one ``local[2]`` session per broker,
variants in turn, the order reversed every repetition (ABCD DCBA ABCD...).

Brokers: the embedded broker (``python -m pyspark_kafka broker``, its own process) and Apache Kafka
4.4.0 (one KRaft node from the Maven jars, :class:`pyspark_kafka.testing.apache_kafka.ApacheKafka`).

Run (about 95 s per run; 4 variants x 3 repetitions x 2 brokers is about 40 min)::

    python bench/realtime_latency.py --repetitions 3 --json bench/results-realtime-latency.json
    python bench/realtime_latency.py --brokers embedded --repetitions 1 --warmup 5 --measure 10  # smoke run
    python bench/realtime_latency.py --brokers embedded --repetitions 0 --evidence --json /tmp/rtm-evidence.json

``--evidence`` first tries Real-time Mode with ``format("pykafka")`` as the source and as the sink (and,
for comparison, ``foreachBatch`` and the memory sink), on the installed pyspark and on the reference
one, and records the error Spark gives for each (``evidence`` in the JSON): a Python data source cannot
take part, see docs/comparison.md.

The job part (``--job SPEC``) is what the reference interpreter runs; it is not meant to be called by hand.
Needs java, Maven (or the cached jars) and PyPI once (the 4.2.0 environment); prints why otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("kafka-rtm", "kafka-mb", "pykafka-mb", "pykafka-mb-pt0")
ALL_VARIANTS = VARIANTS + ("pykafka-kafkasink",)
DRAIN_TIMEOUT_S = 30.0
"""Bound (seconds) for the measured records still in flight to arrive after the producer stops."""


def _loadavg() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def _percentile(sorted_ms: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of an ascending list."""
    k = max(0, min(len(sorted_ms) - 1, int(round(q / 100 * len(sorted_ms) + 0.5)) - 1))
    return sorted_ms[k]


# --------------------------------------------------------------------------------------------- job


def _run_variant(spark, variant: str, bootstrap: str, spec: dict, workdir: str) -> dict:
    """One run: fresh topics, the query, producer and consumer threads; the latency summary."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from read_paths_job import tree_cpu_seconds

    tag = uuid.uuid4().hex[:8]
    src, dst = f"rtm-a-{tag}", f"rtm-b-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in (src, dst)]).values():
        f.result(30)

    source_fmt = "pykafka" if variant.startswith("pykafka") else "kafka"
    sink_fmt = "pykafka" if variant in ("pykafka-mb", "pykafka-mb-pt0") else "kafka"
    df = (spark.readStream.format(source_fmt).option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest").load()
          .selectExpr("value"))
    w = (df.writeStream.format(sink_fmt).option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
         .option("kafka.linger.ms", "0").option("checkpointLocation", os.path.join(workdir, f"ck-{tag}")))
    if variant == "kafka-rtm":
        w = w.outputMode("update").trigger(realTime=spec["rtm_batch"])
    elif variant == "pykafka-mb-pt0":
        w = w.trigger(processingTime="0 seconds")

    rate, warmup, measure = spec["rate"], spec["warmup"], spec["measure"]
    total = int(rate * (warmup + measure))
    first_measured = int(rate * warmup)
    sent: dict[int, float] = {}
    arrived: dict[int, float] = {}
    stop = threading.Event()
    marks: dict[str, float] = {}

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rtm-{tag}", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 0})
    consumer.assign([TopicPartition(dst, 0, 0)])

    def consume():
        while not stop.is_set():
            m = consumer.poll(0.05)
            if m is None or m.error():
                continue
            now = time.time()
            seq = int(m.value().split(b":", 1)[0])
            arrived.setdefault(seq, now)
        consumer.close()

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    pad = b"x" * 64

    def produce():
        t0 = time.time() + 0.5
        for i in range(total):
            due = t0 + i / rate
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            if i == first_measured:
                marks["measure_start_load"] = _loadavg()
                marks["cpu_start"] = tree_cpu_seconds()
                marks["t_start"] = time.time()
            now = time.time()
            producer.produce(src, b"%d:%.6f:" % (i, now) + pad)
            sent[i] = now
            producer.poll(0)
        producer.flush(30)
        marks["measure_end_load"] = _loadavg()
        marks["cpu_end"] = tree_cpu_seconds()
        marks["t_end"] = time.time()

    query = w.start()
    consumer_thread = threading.Thread(target=consume, daemon=True)
    consumer_thread.start()
    try:
        produce()
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while time.monotonic() < deadline and any(i not in arrived for i in range(first_measured, total)):
            if query.exception() is not None:
                break
            time.sleep(0.2)
        error = query.exception()
    finally:
        stop.set()
        consumer_thread.join(10)
        query.stop()
    if error is not None:
        raise RuntimeError(f"{variant}: the query failed: {error}")
    lat = sorted((arrived[i] - sent[i]) * 1000 for i in range(first_measured, total) if i in arrived)
    missing = sum(1 for i in range(first_measured, total) if i not in arrived)
    if not lat:
        raise RuntimeError(f"{variant}: no measured record arrived on {dst} within {DRAIN_TIMEOUT_S} s")
    return {
        "variant": variant, "records": len(lat), "missing": missing,
        "p50_ms": round(_percentile(lat, 50), 2), "p90_ms": round(_percentile(lat, 90), 2),
        "p99_ms": round(_percentile(lat, 99), 2), "max_ms": round(lat[-1], 2),
        "mean_ms": round(statistics.fmean(lat), 2),
        "load_1min_start": marks.get("measure_start_load"), "load_1min_end": marks.get("measure_end_load"),
        "cpu_s_per_s": round((marks["cpu_end"] - marks["cpu_start"]) / (marks["t_end"] - marks["t_start"]), 3),
    }


EVIDENCE_CASES = {
    "pykafka source -> console sink": ("pykafka", "console"),
    "pykafka source -> Spark's Kafka sink": ("pykafka", "kafka"),
    "Spark's Kafka source -> pykafka sink": ("kafka", "pykafka"),
    "Spark's Kafka source -> foreachBatch": ("kafka", "foreachBatch"),
    "Spark's Kafka source -> memory sink": ("kafka", "memory"),
}
"""What ``--evidence`` tries in Real-time Mode: (source format, sink); cases needing ``format("kafka")``
are left out when the session has no Spark Kafka jars."""


def evidence(spark, bootstrap: str, workdir: str, have_kafka_jars: bool) -> dict:
    """Try each :data:`EVIDENCE_CASES` query with ``trigger(realTime="5 seconds")``; per case the error
    Spark raised (at ``start()`` or as the query's exception within 15 s), or that it ran."""
    from confluent_kafka.admin import AdminClient, NewTopic

    tag = uuid.uuid4().hex[:8]
    src, dst = f"rtm-ev-a-{tag}", f"rtm-ev-b-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in (src, dst)]).values():
        f.result(30)
    out = {}
    for name, (source_fmt, sink) in EVIDENCE_CASES.items():
        if "kafka" in (source_fmt, sink) and not have_kafka_jars:
            continue
        df = (spark.readStream.format(source_fmt).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", src).option("startingOffsets", "earliest").load().selectExpr("value"))
        w = df.writeStream.outputMode("update").option("checkpointLocation", os.path.join(workdir, f"ev-{tag}-{len(out)}"))
        if sink == "foreachBatch":
            w = w.foreachBatch(lambda batch, batch_id: None)
        elif sink == "memory":
            w = w.format("memory").queryName(f"ev_{tag}")
        else:
            w = w.format(sink).option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
        try:
            q = w.trigger(realTime="5 seconds").start()
            q.awaitTermination(15)
            error = q.exception()
            q.stop()
            out[name] = str(error).split("\n")[0] if error is not None else "ran (no error within 15 s)"
        except Exception as e:  # noqa: BLE001 - the error text is the evidence
            out[name] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return out


def job(spec_path: str) -> int:
    """The driver process (reference interpreter): one SparkSession, every run of ``spec``; one JSON line."""
    import pyspark

    import pyspark_kafka
    from pyspark_kafka.spark import get_spark

    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    conf = {"spark.sql.shuffle.partitions": "2"}
    if spec["jars"]:
        conf["spark.jars"] = ",".join(spec["jars"])
    spark = get_spark("realtime-latency", master="local[2]", conf=conf)
    runs = []
    found = None
    with tempfile.TemporaryDirectory(prefix="rtm-latency-") as workdir:
        if spec.get("evidence"):
            found = evidence(spark, spec["bootstrap"], workdir, bool(spec["jars"]))
        for rep in range(spec["repetitions"]):
            order = list(spec["variants"]) if rep % 2 == 0 else list(reversed(spec["variants"]))
            for variant in order:
                r = _run_variant(spark, variant, spec["bootstrap"], spec, workdir)
                r["repetition"] = rep
                print(f"realtime_latency: {spec['broker']} rep {rep} {json.dumps(r)}", file=sys.stderr, flush=True)
                runs.append(r)
    spark.stop()
    print(json.dumps({"spark": pyspark.__version__, "pykafka_module": pyspark_kafka.__file__, "runs": runs,
                      "evidence": found}))
    return 0


# ------------------------------------------------------------------------------------------ parent


def summarize(runs: list[dict]) -> dict:
    """Per variant: median and range of p50 and p99 (ms) over the repetitions, missing records, loads."""
    out = {}
    for variant in dict.fromkeys(r["variant"] for r in runs):
        rs = [r for r in runs if r["variant"] == variant]
        out[variant] = {
            "repetitions": len(rs),
            **{f"{k}_median": round(statistics.median(r[k] for r in rs), 2) for k in ("p50_ms", "p99_ms")},
            **{f"{k}_range": [min(r[k] for r in rs), max(r[k] for r in rs)] for k in ("p50_ms", "p99_ms")},
            "missing": sum(r["missing"] for r in rs),
            "load_1min_end": [r["load_1min_end"] for r in rs],
            "cpu_s_per_s_median": round(statistics.median(r["cpu_s_per_s"] for r in rs), 3),
        }
    return out


def run_broker(python: str, jars, broker: str, bootstrap: str, args, variants: list[str],
               with_evidence: bool = False) -> dict:
    """Run the job with interpreter ``python`` (``jars``: Spark's Kafka connector for ``spark.jars``, may
    be empty) against one broker; its parsed output. Raises RuntimeError with the job's error tail."""
    connector = os.path.join(os.path.dirname(HERE), "connector")
    spec = {"broker": broker, "bootstrap": bootstrap, "jars": [str(j) for j in jars], "variants": variants,
            "repetitions": args.repetitions, "rate": args.rate, "warmup": args.warmup, "measure": args.measure,
            "rtm_batch": args.rtm_batch, "evidence": with_evidence}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    env = {**{k: v for k, v in os.environ.items() if k != "PYSPARK_DRIVER_PYTHON"},
           "PYTHONPATH": os.pathsep.join([connector, HERE]), "PYSPARK_PYTHON": python}
    try:
        proc = subprocess.run([python, os.path.abspath(__file__), "--job", f.name], stdout=subprocess.PIPE,
                              stderr=None if args.verbose else subprocess.PIPE, text=True, env=env, timeout=7200)
    finally:
        os.unlink(f.name)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        err = proc.stderr or ""
        at = err.rfind("RuntimeError")
        raise RuntimeError(f"the job failed (exit {proc.returncode}):\n{err[at - 200 if at > 200 else 0:][-4000:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring. Returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--brokers", default="embedded,apache", help="comma-separated: embedded, apache")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(ALL_VARIANTS)}")
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--rate", type=float, default=100.0, help="records per second")
    ap.add_argument("--warmup", type=float, default=20.0, help="seconds not counted")
    ap.add_argument("--measure", type=float, default=60.0, help="seconds counted")
    ap.add_argument("--rtm-batch", default="5 seconds", help="Real-time Mode batch duration")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--verbose", action="store_true", help="show the job's stderr")
    ap.add_argument("--evidence", action="store_true",
                    help="first try pykafka in Real-time Mode (source and sink) and record Spark's errors")
    args = ap.parse_args(argv)
    if args.job:
        sys.path.insert(0, HERE)
        return job(args.job)

    sys.path.insert(0, HERE)
    from common import ServerProcess, machine_info

    from pyspark_kafka.testing.reference import reference_spark

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(variants) - set(ALL_VARIANTS)
    if unknown:
        ap.error(f"unknown variant(s) {sorted(unknown)}; choose from {', '.join(ALL_VARIANTS)}")
    ref = reference_spark()
    result = {"what": "end-to-end latency produce(topic A) -> streaming query -> arrival on topic B, ms",
              "reference": ref.note, "machine": machine_info(), "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "settings": {k: getattr(args, k) for k in ("repetitions", "rate", "warmup", "measure", "rtm_batch")},
              "variants": variants, "brokers": {}}
    for broker in [b.strip() for b in args.brokers.split(",") if b.strip()]:
        with contextlib.ExitStack() as stack:
            if broker == "embedded":
                data = stack.enter_context(tempfile.TemporaryDirectory(prefix="rtm-broker-"))
                bootstrap = stack.enter_context(ServerProcess.embedded_broker(data)).bootstrap
                label = "embedded broker (pyspark_kafka broker, own process)"
            elif broker == "apache":
                from pyspark_kafka.testing.apache_kafka import ApacheKafka

                kafka = stack.enter_context(ApacheKafka(nodes=1))
                bootstrap, label = kafka.bootstrap_servers, f"Apache Kafka {kafka.version} (KRaft, 1 node)"
            else:
                ap.error(f"unknown broker {broker!r}: use embedded or apache")
            print(f"realtime_latency: {label} at {bootstrap}", file=sys.stderr, flush=True)
            if args.evidence and "evidence" not in result:
                # what Real-time Mode says to a Python data source, on the installed pyspark (no Kafka jars
                # served for it) and on the reference one
                found = {}
                if ref.installed != ref.version:
                    found[f"pyspark {ref.installed}"] = run_broker(sys.executable, [], broker, bootstrap, args, [],
                                                                  True)["evidence"]
                found[f"pyspark {ref.version} + spark-sql-kafka-0-10 {ref.version}"] = run_broker(
                    ref.python, ref.jars, broker, bootstrap, args, [], True)["evidence"]
                result["evidence"] = found
                print(json.dumps(found, indent=1), flush=True)
            if variants and args.repetitions > 0:
                out = run_broker(ref.python, ref.jars, broker, bootstrap, args, variants)
                result["brokers"][broker] = {"label": label, "spark": out["spark"], "runs": out["runs"],
                                             "summary": summarize(out["runs"])}
                print(json.dumps({broker: result["brokers"][broker]["summary"]}, indent=1), flush=True)
    result["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
