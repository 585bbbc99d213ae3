"""Per-record errors in Produce (KIP-467), as Apache Kafka 4.3.1 answers them.

A batch refused because of some of its records (a null key on a compacted topic, a CreateTime
outside ``message.timestamp.before/after.max.ms``) gets, from Produce v8 on, ``record_errors``
(each bad record's index in the batch and Kafka's message) and Kafka's ``error_message``;
v7 carries only the error code. Expected values were captured from Apache Kafka 4.3.1 with the
same requests. Malformed records (a wrong record length) stay a plain INVALID_RECORD without
record errors, as in Kafka.
"""

from __future__ import annotations

import datetime
import time
import zlib

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v7.request import PartitionProduceData as PartitionV7
from kio.schema.produce.v7.request import ProduceRequest as ProduceV7
from kio.schema.produce.v7.request import TopicProduceData as TopicV7
from kio.schema.produce.v11.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i16, i32

from pyspark_kafka.broker.log.record_batch import build_batch
from support.batches import encode_record, make_batch
from support.topics import consume_all
from support.wire import WireClient

HOUR_MS = 3_600_000


def _produce(bootstrap: str, topic: str, batch: bytes, version: int = 11):
    request_cls, topic_cls, partition_cls = ((ProduceRequest, TopicProduceData, PartitionProduceData) if version == 11
                                             else (ProduceV7, TopicV7, PartitionV7))
    with WireClient(bootstrap) as client:
        response = client.request(request_cls(
            transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(seconds=10),
            topic_data=(topic_cls(name=topic, partition_data=(partition_cls(index=i32(0), records=batch),)),)))
    return response.responses[0].partition_responses[0]


def _batch(keys, timestamp_deltas=None, base_ts=None) -> bytes:
    base_ts = int(time.time() * 1000) if base_ts is None else base_ts
    deltas = timestamp_deltas or [0] * len(keys)
    records = b"".join(encode_record(i, d, k, b"v") for i, (k, d) in enumerate(zip(keys, deltas)))
    return build_batch(records, record_count=len(keys), last_offset_delta=len(keys) - 1, base_timestamp=base_ts,
                       max_timestamp=base_ts + max(deltas))


def test_null_keys_on_a_compacted_topic_are_record_errors(bootstrap, make_topic):
    topic = make_topic(1, {"cleanup.policy": "compact"})
    res = _produce(bootstrap, topic, _batch([b"k", None, b"k", None]))
    assert res.error_code == ErrorCode.invalid_record
    assert (res.base_offset, res.log_start_offset) == (-1, 0)  # Kafka reports the log start offset
    message = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    assert [(e.batch_index, e.batch_index_error_message) for e in res.record_errors] == [(1, message), (3, message)]
    assert res.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first "
        f"three errors at most: [RecordError(batchIndex=1, message='{message}'), "
        f"RecordError(batchIndex=3, message='{message}')]")
    assert consume_all(bootstrap, topic, timeout_s=3) == []  # nothing of the batch was stored


def test_error_message_shows_at_most_three_record_errors(bootstrap, make_topic):
    topic = make_topic(1, {"cleanup.policy": "compact"})
    res = _produce(bootstrap, topic, _batch([None] * 5))
    assert [e.batch_index for e in res.record_errors] == [0, 1, 2, 3, 4]
    assert res.error_message.startswith("One or more records have been rejected due to 5 record errors in total")
    assert res.error_message.count("RecordError(") == 3


def test_v7_carries_only_the_error_code(bootstrap, make_topic):
    topic = make_topic(1, {"cleanup.policy": "compact"})
    res = _produce(bootstrap, topic, _batch([None]), version=7)
    assert res.error_code == ErrorCode.invalid_record
    assert not hasattr(res, "record_errors")


def test_large_compressed_batch_with_one_keyless_record(bootstrap, make_topic):
    """The vectorized path (256+ records) and a gzip batch report the same record errors."""
    topic = make_topic(1, {"cleanup.policy": "compact"})
    n = 300
    batch = make_batch([b"v"] * n, key=b"k", compression=1)
    assert _produce(bootstrap, topic, batch).error_code == ErrorCode.none
    records = b"".join(encode_record(i, 0, None if i == 257 else b"k", b"v") for i in range(n))
    now = int(time.time() * 1000)
    batch = build_batch(zlib.compress(records, wbits=31), record_count=n, last_offset_delta=n - 1,
                        base_timestamp=now, max_timestamp=now, attributes=1)
    res = _produce(bootstrap, topic, batch)
    assert res.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in res.record_errors] == [257]


