"""DeleteRecords (key 21) against the embedded broker: confluent-kafka and kafka-python admin clients,
the raw wire for exact error codes, restart durability and segment deletion."""

from __future__ import annotations

import datetime
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.errors import ErrorCode

from support.topics import create_topic
from support.wire import WireClient

DEADLINE_S = 20.0


def _produce(bootstrap, topic, count, partition=0):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        p.produce(topic, value=b"v%d" % i, partition=partition)
        p.flush(DEADLINE_S)  # one batch per record
    assert p.flush(DEADLINE_S) == 0


def _earliest(admin, topic, partition=0):
    tp = TopicPartition(topic, partition)
    return admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(DEADLINE_S).offset


def _delete(admin, topic, offset, partition=0):
    tp = TopicPartition(topic, partition, offset)
    return admin.delete_records([tp])[tp].result(DEADLINE_S)


def _first_readable(bootstrap, topic, offset):
    """``(offset of the first record read from `offset`, or the error code string)``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-" + uuid.uuid4().hex, "auto.offset.reset": "error",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, offset)])
        msg = c.poll(DEADLINE_S)
        if msg is None:
            return "NO_ANSWER"  # neither a record nor an error: callers' expectations then fail
        return msg.error().name() if msg.error() else msg.offset()
    finally:
        c.close()


def _wire_delete(bootstrap, topic, partitions: dict[int, int]):
    request = DeleteRecordsRequest(
        topics=(DeleteRecordsTopic(name=topic, partitions=tuple(
            DeleteRecordsPartition(partition_index=p, offset=o) for p, o in partitions.items())),),
        timeout=datetime.timedelta(seconds=5))
    with WireClient(bootstrap) as client:
        response = client.request(request)
    return {p.partition_index: (p.error_code, p.low_watermark) for p in response.topics[0].partitions}


def test_confluent_delete_records_moves_the_low_watermark(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    _produce(bootstrap, topic, 10)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert _delete(admin, topic, 4).low_watermark == 4
    assert _earliest(admin, topic) == 4
    assert _first_readable(bootstrap, topic, 4) == 4
    assert _first_readable(bootstrap, topic, 3) == "_AUTO_OFFSET_RESET"  # OFFSET_OUT_OF_RANGE, no reset
    assert _delete(admin, topic, 2).low_watermark == 4  # below the start: nothing changes
    assert _delete(admin, topic, -1).low_watermark == 10  # -1: the high watermark
    assert _earliest(admin, topic) == 10


def test_kafka_python_delete_records(bootstrap, make_topic):
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KTopicPartition

    topic = make_topic(partitions=2)
    _produce(bootstrap, topic, 5, partition=1)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.delete_records({KTopicPartition(topic, 1): 3})
    finally:
        admin.close()
    assert result[KTopicPartition(topic, 1)]["low_watermark"] == 3


def test_bad_offsets_unknown_partitions_and_compacted_topics_are_refused(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    _produce(bootstrap, topic, 3)
    assert _wire_delete(bootstrap, topic, {0: 4}) == {0: (ErrorCode.offset_out_of_range, -1)}
    assert _wire_delete(bootstrap, topic, {0: -2}) == {0: (ErrorCode.offset_out_of_range, -1)}
    assert _wire_delete(bootstrap, topic, {0: 3}) == {0: (ErrorCode.none, 3)}  # exactly the high watermark
    assert _wire_delete(bootstrap, topic, {7: 0}) == {7: (ErrorCode.unknown_topic_or_partition, -1)}
    assert _wire_delete(bootstrap, "no-such-" + uuid.uuid4().hex, {0: 0}) == {
        0: (ErrorCode.unknown_topic_or_partition, -1)}
    assert _wire_delete(bootstrap, "__consumer_offsets", {0: 0}) == {0: (ErrorCode.invalid_topic_exception, -1)}
    compacted = make_topic(partitions=1, config={"cleanup.policy": "compact"})
    assert _wire_delete(bootstrap, compacted, {0: 0}) == {0: (ErrorCode.policy_violation, -1)}
    both = make_topic(partitions=1, config={"cleanup.policy": "compact,delete"})
    assert _wire_delete(bootstrap, both, {0: 0}) == {0: (ErrorCode.none, 0)}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(KafkaException) as info:
        _delete(admin, topic, 99)
    assert info.value.args[0].name() == "OFFSET_OUT_OF_RANGE"


def test_the_log_start_offset_survives_a_restart_and_whole_segments_go(tmp_path):
    from pyspark_kafka.broker import EmbeddedBroker

    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data, config={"log.segment.bytes": "1024"}) as broker:
        topic = create_topic(broker.bootstrap_servers, "dr-restart", 1)
        p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
        for i in range(40):
            p.produce(topic, value=b"x" * 100, partition=0)
            p.flush(DEADLINE_S)
        segments_before = sorted((data / f"{topic}-0").glob("*.log"))
        assert len(segments_before) > 5
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert _delete(admin, topic, 25).low_watermark == 25
        remaining = sorted(int(f.stem) for f in (data / f"{topic}-0").glob("*.log"))
        assert remaining[0] <= 25 and (len(remaining) == 1 or remaining[1] > 25)  # wholly-below segments gone
        assert len(remaining) < len(segments_before)
    with EmbeddedBroker(data_dir=data) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert _earliest(admin, topic) == 25
        assert _first_readable(broker.bootstrap_servers, topic, 25) == 25
        assert _first_readable(broker.bootstrap_servers, topic, 24) == "_AUTO_OFFSET_RESET"
