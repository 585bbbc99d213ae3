"""Embedded broker benchmarks: produce and fetch throughput, offset lookup, memory.

How it is measured (and why it is fair):

- **Produce / fetch throughput**: each server runs in its own process (the embedded broker
  via ``python -m pyspark_kafka broker``; the anchor, librdkafka's built-in mock cluster, in
  a Python process that only hosts it), and the confluent-kafka client runs in this process,
  so client and broker never share a GIL. Both servers get the same client, settings
  (``linger.ms=5``, no compression), record sizes and record counts, one partition, and the
  repetitions alternate between the two so background load hits both alike. On a 2-core
  machine client and server compete for the cores in both cases. The mock cluster keeps
  records in memory and checks nothing (no CRC, no files), so it is an upper bound for a
  broker on this machine, not a peer. Every produce run is checked: the partition's end
  offset must advance by exactly the number of records sent.
- **Apache Kafka** (4.3.1 by default, ``KAFKA_VERSION`` to change it, from the cached Maven Central jars, one KRaft node, started by
  :class:`pyspark_kafka.testing.apache_kafka.ApacheKafka` with the JVM options and request
  threads of Kafka's own start script, :data:`APACHE_KAFKA_JVM`) is the second anchor of the
  same produce and fetch runs: same client, settings, sizes, and its turn in every repetition
  after ours and the mock cluster's. Every server first takes one 3 MB produce (connections,
  metadata, the JVM's JIT) outside the timing. Without java or the jars (and no mvn to get
  them) its rows are left out and :data:`SKIPPED` says why.
- **Sequential write bandwidth** (the physical limit): the same number of bytes written to a
  plain file in 1 MiB chunks, then ``fsync``, in each repetition; it is the anchor of the
  rows ``produce ... vs file write`` (our produce MB/s over it). (The broker does not fsync
  per request, like Kafka with its default ``flush.messages``; the figure bounds what a
  durable write costs.)
- **Offset lookup latency**: the storage layer (:mod:`pyspark_kafka.broker.log`) filled
  directly with big batches, then ``read(offset)`` of random offsets; the figure should stay
  flat as the log grows (10^5 vs 10^6 records; 10^7 in the full run).
- **Offsets restart**: the group coordinator's store (real LogManager and ``OffsetStore``, no
  server) after 50,000 / 200,000 (and 400,000 in the full run) offset commits over 1,000 groups
  and the 50 partitions of ``__consumer_offsets``, closed without a final snapshot (as after
  ``kill -9``): seconds from opening the logs to the offsets loaded, what a broker (or a new
  coordinator in the cluster) does before it answers OffsetFetch (``bench/offsets_restart.py``).
  Anchor: the same after 50,000 commits; the figure should stay flat (ratio near 1) as commits grow.
- **Broker RSS**: resident memory of the broker process empty (anchor) and after storing
  many records (300,000 quick, 10^7 full) and after a restart on that data; it should not grow
  with the log (indexes are sparse: one 16-byte entry per 4 KiB of log).
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from common import REPETITIONS, ServerProcess, metric, rate, rss_bytes

MB = 1_000_000
ANCHOR = "librdkafka mock cluster"
CLIENT = {"linger.ms": 5, "compression.type": "none", "log_level": 0}
DEADLINE_S = 300  # bound on any single produce or fetch run
FETCH_BYTES = 3 * MB  # partition size read by fetch runs (under the mock cluster's ~5 MB retention)


def _produce(bootstrap: str, topic: str, count: int, size: int, acks: str, **extra) -> float:
    """Send ``count`` records of ``size`` bytes to partition 0; seconds until all are acknowledged.

    ``extra``: more librdkafka settings (e.g. ``{"enable.idempotence": True}``). Raises RuntimeError
    when the end offset did not advance by exactly ``count``.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, **CLIENT, **extra})
    producer.produce(topic, b"warm-up", partition=0)  # metadata and connection outside the timing
    producer.flush(30)
    before = _end_offset(bootstrap, topic)
    value = random.randbytes(size)
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(DEADLINE_S)
    seconds = time.perf_counter() - started
    stored = _end_offset(bootstrap, topic) - before
    if left or stored != count:
        raise RuntimeError(f"produce to {bootstrap}: {stored} of {count} records stored, {left} unacknowledged")
    return seconds


def _end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "log_level": 0})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        consumer.close()


