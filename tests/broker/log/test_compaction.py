"""Log compaction: the latest record per key at its original offset, tombstones gone after
``delete.retention.ms``, the active segment untouched, and ``__consumer_offsets`` compacted too."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from support.topics import create_topic
from support.waiting import wait_until
from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.config import LogConfig
from pyspark_kafka.broker.coordinator.offsets import OFFSETS_TOPIC
from pyspark_kafka.broker.log.records import encode_batch
from pyspark_kafka.broker.log.cleaner import LogCleaner, iter_records
from pyspark_kafka.broker.log.partition_log import PartitionLog

T0 = 1_700_000_000_000
DEADLINE_S = 45.0


def compact_config(**extra) -> LogConfig:
    return LogConfig(segment_bytes=600, cleanup_policy="compact", delete_retention_ms=1000, **extra)


def records_of(plog: PartitionLog) -> list[tuple[int, bytes | None, bool]]:
    """``(offset, key, tombstone)`` of every record, from the segment files."""
    out = []
    for segment in plog.segments:
        for position, header in segment.iter_headers():
            batch = segment.read_batch(position, header.size)
            out += [(r.offset, r.key, r.tombstone) for r in iter_records(header, batch)]
    return out


def append(plog: PartitionLog, pairs: list[tuple[bytes, bytes | None]], ts: int) -> int:
    return plog.append(encode_batch(pairs, ts), now_ms=ts).base_offset


def test_cleaner_keeps_the_latest_record_per_key_at_its_offset(tmp_path):
    plog = PartitionLog("c", 0, tmp_path / "c-0", compact_config())
    latest = {}
    for i in range(200):
        key = b"k%d" % (i % 5)
        latest[key] = append(plog, [(key, b"value-%d" % i)], T0 + i)
    multi = append(plog, [(b"k0", b"x"), (b"k9", b"y"), (b"k0", b"z")], T0 + 300)
    latest[b"k0"], latest[b"k9"] = multi + 2, multi + 1
    plog.roll()
    active_before = plog.active_segment.log_path.read_bytes()
    leo = plog.log_end_offset

    stats = LogCleaner().clean(plog, T0 + 10_000)

    assert stats.records_removed == 203 - 6
    assert sorted((k, o) for o, k, _ in records_of(plog)) == sorted((k, o) for k, o in latest.items())
    assert plog.log_end_offset == leo
    assert plog.active_segment.log_path.read_bytes() == active_before
    # Reads from a removed offset start at the next retained batch; the value is the latest.
    sliced = plog.read(0, 1 << 20).read_bytes()
    assert sliced and records_of(plog)[0][0] >= 0
    plog.close()
    reopened = PartitionLog("c", 0, tmp_path / "c-0", compact_config())
    assert sorted(o for o, _, _ in records_of(reopened)) == sorted(latest.values())
    assert reopened.log_end_offset == leo
    reopened.close()


def test_tombstones_last_delete_retention_ms_then_disappear(tmp_path):
    plog = PartitionLog("t", 0, tmp_path / "t-0", compact_config())
    for i in range(30):
        append(plog, [(b"a", b"a%d" % i), (b"b", b"b%d" % i)], T0 + i)
    tombstone = append(plog, [(b"b", None)], T0 + 500)
    plog.roll()
    cleaner = LogCleaner()

    cleaner.clean(plog, T0 + 1000)  # tombstone is 500 ms old: kept, older "b" records gone
    assert [(k, t) for _, k, t in records_of(plog)] == [(b"a", False), (b"b", True)]
    assert [o for o, k, _ in records_of(plog) if k == b"b"] == [tombstone]

    assert cleaner.clean(plog, T0 + 1400) is None  # nothing new, tombstone not due yet
    cleaner.clean(plog, T0 + 1501)  # delete.retention.ms (1000) has passed
    assert [(k, t) for _, k, t in records_of(plog)] == [(b"a", False)]
    plog.close()


def test_min_compaction_lag_protects_recent_segments(tmp_path):
    plog = PartitionLog("l", 0, tmp_path / "l-0", compact_config(min_compaction_lag_ms=60_000))
    for i in range(40):
        append(plog, [(b"k", b"%d" % i)], T0 + i)
    plog.roll()
    assert LogCleaner().clean(plog, T0 + 1000) is None
    assert LogCleaner().clean(plog, T0 + 120_000).records_removed == 39
    plog.close()


# --- through the broker ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cbroker(tmp_path_factory):
    config = {"log.retention.check.interval.ms": "200", "offsets.topic.segment.bytes": "2048",
              "group.initial.rebalance.delay.ms": "0"}
    data = tmp_path_factory.mktemp("compaction")
    with EmbeddedBroker(data_dir=data, config=config) as b:
        yield b


def read_partition(bootstrap: str, topic: str, partition: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of ``topic``/``partition`` from the beginning to the end offset."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + DEADLINE_S
        while True:
            assert time.monotonic() < deadline
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                return out  # partition EOF
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()


def test_compacted_topic_through_the_broker(cbroker):
    bootstrap = cbroker.bootstrap_servers
    topic = create_topic(bootstrap, f"compact-{uuid.uuid4().hex[:8]}", 1,
                         {"cleanup.policy": "compact", "segment.bytes": "1024", "delete.retention.ms": "0"})
    offsets = {}
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})

    def delivered(err, msg):
        assert err is None
        offsets[(msg.key(), msg.value())] = msg.offset()

    for i in range(300):
        p.produce(topic, key=b"key-%d" % (i % 4), value=b"v%d" % i, on_delivery=delivered)
        p.flush()
    p.produce(topic, key=b"gone", value=b"x", on_delivery=delivered)
    p.produce(topic, key=b"gone", value=None, on_delivery=delivered)
    p.flush()
    for i in range(20):  # fill and roll segments so the records above are in closed ones
        p.produce(topic, key=b"filler", value=b"%03d" % i + b"f" * 200, on_delivery=delivered)
        p.flush()
    expected = {(b"key-%d" % k, b"v%d" % (296 + k)) for k in range(4)}

    def compacted():
        records = read_partition(bootstrap, topic)
        head = [(k, v) for _, k, v in records if k != b"filler"]
        return records if set(head) == expected and len(head) == 4 else None

    records = wait_until(compacted, "compaction", DEADLINE_S, interval_s=0.2)
    for offset, key, value in records:
        assert offsets[(key, value)] == offset  # offsets never change


def test_consumer_offsets_is_compacted_and_still_replays(tmp_path):
    config = {"log.retention.check.interval.ms": "200", "offsets.topic.segment.bytes": "2048"}
    group = f"compacting-{uuid.uuid4().hex[:8]}"
    with EmbeddedBroker(data_dir=tmp_path, config=config) as b:
        topic = create_topic(b.bootstrap_servers, "co", 1)
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": group, "enable.auto.commit": False})
        try:
            for i in range(1, 121):
                c.commit(offsets=[TopicPartition(topic, 0, i, metadata="m%d" % i)], asynchronous=False)
        finally:
            c.close()
        wait_until(lambda: len(read_partition(b.bootstrap_servers, OFFSETS_TOPIC)) < 60,
                   f"compaction of {OFFSETS_TOPIC}", DEADLINE_S, interval_s=0.2)
    with EmbeddedBroker(data_dir=tmp_path, config=config) as b:  # replays the compacted topic
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": group})
        try:
            got = c.committed([TopicPartition(topic, 0)], timeout=10)[0]
            assert (got.offset, got.metadata) == (120, "m120")
        finally:
            c.close()
