"""Kafka's own ``kafka-dump-log`` (``DumpLogSegments``) reads the embedded broker's files.

The embedded broker claims Kafka's on-disk layout (``.log`` segments of RecordBatch v2,
sparse ``.index`` / ``.timeindex``, ``__consumer_offsets`` and ``__transaction_state`` in
Kafka's record schemas). Here Apache Kafka's tool, run from the Maven Central jars of the
``apache-kafka`` backend, checks that claim on a data directory the broker wrote and closed:

- every ``.log`` with ``--deep-iteration --print-data-log``: every batch ``isvalid: true``,
  the records (offset, key, value, header keys) are exactly those a consumer reads, codecs
  and transaction markers as written;
- every ``.index`` / ``.timeindex`` with ``--index-sanity-check`` ("passed sanity check")
  and ``--verify-index-only`` (no mismatch against the log);
- ``__consumer_offsets`` with ``--offsets-decoder``: the group's committed offsets;
  ``__transaction_state`` with ``--transaction-log-decoder``: the transaction's states.

Skipped with the reason when Java or Maven (or Maven Central) is not available.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from pyspark_kafka.testing import maven

TOOL_TIMEOUT_S = 120
RECORDS_PER_CODEC = 200
CODECS = ("none", "gzip", "zstd")
GROUP = "dump-log-group"
TXN_ID = "dump-log-txn"
TXN_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
              "PrepareEpochFence")
"""Kafka's ``TransactionState`` names in id order (``transactionStatus`` in ``__transaction_state``)."""


def _tool_class(version: str) -> str:
    # Kafka 4 moved the tool from core (Scala) to the tools module (Java).
    return ("org.apache.kafka.tools.DumpLogSegments" if int(version.split(".")[0]) >= 4
            else "kafka.tools.DumpLogSegments")


@pytest.fixture(scope="module")
def dump_log():
    """``dump_log(*args) -> stdout`` running Apache Kafka's DumpLogSegments (skips without jars)."""
    version = maven.kafka_version()
    try:
        classpath = maven.kafka_classpath(version)
    except maven.MavenUnavailable as e:
        pytest.skip(f"Apache Kafka {version} from Maven Central unavailable: {e}")

    def run(*args: str) -> str:
        cmd = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", classpath, _tool_class(version), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
        assert proc.returncode == 0, f"{' '.join(cmd[-len(args) - 1:])} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        return proc.stdout

    return run


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A closed data directory: topic ``t`` (2 partitions, small segments) with plain and
    compressed batches with headers, one committed and one aborted transaction, and a group's
    committed offsets. Returns ``(data_dir, records)`` where ``records`` maps (partition,
    offset) to (key, value) as confluent-kafka read them before the broker stopped."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from pyspark_kafka.broker import EmbeddedBroker

    data = tmp_path_factory.mktemp("dump-log-data")
    with EmbeddedBroker(data_dir=data) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("t", 2, 1, config={"segment.bytes": "4096", "index.interval.bytes": "512"})],
                            operation_timeout=15)["t"].result(30)
        for codec in CODECS:
            producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
            for i in range(RECORDS_PER_CODEC):
                producer.produce("t", key=b"%s-%d" % (codec.encode(), i), value=b"value-%d" % i,
                                 headers=[("h", b"1")])
            assert producer.flush(30) == 0
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID})
        txn.init_transactions(30)
        for value, commit in ((b"committed", True), (b"aborted", False)):
            txn.begin_transaction()
            txn.produce("t", key=b"txn", value=value, partition=0)
            assert txn.flush(30) == 0  # in the log before the outcome
            txn.commit_transaction(30) if commit else txn.abort_transaction(30)

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                             "isolation.level": "read_uncommitted"})
        ends = {p: consumer.get_watermark_offsets(TopicPartition("t", p), timeout=10)[1] for p in (0, 1)}
        consumer.assign([TopicPartition("t", p, 0) for p in (0, 1)])
        records: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        # the last record to read: partition 0 ends with the abort marker (offset ends - 1), partition 1 with data
        last = {0: ends[0] - 2, 1: ends[1] - 1}
        for _ in range(1000):
            if all(max((o for p_, o in records if p_ == p), default=-1) >= last[p] for p in (0, 1)):
                break
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                records[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
        consumer.commit(offsets=[TopicPartition("t", p, ends[p]) for p in (0, 1)], asynchronous=False)
        consumer.close()
    return data, records, ends


_RECORD = re.compile(r"^\| offset: (\d+) .*?headerKeys: \[([^\]]*)\](?: key: (\S*))? payload: (.*)$")
_KEYED_RECORD = re.compile(r"^\| offset: (\d+) .*?headerKeys: \[[^\]]*\] key: (\S+)(?: payload: (.*))?$")
_MARKER = re.compile(r"^\| offset: (\d+) .*endTxnMarker: (\w+)")
_BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*isTransactional: (\w+) isControl: (\w+)"
                    r" .*compresscodec: (\w+) crc: \d+ isvalid: (\w+)")


