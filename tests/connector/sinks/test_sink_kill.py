"""Kill tests: Kafka (embedded broker) → pykafka → exactly-once sink, driver killed with SIGKILL.

Each run is a separate driver process (``sink_kill_driver.py``); it is killed (whole
process group: Python driver, JVM, Python workers) once the sink's stored offsets pass
a random threshold, restarted, and finally run to completion. At the end every source
record is in the sink exactly once and the stored offsets equal the topic's log end offsets.

``test_executor_workers_killed_mid_write`` kills only the Python executor workers that are
staging a task's data file; the driver lives on and Spark retries the tasks.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa
from confluent_kafka import Consumer, Producer, TopicPartition

from pyspark_kafka.sinks import stored_offsets
from pyspark_kafka.sinks.files import TMP_DIR, committed_files, read_committed
from pyspark_kafka.sinks.iceberg import read_table
from pyspark_kafka.sinks.sql import staging_table_name
from support.sink_kill_driver import iceberg_catalog

DRIVER = os.path.join(os.path.dirname(__file__), "..", "..", "support", "sink_kill_driver.py")
PARTITIONS = 3
PER_PARTITION = 2000
RUN_TIMEOUT_S = 300


def produce(bootstrap, topic, per_partition, start=0):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(start, start + per_partition):
        for part in range(PARTITIONS):
            p.produce(topic, value=f"{part}:{i}".encode(), partition=part)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def end_offsets(bootstrap, topic):
    """Log end offsets read by an independent client (confluent-kafka watermarks)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "sink-kill-check"})
    try:
        return {(topic, p): c.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


class Sink:
    """The sink under test, inspected with independent readers."""

    def __init__(self, kind, tmp_path):
        self.kind = kind
        self.target = f"sqlite:///{tmp_path}/sink.db" if kind == "sql" else str(tmp_path / "out")
        if kind == "iceberg":
            os.makedirs(self.target, exist_ok=True)

    def offsets(self):
        if self.kind == "sql":
            return stored_offsets(url=self.target, table="events")
        if self.kind == "iceberg":
            return stored_offsets(iceberg="kafka.events", catalog=iceberg_catalog(self.target))
        if self.kind == "delta":
            return stored_offsets(delta=self.target)
        return stored_offsets(path=self.target) if os.path.isdir(self.target) else {}

    def progress(self) -> int:
        return sum(self.offsets().values())

    def has_staged(self) -> bool:
        if self.kind == "parquet":
            d = os.path.join(self.target, TMP_DIR)
            return os.path.isdir(d) and any(os.scandir(d))
        eng = sa.create_engine(self.target)
        try:
            with eng.connect() as conn:
                name = staging_table_name("pykafka_offsets", "events")
                if not sa.inspect(conn).has_table(name):
                    return False
                return conn.exec_driver_sql(f"SELECT COUNT(*) FROM {name}").scalar() > 0
        finally:
            eng.dispose()

    def rows(self):
        """(partition, offset, value) of every stored row (Delta, Iceberg: read by deltalake, pyiceberg)."""
        if self.kind in ("delta", "iceberg"):
            if self.kind == "delta":
                from deltalake import DeltaTable

                if not DeltaTable.is_deltatable(self.target):
                    return []
                t = DeltaTable(self.target).to_pyarrow_table()
            else:
                if not self.offsets():
                    return []
                t = read_table("kafka.events", iceberg_catalog(self.target))
            return list(zip(t["partition"].to_pylist(), t["offset"].to_pylist(), t["value"].to_pylist()))
        if self.kind == "parquet":
            t = read_committed(self.target) if os.path.isdir(self.target) else None
            if t is None or t.num_rows == 0:
                return []
            return list(zip(t["partition"].to_pylist(), t["offset"].to_pylist(), t["value"].to_pylist()))
        eng = sa.create_engine(self.target)
        try:
            with eng.connect() as conn:
                if not sa.inspect(conn).has_table("events"):
                    return []
                return [tuple(r) for r in conn.exec_driver_sql('SELECT "partition", "offset", value FROM events')]
        finally:
            eng.dispose()


class DriverRun:
    """One driver process in its own process group, always reaped."""

    def __init__(self, args, log_path):
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, DRIVER, *args], stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(60)
        self._reap_group()

    def _reap_group(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the JVM and Python workers of the run
        except ProcessLookupError:
            pass
        self.log.close()

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout)
        finally:
            self._reap_group()


def run_until(args, log_path, condition, deadline_s):
    """Start a run; SIGKILL it when ``condition()`` holds. Returns False if it finished first."""
    run = DriverRun(args, log_path)
    try:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if run.proc.poll() is not None:
                assert run.proc.returncode == 0, open(log_path, errors="replace").read()[-3000:]
                return False
            if condition():
                return True
            time.sleep(0.2)
        raise AssertionError(f"condition not reached within {deadline_s} s; log: {log_path}")
    finally:
        run.kill()


