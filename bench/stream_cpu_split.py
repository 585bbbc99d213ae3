"""Where a streaming read's CPU goes, process by process: Spark's ``format("kafka")`` against ``format("pykafka")``.

``python bench/stream_cpu_split.py [--session plain|get_spark] [--records 2000000] [--warmup 3] [--repetitions 6]``

Not a benchmark row (``bench/run.py`` does not run it; ``read_paths_bench`` gives the ratios): a split of
each query's CPU seconds by process kind, to see what a Python data source can still change. Apache Kafka 4.4.0
(one KRaft node from the Maven jars, as ``broker_bench``'s anchor) holds one topic of ``--records`` 100-byte
records in 2 partitions; one Spark driver (``local[2]``, Spark's connector jars from
:func:`spark_connector_bench.reference`) runs ``--warmup`` untimed AvailableNow reads into ``noop`` of each
format (both JITs warm), then ``--repetitions`` timed ones, the formats alternating which goes first.

Per query, the CPU seconds (utime + stime from ``/proc``, and cutime + cstime: reaped children) of the job's
process tree, by kind: ``jvm`` (the driver JVM, all threads), ``jvm+reaped`` (its exited children: Hadoop's
``chmod`` helpers), ``workers`` (pyspark's daemon and its Python workers), ``runner`` (source runners and the
runner zygote, with ``+reaped`` their exited children), ``driver_py``. A process that exits between the two
readings (an earlier query's runner) shows negative in its own kind and positive in its parent's ``+reaped``:
the total is right. Prints one line per query and writes the
JSON to ``--json``. For a JVM profile add ``--jfr FILE`` (Java Flight Recorder, ``settings=profile``) and read
it with ``jfr print --events jdk.ExecutionSample``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _kinds(J) -> dict[str, float]:
    """CPU seconds so far of this process's tree by process kind (see the module docstring)."""
    stats, me, out = J._proc_stats(), os.getpid(), {}
    for pid in J._descendants(stats, me):
        if pid not in stats:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            cmd = b""
        if pid == me:
            kind = "driver_py"
        elif b"java" in cmd.split(b"\0")[0]:
            kind = "jvm"
        elif b"runner_zygote" in cmd or b"python_streaming_source_runner" in cmd:
            kind = "runner"
        elif b"daemon" in cmd or b"pyspark.worker" in cmd:
            kind = "workers"
        else:
            kind = "other"
        f = stats[pid]
        out[kind] = out.get(kind, 0.0) + (int(f[11]) + int(f[12])) / J.CLK_TCK
        out[kind + "+reaped"] = out.get(kind + "+reaped", 0.0) + (int(f[13]) + int(f[14])) / J.CLK_TCK
    return out


def job(spec_path: str) -> None:
    """The Spark driver: warm-up reads, then the timed ones; prints the JSON result line."""
    import read_paths_job as J

    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = {"spark.jars": ",".join(spec["jars"]), "spark.ui.showConsoleProgress": "false", **spec.get("conf", {})}
    if spec["session"] == "get_spark":
        from pyspark_kafka.spark import get_spark

        spark = get_spark("stream-cpu-split", master="local[2]", conf=conf)
    else:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.master("local[2]").appName("stream-cpu-split")
        for k, v in conf.items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    variants, b, topic, n = spec["variants"], spec["bootstrap"], spec["topic"], spec["count"]
    res: dict[str, list] = {v: [] for v in variants}
    try:
        for _ in range(spec["warmup"]):
            for v in variants:
                J.stream_read(spark, v, b, topic, n)
        for rep in range(spec["repetitions"]):
            for v in (variants if rep % 2 == 0 else variants[::-1]):
                before = set(J.query_processes())
                c0, t0 = _kinds(J), time.perf_counter()
                J.stream_read(spark, v, b, topic, n)
                wall = time.perf_counter() - t0
                J.settle(before)
                c1 = _kinds(J)
                d = {k: round(c1.get(k, 0) - c0.get(k, 0), 3) for k in set(c0) | set(c1)}
                d = {k: x for k, x in d.items() if abs(x) > 0.004}
                d["total"] = round(sum(d.values()), 3)
                d["wall"] = round(wall, 3)
                res[v].append(d)
                print(f"[split] {v} {rep + 1}: {d}", file=sys.stderr, flush=True)
        import pyspark_kafka

        print(json.dumps({"results": res, "pykafka_module": pyspark_kafka.__file__}), flush=True)
    finally:
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--session", choices=["plain", "get_spark"], default="plain")
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repetitions", type=int, default=6)
    ap.add_argument("--jfr", help="write a Java Flight Recorder file of the driver JVM here")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args()
    if args.spec:
        job(args.spec)
        return
    from broker_bench import apache_kafka
    from read_bench import _fill_topic
    from spark_connector_bench import reference, run_job

    ref = reference()
    load = [os.getloadavg()]
    with tempfile.TemporaryDirectory() as workdir, contextlib.ExitStack() as stack:
        started = apache_kafka(stack)
        if started is None:
            raise SystemExit("Apache Kafka cannot run here (see broker_bench)")
        _, cluster = started
        bootstrap = cluster.bootstrap_servers
        spec = {"bootstrap": bootstrap, "jars": [str(j) for j in ref.jars], "session": args.session,
                "topic": _fill_topic(bootstrap, args.records), "count": args.records,
                "variants": ["kafka", "pykafka:columnar"], "warmup": args.warmup, "repetitions": args.repetitions}
        if args.jfr:
            spec["conf"] = {"spark.driver.extraJavaOptions":
                            f"-XX:StartFlightRecording=filename={os.path.abspath(args.jfr)},settings=profile"}
        out = run_job(ref, spec, workdir, os.path.abspath(__file__))
    load.append(os.getloadavg())
    out["load"] = load
    for v, rows in out["results"].items():
        for r in rows:
            print(v, r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