def _fetch(bootstrap: str, topic: str, passes: int) -> tuple[float, int]:
    """Read all of partition 0 ``passes`` times with a fresh consumer; ``(seconds, records read)``.

    ``fetch.wait.max.ms`` is short so that the long poll left open at the end of a pass does
    not delay the seek back to the start.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 10, "log_level": 0})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        got = 0
        started = time.perf_counter()
        end = time.monotonic() + DEADLINE_S
        for _ in range(passes):
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            target = got + high - low
            while got < target and time.monotonic() < end:
                batch = consumer.consume(min(10_000, target - got), 1.0)
                got += sum(1 for m in batch if not m.error())
        seconds = time.perf_counter() - started
    finally:
        consumer.close()
    if got < passes * (high - low):
        raise RuntimeError(f"fetch from {bootstrap}: {got} of {passes * (high - low)} records within {DEADLINE_S} s")
    return seconds, got


def _disk_write(directory: str, nbytes: int) -> float:
    """Seconds to write ``nbytes`` sequentially in 1 MiB chunks and fsync (a plain file)."""
    chunk = random.randbytes(1 << 20)
    path = os.path.join(directory, f"seq-{uuid.uuid4().hex}")
    try:
        started = time.perf_counter()
        with open(path, "wb", buffering=0) as f:
            left = nbytes
            while left > 0:
                left -= f.write(chunk[: min(left, len(chunk))])
            os.fsync(f.fileno())
        return time.perf_counter() - started
    finally:
        os.unlink(path)


APACHE_KAFKA_JVM = ("-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                    "-Djava.awt.headless=true")
"""The JVM options Kafka's own ``kafka-server-start.sh`` / ``kafka-run-class.sh`` use by default
(``KAFKA_HEAP_OPTS``, ``KAFKA_JVM_PERFORMANCE_OPTS``), not the tests' fast-start ones."""
APACHE_KAFKA_CONFIG = {"num.network.threads": "3", "num.io.threads": "8"}
"""Kafka's defaults for its request threads (the test cluster uses 2 and 2)."""
SKIPPED: dict[str, str] = {}
"""Parts left out of the last :func:`run` and why (``bench/run.py`` records them)."""


def apache_kafka(stack: contextlib.ExitStack) -> tuple[str, object] | None:
    """Start Apache Kafka (single KRaft node from the cached jars, :mod:`pyspark_kafka.testing.apache_kafka`)
    on ``stack``; ``(label, cluster)``, or None with the reason in :data:`SKIPPED` when java, mvn or
    the jars are missing or it does not start."""
    from pyspark_kafka.testing.apache_kafka import ApacheKafka, KafkaStartError
    from pyspark_kafka.testing.maven import MavenUnavailable

    kafka = ApacheKafka(nodes=1, config=APACHE_KAFKA_CONFIG, java_options=APACHE_KAFKA_JVM)
    try:
        stack.enter_context(kafka)
    except (MavenUnavailable, KafkaStartError) as e:
        SKIPPED["apache-kafka anchor"] = f"Apache Kafka cannot run here: {str(e).splitlines()[0]}"
        return None
    return f"Apache Kafka {kafka.version} (KRaft, 1 node)", kafka


CPU_UNIT = "CPU µs per record"
CPU_NOTE = "; CPU of the server's processes (a JVM's every thread) and of the librdkafka client, the same for every server"


class _Server:
    """A server measured by :func:`throughput`: its ``bootstrap`` address, its label and its process ids (whose
    CPU time is counted)."""

    def __init__(self, bootstrap: str, label: str, pids: list[int]):
        self.bootstrap, self.label, self.pids = bootstrap, label, pids


def _cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by processes ``pids`` (Linux ``/proc/<pid>/stat``, reaped children
    included) and by this process (the librdkafka client, all threads)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = sum(os.times()[:2])
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += sum(int(v) for v in fields[11:15]) / tick  # utime, stime, cutime, cstime
    return total


def _with_cpu(server: _Server, run):
    """``(run(), CPU seconds of the server's processes and this client during it)``."""
    before = _cpu_s(server.pids)
    result = run()
    return result, _cpu_s(server.pids) - before


