"""Where the connector's time goes: the reader's and writer's hot paths, and Python worker start-up.

Not a benchmark (``bench/run.py`` does not run it, nothing is compared with an anchor): a
profile, printed per component, to decide what to optimise. Run it as::

    PYTHONPATH=connector python bench/profile_connector.py [--records N] [--only read,write,startup]

- **read**: the embedded broker in its own process (``common.ServerProcess.embedded_broker``),
  one partition filled with ``N`` records of 100-byte values (no key). Then the executor's
  read path itself, :func:`pyspark_kafka.read.partition_reader._read_range`, with a consumer
  configured as on executors (:func:`executor_conf`), run once to warm up and once under
  ``cProfile``. Components: ``Consumer.consume`` calls (librdkafka fetch + one Python
  ``Message`` object per record), per-record Python work (``_take`` and
  ``_ColumnBuilder.add``: attribute calls per message), Arrow building
  (``_ColumnBuilder.flush``), the rest (``position``, assignment, loop).
- **write**: the same broker; ``N`` rows as Arrow batches of 10,000 rows (a 100-byte string
  ``value``, with and without a 16-byte string ``key``) written by
  :func:`pyspark_kafka.write.write_batches` to a topic of 8 partitions, as one Spark task
  does. Components: routing (``Router.assign``: murmur2 over the keys or round robin),
  Arrow → Python conversion (``as_bytes_list``), handing rows to librdkafka
  (``_produce``: one ``Producer.produce`` call per row, its enqueue work included), serving
  delivery reports between batches (``poll(0)``), waiting for acknowledgements (``finish``:
  ``flush``).
- **startup**: what a new Python worker pays before our code runs: importing what a
  ``pykafka`` read and write import, with pyspark found the way Spark's workers find it
  (``$SPARK_HOME/python/lib/pyspark.zip`` first on ``PYTHONPATH``, as Spark's
  ``PythonUtils.sparkPythonPath`` puts it) and the way the driver finds it (the installed
  package, with its ``__pycache__``); and our package with and without compiled bytecode.
  Each figure is the median of 3 fresh interpreters.

CPU seconds are this process's ``time.process_time()`` (librdkafka's own threads included);
wall seconds by ``time.perf_counter()``. On a shared 2-core machine the broker competes for
the cores: read the shares, not the absolute rates.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import ServerProcess  # noqa: E402

VALUE_BYTES = 100
KEY_BYTES = 16
WRITE_PARTITIONS = 8
BATCH_ROWS = 10_000


# -- cProfile helpers --------------------------------------------------------------

def _find(stats: pstats.Stats, name: str, file_part: str = "") -> tuple[float, float]:
    """(tottime, cumtime) summed over every function called ``name`` (in a file containing ``file_part``).

    Built-in methods are matched on their printed name, e.g. ``"<method 'consume' of"``.
    """
    tot = cum = 0.0
    for (file, _line, func), (_cc, _nc, tt, ct, _callers) in stats.stats.items():
        if (func == name or (name.startswith("<") and func.startswith(name))) and file_part in file:
            tot += tt
            cum += ct
    return tot, cum


def _profiled(fn):
    """Run ``fn()`` under cProfile; (its result, stats, wall s, cpu s)."""
    prof = cProfile.Profile()
    wall, cpu = time.perf_counter(), time.process_time()
    prof.enable()
    try:
        result = fn()
    finally:
        prof.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return result, pstats.Stats(prof), wall, cpu


def _timed(fn):
    """Run ``fn()`` without profiler: (its result, wall s, cpu s)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _print_components(title: str, records: int, wall: float, cpu: float, parts: list[tuple[str, float]],
                      profiled_total: float) -> dict:
    print(f"\n{title}: {records:,} records, {wall:.3f} s wall, {cpu:.3f} s CPU "
          f"({records / wall:,.0f} records/s, {cpu / records * 1e6:.2f} µs CPU/record) without profiler")
    print(f"  under cProfile ({profiled_total:.3f} s profiled; the profiler itself inflates per-call Python work):")
    out = {"records": records, "wall_s": wall, "cpu_s": cpu, "components": {}}
    rest = profiled_total - sum(s for _, s in parts)
    for name, seconds in [*parts, ("rest", rest)]:
        share = seconds / profiled_total if profiled_total else 0.0
        print(f"    {name:<52} {seconds:8.3f} s  {share:6.1%}  {seconds / records * 1e6:7.2f} µs/record")
        out["components"][name] = seconds
    return out


