"""Malformed input over a raw socket: each case gets the Kafka error or a closed connection for that
client only; the broker keeps serving other clients and nothing written before is lost."""

from __future__ import annotations

import datetime
import os
import struct

import pytest
from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.fetch.v17.request import FetchRequest as FetchV17
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from support.client_records import consume
from support.malformed import assert_nothing_lost, produce_request
from support.wire import WireClient, record_batch

CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
UNSUPPORTED_VERSION = 35
ILLEGAL_NAMES = ["../x", "a" * 250, ".", "..", "with space", ""]


def frame(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    client = b"bad-client"
    payload = struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client + body
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("data", [
    pytest.param(struct.pack(">i", 100) + b"\x00\x03" + b"\x00" * 8, id="truncated-frame"),
    pytest.param(struct.pack(">i", 4) + b"\x00\x03\x00\x01", id="size-below-header"),
    pytest.param(struct.pack(">i", -5), id="negative-size"),
    pytest.param(struct.pack(">i", 104857600 + 1), id="oversize-frame"),
    pytest.param(frame(3, 12, os.urandom(7) + b"\xff" * 32), id="garbage-body"),
    pytest.param(frame(29999, 0, b""), id="unknown-api-key"),
    pytest.param(frame(17, 1, b""), id="sasl-not-served"),
    pytest.param(frame(3, 99, b"\x00"), id="unsupported-version-no-schema"),
    pytest.param(frame(0, 2, b"\x00"), id="produce-below-v3"),
])
def test_bad_frames_close_only_that_connection(bootstrap, written, data):
    with WireClient(bootstrap) as bad, WireClient(bootstrap) as other:
        bad.send_raw(data)
        if data.startswith(struct.pack(">i", 100)):
            bad.sock.shutdown(1)  # the rest of the truncated frame never comes
        assert bad.is_closed_by_broker()
        # Another client on the same broker is unaffected.
        md = other.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=written[0]),),
                                           allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        assert md.topics[0].error_code == 0
    assert_nothing_lost(bootstrap, written)


def test_unsupported_version_with_a_schema_gets_unsupported_version_error(bootstrap, written):
    request = FetchV17(max_wait=datetime.timedelta(0), min_bytes=0, topics=(), forgotten_topics_data=(), rack_id="")
    with WireClient(bootstrap) as c:
        resp = c.request(request)
    assert resp.error_code == UNSUPPORTED_VERSION


def test_bad_crc_is_corrupt_message_and_nothing_is_appended(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    good = record_batch([b"good-1", b"good-2"])
    bad = bytearray(record_batch([b"evil"]))
    bad[-1] ^= 0xFF  # payload byte flipped: the CRC32C no longer matches
    with WireClient(bootstrap) as c:
        ok = c.request(produce_request(topic, good)).responses[0].partition_responses[0]
        assert (ok.error_code, ok.base_offset) == (0, 0)
        # One bad batch after a good one in the same record set: the whole set is refused.
        rejected = c.request(produce_request(topic, good + bytes(bad))).responses[0].partition_responses[0]
        assert rejected.error_code == CORRUPT_MESSAGE
        again = c.request(produce_request(topic, good)).responses[0].partition_responses[0]
        assert (again.error_code, again.base_offset) == (0, 2)  # the connection still works, no gap
    got = consume(bootstrap, topic, 4)
    assert [m.value() for m in got] == [b"good-1", b"good-2", b"good-1", b"good-2"]


def test_failed_acks0_produce_closes_the_connection(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    bad = bytearray(record_batch([b"evil"]))
    bad[-1] ^= 0xFF
    with WireClient(bootstrap) as c:
        c.send(produce_request(topic, bytes(bad), acks=0))
        assert c.is_closed_by_broker()  # Kafka closes so the client refreshes metadata


def test_batch_larger_than_max_message_bytes_is_message_too_large(bootstrap, make_topic):
    topic = make_topic(partitions=1, config={"max.message.bytes": "1000"})
    with WireClient(bootstrap) as c:
        resp = c.request(produce_request(topic, record_batch([b"x" * 5000])))
    assert resp.responses[0].partition_responses[0].error_code == MESSAGE_TOO_LARGE


@pytest.mark.parametrize("name", ILLEGAL_NAMES, ids=["dotdot-slash", "250-chars", "dot", "dotdot", "space", "empty"])
def test_illegal_topic_names_are_invalid_topic_everywhere(bootstrap, broker, written, name):
    with WireClient(bootstrap) as c:
        produced = c.request(produce_request(name, record_batch([b"v"]))).responses[0].partition_responses[0]
        created = c.request(CreateTopicsRequest(topics=(CreatableTopic(
            name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()),),
            timeout=datetime.timedelta(seconds=5), validate_only=False)).topics[0]
        md = c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=name),),
                                       allow_auto_topic_creation=True,
                                       include_topic_authorized_operations=False)).topics[0]
    assert produced.error_code == INVALID_TOPIC_EXCEPTION
    assert created.error_code == INVALID_TOPIC_EXCEPTION
    assert md.error_code == INVALID_TOPIC_EXCEPTION
    # Nothing was created inside or outside the data directory.
    parent = broker.data_dir.parent
    assert not any(p.name.startswith("x-") for p in parent.iterdir())
    assert name not in {d.name.rsplit("-", 1)[0] for d in broker.data_dir.iterdir()}
    assert_nothing_lost(bootstrap, written)
