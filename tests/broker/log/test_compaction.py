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
from pyspark_kafka.broker.topic_config import LogConfig
from pyspark_kafka.broker.coordinator.internal_topics import OFFSETS_TOPIC
from pyspark_kafka.broker.log.records import encode_batch
from pyspark_kafka.broker.log.cleaner import LogCleaner, cleanable_range, delete_horizon, iter_records
from pyspark_kafka.broker.log.record_batch import TRANSACTIONAL_BIT
from pyspark_kafka.broker.log.partition_log import PartitionLog

T0 = 1_700_000_000_000
DEADLINE_S = 45.0


def compact_config(**extra) -> LogConfig:
    return LogConfig(**{"segment_bytes": 600, "cleanup_policy": "compact", "delete_retention_ms": 1000, **extra})


def records_of(plog: PartitionLog) -> list[tuple[int, bytes | None, bool]]:
    """``(offset, key, tombstone)`` of every record, from the segment files."""
    out = []
    for segment in plog.segments:
        for position, header in segment.iter_headers():
            batch = segment.read_batch(position, header.size)
            out += [(r.offset, r.key, r.tombstone) for r in iter_records(header, batch)]
    return out


def append(plog: PartitionLog, pairs: list[tuple[bytes, bytes | None]], ts: int) -> int:
    """Append one batch of ``pairs`` and move the high watermark to the log end (an ISR of one); the first offset."""
    base = plog.append(encode_batch(pairs, ts), now_ms=ts).base_offset
    plog.update_high_watermark(plog.log_end_offset)
    return base


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


def test_tombstones_get_a_delete_horizon_then_disappear_at_a_later_cleaning(tmp_path):
    # KIP-534: the first cleaning that keeps a tombstone stamps its batch with a delete horizon
    # (now + delete.retention.ms); the first cleaning at or after the horizon removes it
    plog = PartitionLog("t", 0, tmp_path / "t-0", compact_config(min_cleanable_dirty_ratio=0.01))
    for i in range(30):
        append(plog, [(b"a", b"a%d" % i), (b"b", b"b%d" % i)], T0 + i)
    tombstone = append(plog, [(b"b", None)], T0 + 500)
    plog.roll()
    cleaner = LogCleaner()

    cleaner.clean(plog, T0 + 1000)  # older "b" records gone, the tombstone kept with horizon T0 + 2000
    assert [(k, t) for _, k, t in records_of(plog)] == [(b"a", False), (b"b", True)]
    assert [o for o, k, _ in records_of(plog) if k == b"b"] == [tombstone]
    headers = [h for s in plog.segments for _, h in s.iter_headers()]
    stamped = [h for h in headers if h.base_offset == tombstone]
    assert delete_horizon(stamped[0]) == T0 + 2000
    # the record keeps its own timestamp (its delta is now relative to the horizon)
    assert [r.timestamp for r in iter_records(stamped[0], _batch_bytes(plog, tombstone))] == [T0 + 500]

    assert cleaner.clean(plog, T0 + 2500) is None  # nothing dirty: the log is not cleaned at all
    append(plog, [(b"c", b"c0")], T0 + 2500)
    plog.roll()
    cleaner.clean(plog, T0 + 2000)  # new dirty data: a cleaning at the horizon removes the tombstone
    assert [(k, t) for _, k, t in records_of(plog)] == [(b"a", False), (b"c", False)]
    plog.close()


