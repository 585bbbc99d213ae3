"""confluent-kafka (librdkafka) producing to and consuming from the embedded broker.

Every record must come back as Apache Kafka would return it: consecutive offsets from 0,
the producer's keys, values, headers and CreateTime timestamps, for each compression codec.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from support.client_records import BASE_TS, DEADLINE_S, RECORDS, as_tuples, consume, expected, produce

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(bootstrap, make_topic, codec):
    topic = make_topic(partitions=1)
    produce(bootstrap, topic, RECORDS, **{"compression.codec": codec})
    assert as_tuples(consume(bootstrap, topic, len(RECORDS))) == expected(RECORDS)


def test_one_megabyte_records(bootstrap, make_topic):
    topic = make_topic(partitions=1, config={"max.message.bytes": str(3 * 1024 * 1024)})
    big = [(b"big-%d" % i, bytes([65 + i]) * (1024 * 1024), [], BASE_TS + i) for i in range(3)]
    produce(bootstrap, topic, big, **{"message.max.bytes": 3 * 1024 * 1024, "linger.ms": 0})
    got = consume(bootstrap, topic, len(big), **{"fetch.max.bytes": 2 * 1024 * 1024,
                                                  "max.partition.fetch.bytes": 1024 * 1024})
    assert as_tuples(got) == expected(big)


def test_record_larger_than_max_message_bytes_is_rejected_and_nothing_appended(bootstrap, make_topic):
    topic = make_topic(partitions=1, config={"max.message.bytes": "100000"})
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.max.bytes": 1_000_000,
                  "compression.codec": "none", "retries": 0})
    errors = []
    p.produce(topic, value=b"x" * 200_000, partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(DEADLINE_S)
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "too-large"})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S) == (0, 0)
    finally:
        c.close()


def test_keyed_records_spread_over_partitions_and_metadata(bootstrap, make_topic):
    topic = make_topic(partitions=3)
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for i in range(60):
        p.produce(topic, key=b"key-%d" % (i % 6), value=b"%d" % i)
    assert p.flush(DEADLINE_S) == 0
    md = p.list_topics(topic, timeout=DEADLINE_S)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2]
    assert md.topics[topic].partitions[0].leader == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spread"})
    try:
        highs = [c.get_watermark_offsets(TopicPartition(topic, i), timeout=DEADLINE_S)[1] for i in range(3)]
    finally:
        c.close()
    assert sum(highs) == 60
    assert all(h % 10 == 0 for h in highs)  # each key (10 records) stays in one partition