def test_kafka_reads_every_segment_and_finds_every_record(written, dump_log):
    data, records, ends = written
    dumped: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    markers, codecs, segments = {}, set(), 0
    for partition in (0, 1):
        logs = sorted((data / f"t-{partition}").glob("*.log"))
        segments += len(logs)
        out = dump_log("--files", ",".join(map(str, logs)), "--deep-iteration", "--print-data-log")
        for line in out.splitlines():
            if m := _BATCH.match(line):
                assert m.group(7) == "true", line
                codecs.add(m.group(6))
            elif m := _MARKER.match(line):
                markers[(partition, int(m.group(1)))] = m.group(2)
            elif m := _RECORD.match(line):
                assert m.group(2) in ("h", ""), line
                dumped[(partition, int(m.group(1)))] = ((m.group(3) or "").encode(), m.group(4).encode())
    assert segments > 2, "the topic was meant to roll segments"
    assert codecs == {"none", "gzip", "zstd"}
    # every record a consumer read, and nothing else, with the same key and value
    assert {k: v for k, v in dumped.items()} == {k: (key or b"", value) for k, (key, value) in records.items()}
    assert sorted(markers.values()) == ["ABORT", "COMMIT"]
    assert all(p == 0 for p, _ in markers)


def test_kafka_finds_the_offset_and_time_indexes_sane(written, dump_log):
    data, _, _ = written
    indexes = sorted(data.glob("t-*/*.index")) + sorted(data.glob("t-*/*.timeindex"))
    assert len(indexes) >= 4
    files = ",".join(map(str, indexes))
    sanity = dump_log("--files", files, "--index-sanity-check")
    for index in indexes:  # an index with no entry yet (a segment under index.interval.bytes) is valid
        assert f"{index} passed sanity check." in sanity or f"{index} is empty." in sanity, sanity
    assert sanity.count("passed sanity check.") >= 2
    verify = dump_log("--files", files, "--verify-index-only")
    # the tool prints only "Dumping <file>" (and "<file> is empty.") when every entry matches the log
    assert [ln for ln in verify.splitlines()
            if ln.strip() and not ln.startswith("Dumping ") and not ln.endswith(" is empty.")] == []
    listing = dump_log("--files", str(indexes[0]))
    assert re.search(r"^offset: \d+ position: \d+$", listing, re.M), listing


def test_kafka_decodes_the_group_and_transaction_logs(written, dump_log):
    data, _, ends = written
    offsets_logs = sorted(data.glob("__consumer_offsets-*/*.log"))
    out = dump_log("--files", ",".join(map(str, offsets_logs)), "--offsets-decoder")
    committed = {int(m.group(1)): int(m.group(2)) for m in re.finditer(
        r'key: \{"type":"1","data":\{"group":"%s","topic":"t","partition":(\d+)\}\} payload: '
        r'\{"version":"\d+","data":\{"offset":(\d+)' % GROUP, out)}
    assert committed == ends
    txn_logs = sorted(data.glob("__transaction_state-*/*.log"))
    out = dump_log("--files", ",".join(map(str, txn_logs)), "--transaction-log-decoder")
    # Kafka's TransactionState ids: 0 Empty, 1 Ongoing, 2 PrepareCommit, 3 PrepareAbort, 4 CompleteCommit,
    # 5 CompleteAbort; the decoder prints the id up to 4.3 and the state's name from 4.4
    ids = {name: i for i, name in enumerate(TXN_STATES)}
    states = [int(s) if s.isdigit() else ids[s.strip('"')] for s in re.findall(
        r'key: \{"type":"0","data":\{"transactionalId":"%s"\}\} payload: .*?"transactionStatus":(\d+|"\w+")' % TXN_ID,
        out)]
    assert states[0] == 0 and {2, 4, 3, 5} <= set(states), states


