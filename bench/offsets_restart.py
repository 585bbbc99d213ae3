"""Restart time of the group coordinator's store after many commits, with and without snapshots.

Usage: ``python bench/offsets_restart.py [--commits 200000] [--groups 1000] [--partitions 50]``

Commits ``--commits`` offsets (one record each, as a consumer committing after every poll, spread over
``--groups`` groups and so over the ``__consumer_offsets`` partitions) through the real store and
LogManager, then times a restart: opening the logs (``LogManager.load``) plus ``OffsetStore.load``,
what a broker does before it answers OffsetFetch. Three ways: from the clean-shutdown snapshot, from
the periodic snapshots (as after kill -9), and with no snapshot (a full replay, what every restart did
before snapshots and what the replicated cluster did before round 3). Prints seconds.
:func:`restart_after_crash` is the ``bench/broker_bench.py`` row.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.coordinator import offsets as O
from pyspark_kafka.broker.coordinator.partition_writer import LogPartitionWriter
from pyspark_kafka.broker.log.manager import LogManager

PARTITIONS = 50
"""``offsets.topic.num.partitions`` of the run: Kafka's default (and the replicated cluster's)."""


def _config(partitions: int) -> BrokerConfig:
    return BrokerConfig({"offsets.topic.num.partitions": str(partitions)})


def _open(data_dir: Path, partitions: int = PARTITIONS) -> O.OffsetStore:
    logs = LogManager(data_dir, _config(partitions))
    logs.load()
    return O.OffsetStore(LogPartitionWriter(logs), _config(partitions))


def _timed_load(data_dir: Path, partitions: int = PARTITIONS, snapshots: bool = True) -> tuple[float, int]:
    started = time.perf_counter()
    store = _open(data_dir, partitions)
    store.snapshots = snapshots
    store.load()
    seconds = time.perf_counter() - started
    store.writer.logs.close()
    return seconds, store.replayed_records


def fill(data_dir: Path, commits: int, groups: int, partitions: int = PARTITIONS) -> float:
    """Commit ``commits`` offsets (one per record, groups ``g-0..``, 4 partitions of topic ``t``) and close the
    logs without a final snapshot (as after kill -9); returns the seconds the commits took."""
    store = _open(data_dir, partitions)
    store.load()
    started = time.perf_counter()
    for i in range(commits):
        store.commit(f"g-{i % groups}", {("t", i % 4): O.OffsetAndMetadata(i, -1, "", 1_700_000_000_000)},
                     1_700_000_000_000)
    seconds = time.perf_counter() - started
    store.writer.logs.close()
    return seconds


def restart_after_crash(commits: int, groups: int = 1000, repetitions: int = 3,
                        partitions: int = PARTITIONS) -> tuple[list[float], int]:
    """Seconds of each of ``repetitions`` restarts (logs opened + offsets loaded) after ``commits`` commits and
    a kill -9, and the records the last one replayed."""
    with tempfile.TemporaryDirectory(prefix="offsets-restart-") as tmp:
        data = Path(tmp) / "data"
        fill(data, commits, groups, partitions)
        runs = [_timed_load(data, partitions) for _ in range(repetitions)]
    return [s for s, _ in runs], runs[-1][1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=200_000)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=PARTITIONS)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        seconds = fill(data, args.commits, args.groups, args.partitions)
        print(f"{args.commits} commits in {seconds:.1f} s")
        crash = _timed_load(data, args.partitions)  # loading snapshots nothing: the crash state stays
        store = _open(data, args.partitions)
        store.load()
        store.write_snapshots()
        store.writer.logs.close()
        clean = _timed_load(data, args.partitions)
        full = _timed_load(data, args.partitions, snapshots=False)
    print(f"{'restart (logs + offsets)':<34} {'seconds':>8} {'records replayed':>17}")
    for name, (seconds, replayed) in (("clean shutdown (final snapshot)", clean),
                                      ("after kill -9 (periodic snapshots)", crash),
                                      ("no snapshot (full replay)", full)):
        print(f"{name:<34} {seconds:>8.2f} {replayed:>17}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
