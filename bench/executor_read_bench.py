"""Executor read paths without Spark: ``read_partition`` of whole offset ranges, records/s and CPU µs per record.

    python bench/executor_read_bench.py [--records N] [--broker apache-kafka|embedded]

What one Python worker spends reading, path by path, in the same run against the same topic:

- ``consumer, fetch.queue.backoff.ms=1000, GC on``: the consumer path as it was before issue 26;
- ``consumer, backoff 10, GC on``: with the executor setting only;
- ``consumer`` (backoff 10, no cyclic GC during the read): the consumer path now;
- ``columnar numpy`` / ``columnar numba``: the columnar fetch path with either decoder.

The topic (``N`` records of 100-byte values, no key, 2 partitions, filled by a confluent-kafka
producer with ``linger.ms=20``) lives on Apache Kafka (one KRaft node from the cached Maven jars)
or on the embedded broker in its own process. Each variant reads both partitions' full ranges
one after the other in this process, after a warm-up read of 1,000 records (pool, numba compile);
every batch is checked for its row count. CPU is this process's (all its threads: librdkafka's
included) from ``time.process_time``; the broker's CPU is not counted. Three repetitions,
variants in rotating order; the median is printed. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import ServerProcess  # noqa: E402

VARIANTS = ("consumer, backoff 1000, GC on", "consumer, backoff 10, GC on", "consumer", "columnar numpy",
            "columnar numba")


def read_all(bootstrap: str, topic: str, ends: dict, variant: str) -> tuple[int, float, float]:
    """``(rows, seconds, cpu seconds)`` of reading ``topic``'s partitions ``{p: end}`` with ``variant``."""
    from pyspark_kafka import offsets as O
    from pyspark_kafka.read import partition_reader as PR
    from pyspark_kafka.read import record_decoder

    options = {"kafka.bootstrap.servers": bootstrap}
    conf = PR.executor_conf(options, "executor-read-bench")
    if "backoff 1000" in variant:
        conf["fetch.queue.backoff.ms"] = 1000
    path = "columnar" if variant.startswith("columnar") else "consumer"
    os.environ[record_decoder.DECODER_ENV] = "numpy" if variant.endswith("numpy") else "numba"
    saved = PR.no_cyclic_gc
    if "GC on" in variant:
        PR.no_cyclic_gc = contextlib.nullcontext
    rows = 0
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        for p, end in ends.items():
            part = PR.KafkaInputPartition(O.OffsetRange(topic, p, 0, end), conf, 60_000, True, False, path)
            for batch in PR.read_partition(part):
                rows += batch.num_rows
        return rows, time.perf_counter() - wall, time.process_time() - cpu
    finally:
        PR.no_cyclic_gc = saved


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "executor-read-bench"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        c.close()


def measure(bootstrap: str, count: int, repetitions: int = 3) -> dict:
    """``{variant: [(records/s, cpu µs per record), ...]}`` over ``repetitions``."""
    from read_bench import PARTITIONS, _fill_topic

    topic, warm = _fill_topic(bootstrap, count), _fill_topic(bootstrap, 1000)
    ends, warm_ends = end_offsets(bootstrap, topic, PARTITIONS), end_offsets(bootstrap, warm, PARTITIONS)
    for v in VARIANTS:
        read_all(bootstrap, warm, warm_ends, v)
    out = {v: [] for v in VARIANTS}
    for rep in range(repetitions):
        order = VARIANTS[rep % len(VARIANTS):] + VARIANTS[:rep % len(VARIANTS)]
        for v in order:
            rows, seconds, cpu = read_all(bootstrap, topic, ends, v)
            if rows != count:
                raise RuntimeError(f"{v} read {rows} rows, expected {count}")
            out[v].append((rows / seconds, cpu / rows * 1e6))
            print(f"[executor_read] rep {rep + 1} {v}: {rows / seconds:,.0f} records/s, "
                  f"{cpu / rows * 1e6:.3f} µs CPU/record", file=sys.stderr, flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--broker", choices=("apache-kafka", "embedded"), default="apache-kafka")
    args = ap.parse_args(argv)
    with contextlib.ExitStack() as stack:
        if args.broker == "apache-kafka":
            from broker_bench import apache_kafka

            started = apache_kafka(stack)
            if started is None:
                from broker_bench import SKIPPED
                print(SKIPPED, file=sys.stderr)
                return 1
            label, cluster = started
            bootstrap = cluster.bootstrap_servers
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            label, bootstrap = "embedded broker", stack.enter_context(ServerProcess.embedded_broker(tmp)).bootstrap
        result = measure(bootstrap, args.records)
    print(f"{args.records:,} records x 100 B, 2 partitions, {label}, load average {os.getloadavg()[0]:.2f}")
    for v, figures in result.items():
        rps = statistics.median(f[0] for f in figures)
        cpu = statistics.median(f[1] for f in figures)
        print(f"{v:32s} {rps:>12,.0f} records/s  {cpu:6.3f} µs CPU/record  "
              f"(records/s {min(f[0] for f in figures):,.0f}-{max(f[0] for f in figures):,.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
