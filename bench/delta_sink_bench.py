"""``pykafka-delta`` against delta-spark's own Delta writer: seconds to append the same rows.

    python bench/delta_sink_bench.py [--records 500000] [--repetitions 5] [--json out.json]

How it is measured:

- The embedded broker (in this process, a background thread) holds a topic of ``--records``
  records (2 partitions, key ``k<i>``, 100-byte value) produced with confluent-kafka before the timing.
- Two driver processes (:mod:`delta_sink_job`), each ``local[2]``, each on the Spark its writer
  runs on: ``pykafka-delta`` on the installed pyspark (it needs pyspark >= 4.2), reading the topic
  with ``format("pykafka")``; delta-spark (``io.delta:delta-spark_2.13:4.1.0``) on pyspark 4.1.4
  (:func:`pyspark_kafka.testing.table_readers.table_reader_spark`: Maven Central serves delta-spark for
  Spark 4.1, not 4.3), reading it with Spark's own ``format("kafka")`` 4.1.1. Each caches and counts
  the same rows, writes them once untimed, then waits; this process then asks them in turn, A B A B
  ..., to append the rows to a fresh table, and each times its write call alone
  (``pykafka-delta``: exactly once, the offsets as ``txn`` actions in the same commit; delta-spark:
  no offsets). Every table is read back and must hold every row. The idle process holds its JVM but
  uses no CPU while the other writes.
- Reported: per writer the median, min and max seconds and records/s, the ratio of the medians
  (pykafka-delta / delta-spark: above 1 is slower), the 1-minute load average after each write.

Raises :class:`common.Skipped` (printed, exit 0) without java, mvn or PyPI.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "delta_sink_job.py")
STEP_TIMEOUT_S = 900
sys.path.insert(0, HERE)

from common import Skipped, machine_info  # noqa: E402


def _produce(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
    pad = "x" * 100
    for i in range(records):
        value = (f"{i}:" + pad)[:100]
        while True:
            try:
                producer.produce(topic, key=f"k{i}".encode(), value=value.encode(), partition=i % 2)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise RuntimeError(f"{records} records not all delivered to {topic}")


class _Writer:
    """One :mod:`delta_sink_job` process (own session, killed by its process group on close)."""

    def __init__(self, python: str, spec: dict, work: str, env: dict):
        self.name = spec["writer"]
        path = os.path.join(work, f"spec-{self.name}.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        self.log = open(os.path.join(work, f"{self.name}.log"), "w+")
        self.proc = subprocess.Popen([python, JOB, "--spec", path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env, start_new_session=True)
        self.info = self._answer()

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()  # the job answers every request or exits
        if not line.startswith("{"):
            self.log.seek(0)
            raise RuntimeError(f"delta_sink_job ({self.name}) failed (exit {self.proc.poll()}):\n"
                               f"{self.log.read()[-3000:]}")
        return json.loads(line)

    def write(self, name: str) -> float:
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        return self._answer()["seconds"]

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def measure(records: int, repetitions: int) -> dict:
    """Run both writers; their figures plus the summary. Raises Skipped or RuntimeError."""
    from pyspark_kafka.testing import clusters
    from pyspark_kafka.testing.maven import MavenUnavailable, spark_kafka_libs
    from pyspark_kafka.testing.reference import ReferenceUnavailable
    from pyspark_kafka.testing.table_readers import table_reader_spark

    try:
        readers = table_reader_spark()
        kafka_version, kafka_jars = spark_kafka_libs("4.1.4")
    except (MavenUnavailable, ReferenceUnavailable) as e:
        raise Skipped(f"delta-spark is not available here: {e}") from e
    import pyspark_kafka

    connector = os.path.dirname(os.path.dirname(os.path.abspath(pyspark_kafka.__file__)))
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON")}
    seconds = {"pykafka-delta": [], "delta": []}
    loadavg, writers = [], []
    with tempfile.TemporaryDirectory(prefix="delta-sink-bench-") as work, \
            clusters.embedded(os.path.join(work, "broker")) as cluster:
        topic = cluster.create_topic(2, {"retention.ms": "-1"}, prefix="delta-bench")
        _produce(cluster.bootstrap, topic, records)
        common = {"bootstrap": cluster.bootstrap, "topic": topic, "records": records, "workdir": work}
        try:
            writers.append(_Writer(sys.executable, {**common, "writer": "pykafka-delta", "source": "pykafka",
                                                    "jars": []}, work,
                                   {**base_env, "PYTHONPATH": connector, "PYSPARK_PYTHON": sys.executable}))
            writers.append(_Writer(readers.python, {**common, "writer": "delta", "source": "kafka",
                                                    "jars": [str(j) for j in [*readers.jars, *kafka_jars]]}, work,
                                   {**base_env, "PYTHONPATH": connector, "PYSPARK_PYTHON": readers.python}))
            for i in range(repetitions):
                for w in writers:
                    seconds[w.name].append(w.write(str(i)))
                    loadavg.append(round(os.getloadavg()[0], 2))
            info = {w.name: w.info for w in writers}
        finally:
            for w in writers:
                w.close()
    summary = {}
    for fmt, secs in seconds.items():
        med = statistics.median(secs)
        summary[fmt] = {"median_s": med, "min_s": min(secs), "max_s": max(secs),
                        "records_per_s": records / med, "n": len(secs)}
    summary["ratio_seconds_pykafka_delta_over_delta"] = summary["pykafka-delta"]["median_s"] / summary["delta"]["median_s"]
    return {"records": records, "seconds": seconds, "loadavg": loadavg, "summary": summary, "processes": info,
            "delta_spark": readers.note, "delta_spark_source": f"Spark {kafka_version}'s format('kafka')",
            "machine": machine_info()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=500_000)
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--json", help="write the result here")
    args = p.parse_args(argv)
    load_before = os.getloadavg()
    try:
        result = measure(args.records, args.repetitions)
    except Skipped as e:
        print(f"skipped: {e}")
        return 0
    result["loadavg_before"] = [round(x, 2) for x in load_before]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    s = result["summary"]
    spark = {k: f"Spark {v['spark']}, {v['partitions']} partitions" for k, v in result["processes"].items()}
    print(f"{args.records:,} records; {spark}; load average before {result['loadavg_before']}, "
          f"after each write {result['loadavg']}")
    for fmt in ("pykafka-delta", "delta"):
        r = s[fmt]
        print(f"{fmt:14} median {r['median_s']:.2f} s (range {r['min_s']:.2f}-{r['max_s']:.2f}, n={r['n']}), "
              f"{r['records_per_s']:,.0f} records/s")
    print(f"pykafka-delta / delta-spark seconds: {s['ratio_seconds_pykafka_delta_over_delta']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