def test_timestamps_out_of_range_are_invalid_timestamp(bootstrap, make_topic):
    topic = make_topic(1, {"message.timestamp.before.max.ms": str(HOUR_MS),
                           "message.timestamp.after.max.ms": str(HOUR_MS)})
    before = int(time.time() * 1000)
    res = _produce(bootstrap, topic, _batch([b"k"] * 4, [0, -2 * HOUR_MS, 0, 2 * HOUR_MS], base_ts=before))
    after = int(time.time() * 1000)
    assert res.error_code == ErrorCode.invalid_timestamp
    assert res.error_message == "One or more records have been rejected due to invalid timestamp"
    assert [e.batch_index for e in res.record_errors] == [1, 3]
    message = res.record_errors[0].batch_index_error_message
    assert message.startswith(f"Timestamp {before - 2 * HOUR_MS} of message with offset 1 is out of range. "
                              "The timestamp should be within [")
    low, high = (int(x) for x in message.rsplit("[", 1)[1].rstrip("]").split(", "))
    assert before - HOUR_MS <= low <= after - HOUR_MS and high == low + 2 * HOUR_MS
    # within the bounds: accepted
    assert _produce(bootstrap, topic, _batch([b"k"] * 2, [0, 1000])).error_code == ErrorCode.none


def test_log_append_time_topics_do_not_check_timestamps(bootstrap, make_topic):
    topic = make_topic(1, {"message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": "1000"})
    assert _produce(bootstrap, topic, _batch([b"k"], base_ts=1_000_000)).error_code == ErrorCode.none


def test_malformed_record_has_no_record_errors(bootstrap, make_topic):
    topic = make_topic(1)
    records = bytearray(encode_record(0, 0, b"k", b"v") + encode_record(1, 0, b"k", b"v"))
    records[0] += 2  # the first record's length one too many (zigzag)
    now = int(time.time() * 1000)
    res = _produce(bootstrap, topic, build_batch(bytes(records), record_count=2, last_offset_delta=1,
                                                 base_timestamp=now, max_timestamp=now))
    assert res.error_code == ErrorCode.invalid_record
    assert res.record_errors == ()
    assert res.log_start_offset == 0  # as Kafka


def test_confluent_kafka_delivery_error(bootstrap, make_topic):
    from confluent_kafka import KafkaError, Producer

    topic = make_topic(1, {"cleanup.policy": "compact"})
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "retries": 0})
    producer.produce(topic, value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    producer.produce(topic, key=b"k", value=b"keyed", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    assert len(errors) == 2
    codes = [None if e is None else e.code() for e in errors]
    assert KafkaError.INVALID_RECORD in codes


def test_kafka_python_delivery_error(bootstrap, make_topic):
    kafka = pytest.importorskip("kafka")
    from kafka.errors import InvalidRecordError

    topic = make_topic(1, {"cleanup.policy": "compact"})
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, retries=0, linger_ms=0)
    try:
        future = producer.send(topic, value=b"no key")
        with pytest.raises(InvalidRecordError):
            future.get(timeout=20)
    finally:
        producer.close(timeout=5)


@pytest.mark.parametrize("container", ["zlib", "raw deflate"])
def test_a_gzip_flagged_batch_holding_no_gzip_stream_is_refused(bootstrap, make_topic, container):
    """Issue 28 item 4: Kafka decompresses gzip with ``GZIPInputStream`` ("Not in GZIP format" for a zlib or raw
    deflate stream) and stores nothing; kafka-python's reader would stop at such a batch for good. Kafka answers
    UNKNOWN_SERVER_ERROR (its KafkaException is no ApiException); we answer CORRUPT_MESSAGE as for every batch that
    does not decompress (docs/compatibility.md). A real gzip batch of the same records is stored."""
    topic = make_topic(1)
    now = int(time.time() * 1000)
    records = b"".join(encode_record(i, 0, b"k", b"v%d" % i) for i in range(3))
    packed = zlib.compress(records) if container == "zlib" else zlib.compress(records, wbits=-15)
    res = _produce(bootstrap, topic, build_batch(packed, record_count=3, last_offset_delta=2, base_timestamp=now,
                                                 max_timestamp=now, attributes=1))
    assert res.error_code == ErrorCode.corrupt_message and "gzip format" in res.error_message
    good = _produce(bootstrap, topic, build_batch(zlib.compress(records, wbits=31), record_count=3, last_offset_delta=2,
                                                  base_timestamp=now, max_timestamp=now, attributes=1))
    assert (good.error_code, good.base_offset) == (ErrorCode.none, 0)  # nothing of the refused batch was stored
