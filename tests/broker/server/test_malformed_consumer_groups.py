"""Malformed input to the KIP-848 APIs (ConsumerGroupHeartbeat 68, ConsumerGroupDescribe 69): broken frames
close only that connection, odd but decodable values get Kafka's answers, and neither changes a
consumer group that lives beside them nor loses the records written before (``written``)."""

from __future__ import annotations

import datetime
import struct
import uuid

import pytest
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest, TopicPartitions

from pyspark_kafka.broker.errors import ErrorCode
from support.consumer_groups import Member, describe
from support.malformed import assert_nothing_lost
from support.topics import create_topic
from support.wire import WireClient, encode_request


@pytest.fixture(scope="module")
def live_group(bootstrap):
    """A consumer group with one member owning a 2-partition topic, made before any bad input."""
    topic = create_topic(bootstrap, f"kip848-guard-{uuid.uuid4().hex[:6]}", 2)
    group = f"kip848-guard-{uuid.uuid4().hex[:6]}"
    with WireClient(bootstrap) as c:
        m = Member(c, group, (topic,))
        assert m.join().error_code == 0
    return group, m.member_id, m.epoch


def assert_group_intact(bootstrap, live_group):
    group, member_id, epoch = live_group
    with WireClient(bootstrap) as c:
        (g,) = describe(c, group)
        assert (g.error_code, [(x.member_id, x.member_epoch) for x in g.members]) == (0, [(member_id, epoch)])
        assert sum(len(t.partitions) for t in g.members[0].assignment.topic_partitions) == 2


def _heartbeat(group: str = "g", **fields) -> ConsumerGroupHeartbeatRequest:
    values = dict(group_id=group, member_id=str(uuid.uuid4()), member_epoch=0, instance_id=None, rack_id=None,
                  rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=("t",),
                  subscribed_topic_regex=None, server_assignor=None, topic_partitions=())
    values.update(fields)
    return ConsumerGroupHeartbeatRequest(**values)


GOOD_HEARTBEAT = encode_request(_heartbeat(), 7)
GOOD_DESCRIBE = encode_request(ConsumerGroupDescribeRequest(group_ids=("g",), include_authorized_operations=False), 7)


def _resized(frame_without_size: bytes) -> bytes:
    return struct.pack(">i", len(frame_without_size)) + frame_without_size


@pytest.mark.parametrize("data,answered", [
    pytest.param(_resized(GOOD_HEARTBEAT[4:-9]), False, id="heartbeat-truncated"),
    pytest.param(_resized(GOOD_HEARTBEAT[4:30] + b"\xff" * 40), False, id="heartbeat-garbage-tail"),
    # bytes after a complete request are not read (as Kafka, which parses the schema and stops)
    pytest.param(_resized(GOOD_HEARTBEAT[4:] + b"\x00" * 5), True, id="heartbeat-trailing-bytes"),
    pytest.param(_resized(GOOD_DESCRIBE[4:-3] + b"\xff\xff\xff\xff\x0f"), False, id="describe-huge-array-count"),
    pytest.param(_resized(GOOD_DESCRIBE[4:-2]), False, id="describe-truncated"),
])
def test_broken_frames_close_only_that_connection(bootstrap, written, live_group, data, answered):
    with WireClient(bootstrap) as bad, WireClient(bootstrap) as other:
        bad.send_raw(data)
        frame = bad.recv_frame()  # an answer, or the connection closed: never a hang
        assert (frame is not None) == answered
        if not answered:
            assert bad.is_closed_by_broker()
        assert describe(other, live_group[0])[0].error_code == 0
    assert_group_intact(bootstrap, live_group)
    assert_nothing_lost(bootstrap, written)


def test_odd_values_get_answers_and_change_nothing_else(bootstrap, written, live_group):
    topic = create_topic(bootstrap, f"kip848-odd-{uuid.uuid4().hex[:6]}", 1)
    with WireClient(bootstrap) as c:
        group = f"kip848-odd-{uuid.uuid4().hex[:6]}"
        # 20,000 subscribed names that do not exist beside one that does
        r = c.request(_heartbeat(group, subscribed_topic_names=(topic, *(f"none-{i}" for i in range(20_000)))))
        assert (r.error_code, [list(t.partitions) for t in r.assignment.topic_partitions]) == (0, [[0]])
        # owned partitions of an unknown topic id, negative and huge partition ids: ignored, not stored
        r2 = c.request(_heartbeat(group, member_id=r.member_id, member_epoch=r.member_epoch, rebalance_timeout=
                                  datetime.timedelta(milliseconds=-1), subscribed_topic_names=None,
                                  topic_partitions=(TopicPartitions(topic_id=uuid.uuid4(), partitions=(-1, 2**31 - 1)),)))
        assert r2.error_code == 0
        (g,) = describe(c, group)
        assert [sorted(p for t in x.assignment.topic_partitions for p in t.partitions) for x in g.members] == [[0]]
        # a 30,000-character member id and group id are plain strings to Kafka as well
        long_group = "g" * 30_000
        r3 = c.request(_heartbeat(long_group, member_id="m" * 30_000))
        assert r3.error_code == 0 and r3.member_id == "m" * 30_000
        assert c.request(_heartbeat(long_group, member_id="m" * 30_000, member_epoch=-1,
                                    topic_partitions=None)).error_code == 0
        # a group id longer than a __consumer_offsets key can hold: refused before anything is created
        r4 = c.request(_heartbeat("g" * 40_000))
        assert r4.error_code == ErrorCode.invalid_group_id and "at most 32767" in r4.error_message
        assert describe(c, "g" * 40_000)[0].error_code == ErrorCode.group_id_not_found
        # an epoch far ahead and a wrong instance id for the live group's member: refused, member untouched
        name, member_id, epoch = live_group
        assert c.request(_heartbeat(name, member_id=member_id, member_epoch=2**31 - 1, topic_partitions=None,
                                    rebalance_timeout=datetime.timedelta(milliseconds=-1),
                                    subscribed_topic_names=None)).error_code == ErrorCode.fenced_member_epoch
        assert c.request(_heartbeat(name, member_id=member_id, member_epoch=-1, instance_id="someone",
                                    topic_partitions=None)).error_code == ErrorCode.unknown_member_id
        # 5,000 group ids in one ConsumerGroupDescribe: one answer each
        assert len(describe(c, *(f"missing-{i}" for i in range(5000)))) == 5000
    assert_group_intact(bootstrap, live_group)
    assert_nothing_lost(bootstrap, written)
