"""DescribeTopicPartitions (API 75, KIP-966) over a raw socket: topics in name order, partitions paged
with a cursor, unknown and illegal names, a cursor outside the requested topics; answers checked
against what Apache Kafka 4.3.1 sends for the same requests (the differential run compares them
field by field too)."""

from __future__ import annotations

import struct

import pytest
from kio.schema.describe_topic_partitions.v0.request import Cursor, DescribeTopicPartitionsRequest, TopicRequest
from kio.static.primitive import i32

from support.malformed import assert_nothing_lost
from support.wire import WireClient

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, INVALID_REQUEST = 0, 3, 17, 42
ALL_TOPIC_OPERATIONS = 3576  # Kafka without an authorizer: READ..ALTER_CONFIGS


def describe(bootstrap, names, limit=2000, cursor=None):
    request = DescribeTopicPartitionsRequest(
        topics=tuple(TopicRequest(name=n) for n in names), response_partition_limit=i32(limit),
        cursor=None if cursor is None else Cursor(topic_name=cursor[0], partition_index=i32(cursor[1])))
    with WireClient(bootstrap) as c:
        return c.request(request)


def shape(response):
    """``([(topic, error, [partitions])], next cursor)`` of a response."""
    topics = [(t.name, int(t.error_code), [p.partition_index for p in t.partitions]) for t in response.topics]
    cursor = response.next_cursor
    return topics, None if cursor is None else (cursor.topic_name, cursor.partition_index)


@pytest.fixture(scope="module")
def two_topics(broker):
    from support.topics import create_topic

    prefix = "dtp-" + struct.pack(">I", id(broker) & 0xFFFFFFFF).hex()
    return (create_topic(broker.bootstrap_servers, prefix + "-a", 3),
            create_topic(broker.bootstrap_servers, prefix + "-b", 2))


def test_partitions_leader_replicas_and_topic_fields(bootstrap, two_topics, broker):
    a, _ = two_topics
    response = describe(bootstrap, [a])
    (topic,) = response.topics
    info = broker.broker.replica_manager.logs.topic(a)
    assert (topic.error_code, topic.name, topic.topic_id, topic.is_internal) == (NONE, a, info.topic_id, False)
    assert topic.topic_authorized_operations == ALL_TOPIC_OPERATIONS and response.next_cursor is None
    node = broker.broker.node_id
    assert [(p.partition_index, p.error_code, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes,
             p.eligible_leader_replicas, p.last_known_elr, p.offline_replicas) for p in topic.partitions] == [
        (i, NONE, node, 0, (node,), (node,), (), (), ()) for i in range(3)]


def test_pages_follow_the_cursor(bootstrap, two_topics):
    a, b = two_topics
    # names answered in order whatever the request's order; the limit stops inside b
    assert shape(describe(bootstrap, [b, a], limit=4)) == ([(a, NONE, [0, 1, 2]), (b, NONE, [0])], (b, 1))
    assert shape(describe(bootstrap, [b, a], limit=4, cursor=(b, 1))) == ([(b, NONE, [1])], None)
    assert shape(describe(bootstrap, [a, b], limit=2, cursor=(a, 2))) == ([(a, NONE, [2]), (b, NONE, [0])], (b, 1))
    # the limit reached at a topic boundary: the cursor names the next topic at partition 0
    assert shape(describe(bootstrap, [a, b], limit=3)) == ([(a, NONE, [0, 1, 2])], (b, 0))
    # limits below 1 count as 1; a cursor past the last partition gives an empty page
    assert shape(describe(bootstrap, [a], limit=0)) == ([(a, NONE, [0])], (a, 1))
    assert shape(describe(bootstrap, [a], limit=-1)) == ([(a, NONE, [0])], (a, 1))
    assert shape(describe(bootstrap, [a], cursor=(a, 7))) == ([(a, NONE, [])], None)
    assert shape(describe(bootstrap, [b, b])) == ([(b, NONE, [0, 1])], None)  # a name asked twice: once


def test_all_topics_when_none_is_named(bootstrap, two_topics):
    a, b = two_topics
    topics, cursor = shape(describe(bootstrap, [], cursor=(a, 1)))
    assert topics[:2] == [(a, NONE, [1, 2]), (b, NONE, [0, 1])] and cursor is None
    assert all(name >= a for name, _, _ in topics)


def test_unknown_and_illegal_names(bootstrap, two_topics):
    a, _ = two_topics
    response = describe(bootstrap, ["zz-no-such-topic", "bad name!", a])
    assert shape(response) == ([("bad name!", INVALID_TOPIC_EXCEPTION, []), (a, NONE, [0, 1, 2]),
                                ("zz-no-such-topic", UNKNOWN_TOPIC_OR_PARTITION, [])], None)
    assert [t.topic_id for t in response.topics if t.error_code] == [None, None]  # zero UUID
    assert {t.topic_authorized_operations for t in response.topics} == {ALL_TOPIC_OPERATIONS}


def test_a_cursor_outside_the_requested_topics_is_invalid_request(bootstrap, two_topics, written):
    a, b = two_topics
    response = describe(bootstrap, [b, b], cursor=(a, 0))
    assert shape(response) == ([(b, INVALID_REQUEST, []), (b, INVALID_REQUEST, [])], None)
    assert response.topics[0].topic_authorized_operations == -(2**31)
    assert_nothing_lost(bootstrap, written)


def _dtp_frame(body: bytes) -> bytes:
    client = b"bad"
    payload = struct.pack(">hhih", 75, 0, 9, len(client)) + client + b"\x00" + body  # header v2: no tags
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("body", [
    pytest.param(b"\x06\x02a", id="topics-array-ends-early"),
    pytest.param(b"\x00" + struct.pack(">i", 10) + b"\xff\x00", id="null-topics-array"),
    pytest.param(b"\xff\xff\xff\xff\x0f", id="topics-count-2^32"),
    pytest.param(b"\x02\x7fab\x00" + struct.pack(">i", 10) + b"\xff\x00", id="topic-name-longer-than-frame"),
    pytest.param(b"\x01" + struct.pack(">i", 10) + b"\x01\x03ab", id="cursor-cut-short"),
])
def test_malformed_requests_close_only_that_connection(bootstrap, written, body):
    with WireClient(bootstrap) as bad, WireClient(bootstrap) as other:
        bad.send_raw(_dtp_frame(body))
        assert bad.is_closed_by_broker()
        a = other.request(DescribeTopicPartitionsRequest(topics=(TopicRequest(name=written[0]),)))
        assert a.topics[0].error_code == NONE  # the broker serves the next client
    assert_nothing_lost(bootstrap, written)