@pytest.mark.slow
def test_kafka_reads_compacted_and_recompressed_segments(tmp_path, dump_log):
    # segments the log cleaner rewrote (a kept tombstone's batch stamped with a KIP-534 delete
    # horizon, a zstd batch rebuilt in zstd) and a topic whose compression.type recompressed
    # librdkafka's lz4 batches to gzip: Kafka's tool finds every batch valid, reads the horizon,
    # the codecs and exactly the records a consumer reads
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from integration_tests import helpers
    from pyspark_kafka.broker import EmbeddedBroker

    data = tmp_path / "data"
    config = {"log.cleaner.backoff.ms": "100", "log.cleaner.min.cleanable.ratio": "0.01"}
    with EmbeddedBroker(data_dir=data, config=config) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([
            NewTopic("c", 1, 1, config={"cleanup.policy": "compact", "segment.bytes": "1024"}),
            NewTopic("g", 1, 1, config={"compression.type": "gzip"})], operation_timeout=15)
        for future in futures.values():
            future.result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd", "linger.ms": 0})
        for i in range(40):
            producer.produce("c", key=b"k%d" % (i % 4), value=b"v%02d" % i + b"x" * 40)
            producer.flush(30)
        producer.produce("c", key=b"k0", value=None)
        for i in range(30):  # more segments: the tombstone's segment closes, new dirty bytes (keys all distinct, so
            # once the k* keys are unique the cleaner has nothing left to remove and `seen` is final)
            producer.produce("c", key=b"filler%02d" % i, value=b"f%02d" % i + b"x" * 60)
            producer.flush(30)
        lz4 = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 5})
        for i in range(20):
            lz4.produce("g", key=b"g%d" % i, value=b"gzip-me-%d" % i)
        assert lz4.flush(30) == 0
        deadline = time.monotonic() + 30
        while True:  # bounded: until the cleaner removed every superseded value
            seen = [(m.offset(), m.key(), m.value()) for m in helpers.consume_all(bootstrap, "c")]
            keyed = [k for _, k, _ in seen if not k.startswith(b"filler")]
            if len(keyed) == len(set(keyed)) or time.monotonic() > deadline:
                break
        assert len(keyed) == len(set(keyed)), seen
        expected_g = [(m.offset(), m.key(), m.value()) for m in helpers.consume_all(bootstrap, "g")]
        del producer, lz4  # closed while the broker still answers

    def dumped(topic: str):
        logs = sorted((data / f"{topic}-0").glob("*.log"))
        out = dump_log("--files", ",".join(map(str, logs)), "--deep-iteration", "--print-data-log")
        batches = [m for line in out.splitlines() if (m := _BATCH.match(line))]
        assert batches and all(m.group(7) == "true" for m in batches), out
        records = [(int(m.group(1)), m.group(2).encode(), None if m.group(3) is None else m.group(3).encode())
                   for line in out.splitlines() if (m := _KEYED_RECORD.match(line))]
        return out, {m.group(6) for m in batches}, records

    out, codecs, records = dumped("c")
    assert codecs <= {"zstd", "none"}  # librdkafka sends a batch uncompressed when zstd does not shrink it
    # the tombstone (delete.retention.ms 24 h) is kept; its batch carries the horizon the cleaner set
    assert [o for o, k, v in seen if v is None] == [40]
    assert re.search(r"^baseOffset: 40 .*deleteHorizonMs: OptionalLong\[\d+\]", out, re.M), out
    assert records == seen  # tombstones included (valueSize -1, no payload)
    out, codecs, records = dumped("g")
    assert codecs == {"gzip"} and [(o, k, v) for o, k, v in records] == expected_g
