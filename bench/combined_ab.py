"""Single node against combined node: produce, fetch and start-up, two source trees, interleaved.

``python bench/combined_ab.py --a DIR --b DIR [--reps 5] [--records 300000]`` where ``DIR`` is the
``connector/`` directory of a source tree (``git archive main connector | tar -x -C /tmp/main`` gives
one of ``main``; the current tree's ``connector/`` is the other). Each broker runs with
``PYTHONPATH=DIR`` in its own process, so the benchmark client never shares its GIL.

How it is measured:

- **Produce / fetch** (the plan's figures): one broker of each tree, both running for the whole
  run; every repetition produces ``--records`` records of 100 bytes to one new partition with
  ``acks=1`` then ``acks=all`` on A, then on B (``linger.ms=5``, no compression, librdkafka, as
  ``bench/broker_bench.py``), then reads a 3 MB partition five times over on A, then on B. A then
  B in every step: background load hits both alike.
- **Start-up**: three figures from ``EmbeddedBroker.start()``: to the first Metadata answer (librdkafka
  ``list_topics``); until every partition has a leader in a Metadata answer (asked again until so: what a
  producer needs); until one record produced to every partition is acknowledged (librdkafka's defaults:
  acks=all, retries). Measured inside a fresh Python process of each tree, on a data directory the same tree
  wrote (empty, or 100 topics of 3 partitions). Each repetition is one process per tree
  (A then B) that starts and stops the broker once untimed, then three times timed; the figure of
  a repetition is the median of its three.

Prints one line per figure: the values of A and of B per repetition, their medians and B / A.
Raises RuntimeError when a produce stored a wrong number of records or a fetch read too few.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

# bench/, the script's directory, is on sys.path
from broker_bench import FETCH_BYTES, _fetch, _produce
from common import ServerProcess

SIZE = 100

# Run in a child process with PYTHONPATH set to one tree: argv = data_dir, topics, partitions, timed starts.
STARTUP_CHILD = r'''
import json, logging, statistics, sys, time
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark_kafka.broker import EmbeddedBroker
logging.disable(logging.CRITICAL)
data_dir, topics, partitions, timed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
marker = __import__("pathlib").Path(data_dir) / ".bench-filled"
if not marker.exists():
    with EmbeddedBroker(data_dir=data_dir) as b:
        if topics:
            admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
            futures = admin.create_topics([NewTopic(f"t{i}", partitions, 1) for i in range(topics)])
            for f in futures.values():
                f.result(60)
    marker.write_text("filled")
figures = {"metadata": [], "leaders": [], "produced": []}
for i in range(timed + 1):
    b = EmbeddedBroker(data_dir=data_dir)
    started = time.perf_counter()
    b.start()
    try:
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "log_level": 0, "linger.ms": 0})
        md = p.list_topics(timeout=30)
        first = time.perf_counter() - started
        assert len([t for t in md.topics if not t.startswith("__")]) == topics, sorted(md.topics)
        while True:  # every partition has a leader in a Metadata answer (what a producer needs)
            mine = [t for n, t in md.topics.items() if not n.startswith("__")]
            if all(q.leader >= 0 for t in mine for q in t.partitions.values()):
                break
            assert time.perf_counter() - started < 30, "partitions without a leader after 30 s"
            md = p.list_topics(timeout=30)
        leaders = time.perf_counter() - started
        failed = []
        for t in mine:
            for q in t.partitions:
                p.produce(t.topic, b"x", partition=q, on_delivery=lambda e, m: e and failed.append(e))
        assert p.flush(30) == 0 and not failed, failed
        produced = time.perf_counter() - started
    finally:
        b.stop()
    if i:
        figures["metadata"].append(first)
        figures["leaders"].append(leaders)
        figures["produced"].append(produced)
print(json.dumps({k: statistics.median(v) for k, v in figures.items()} | {"all_s": figures}))
'''


def _with_path(tree: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = tree
    return env


def _start_broker(tree: str, data_dir: str) -> ServerProcess:
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = tree  # ServerProcess inherits this process's environment
    try:
        return ServerProcess.embedded_broker(data_dir)
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved


def _line(name: str, unit: str, a: list[float], b: list[float]) -> None:
    ma, mb = statistics.median(a), statistics.median(b)
    fmt = (lambda v: f"{v:,.0f}") if unit == "records/s" else (lambda v: f"{v * 1000:.0f}")
    print(f"{name} ({unit if unit == 'records/s' else 'ms'}): A {[fmt(v) for v in a]} median {fmt(ma)}; "
          f"B {[fmt(v) for v in b]} median {fmt(mb)}; B/A {mb / ma:.2f}", flush=True)


def throughput(trees: dict[str, str], workdir: str, reps: int, records: int, size: int = SIZE) -> None:
    """Produce (acks=1, acks=all) and fetch records/s of both trees' brokers, A then B per step; ``size``: bytes
    a record."""
    servers = {k: _start_broker(t, os.path.join(workdir, f"broker-{k}")) for k, t in trees.items()}
    try:
        for s in servers.values():  # connections, metadata, first appends: outside the timing
            _produce(s.bootstrap, "warm-up", FETCH_BYTES // 1024, 1024, "1")
            _produce(s.bootstrap, "fetch", FETCH_BYTES // size, size, "1")
        produced = {(k, acks): [] for k in trees for acks in ("1", "all")}
        fetched = {k: [] for k in trees}
        for rep in range(reps):
            for acks in ("1", "all"):
                for k, s in servers.items():
                    seconds = _produce(s.bootstrap, f"p-{acks}-{rep}-{uuid.uuid4().hex[:6]}", records, size, acks)
                    produced[(k, acks)].append(records / seconds)
            for k, s in servers.items():
                seconds, got = _fetch(s.bootstrap, "fetch", 5)
                fetched[k].append(got / seconds)
        for acks in ("1", "all"):
            _line(f"produce {size} B acks={acks}", "records/s", produced[("A", acks)], produced[("B", acks)])
        _line(f"fetch {size} B", "records/s", fetched["A"], fetched["B"])
    finally:
        for s in servers.values():
            s.stop()


FIGURES = {"metadata": "to the first Metadata answer", "leaders": "until every partition has a leader in Metadata",
           "produced": "until a produce to every partition is acknowledged"}


def startup(trees: dict[str, str], workdir: str, reps: int, topics: int, partitions: int) -> None:
    """Start-up figures (:data:`FIGURES`) on a data directory of ``topics`` x ``partitions``."""
    results = {(k, f): [] for k in trees for f in FIGURES}
    for rep in range(reps):
        for k, tree in trees.items():
            data_dir = os.path.join(workdir, f"start-{k}-{topics}")
            out = subprocess.run([sys.executable, "-c", STARTUP_CHILD, data_dir, str(topics), str(partitions), "3"],
                                 env=_with_path(tree), capture_output=True, text=True, timeout=600, check=False)
            if out.returncode:
                raise RuntimeError(f"start-up child of {k} failed: {out.stderr[-2000:]}")
            got = json.loads(out.stdout.strip().splitlines()[-1])
            for f in FIGURES:
                results[(k, f)].append(got[f])
    for f, what in FIGURES.items():
        _line(f"start-up {what}, {topics} topics x {partitions} partitions", "ms", results[("A", f)],
              results[("B", f)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="connector/ directory of tree A (the base)")
    ap.add_argument("--b", required=True, help="connector/ directory of tree B (the change)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=SIZE, help="bytes a record for produce and fetch (100)")
    ap.add_argument("--skip", choices=["throughput", "startup"], action="append", default=[])
    args = ap.parse_args()
    trees = {"A": str(Path(args.a).resolve()), "B": str(Path(args.b).resolve())}
    print(f"A = {trees['A']}, B = {trees['B']}; load average before: {os.getloadavg()}", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="combined-ab-") as workdir:
        if "startup" not in args.skip:
            startup(trees, workdir, args.reps, 0, 1)
            startup(trees, workdir, args.reps, 100, 3)
        if "throughput" not in args.skip:
            throughput(trees, workdir, args.reps, args.records, args.size)
    print(f"load average after: {os.getloadavg()}; {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
