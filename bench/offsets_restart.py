"""Restart time of the group coordinator's store after many commits, with and without snapshots.

Usage: ``python bench/offsets_restart.py [--commits 340590] [--groups 10]``

Commits ``--commits`` offsets (one record each, as a consumer committing after every poll) to
``__consumer_offsets`` through the real store and LogManager, then times ``OffsetStore.load``
three ways: from the clean-shutdown snapshot, from the last periodic snapshot (as after kill -9),
and with no snapshot (a full replay, what every restart did before snapshots). Prints seconds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.coordinator import offsets as O
from pyspark_kafka.broker.log.manager import LogManager


def _open(data_dir: Path) -> O.OffsetStore:
    logs = LogManager(data_dir, BrokerConfig())
    logs.load()
    return O.OffsetStore(logs, BrokerConfig())


def _timed_load(data_dir: Path) -> tuple[float, int]:
    store = _open(data_dir)
    started = time.perf_counter()
    store.load()
    seconds = time.perf_counter() - started
    store.logs.close()
    return seconds, store.replayed_records


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=340_590)
    ap.add_argument("--groups", type=int, default=10)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        store = _open(data)
        store.load()
        started = time.perf_counter()
        for i in range(args.commits):
            store.commit(f"g-{i % args.groups}", {("t", i % 4): O.OffsetAndMetadata(i, -1, "", 1_700_000_000_000)},
                         1_700_000_000_000)
        print(f"{args.commits} commits in {time.perf_counter() - started:.1f} s")
        store.logs.close()  # no final snapshot: as after kill -9
        crash = _timed_load(data)
        store = _open(data)
        store.load()
        store.write_snapshots()
        store.logs.close()
        clean = _timed_load(data)
        for path in (data / f"{O.OFFSETS_TOPIC}-0").glob(f"*{O.SNAPSHOT_SUFFIX}"):
            path.unlink()
        full = _timed_load(data)
    print(f"{'load':<34} {'seconds':>8} {'records replayed':>17}")
    for name, (seconds, replayed) in (("clean shutdown (final snapshot)", clean),
                                      ("after kill -9 (periodic snapshot)", crash),
                                      ("no snapshot (full replay)", full)):
        print(f"{name:<34} {seconds:>8.2f} {replayed:>17}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
