"""The driver of ``bench/read_paths_bench.py``: Spark's ``format("kafka")`` and ``format("pykafka")`` with
each ``readPath``, timed in ONE SparkSession, with the CPU of the whole Spark application.

    python bench/read_paths_job.py --spec SPEC.json

``SPEC.json``::

    {"bootstrap": "H:P", "jars": [...], "master": "local[2]", "repetitions": 3,
     "topic": T, "count": N, "warmup_topic": W, "warmup_count": n,
     "small": {"topic": S, "count": 20000, "per_trigger": 1000} | null,
     "variants": ["kafka", "pykafka:consumer", "pykafka:columnar"],
     "conf": {spark setting: value} (optional, added to the SparkSession's),
     "session": "get_spark" (default: ``pyspark_kafka.spark.get_spark``) | "plain" (the user's own
                ``SparkSession.builder``: master, app name, ``spark.jars`` and ``conf`` only)}

Per variant and repetition (variants in rotating order; a warm-up read of ``W`` by each first):

- ``stream``: ``readStream`` (``startingOffsets=earliest``, AvailableNow) into ``noop``; exactly ``N`` rows;
- ``count``: ``spark.read`` of the topic and ``count()``; exactly ``N``;
- ``sum``: ``spark.read`` and ``sum(length(value))`` (touches every value); checked against 100 × ``N``;
- ``query_1k``: one whole AvailableNow query over the 1,000-record topic ``W`` (start to end: the
  source runner's start, planning, one micro-batch, stop); ``warmup.query_1k``: the first such
  query of the format, before any repetition (JVM JIT cold), reported apart;
- ``small`` (when given): AvailableNow with ``maxOffsetsPerTrigger`` over ``S``: the median
  ``triggerExecution`` of its micro-batches and the seconds from ``start()`` to the first progress;
  ``small_phases``: the median of each ``durationMs`` phase over the micro-batches with rows,
  ``first_phases``: the first micro-batch's ``durationMs``; with ``spark.ui.enabled=true`` in ``conf``,
  ``small_stages``: the query's stages and tasks from Spark's REST API (:func:`stage_profile`).

``"count": 0`` leaves the three large reads out (only the small micro-batches are measured).

Each figure is ``{"s": seconds, "cpu": CPU seconds}``; CPU is utime + stime (+ reaped children's)
of this process and every descendant (the Spark JVM, the Python worker daemon and its workers,
including workers that exited, through their parent's cutime/cstime) from ``/proc``, before and
after. The broker is another process tree and is not counted. A streaming query's source runner
exits a moment after the query ends: each figure is read only once the runners started during it
have exited (:func:`settle`; ``"unsettled"`` counts those still alive after 10 s, 0 normally), so
their CPU is in the JVM's cutime/cstime. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from spark_connector_job import _await  # noqa: E402 - bench/ is on PYTHONPATH (the parent sets it)

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_stats() -> dict[int, list[bytes]]:
    """``{pid: the fields of /proc/<pid>/stat after the command name}`` of every process now."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                out[int(name)] = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
    return out