def _batch_bytes(plog: PartitionLog, base_offset: int) -> bytes:
    for segment in plog.segments:
        for position, header in segment.iter_headers():
            if header.base_offset == base_offset:
                return segment.read_batch(position, header.size)
    raise AssertionError(f"no batch at {base_offset}")


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
    config = {"log.cleaner.backoff.ms": "200", "offsets.topic.segment.bytes": "2048",
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

    extra: list[int] = []

    def compacted():
        # more dirty data on every look: the tombstone's delete horizon (delete.retention.ms=0) only
        # removes it at a later cleaning, and a cleaning needs a dirty ratio over 0.5 (Kafka's rules)
        for _ in range(4):
            extra.append(len(extra))
            p.produce(topic, key=b"filler", value=b"x%04d" % extra[-1] + b"f" * 200, on_delivery=delivered)
        p.flush()
        records = read_partition(bootstrap, topic)
        head = [(k, v) for _, k, v in records if k != b"filler"]
        return records if set(head) == expected and len(head) == 4 else None

    records = wait_until(compacted, "compaction", DEADLINE_S, interval_s=0.2)
    for offset, key, value in records:
        assert offsets[(key, value)] == offset  # offsets never change


def test_consumer_offsets_is_compacted_and_still_replays(tmp_path):
    config = {"log.cleaner.backoff.ms": "200", "offsets.topic.segment.bytes": "2048"}
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


# --- when a log is cleanable (Kafka's LogCleanerManager rules) -----------------------------------


def _segments_of(plog: PartitionLog, keys_per_segment: list[list[bytes]], ts: int) -> None:
    for keys in keys_per_segment:
        for key in keys:
            append(plog, [(key, b"v" * 20)], ts)
        plog.roll()


def test_dirty_ratio_must_exceed_min_cleanable_dirty_ratio(tmp_path):
    plog = PartitionLog("r", 0, tmp_path / "r-0", compact_config(segment_bytes=1 << 20))
    _segments_of(plog, [[b"a", b"b", b"c", b"d"]] * 3, T0)  # 3 closed segments of equal size
    cleaner = LogCleaner()
    span = cleanable_range(plog, None, T0)
    assert (span.first_dirty, span.first_uncleanable, span.clean_bytes) == (0, 12, 0) and span.dirty_ratio == 1.0
    assert cleaner.clean(plog, T0).records_removed == 8  # never cleaned: ratio 1 > 0.5
    assert cleaner.first_dirty_offset(plog) == 12
    _segments_of(plog, [[b"a"]], T0)  # a small dirty segment: ratio far below 0.5
    span = cleanable_range(plog, cleaner.first_dirty_offset(plog), T0)
    assert 0 < span.dirty_ratio < 0.5 and cleaner.clean(plog, T0) is None
    # min.cleanable.dirty.ratio changed at runtime (IncrementalAlterConfigs replaces plog.config)
    plog.config = compact_config(segment_bytes=1 << 20, min_cleanable_dirty_ratio=span.dirty_ratio - 0.01)
    assert cleaner.clean(plog, T0).records_removed == 1  # the older "a" is superseded
    plog.close()


def test_max_compaction_lag_forces_cleaning_below_the_ratio(tmp_path):
    config = compact_config(segment_bytes=1 << 20, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=5000)
    plog = PartitionLog("m", 0, tmp_path / "m-0", config)
    _segments_of(plog, [[b"a", b"b", b"c", b"d"]] * 2, T0)
    cleaner = LogCleaner()
    assert cleaner.clean(plog, T0).records_removed == 4  # ratio 1 > 0.99
    _segments_of(plog, [[b"a"]], T0 + 1000)
    assert cleaner.clean(plog, T0 + 5999) is None  # dirty segment's first batch 4999 ms old, ratio low
    span = cleanable_range(plog, cleaner.first_dirty_offset(plog), T0 + 6001)
    assert span.need_compaction_now and span.dirty_ratio < 0.99
    assert cleaner.clean(plog, T0 + 6001).records_removed == 1
    plog.close()


def test_never_past_the_active_segment_or_the_last_stable_offset(tmp_path):
    plog = PartitionLog("s", 0, tmp_path / "s-0", compact_config(segment_bytes=1 << 20))
    _segments_of(plog, [[b"a", b"a"]], T0)
    append(plog, [(b"a", b"active")], T0)  # the active segment holds the latest "a": never cleaned
    cleaner = LogCleaner()
    assert cleaner.clean(plog, T0).records_removed == 1  # only the closed segment's older "a"
    assert [o for o, _, _ in records_of(plog)] == [1, 2]
    # an open transaction bounds the range: nothing from its first offset on is cleanable
    txn = encode_batch([(b"t", b"1")], T0, producer_id=7, producer_epoch=0, attributes=TRANSACTIONAL_BIT)
    plog.append(txn, now_ms=T0)
    plog.update_high_watermark(plog.log_end_offset)
    plog.roll()
    _segments_of(plog, [[b"t", b"t"]], T0)
    span = cleanable_range(plog, None, T0)
    assert span.first_uncleanable == 2 and plog.last_stable_offset == 3
    plog.close()


def test_compression_codec_is_kept_when_a_batch_is_rewritten(tmp_path):
    from pyspark_kafka.broker.log.compression import compress
    from pyspark_kafka.broker.log.record_batch import build_batch, parse_header

    plain = encode_batch([(b"a", b"1"), (b"b", b"2"), (b"a", b"3")], T0)
    header = parse_header(plain)
    zstd = build_batch(compress(4, plain[61:]), record_count=3, last_offset_delta=2, base_timestamp=T0,
                       max_timestamp=T0, attributes=4)
    plog = PartitionLog("z", 0, tmp_path / "z-0", compact_config(segment_bytes=1 << 20))
    plog.append(zstd, now_ms=T0)
    plog.update_high_watermark(plog.log_end_offset)
    plog.roll()
    assert header.record_count == 3 and LogCleaner().clean(plog, T0).records_removed == 1
    (_, kept), = list(plog.segments[0].iter_headers())
    assert kept.compression == "zstd" and (kept.base_offset, kept.last_offset_delta) == (0, 2)
    assert [(o, k) for o, k, _ in records_of(plog)] == [(1, b"b"), (2, b"a")]
    plog.close()


def test_compaction_settings_changed_at_runtime_take_effect(cbroker):
    # min.compaction.lag.ms of an hour keeps every record; IncrementalAlterConfigs lowering it to 0
    # lets the next cleaner run (log.cleaner.backoff.ms=200) compact the closed segments. A witness
    # topic without the lag, written alongside, shows when cleaner runs have happened.
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    bootstrap = cbroker.bootstrap_servers
    config = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"}
    topic = create_topic(bootstrap, f"compact-alter-{uuid.uuid4().hex[:8]}", 1,
                         {**config, "min.compaction.lag.ms": "3600000"})
    witness = create_topic(bootstrap, f"compact-witness-{uuid.uuid4().hex[:8]}", 1, config)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(60):
        for t in (topic, witness):
            p.produce(t, key=b"k%d" % (i % 3), value=b"v%03d" % i + b"x" * 60)
        p.flush()
    wait_until(lambda: len(read_partition(bootstrap, witness)) < 60, "compaction of the witness topic", DEADLINE_S,
               interval_s=0.2)
    assert len(read_partition(bootstrap, topic)) == 60  # the same cleaner runs left it alone

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(DEADLINE_S)
    records = wait_until(lambda: (r := read_partition(bootstrap, topic)) and len(r) < 60 and r, "compaction",
                         DEADLINE_S, interval_s=0.2)
    latest = {k: v for _, k, v in records}
    assert latest == {b"k%d" % k: b"v%03d" % (57 + k) + b"x" * 60 for k in range(3)}


def test_first_dirty_offset_survives_a_restart_and_compact_delete_also_deletes(tmp_path):
    # Kafka's cleaner-offset-checkpoint: a restarted broker does not treat cleaned segments as dirty;
    # cleanup.policy=compact,delete: the cleaner compacts and retention deletes expired segments
    from pyspark_kafka.broker.config import BrokerConfig
    from pyspark_kafka.broker.log.manager import CLEANER_OFFSET_CHECKPOINT, LogManager

    def open_manager() -> LogManager:
        manager = LogManager(tmp_path, BrokerConfig())
        manager.load()
        return manager

    now = int(time.time() * 1000)  # an emptied segment's age is its file's mtime (Kafka's rule)
    manager = open_manager()
    manager.create_topic("cd", 1, {"cleanup.policy": "compact,delete", "segment.bytes": "1024",
                                   "retention.ms": "60000", "delete.retention.ms": "0"})
    plog = manager.get_log("cd", 0)
    for i in range(40):
        append(plog, [(b"k%d" % (i % 4), b"v%02d" % i + b"x" * 50)], now + i)
    assert manager.run_cleaner(now + 1000) == 40 - 4 - (40 - plog.active_segment.base_offset)  # active kept whole
    first_dirty = manager.cleaner.first_dirty_offset(plog)
    assert first_dirty == plog.active_segment.base_offset
    assert f"cd 0 {first_dirty}" in (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text()
    manager.close()

    manager = open_manager()
    plog = manager.get_log("cd", 0)
    assert manager.cleaner.first_dirty_offset(plog) == first_dirty
    assert manager.run_cleaner(now + 2000) == 0  # nothing dirty: not cleaned again
    assert manager.run_retention(now + 120_000) > 0  # compact,delete: retention too
    assert plog.log_start_offset > 0
    manager.delete_topic("cd")
    assert manager.cleaner.first_dirty_offset(plog) is None
    manager.close()


def test_max_compaction_lag_rolls_the_active_segment_of_a_compacted_topic(tmp_path):
    # KIP-354 (Kafka's LogConfig.maxSegmentMs): segment.ms is capped by max.compaction.lag.ms on
    # compacted topics, so the active segment closes and its records can be cleaned in time
    config = compact_config(segment_bytes=1 << 20, segment_ms=3_600_000, max_compaction_lag_ms=1000)
    assert config.max_segment_ms == 1000
    assert LogConfig(segment_ms=3_600_000, max_compaction_lag_ms=1000).max_segment_ms == 3_600_000  # delete policy
    plog = PartitionLog("roll", 0, tmp_path / "roll-0", config)
    append(plog, [(b"a", b"1")], T0)
    append(plog, [(b"a", b"2")], T0 + 999)
    assert len(plog.segments) == 1
    append(plog, [(b"a", b"3")], T0 + 1001)  # the first batch is now older than max.compaction.lag.ms
    assert len(plog.segments) == 2 and plog.active_segment.base_offset == 2
    plog.close()


def _txn_batch(pairs, producer_id: int, sequence: int, ts: int) -> bytes:
    from pyspark_kafka.broker.log.record_batch import batch_crc

    batch = bytearray(encode_batch(pairs, ts, producer_id=producer_id, producer_epoch=0, attributes=TRANSACTIONAL_BIT))
    batch[53:57] = sequence.to_bytes(4, "big")  # base sequence
    batch[17:21] = batch_crc(batch, 0, len(batch)).to_bytes(4, "big")
    return bytes(batch)


def test_committed_transactions_are_compacted_and_aborted_ones_removed(tmp_path):
    # Kafka's cleaner (CleanedTransactionMetadata): committed transactional records are compacted like
    # any other; aborted batches never hide an older value and are removed; markers stay here
    plog = PartitionLog("x", 0, tmp_path / "x-0", compact_config(segment_bytes=1 << 20))
    append(plog, [(b"a", b"plain-1"), (b"b", b"plain-1")], T0)               # offsets 0, 1
    plog.append(_txn_batch([(b"a", b"committed")], 7, 0, T0), now_ms=T0)     # 2
    plog.append_marker(7, 0, commit=True, now_ms=T0)                          # 3
    plog.append(_txn_batch([(b"b", b"aborted")], 8, 0, T0), now_ms=T0)       # 4
    plog.append_marker(8, 0, commit=False, now_ms=T0)                         # 5
    plog.update_high_watermark(plog.log_end_offset)
    plog.roll()
    stats = LogCleaner().clean(plog, T0)
    assert stats.records_removed == 2  # plain "a" (superseded by the committed one) and the aborted "b"
    assert [o for o, _, _ in records_of(plog)] == [1, 2, 3, 5]  # 3 and 5: the markers
    kept = {h.base_offset: (h.is_transactional, h.is_control) for s in plog.segments for _, h in s.iter_headers()}
    assert kept == {0: (False, False), 2: (True, False), 3: (True, True), 5: (True, True)}
    assert plog.last_stable_offset == plog.log_end_offset
    plog.close()