def throughput(quick: bool, workdir: str, total_bytes: int | None = None, fetch_bytes: int = FETCH_BYTES) -> list[dict]:
    """Produce (100 B and 1 KiB, acks=1 and all) and fetch throughput vs the mock cluster and,
    when it can run here, Apache Kafka; the servers take turns in every repetition.

    ``total_bytes``: value bytes per produce run and per fetch run (default 16 MB quick, 128 MB
    full); ``fetch_bytes``: size of the partition the fetch runs read over and over (bytes).
    Raises RuntimeError when a run stored or read a wrong number of records."""
    total = total_bytes or (16 if quick else 128) * MB
    rows = []
    with contextlib.ExitStack() as stack:
        ours = stack.enter_context(ServerProcess.embedded_broker(os.path.join(workdir, "broker")))
        mock = stack.enter_context(ServerProcess.mock_cluster())
        servers = [("ours", _Server(ours.bootstrap, "ours", [ours.pid])),
                   ("mock", _Server(mock.bootstrap, ANCHOR, [mock.pid]))]
        apache = apache_kafka(stack)
        if apache is not None:
            servers.append(("apache", _Server(apache[1].bootstrap_servers, apache[0],
                                              [p for p in apache[1].pids.values() if p])))
        anchors = [(who, server.label) for who, server in servers if who != "ours"]
        for who, server in servers:  # connections, metadata, and the JVM's JIT, before any timing
            _produce(server.bootstrap, "warm-up", fetch_bytes // 1024, 1024, "1")
        for size in (100, 1024):
            count = total // size
            label = f"{size} B" if size < 1024 else "1 KiB"
            produced = {(who, acks): [] for who, _ in servers for acks in ("1", "all")}
            produce_cpu = {(who, acks): [] for who, _ in servers for acks in ("1", "all")}
            fetched = {who: [] for who, _ in servers}
            fetch_cpu = {who: [] for who, _ in servers}
            disk = []
            # The mock cluster keeps only the last ~5 MB of a partition: fetch runs read a
            # 3 MB partition several times over, on every server.
            for who, server in servers:
                _produce(server.bootstrap, f"fetch-{size}", fetch_bytes // size, size, "1")
            passes = max(1, total // fetch_bytes)
            for rep in range(REPETITIONS):
                for acks in ("1", "all"):
                    for who, server in servers:
                        topic = f"produce-{size}-{acks}-{rep}"
                        seconds, cpu = _with_cpu(server, lambda: _produce(server.bootstrap, topic, count, size, acks))
                        produced[(who, acks)].append(seconds)
                        produce_cpu[(who, acks)].append(cpu * 1e6 / count)
                for who, server in servers:
                    (seconds, records), cpu = _with_cpu(server, lambda: _fetch(server.bootstrap, f"fetch-{size}", passes))
                    fetched[who].append((seconds, records))
                    fetch_cpu[who].append(cpu * 1e6 / records)
                disk.append(_disk_write(workdir, count * size))
            note = f"{count:,} records of {label} per run, one partition"
            fetch_note = f"{passes} passes over {fetch_bytes // size:,} records of {label}, one partition"
            for anchor, anchor_label in anchors:
                for acks in ("1", "all"):
                    ours_s, them_s = produced[("ours", acks)], produced[(anchor, acks)]
                    for unit, scale in (("records/s", count), ("MB/s", count * size / MB)):
                        rows.append(metric(f"produce {label} acks={acks}", unit, [rate(scale, s) for s in ours_s],
                                           [rate(scale, s) for s in them_s], anchor_label, note=note))
                    rows.append(metric(f"produce {label} acks={acks}", CPU_UNIT, produce_cpu[("ours", acks)],
                                       produce_cpu[(anchor, acks)], anchor_label, higher_is_better=False,
                                       note=note + CPU_NOTE))
                for unit, scale in (("records/s", 1), ("MB/s", size / MB)):
                    rows.append(metric(f"fetch {label}", unit, [rate(n * scale, s) for s, n in fetched["ours"]],
                                       [rate(n * scale, s) for s, n in fetched[anchor]], anchor_label,
                                       note=fetch_note))
                rows.append(metric(f"fetch {label}", CPU_UNIT, fetch_cpu["ours"], fetch_cpu[anchor], anchor_label,
                                   higher_is_better=False, note=fetch_note + CPU_NOTE))
            disk_mb_s = [rate(count * size / MB, s) for s in disk]
            for acks in ("1", "all"):
                rows.append(metric(f"produce {label} acks={acks} vs file write", "MB/s",
                                   [rate(count * size / MB, s) for s in produced[("ours", acks)]], disk_mb_s,
                                   f"sequential file write + fsync ({count * size // MB} MB)",
                                   note="physical limit: the same bytes to a plain file, 1 MiB writes, one fsync"))
    return rows


def _fill_with_client(bootstrap: str, topic: str, count: int, size: int) -> None:
    """Store ``count`` records of ``size`` bytes in partition 0 (big batches, acks=1)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 50,
                         "batch.size": 1_000_000, "batch.num.messages": 100_000, "log_level": 0})
    value = bytes(size)
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(DEADLINE_S):
        raise RuntimeError(f"filling {topic}: records not acknowledged within {DEADLINE_S} s")


def memory(quick: bool, workdir: str) -> list[dict]:
    """Broker RSS empty (anchor) vs after storing ``count`` records and after a restart on them."""
    count = 300_000 if quick else 10**7
    empty, full, restarted = [], [], []
    for rep in range(REPETITIONS):
        data_dir = os.path.join(workdir, f"rss-{rep}")
        with ServerProcess.embedded_broker(data_dir) as broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
            admin.create_topics([NewTopic("rss", 1, 1)])["rss"].result(timeout=30)
            empty.append(rss_bytes(broker.pid) / MB)
            _fill_with_client(broker.bootstrap, "rss", count, 16)
            _fetch(broker.bootstrap, "rss", 1)  # read the whole log once
            full.append(rss_bytes(broker.pid) / MB)
        with ServerProcess.embedded_broker(data_dir) as broker:
            if _end_offset(broker.bootstrap, "rss") != count:
                raise RuntimeError(f"restarted broker does not have the {count} records stored before")
            restarted.append(rss_bytes(broker.pid) / MB)
    note = f"{count:,} records of 16 B in one partition; anchor = the same broker empty"
    return [
        metric(f"broker RSS with {count:,} records", "MB", full, empty, "same broker, empty",
               higher_is_better=False, note=note),
        metric(f"broker RSS after restart on {count:,} records", "MB", restarted, empty, "same broker, empty",
               higher_is_better=False, note=note),
    ]


def _lookup_latencies_us(directory: str, counts: list[int], lookups: int) -> dict[int, list[float]]:
    """Fill one partition log in steps up to each of ``counts`` records; at each step the median
    latency (µs) of ``lookups`` reads of random offsets, measured :data:`REPETITIONS` times.
    """
    from pyspark_kafka.broker.topic_config import LogConfig
    from pyspark_kafka.broker.log.partition_log import PartitionLog

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from support.batches import make_batch  # the tests' batch builder (exact timestamps)

    batch_records = 10_000
    batch = make_batch([b"v" * 10] * batch_records)
    log = PartitionLog("lookup", 0, os.path.join(directory, "lookup-0"), LogConfig())
    rng = random.Random(42)
    out: dict[int, list[float]] = {}
    try:
        for count in sorted(counts):
            while log.log_end_offset < count:
                log.append(batch)
            out[count] = []
            for _ in range(REPETITIONS):
                offsets = [rng.randrange(count) for _ in range(lookups)]
                times = []
                for offset in offsets:
                    started = time.perf_counter()
                    log.read(offset, 1)
                    times.append(time.perf_counter() - started)
                out[count].append(statistics.median(times) * 1e6)
    finally:
        log.close()
    return out


def offset_lookup(quick: bool, workdir: str) -> list[dict]:
    """Latency of locating a random offset (``PartitionLog.read``) as the log grows."""
    counts = [10**5, 10**6] if quick else [10**5, 10**6, 10**7]
    lat = _lookup_latencies_us(workdir, counts, lookups=2000)
    base = counts[0]
    note = ("storage layer directly: batches of 10,000 records, one 1 GiB-segment partition, median of "
            "2,000 random reads per repetition (sparse index binary search + batch header scan)")
    return [metric(f"offset lookup at {count:,} records", "µs", lat[count], lat[base] if count != base else None,
                   f"same log at {base:,} records" if count != base else None, higher_is_better=False, note=note)
            for count in counts]


def offsets_restart(quick: bool) -> list[dict]:
    """Seconds to reload committed offsets after N commits and a kill -9 (see the module docstring)."""
    from offsets_restart import restart_after_crash

    counts = [50_000, 200_000] if quick else [50_000, 200_000, 400_000]
    base, *larger = counts
    base_s, _ = restart_after_crash(base, repetitions=REPETITIONS)
    rows = []
    for count in larger:
        seconds, replayed = restart_after_crash(count, repetitions=REPETITIONS)
        rows.append(metric(f"offsets restart after {count:,} commits (kill -9)", "s", seconds, base_s,
                           f"same after {base:,} commits", higher_is_better=False,
                           note=f"LogManager.load + OffsetStore.load, 50 partitions, 1,000 groups; {replayed:,} "
                                "records replayed after the periodic snapshots; target: under 2 s, flat"))
    return rows


def run(quick: bool) -> list[dict]:
    """All broker benchmarks (see the module docstring); rows as :func:`common.metric` builds them."""
    SKIPPED.clear()
    with tempfile.TemporaryDirectory(prefix="broker-bench-") as workdir:
        return (throughput(quick, workdir) + offset_lookup(quick, workdir) + offsets_restart(quick)
                + memory(quick, workdir))
