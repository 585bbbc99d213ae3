"""The request/response header rule, defined once (:mod:`pyspark_kafka.kafka.wire_header`), checked against
what independent implementations put on the wire: kafka-python's encoder for the request header
and Kafka's ``ByteUtils`` examples for unsigned varints."""

from __future__ import annotations

import struct

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from pyspark_kafka.kafka import wire_header


@pytest.mark.parametrize("n, encoded", [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"),
                                        (300, b"\xac\x02"), (2**31 - 1, b"\xff\xff\xff\xff\x07")])
def test_unsigned_varints_as_kafka_writes_them(n, encoded):
    assert wire_header.encode_uvarint(n) == encoded
    with pytest.raises(ValueError, match="cannot hold -1"):
        wire_header.encode_uvarint(-1)


def test_a_non_flexible_request_carries_header_v1_as_kafka_python_writes_it():
    from kafka.protocol.metadata import MetadataRequest as TheirMetadataRequest
    from kafka.protocol.parser import KafkaProtocol
    from kio.schema.metadata.v1.request import MetadataRequest, MetadataRequestTopic

    ours = wire_header.encode_request(MetadataRequest(topics=(MetadataRequestTopic(name="t"),)), 7, "cid")
    theirs = KafkaProtocol(client_id="cid")
    theirs.send_request(TheirMetadataRequest[1](topics=["t"]), correlation_id=7)
    assert ours == theirs.send_bytes()


def test_flexible_versions_use_header_v2_and_response_v1_except_api_versions():
    from kio.schema.api_versions.v3.response import ApiVersionsResponse
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.metadata.v12.response import MetadataResponse

    frame = wire_header.encode_request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                       include_topic_authorized_operations=False), 9, "c")
    size, key, version, correlation, client_len = struct.unpack_from(">ihhih", frame)
    assert (size, key, version, correlation, client_len) == (len(frame) - 4, 3, 12, 9, 1)
    assert frame[14:15] == b"c" and frame[15] == 0  # client id (legacy string), then the empty tagged fields
    assert wire_header.response_header_class(18, ApiVersionsResponse.__flexible__).__name__ == "ResponseHeader"
    assert wire_header.response_header_version(18, True) == 0
    assert wire_header.response_header_version(3, MetadataResponse.__flexible__) == 1
    assert wire_header.response_header_version(3, False) == 0
