"""The pykafka reader as black-box Spark jobs on every backend: batch, streaming, offsets,
timestamps and data loss. Records are produced with confluent-kafka; its delivery reports
are the reference for partitions, offsets and timestamps."""

from __future__ import annotations

import json
import time

import pytest

from integration_tests.helpers import Collector, produce, read, read_stream, run_available_now, watermarks

BASE_TS = 1_700_000_000_000
KEEP_OLD_RECORDS = {"retention.ms": "-1"}
"""For topics written with timestamps older than the default retention (7 days): Kafka's
retention deletes such records at its next check, from the active segment too."""

pytestmark = pytest.mark.slow  # Spark jobs; still run in CI


def test_batch_read_returns_every_record_with_sparks_schema(spark, kafka_cluster, read_path):
    topic = kafka_cluster.create_topic(3, config=KEEP_OLD_RECORDS)
    records = [{"partition": i % 3, "key": None if i % 5 == 0 else b"k%d" % i, "value": b"v%d" % i,
                "timestamp": BASE_TS + i, "headers": [("h", b"%d" % i)]} for i in range(60)]
    delivered = produce(kafka_cluster.bootstrap, topic, records)

    df = read(spark, kafka_cluster.bootstrap, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    by_position = lambda row: (row[2], row[3])  # noqa: E731 (partition, offset); keys may be null
    got = sorted(((r.key, r.value, r.partition, r.offset, r.ts, r.topic, r.timestampType,
                   [tuple(h) for h in r.headers])
                  for r in df.selectExpr("*", "unix_millis(timestamp) AS ts").collect()), key=by_position)
    expected = sorted(((k, v, p, o, ts, topic, 0, [("h", v[1:])]) for k, v, p, o, ts in delivered), key=by_position)
    assert got == expected


def test_offset_json_and_timestamps_select_exactly_the_expected_rows(spark, kafka_cluster):
    topic = kafka_cluster.create_topic(2, config=KEEP_OLD_RECORDS)
    produce(kafka_cluster.bootstrap, topic, [{"partition": p, "value": b"%d-%d" % (p, i), "timestamp": BASE_TS + i * 1000}
                                             for p in (0, 1) for i in range(10)])

    def offsets(**options) -> list[tuple[int, int]]:
        df = read(spark, kafka_cluster.bootstrap, subscribe=topic, **options)
        return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())

    assert offsets(startingOffsets=json.dumps({topic: {"0": 2, "1": -2}}),
                   endingOffsets=json.dumps({topic: {"0": 5, "1": -1}})) == \
        [(0, 2), (0, 3), (0, 4)] + [(1, i) for i in range(10)]
    assert offsets(startingTimestamp=str(BASE_TS + 3000), endingTimestamp=str(BASE_TS + 5500)) == \
        [(p, o) for p in (0, 1) for o in (3, 4, 5)]
    assert offsets(startingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_TS + 8000, "1": BASE_TS + 99_000}}),
                   startingOffsetsByTimestampStrategy="latest") == [(0, 8), (0, 9)]


def test_streaming_available_now_batches_and_restart_neither_lose_nor_repeat(spark, kafka_cluster, checkpoint_dir):
    topic = kafka_cluster.create_topic(2)
    first = [v for _, v, *_ in produce(kafka_cluster.bootstrap, topic,
                                       [{"value": b"a%d" % i, "partition": i % 2} for i in range(60)])]
    collector = Collector()

    def run() -> None:
        stream = read_stream(spark, kafka_cluster.bootstrap, subscribe=topic, startingOffsets="earliest",
                             maxOffsetsPerTrigger="20")  # 10 per partition
        run_available_now(stream.writeStream.foreachBatch(collector).option("checkpointLocation", checkpoint_dir))

    run()
    assert [len(b) for b in collector.batches if b] == [20, 20, 20]
    second = [v for _, v, *_ in produce(kafka_cluster.bootstrap, topic,
                                        [{"value": b"b%d" % i, "partition": i % 2} for i in range(10)])]
    run()  # restarts from the checkpoint: only the new records
    assert sorted(v for _, _, v in collector.rows) == sorted(first + second)
    assert len({(p, o) for p, o, _ in collector.rows}) == 70


def _trimmed_topic(kafka_cluster) -> tuple[str, int]:
    """A 1-partition topic whose first 20 records (1970 timestamps) were deleted by time
    retention, followed by 5 new ones; returns ``(topic, log start offset)``. Retention deletes
    the expired active segment too (Kafka rolls it first), so no small segments are needed
    (Kafka 4 refuses ``segment.bytes`` below 1 MiB)."""
    bootstrap = kafka_cluster.bootstrap
    topic = kafka_cluster.create_topic(1, config={"retention.ms": "60000"})
    produce(bootstrap, topic, [{"value": b"old-%02d" % i, "timestamp": 1000 + i} for i in range(20)])
    deadline = time.monotonic() + 30
    while watermarks(bootstrap, topic)[0] < 20:
        if time.monotonic() > deadline:
            pytest.skip(f"{kafka_cluster.name}: retention did not delete the expired records within 30 s "
                        "(log.retention.check.interval.ms of this cluster is too long for the test)")
        time.sleep(0.2)
    produce(bootstrap, topic, [{"value": b"new-%d" % i} for i in range(5)])
    return topic, watermarks(bootstrap, topic)[0]


def test_data_loss_fails_the_read_or_is_skipped_with_fail_on_data_loss_false(spark, kafka_cluster, read_path):
    topic, log_start = _trimmed_topic(kafka_cluster)
    from_zero = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception) as failure:
        read(spark, kafka_cluster.bootstrap, subscribe=topic, startingOffsets=from_zero).collect()
    assert f"offsets [0, {log_start}) of {topic}-0 are no longer available" in str(failure.value)
    assert "failOnDataLoss=false" in str(failure.value)

    rows = read(spark, kafka_cluster.bootstrap, subscribe=topic, startingOffsets=from_zero,
                failOnDataLoss="false").select("offset", "value").collect()
    assert log_start == 20
    assert [(r.offset, r.value) for r in rows] == [(20 + i, b"new-%d" % i) for i in range(5)]
