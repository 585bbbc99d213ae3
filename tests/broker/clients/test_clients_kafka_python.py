"""kafka-python producing to and consuming from the embedded broker, and reading what librdkafka wrote.

The producer keeps kafka-python 3's defaults, so it is idempotent (InitProducerId, producer id and
sequence numbers in every batch) for every codec.
"""

from __future__ import annotations

import uuid

import pytest

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic  # noqa: E402

from support.client_records import RECORDS, as_tuples, consume, expected, produce  # noqa: E402

DEADLINE_S = 30.0
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def kp_produce(bootstrap, topic, records, **conf):
    conf = {"linger_ms": 5, **conf}
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **conf)
    try:
        futures = [p.send(topic, key=k, value=v, headers=h, timestamp_ms=ts, partition=0) for k, v, h, ts in records]
        p.flush(DEADLINE_S)
        return [f.get(DEADLINE_S) for f in futures]
    finally:
        p.close(DEADLINE_S)


def kp_consume(bootstrap, topic, count, **conf) -> list:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **conf)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        out = []
        for _ in range(int(DEADLINE_S * 10)):
            if len(out) >= count:
                break
            for records in c.poll(timeout_ms=100, max_records=count - len(out)).values():
                out.extend(records)
        return [(r.offset, r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp) for r in out]
    finally:
        c.close()


def stored_producer_ids(broker, topic: str) -> set[int]:
    """Producer ids in the headers of the batches stored for ``topic``-0 (read-only look at the log)."""
    plog = broker.broker.replica_manager.logs.get_log(topic, 0)
    return {header.producer_id for segment in plog.segments for _, header in segment.iter_headers()}


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(broker, bootstrap, make_topic, codec):
    topic = make_topic(partitions=1)
    metadata = kp_produce(bootstrap, topic, RECORDS, compression_type=codec)
    assert [m.offset for m in metadata] == list(range(len(RECORDS)))
    assert min(stored_producer_ids(broker, topic)) >= 0  # idempotent: every batch names its producer
    assert kp_consume(bootstrap, topic, len(RECORDS)) == expected(RECORDS)
    # librdkafka reads kafka-python's batches too.
    assert as_tuples(consume(bootstrap, topic, len(RECORDS))) == expected(RECORDS)


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_reads_batches_written_by_librdkafka(bootstrap, make_topic, codec):
    topic = make_topic(partitions=1)
    produce(bootstrap, topic, RECORDS, **{"compression.codec": codec})
    assert kp_consume(bootstrap, topic, len(RECORDS)) == expected(RECORDS)


def test_one_megabyte_records(bootstrap, make_topic):
    topic = make_topic(partitions=1, config={"max.message.bytes": str(3 * 1024 * 1024)})
    big = [(b"big-%d" % i, bytes([97 + i]) * (1024 * 1024), [], 1_700_000_000_000 + i) for i in range(3)]
    kp_produce(bootstrap, topic, big, max_request_size=3 * 1024 * 1024)
    assert kp_consume(bootstrap, topic, len(big), max_partition_fetch_bytes=1024 * 1024) == expected(big)


def test_offsets_for_times_and_end_offsets(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    base = 1_700_000_000_000
    kp_produce(bootstrap, topic, [(None, b"a", [], base), (None, b"b", [], base + 10)], linger_ms=0, batch_size=1)
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        found = c.offsets_for_times({tp: base + 5})[tp]
        assert (found.offset, found.timestamp) == (1, base + 10)
        assert c.offsets_for_times({tp: base + 11})[tp] is None
        assert c.beginning_offsets([tp])[tp] == 0
        assert c.end_offsets([tp])[tp] == 2
    finally:
        c.close()


def test_admin_create_and_describe_configs(bootstrap):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        name = f"kp-admin-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(name, 2, 1, topic_configs={"cleanup.policy": "delete",
                                                                 "retention.bytes": "1048576"})])
        assert name in admin.list_topics()
        result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        text = repr(result)
        assert "retention.bytes" in text and "1048576" in text
        admin.delete_topics([name])
        assert name not in admin.list_topics()
    finally:
        admin.close()