# -- read ---------------------------------------------------------------------------

def _fill(bootstrap: str, topic: str, partitions: int, count: int, keyed: bool = False) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    if not count:
        return
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
    value = b"x" * VALUE_BYTES
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, b"%016d" % i if keyed else None, i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("could not fill the topic")


def profile_read(bootstrap: str, count: int) -> dict:
    from confluent_kafka import Consumer

    from pyspark_kafka import offsets as O
    from pyspark_kafka.read.partition_reader import KafkaInputPartition, _read_range, executor_conf

    topic = f"profile-read-{uuid.uuid4().hex[:8]}"
    _fill(bootstrap, topic, 1, count)
    conf = executor_conf({"kafka.bootstrap.servers": bootstrap}, f"profile-{uuid.uuid4().hex[:8]}")
    part = KafkaInputPartition(O.OffsetRange(topic, 0, 0, count), conf, 120_000, True, False)

    def read_all(consumer) -> int:
        rows = sum(b.num_rows for b in _read_range(consumer, part))
        if rows != count:
            raise RuntimeError(f"read {rows} rows, expected {count}")
        consumer.unassign()
        return rows

    consumer = Consumer(conf)
    try:
        read_all(consumer)  # warm: connection, metadata, page cache
        _, wall, cpu = _timed(lambda: read_all(consumer))
        _, stats, pwall, _ = _profiled(lambda: read_all(consumer))
    finally:
        consumer.close()
    consume = _find(stats, "<method 'consume' of")[0]
    take = _find(stats, "_take", "partition_reader")  # its cumtime includes _ColumnBuilder.add
    flush = _find(stats, "flush", "partition_reader")
    parts = [
        ("Consumer.consume (librdkafka + Message objects)", consume),
        ("per-record Python (_take, _ColumnBuilder.add)", take[1]),
        ("Arrow building (_ColumnBuilder.flush)", flush[1]),
    ]
    return _print_components("read (_read_range, 1 partition, 100 B values)", count, wall, cpu, parts, pwall)


# -- write --------------------------------------------------------------------------

def _write_batches(count: int, keyed: bool):
    import pyarrow as pa

    batches = []
    for start in range(0, count, BATCH_ROWS):
        ids = range(start, min(count, start + BATCH_ROWS))
        cols = {"value": pa.array([f"{i:010d}" + "x" * (VALUE_BYTES - 10) for i in ids])}
        if keyed:
            cols["key"] = pa.array([f"{i:016d}" for i in ids])
        batches.append(pa.RecordBatch.from_pydict(cols))
    return batches