def run_to_end(args, log_path):
    rc = DriverRun(args, log_path).wait(RUN_TIMEOUT_S)
    assert rc == 0, open(log_path, errors="replace").read()[-3000:]


def assert_exactly_once(sink, bootstrap, topic):
    ends = end_offsets(bootstrap, topic)
    rows = sink.rows()
    keys = [(p, o) for p, o, _ in rows]
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} duplicated records"
    assert set(keys) == {(p, o) for (_, p), end in ends.items() for o in range(end)}
    assert sink.offsets() == ends


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sql", "parquet", "delta", "iceberg"])  # 35-40 s each for the tables, quiet
def test_streaming_query_killed_and_restarted(bootstrap, make_topic, tmp_path, kind):
    """Kill 1: restart on the same checkpoint. Kill 2: checkpoint deleted, resume from the sink's offsets."""
    topic = make_topic(PARTITIONS)
    produce(bootstrap, topic, PER_PARTITION)
    sink = Sink(kind, tmp_path)
    checkpoint = str(tmp_path / "checkpoint")
    args = ["--bootstrap", bootstrap, "--topic", topic, "--sink", kind, "--target", sink.target,
            "--checkpoint", checkpoint, "--max-per-trigger", "1500"]
    total = PARTITIONS * PER_PARTITION
    rng = random.Random(topic)
    for kill in range(2):
        floor = sink.progress()
        threshold = rng.randint(floor + 1, max(floor + 1, total - 1500))
        killed = run_until(args, tmp_path / f"run{kill}.log", lambda: sink.progress() >= threshold, RUN_TIMEOUT_S)
        if not killed:
            break
        if kill == 1:
            shutil.rmtree(checkpoint)  # batch ids restart at 0; offsets come from the sink
    produce(bootstrap, topic, 100, start=PER_PARTITION)  # records arriving while the job was down
    run_to_end(args, tmp_path / "final.log")
    assert_exactly_once(sink, bootstrap, topic)
    assert len(sink.rows()) == total + PARTITIONS * 100
    if kind in ("parquet", "delta"):  # a batch backfill over the same sink finds nothing left to add
        run_to_end(args + ["--batch"], tmp_path / "backfill.log")
        assert_exactly_once(sink, bootstrap, topic)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sql"])  # Parquet: backfill rerun at the end of the streaming test
def test_batch_backfill_killed_then_rerun_adds_nothing(bootstrap, make_topic, tmp_path, kind):
    topic = make_topic(PARTITIONS)
    produce(bootstrap, topic, PER_PARTITION)
    sink = Sink(kind, tmp_path)
    args = ["--bootstrap", bootstrap, "--topic", topic, "--sink", kind, "--target", sink.target, "--batch"]
    # killed while tasks are staging (or before, if the job is quicker than the poll)
    run_until(args, tmp_path / "killed.log", sink.has_staged, RUN_TIMEOUT_S)
    assert sink.rows() == [] or len(sink.rows()) == PARTITIONS * PER_PARTITION
    run_to_end(args, tmp_path / "first.log")
    assert_exactly_once(sink, bootstrap, topic)
    run_to_end(args, tmp_path / "second.log")
    assert_exactly_once(sink, bootstrap, topic)
    assert not sink.has_staged()


# ----------------------------------------------------------------------------- executor worker kills

# A task attempt's staged data file, named by its attempt id b<batch>-p<partition>-a<attempt>-<tag>
# (Delta: part-00000-<id>.snappy.parquet, Iceberg: pykafka-<id>.parquet, Parquet: _pykafka_tmp/<id>/part-0.parquet);
# the driver's rewrites of replayed files (part-r..., <id>-r.parquet, part-0-filtered.parquet) do not match.
_STAGED_FILE = re.compile(r"(?:/part-\d{5}-|/pykafka-|/_pykafka_tmp/)(?P<task>b(?:\d+|job)-p\d+)-a(?P<attempt>\d+)-"
                          r"(?P<tag>[0-9a-f]{12})(?:(?:\.\w+)?\.parquet|/part-0\.parquet)$")


def _children() -> dict[int, list[int]]:
    """{parent pid: [child pids]} of every process on the machine (from /proc/<pid>/stat)."""
    out: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        out.setdefault(ppid, []).append(int(entry.name))
    return out


def _descendants(pid: int) -> list[int]:
    tree, out, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def staging_writers(driver_pid: int) -> dict[int, str]:
    """{pid: staged file} of the driver's descendant processes that hold a task attempt's data file
    open for writing: the Python executor workers (forked by the worker daemon) while they stage rows."""
    found = {}
    for pid in _descendants(driver_pid):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if not _STAGED_FILE.search(target):
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    flags = int(next(line for line in f if line.startswith("flags:")).split()[1], 8)
            except (OSError, StopIteration, ValueError):
                continue
            if flags & 3:  # O_WRONLY or O_RDWR
                found[pid] = target
    return found