def _descendants(stats: dict[int, list[bytes]], root: int) -> list[int]:
    """``root`` and every descendant of it in ``stats`` (field 1: the parent's pid)."""
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds of process ``root`` (default: this one) and all its descendants, reaped children included."""
    stats = _proc_stats()
    ticks = sum(sum(int(x) for x in stats[pid][11:15])  # utime stime cutime cstime
                for pid in _descendants(stats, os.getpid() if root is None else root) if pid in stats)
    return ticks / CLK_TCK


RUNNER_MARK = b"python_streaming_source_runner"
"""In the command line of the process each streaming query starts on the driver (Spark's source runner)."""


def query_processes(root: int | None = None) -> list[int]:
    """Pids of the live descendants of ``root`` (default: this process) whose command line names
    :data:`RUNNER_MARK`: streaming queries' source runners that have not exited yet (zombies are left
    out: an exited process's CPU reaches its parent's cutime once reaped)."""
    stats = _proc_stats()
    out = []
    for pid in _descendants(stats, os.getpid() if root is None else root):
        if pid not in stats or stats[pid][0] == b"Z":
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if RUNNER_MARK in f.read():
                    out.append(pid)
        except OSError:
            continue
    return out


def settle(before: set[int], timeout_s: float = 10.0) -> int:
    """Wait (bounded by ``timeout_s``) until every source runner started since ``before`` (a set of
    pids from :func:`query_processes`) has exited, so that its CPU time is in its parent's
    cutime/cstime when the figure is read: a stopped query's runner exits a moment after
    ``awaitTermination`` returns, and read too early, the figure misses its last CPU (about 0.1 s
    of 0.3-1 s measured here). Returns how many were still alive at the deadline (0 normally)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in query_processes() if p not in before]
        if not alive or time.monotonic() > deadline:
            return len(alive)
        time.sleep(0.05)


def _measure(fn):
    """``(fn(), {"s": wall seconds of fn, "cpu": CPU seconds of the process tree, "unsettled": runners
    still alive when read})``; the CPU is read once the source runners that ``fn`` started have exited."""
    before = set(query_processes())
    cpu, wall = tree_cpu_seconds(), time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - wall
    unsettled = settle(before)
    return result, {"s": seconds, "cpu": tree_cpu_seconds() - cpu, "unsettled": unsettled}


def _reader(spark, variant: str, bootstrap: str, topic: str, stream: bool):
    fmt, _, path = variant.partition(":")
    r = (spark.readStream if stream else spark.read).format(fmt).option("kafka.bootstrap.servers", bootstrap)
    r = r.option("subscribe", topic).option("startingOffsets", "earliest")
    return r.option("readPath", path) if path else r


def stream_read(spark, variant, bootstrap, topic, expected, per_trigger=None):
    """One AvailableNow query into noop: ``(rows, progress list, seconds to the first progress)``."""
    with tempfile.TemporaryDirectory() as checkpoint:
        df = _reader(spark, variant, bootstrap, topic, True)
        if per_trigger:
            df = df.option("maxOffsetsPerTrigger", per_trigger)
        started = time.perf_counter()
        query = (df.load().writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        first = None
        while first is None and query.isActive:
            if query.lastProgress is not None:
                first = time.perf_counter() - started
            else:
                time.sleep(0.005)
        _await(query)
        progress = query.recentProgress
        first = first if first is not None else time.perf_counter() - started
    rows = sum(p.numInputRows for p in progress)
    if rows != expected:
        raise RuntimeError(f"{variant} streamed {rows} rows of {topic}, expected {expected}")
    return rows, progress, first


def _rest(spark, path: str):
    """GET ``/api/v1/applications/<app id>/<path>`` of Spark's UI (JSON)."""
    import urllib.request

    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}/{path}"
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def _ms(stamp: str) -> float:
    """Spark's REST time stamp (``2026-11-26T20:10:00.123GMT``) as epoch ms."""
    from datetime import datetime, timezone

    return datetime.strptime(stamp.replace("GMT", ""), "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=timezone.utc).timestamp() * 1000


def stage_profile(spark, after_stage: int) -> dict:
    """Medians over the completed stages with id > ``after_stage`` (the tasks of one query's micro-batches),
    in ms: ``stage`` (submission to completion), ``to_first_task`` (submission to the first task's launch),
    ``task`` (a task's duration), ``deserialize``, ``run`` (executorRunTime), ``run_cpu`` (executorCpuTime),
    ``scheduler_delay``; ``stages`` how many. Needs ``spark.ui.enabled=true`` (the job's ``conf``)."""
    med = statistics.median
    stages = [s for s in _rest(spark, "stages?status=complete") if s["stageId"] > after_stage]
    if not stages:
        return {"stages": 0}
    per_stage, tasks = [], []
    for s in stages:
        detail = _rest(spark, f"stages/{s['stageId']}/{s['attemptId']}/taskList?length=100")
        per_stage.append((_ms(s["completionTime"]) - _ms(s["submissionTime"]),
                          _ms(s["firstTaskLaunchedTime"]) - _ms(s["submissionTime"])))
        tasks += detail
    return {"stages": len(stages), "stage": med(a for a, _ in per_stage), "to_first_task": med(b for _, b in per_stage),
            "task": med(t["duration"] for t in tasks),
            "deserialize": med(t["taskMetrics"]["executorDeserializeTime"] for t in tasks),
            "run": med(t["taskMetrics"]["executorRunTime"] for t in tasks),
            "run_cpu": med(t["taskMetrics"]["executorCpuTime"] / 1e6 for t in tasks),
            "scheduler_delay": med(t.get("schedulerDelay", 0) for t in tasks)}


def _last_stage(spark) -> int:
    """The highest stage id Spark's UI knows (-1 without stages or without the UI)."""
    if spark.sparkContext.uiWebUrl is None:
        return -1
    return max((s["stageId"] for s in _rest(spark, "stages")), default=-1)


def _big_reads(spark, v, b, topic, n, out):
    """The streaming read, ``count()`` and ``sum(length(value))`` of ``topic`` (``n`` records) by variant ``v``."""
    _, m = _measure(lambda: stream_read(spark, v, b, topic, n))
    out["stream"].append(m)
    rows, m = _measure(lambda: _reader(spark, v, b, topic, False).load().count())
    if rows != n:
        raise RuntimeError(f"{v} counted {rows}, expected {n}")
    out["count"].append(m)
    total, m = _measure(lambda: _reader(spark, v, b, topic, False).load()
                        .selectExpr("sum(length(value)) AS s").collect()[0]["s"])
    if total != 100 * n:
        raise RuntimeError(f"{v} summed {total} value bytes, expected {100 * n}")
    out["sum"].append(m)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", required=True)
    spec = json.loads(open(ap.parse_args(argv).spec).read())
    if spec.get("conf", {}).get("spark.ui.enabled") == "true":
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # Spark's UI binds there, not on every address
    conf = {"spark.jars": ",".join(spec["jars"]), "spark.ui.showConsoleProgress": "false", **spec.get("conf", {})}
    if spec.get("session", "get_spark") == "plain":
        # what most users write: their own builder, only the interpreter named (a virtualenv needs it)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.master(spec["master"]).appName("read-paths-bench")
        for k, v in conf.items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
    else:
        from pyspark_kafka.spark import get_spark

        spark = get_spark("read-paths-bench", master=spec["master"], conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    b, topic, n, variants = spec["bootstrap"], spec["topic"], spec["count"], spec["variants"]
    out = {v: {"stream": [], "count": [], "sum": [], "small_trigger_ms": [], "first_batch_s": [],
               "small_phases": [], "first_phases": [], "query_1k": [], "warmup": {}} for v in variants}
    try:
        for v in variants:  # the first query of each format (JVM JIT cold): reported apart, not in the medians
            _, out[v]["warmup"]["query_1k"] = _measure(
                lambda: stream_read(spark, v, b, spec["warmup_topic"], spec["warmup_count"]))
            _reader(spark, v, b, spec["warmup_topic"], False).load().count()
        for rep in range(spec["repetitions"]):
            for v in variants[rep % len(variants):] + variants[:rep % len(variants)]:
                print(f"[read_paths] repetition {rep + 1}: {v}", file=sys.stderr, flush=True)
                if n:
                    _big_reads(spark, v, b, topic, n, out[v])
                _, m = _measure(lambda: stream_read(spark, v, b, spec["warmup_topic"], spec["warmup_count"]))
                out[v]["query_1k"].append(m)
                small = spec.get("small")
                if small:
                    ui = spark.sparkContext.uiWebUrl is not None
                    before = _last_stage(spark) if ui else -1
                    _, progress, first = stream_read(spark, v, b, small["topic"], small["count"], small["per_trigger"])
                    if ui:
                        out[v].setdefault("small_stages", []).append(stage_profile(spark, before))
                    with_rows = [p for p in progress if p.numInputRows]
                    out[v]["small_trigger_ms"].append(statistics.median(
                        p.durationMs["triggerExecution"] for p in with_rows))
                    out[v]["small_phases"].append({k: statistics.median(p.durationMs.get(k, 0) for p in with_rows)
                                                   for k in with_rows[0].durationMs})
                    out[v]["first_phases"].append(dict(progress[0].durationMs))
                    out[v]["first_batch_s"].append(first)
        import pyspark_kafka

        print(json.dumps({"spark": spark.version, "pykafka_module": pyspark_kafka.__file__,
                          "session": spec.get("session", "get_spark"), "results": out}),
              flush=True)
    except Exception as exc:  # noqa: BLE001 - the parent shows this line
        print(f"read_paths_job: {type(exc).__name__}: {exc}"[:4000], file=sys.stderr, flush=True)
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
