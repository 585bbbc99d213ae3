"""Framing, ApiVersions rules, correlation ids and pipelining, over a raw socket (kio encoding)."""

from __future__ import annotations

import struct

from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1
from kio.schema.metadata.v12.request import MetadataRequest as MetadataV12
from kio.schema.metadata.v12.request import MetadataRequestTopic as MetadataTopicV12
from support.wire import WireClient, decode_response

UNSUPPORTED_VERSION = 35


def test_api_versions_v3_flexible_lists_the_served_apis(bootstrap):
    with WireClient(bootstrap) as c:
        resp = c.request(ApiVersionsV3(client_software_name="wire-test", client_software_version="1"))
    assert resp.error_code == 0
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    # The core data path and admin APIs, with versions clients use (Produce needs v3+).
    for key in (0, 1, 2, 3, 18, 19, 20, 32, 37, 60):
        assert key in ranges, key
    assert ranges[0][0] == 3
    assert ranges[18] == (0, 4)


def test_api_versions_v0(bootstrap):
    with WireClient(bootstrap) as c:
        resp = c.request(ApiVersionsV0())
    assert resp.error_code == 0
    assert any(k.api_key == 3 for k in resp.api_keys)


def test_unsupported_api_versions_version_gets_v0_response_with_ranges(bootstrap):
    """KIP-511: an unknown ApiVersions version is answered in v0 with UNSUPPORTED_VERSION and our ranges."""
    client_id = b"wire-test"
    body = struct.pack(">hhih", 18, 99, 4242, len(client_id)) + client_id + b"\x00" * 5
    with WireClient(bootstrap) as c:
        c.send_raw(struct.pack(">i", len(body)) + body)
        frame = c.recv_frame()
        assert frame is not None, "the broker closed the connection instead of answering UNSUPPORTED_VERSION"
        cid, resp = decode_response(frame, 18, 0)
        assert cid == 4242
        assert resp.error_code == UNSUPPORTED_VERSION
        assert {k.api_key for k in resp.api_keys} >= {0, 1, 3, 18}
        # The connection stays usable: the client retries with a version from the list.
        assert c.request(ApiVersionsV3(client_software_name="x", client_software_version="1")).error_code == 0


def test_pipelined_requests_are_answered_in_order_with_their_correlation_ids(bootstrap, make_topic):
    topic = make_topic(partitions=2)
    requests = [
        MetadataV12(topics=(MetadataTopicV12(topic_id=None, name=topic),), allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False),
        ApiVersionsV3(client_software_name="x", client_software_version="1"),
        MetadataV1(topics=None),
    ] * 3
    with WireClient(bootstrap) as c:
        # All frames go out before any response is read (librdkafka keeps several in flight).
        frames = b""
        from support.wire import encode_request

        for i, r in enumerate(requests):
            frames += encode_request(r, 1000 + i)
        c.send_raw(frames)
        for i, r in enumerate(requests):
            cid, resp = c.receive(type(r))
            assert cid == 1000 + i
        # Spot-check the contents of the last Metadata v1 (all topics).
        assert topic in {t.name for t in resp.topics}


def test_metadata_advertises_the_bound_port(broker, bootstrap):
    with WireClient(bootstrap) as c:
        resp = c.request(MetadataV1(topics=None))
    assert [(b.host, b.port) for b in resp.brokers] == [("127.0.0.1", broker.port)]
    assert broker.port != 0
    assert resp.controller_id == resp.brokers[0].node_id