def table_files(sink) -> list[str]:
    """Local paths of the data files the table references now (Delta: the log's add actions; Iceberg: the
    current snapshot's manifests; Parquet: the sink's manifests), read by deltalake / pyiceberg."""
    if sink.kind == "parquet":
        return [os.path.realpath(p) for p in committed_files(sink.target)]
    if sink.kind == "delta":
        from deltalake import DeltaTable

        uris = DeltaTable(sink.target).file_uris()
    else:
        from pyspark_kafka.sinks.iceberg import load_catalog

        table = load_catalog(iceberg_catalog(sink.target)).load_table("kafka.events")
        uris = [task.file.file_path for task in table.scan().plan_files()]
    return [os.path.realpath(u.removeprefix("file://")) for u in uris]


def parquet_files_on_disk(sink) -> set[str]:
    """Every Parquet file under the table's directory (Delta: the table path; Iceberg: the warehouse)."""
    root = os.path.join(sink.target, "warehouse") if sink.kind == "iceberg" else sink.target
    return {os.path.realpath(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs if f.endswith(".parquet")}


WORKER_KILLS = 3  # < the 4 attempts of local[2,4]: even three kills of one task leave it a last try
WORKER_KILL_PER_PARTITION = 20000


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["delta", "iceberg", "parquet"])
def test_executor_workers_killed_mid_write(bootstrap, make_topic, tmp_path, kind):
    """SIGKILL the Python executor workers while they stage a task's data file, a few times, bounded.

    The query (``local[2,4]``: each task tried up to 4 times) finishes by itself through task retries;
    every record is in the table exactly once, the stored offsets are the topic's end offsets, and no
    data file of a killed attempt is referenced by the table (its partial file stays on disk,
    unreferenced, until VACUUM / remove_orphan_files).
    """
    import pyarrow.parquet as pq

    topic = make_topic(PARTITIONS)
    produce(bootstrap, topic, WORKER_KILL_PER_PARTITION)
    sink = Sink(kind, tmp_path)
    args = ["--bootstrap", bootstrap, "--topic", topic, "--sink", kind, "--target", sink.target,
            "--checkpoint", str(tmp_path / "checkpoint"), "--max-per-trigger", "15000", "--master", "local[2,4]"]
    log_path = tmp_path / "run.log"
    killed: dict[int, str] = {}  # pid -> the staged file it was writing
    run = DriverRun(args, log_path)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while run.proc.poll() is None and len(killed) < WORKER_KILLS and time.monotonic() < deadline:
            for pid, path in staging_writers(run.proc.pid).items():
                task = _STAGED_FILE.search(path)["task"]  # one kill per task (batch, partition)
                if pid not in killed and all(_STAGED_FILE.search(k)["task"] != task for k in killed.values()):
                    os.kill(pid, signal.SIGKILL)
                    killed[pid] = os.path.realpath(path)
                    break
            time.sleep(0.005)
        rc = run.wait(max(1.0, deadline - time.monotonic()))
    finally:
        run.kill()
    with open(log_path, errors="replace") as f:
        log = f.read()
    assert rc == 0, log[-4000:]
    assert killed, "no executor worker was caught writing a staged file: the batches are too small to kill"
    print(f"killed {len(killed)} workers writing {sorted(os.path.relpath(p, sink.target) for p in killed.values())}")

    referenced = table_files(sink)  # file list only: a referenced partial file would fail every read below
    killed_tags = {_STAGED_FILE.search(p)["tag"] for p in killed.values()}  # Parquet renames, keeping the tag
    assert not [p for p in referenced if any(t in p for t in killed_tags)], \
        "the table references a killed attempt's data file"
    assert len(referenced) == len(set(referenced))
    if kind != "parquet":  # Delta and Iceberg keep the attempt id in the name: a retry's file took the place
        retried = {m["task"] for m in map(_STAGED_FILE.search, referenced) if m and m["attempt"] != "0"}
        assert retried == {_STAGED_FILE.search(p)["task"] for p in killed.values()}
    assert_exactly_once(sink, bootstrap, topic)
    total = PARTITIONS * WORKER_KILL_PER_PARTITION
    assert len(sink.rows()) == total
    assert sum(pq.read_metadata(p).num_rows for p in referenced) == total  # each referenced file readable
    leftovers = parquet_files_on_disk(sink) - set(referenced)
    print(f"{len(referenced)} data files referenced; {len(leftovers)} unreferenced on disk, of which "
          f"{len(leftovers & set(killed.values()))} are the killed attempts' partial files")