def profile_write(bootstrap: str, count: int, keyed: bool) -> dict:
    from pyspark.sql.types import StringType, StructField, StructType

    from pyspark_kafka.write import WriteSpec, close_idle_producers, write_batches

    topic = f"profile-write-{uuid.uuid4().hex[:8]}"
    _fill(bootstrap, topic, WRITE_PARTITIONS, 0)
    fields = [StructField("value", StringType())] + ([StructField("key", StringType())] if keyed else [])
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "kafka.linger.ms": "5"}
    spec = WriteSpec.from_options(options, StructType(fields))
    batches = _write_batches(count, keyed)

    def write() -> None:
        written = write_batches(spec, batches).records
        if written != count:
            raise RuntimeError(f"wrote {written} records, expected {count}")

    try:
        write()  # warm: producer, metadata (the producer is pooled, as in a reused worker)
        _, wall, cpu = _timed(write)
        _, stats, pwall, _ = _profiled(write)
    finally:
        close_idle_producers()
    route = _find(stats, "_route", "pyspark_kafka/write/")[1]
    to_py = _find(stats, "as_bytes_list", "pyspark_kafka/write/")[1]
    enqueue = _find(stats, "_produce", "pyspark_kafka/write/")[1]
    poll = _find(stats, "<method 'poll' of")[0]
    finish = _find(stats, "finish", "pyspark_kafka/write/")[1]
    parts = [
        ("routing (Router.assign)", route),
        ("Arrow -> Python bytes (as_bytes_list)", to_py),
        ("enqueue: Producer.produce per row (_produce)", enqueue),
        ("delivery reports between batches (poll(0))", poll),
        ("waiting for acks (finish: flush)", finish),
    ]
    title = f"write (write_batches, {WRITE_PARTITIONS} partitions, 100 B values, " + (
        f"{KEY_BYTES} B string keys)" if keyed else "no key)")
    return _print_components(title, count, wall, cpu, parts, pwall)


# -- worker start-up ------------------------------------------------------------------

WORKER_IMPORTS = ("import pyspark.worker, pyspark.sql.datasource, pyspark.sql.worker.plan_data_source_read; "
                  "import pyspark_kafka.source, pyspark_kafka.read, pyspark_kafka.write, "
                  "pyspark_kafka.read.partition_reader")


def _spark_python_path() -> list[str]:
    import pyspark

    lib = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")
    return [os.path.join(lib, f) for f in sorted(os.listdir(lib)) if f.endswith(".zip")] if os.path.isdir(lib) else []


def _import_seconds(code: str, pythonpath: list[str], env_extra: dict | None = None) -> float:
    """Median wall seconds of 3 fresh interpreters running ``code`` (interpreter start included)."""
    env = {**os.environ, **(env_extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def profile_startup() -> dict:
    import pyspark_kafka

    ours = os.path.dirname(os.path.dirname(pyspark_kafka.__file__))
    zips = _spark_python_path()
    print("\nworker start-up (median of 3 fresh interpreters, interpreter start included):")
    print(f"  PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE')!r}; pyspark zips on Spark's "
          f"worker path: {', '.join(os.path.basename(z) for z in zips) or 'none'}; "
          f"{ours}/pyspark_kafka/__pycache__ exists: {os.path.isdir(os.path.join(ours, 'pyspark_kafka', '__pycache__'))}")
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        compiled = {"PYTHONPYCACHEPREFIX": cache, "PYTHONDONTWRITEBYTECODE": ""}
        subprocess.run([sys.executable, "-c", WORKER_IMPORTS], check=True,
                       env={**os.environ, **compiled, "PYTHONPATH": ours})  # write our bytecode once
        rows = [
            ("bare interpreter", "pass", [ours], None),
            ("worker imports, pyspark from pyspark.zip (Spark's worker path), ours not compiled",
             WORKER_IMPORTS, [*zips, ours], {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": ""}),
            ("worker imports, pyspark from pyspark.zip, ours compiled", WORKER_IMPORTS, [*zips, ours], compiled),
            ("worker imports, installed pyspark (__pycache__), ours compiled", WORKER_IMPORTS, [ours], compiled),
        ]
        for name, code, path, env in rows:
            seconds = _import_seconds(code, path, env)
            out[name] = seconds
            print(f"    {name:<78} {seconds:6.3f} s")
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--only", default="read,write,startup")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    results: dict = {}
    if only & {"read", "write"}:
        with tempfile.TemporaryDirectory() as data_dir, ServerProcess.embedded_broker(data_dir) as broker:
            if "read" in only:
                results["read"] = profile_read(broker.bootstrap, args.records)
            if "write" in only:
                results["write"] = profile_write(broker.bootstrap, args.records, keyed=False)
                results["write_keyed"] = profile_write(broker.bootstrap, args.records, keyed=True)
    if "startup" in only:
        results["startup"] = profile_startup()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
