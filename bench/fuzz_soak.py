"""Memory and liveness of the broker under a long network fuzz run (issue: no frame may take it down).

Usage: ``python bench/fuzz_soak.py [--frames 20000] [--seed 1] [--rounds 4]``

Starts ``pyspark-kafka broker`` as a child process, writes guard data with confluent-kafka,
then sends ``--frames`` mutated client frames (``tests/support/fuzz_mutate.py``: bit flips,
truncation, lying sizes and counts, null arrays, bad api keys, CRC-valid lying batches,
compression bombs) in ``--rounds`` rounds, and reports after each round the broker's resident
memory (VmRSS), how many connections it closed, and whether the guard data still reads back.
Prints one table and exits non-zero if the broker died, stopped answering or lost data.
Not a timed test: memory figures are reported, not asserted (the CI test bounds the growth).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS)]  # the tests' helpers: ``support``

from support.fuzz_corpus import seeds  # noqa: E402
from support.fuzz_network import BrokerProcess, FuzzFailure, fuzz  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    from support.topics import create_topic
    from support.client_records import RECORDS, as_tuples, consume, expected, produce

    frames = seeds()
    per_round = max(1, args.frames // args.rounds)
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp) / "data") as broker:
        topic = create_topic(broker.bootstrap, "soak-guard", partitions=1)
        produce(broker.bootstrap, topic, RECORDS[:100])
        baseline = broker.rss_kib()
        print(f"broker pid {broker.pid} on {broker.bootstrap}; RSS after start and guard data: {baseline / 1024:.1f} MiB")
        print(f"{'round':>5} {'frames':>8} {'seconds':>8} {'closed':>7} {'RSS MiB':>8} {'max RSS':>8} guard")
        sent = 0
        started = time.monotonic()
        for r in range(args.rounds):
            try:
                stats = fuzz(broker, frames, args.seed * 1000 + r, per_round, time_limit_s=1800)
            except FuzzFailure as e:
                print(f"FAILED in round {r}: {e}")
                return 1
            sent += stats.total
            intact = as_tuples(consume(broker.bootstrap, topic, 100)) == expected(RECORDS[:100])
            print(f"{r:>5} {sent:>8} {stats.seconds:>8.1f} {stats.closed_by_broker:>7} "
                  f"{broker.rss_kib() / 1024:>8.1f} {stats.rss_max_kib / 1024:>8.1f} {'intact' if intact else 'LOST'}")
            if not intact:
                return 1
        print(f"{sent} frames in {time.monotonic() - started:.0f} s; RSS {baseline / 1024:.1f} -> "
              f"{broker.rss_kib() / 1024:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
