"""Restart time of the group coordinator's store after many commits, with and without snapshots.

Usage: ``python bench/offsets_restart.py [--commits 200000] [--groups 1000] [--partitions 50]``, or
``python bench/offsets_restart.py --process-kills 10 [--commits 200000] [--keep DIR]`` for a real broker process
killed (SIGKILL) after each tenth of the commits, timed from its last start to the committed offset answered
(:func:`process_kills`).

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
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
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
    """The store over ``data_dir``'s logs as a broker leading every ``__consumer_offsets`` partition has it: the
    topic created as the controller creates it (kept when it exists), the high watermark moved after each append
    (the leader's, with an ISR of one). :meth:`OffsetStore.load` then takes ``range(partitions)``."""
    config = _config(partitions)
    logs = LogManager(data_dir, config)
    logs.load()
    store = O.OffsetStore(LogPartitionWriter(logs), config)
    store.writer.create_topic(O.OFFSETS_TOPIC, partitions, config.get_int("offsets.topic.segment.bytes"))

    def leader_hw(partition: int) -> None:
        plog = logs.get_log(O.OFFSETS_TOPIC, partition)
        plog.update_high_watermark(plog.log_end_offset)

    store.on_append = leader_hw
    return store


def _timed_load(data_dir: Path, partitions: int = PARTITIONS, snapshots: bool = True) -> tuple[float, int]:
    started = time.perf_counter()
    store = _open(data_dir, partitions)
    store.snapshots = snapshots
    store.load(range(partitions))
    seconds = time.perf_counter() - started
    store.writer.logs.close()
    return seconds, store.replayed_records


def fill(data_dir: Path, commits: int, groups: int, partitions: int = PARTITIONS) -> float:
    """Commit ``commits`` offsets (one per record, groups ``g-0..``, 4 partitions of topic ``t``) and close the
    logs without a final snapshot (as after kill -9); returns the seconds the commits took."""
    store = _open(data_dir, partitions)
    store.load(range(partitions))
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


LISTENING = re.compile(r"listening on (\S+):(\d+)")


class _BrokerProcess:
    """``python -m pyspark_kafka broker`` on a free 127.0.0.1 port, output to ``<data dir>.log``; SIGKILLed by pid."""

    def __init__(self, data_dir: Path) -> None:
        self.started = time.perf_counter()
        self.log_path = data_dir.with_suffix(".log")
        self.proc = subprocess.Popen([sys.executable, "-m", "pyspark_kafka", "broker", "--data-dir", str(data_dir),
                                      "--port", "0", "--host", "127.0.0.1"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.bootstrap = ""
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        with open(self.log_path, "a") as out:
            for line in self.proc.stdout:
                out.write(line)
                m = LISTENING.search(line)
                if m and not self.bootstrap:
                    self.bootstrap = f"{m.group(1)}:{m.group(2)}"

    def wait_listening(self, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while not self.bootstrap:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"the broker did not start; see {self.log_path}")
            time.sleep(0.01)
        return self.bootstrap

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


def process_kills(commits: int, kills: int, groups: int = 10, keep: Path | None = None) -> dict:
    """A single-node broker process takes ``commits`` offset commits (librdkafka asynchronous commits, one
    partition offset each, over ``groups`` groups and 4 partitions of topic ``t``) in ``kills`` runs, each ended by
    SIGKILL; then it starts once more. Returns the seconds from that last start to its listener, and to the first
    OffsetFetch answering the last committed offset (what a consumer waits for), and the same two for a fresh data
    directory (the process's own start). ``keep``: where to copy the data directory as the last kill left it."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    def time_to_offset(data: Path, expected: dict) -> tuple[float, float]:
        broker = _BrokerProcess(data)
        try:
            bootstrap = broker.wait_listening()
            listening = time.perf_counter() - broker.started
            group, (tp, offset) = next(iter(expected.items()))
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
            try:
                while True:
                    try:
                        got = consumer.committed([TopicPartition("t", tp, 0)], timeout=10)[0].offset
                    except KafkaException:
                        got = None
                    if got == offset:
                        return listening, time.perf_counter() - broker.started
                    time.sleep(0.01)
            finally:
                consumer.close()
        finally:
            broker.kill()

    with tempfile.TemporaryDirectory(prefix="offsets-kills-") as tmp:
        data = Path(tmp) / "data"
        last: dict[str, tuple[int, int]] = {}
        per_run = commits // kills
        n = 0
        for run in range(kills):
            broker = _BrokerProcess(data)
            try:
                bootstrap = broker.wait_listening()
                if run == 0:
                    admin = AdminClient({"bootstrap.servers": bootstrap})
                    admin.create_topics([NewTopic("t", 4, 1)])["t"].result(30)
                    del admin  # no client outlives the broker it talks to
                consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{g}",
                                       "enable.auto.commit": False}) for g in range(groups)]
                for i in range(per_run):
                    g, partition = n % groups, n % 4
                    consumers[g].commit(offsets=[TopicPartition("t", partition, n)], asynchronous=True)
                    last[f"g-{g}"] = (partition, n)
                    n += 1
                    if i % 1000 == 999:
                        for c in consumers:
                            c.poll(0)
                group = f"g-{(n - 1) % groups}"  # the run's last commit answered before the kill
                partition, offset = last[group]
                probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
                deadline = time.monotonic() + 120
                while probe.committed([TopicPartition("t", partition)], timeout=10)[0].offset != offset:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"commit {offset} of {group} not answered within 120 s")
                    time.sleep(0.05)
                probe.close()
                for c in consumers:
                    c.close()
            finally:
                broker.kill()
        group = f"g-{(n - 1) % groups}"
        if keep is not None:
            shutil.copytree(data, keep)  # the state after the last kill, to time or profile the start again
        after = time_to_offset(data, {group: last[group]})
        fresh_dir = Path(tmp) / "fresh"
        broker = _BrokerProcess(fresh_dir)
        try:
            broker.wait_listening()
            fresh_listening = time.perf_counter() - broker.started
        finally:
            broker.kill()
    return {"commits": n, "kills": kills, "listening_s": after[0], "offset_answered_s": after[1],
            "fresh_listening_s": fresh_listening}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=200_000)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=PARTITIONS)
    ap.add_argument("--process-kills", type=int, default=0, metavar="N",
                    help="instead: a broker process takes --commits over N runs each ended by SIGKILL (10 groups); "
                         "time its last start to the committed offset answered")
    ap.add_argument("--keep", type=Path, default=None, help="with --process-kills: copy the data directory as the "
                    "last kill left it here (must not exist)")
    args = ap.parse_args(argv)
    if args.process_kills:
        result = process_kills(args.commits, args.process_kills, keep=args.keep)
        print(f"{result['commits']} commits over {result['kills']} SIGKILLed runs; last start: listening after "
              f"{result['listening_s']:.2f} s, committed offset answered after {result['offset_answered_s']:.2f} s "
              f"(a fresh data directory: listening after {result['fresh_listening_s']:.2f} s)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        seconds = fill(data, args.commits, args.groups, args.partitions)
        print(f"{args.commits} commits in {seconds:.1f} s")
        crash = _timed_load(data, args.partitions)  # loading snapshots nothing: the crash state stays
        store = _open(data, args.partitions)
        store.load(range(args.partitions))
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
