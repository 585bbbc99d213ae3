"""Request frames are bounds-checked before kio's native decoder sees them (request_bounds).

A lying array count once made kio reserve 32 GiB and abort the broker process; null arrays in
non-nullable fields reached handlers as ``None``. Every real client frame must still pass.
"""

from __future__ import annotations

import struct

import pytest
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2

from support.fuzz_corpus import REGRESSIONS_DIR, read_frames, seeds
from pyspark_kafka.broker import protocol
from pyspark_kafka.broker.request_bounds import FrameBoundsError, check_frame
from support.malformed import assert_nothing_lost
from support.wire import WireClient


def _schemas(frame: bytes):
    api_key, version = struct.unpack_from(">hh", frame)
    schema = protocol.request_schema(api_key, version)
    return (RequestHeaderV2 if schema.__flexible__ else RequestHeaderV1), schema


def test_every_captured_client_frame_passes():
    frames = seeds()
    assert len(frames) > 100
    for frame in frames:
        check_frame(frame, *_schemas(frame))  # raises on a false positive


@pytest.mark.parametrize("path", sorted(REGRESSIONS_DIR.glob("native-abort-*.bin")), ids=lambda p: p.stem)
def test_lying_array_counts_are_refused_before_decoding(path):
    (wire,) = read_frames(path)
    frame = wire[4:]
    with pytest.raises(FrameBoundsError, match="cannot fit"):
        check_frame(frame, *_schemas(frame))


def _header_v2(api_key: int, version: int) -> bytes:
    client = b"null-array"
    return struct.pack(">hhih", api_key, version, 99, len(client)) + client + b"\x00"


NULL_ARRAYS = {
    # (api key, version): body with the named array null (compact array length 0 = null)
    "FindCoordinator-v6-coordinator_keys": (10, 6, b"\x00" + b"\x00" + b"\x00"),
    "DescribeGroups-v5-groups": (15, 5, b"\x00" + b"\x00" + b"\x00"),
    "ListOffsets-v7-topics": (2, 7, struct.pack(">ib", -1, 0) + b"\x00" + b"\x00"),
    "TxnOffsetCommit-v3-topics": (28, 3, b"\x03tx" + b"\x02g" + struct.pack(">qhi", 1, 0, -1) + b"\x01" + b"\x00"
                                  + b"\x00" + b"\x00"),
}


@pytest.mark.parametrize("case", sorted(NULL_ARRAYS))
def test_null_non_nullable_arrays_close_the_connection(bootstrap, written, case):  # noqa: F811
    """Kafka's generated parsers refuse "non-nullable field ... was serialized as null" and the
    broker closes the connection; so does ours, instead of a handler's TypeError."""
    api_key, version, body = NULL_ARRAYS[case]
    frame = _header_v2(api_key, version) + body
    with pytest.raises(FrameBoundsError, match="non-nullable field"):
        check_frame(frame, *_schemas(frame))
    with WireClient(bootstrap) as c:
        c.send_raw(struct.pack(">i", len(frame)) + frame)
        assert c.is_closed_by_broker()
    assert_nothing_lost(bootstrap, written)


def test_truncated_varint_and_tag_sizes_are_refused():
    # Metadata v12 (flexible): topics compact array with a varint that never ends.
    frame = _header_v2(3, 12) + b"\xff\xff\xff\xff\xff\xff"
    with pytest.raises(FrameBoundsError, match="varint"):
        check_frame(frame, *_schemas(frame))
    # ApiVersions v3 with a tagged field whose size runs past the frame.
    body = b"\x02a\x021" + b"\x01" + b"\x05" + b"\x7f"  # client software name/version, 1 tag (5) of 127 bytes
    frame = _header_v2(18, 3) + body
    with pytest.raises(FrameBoundsError, match="needs 127 bytes"):
        check_frame(frame, *_schemas(frame))


def test_unknown_tagged_fields_are_ignored_as_kip_482_says(bootstrap):
    """A newer client may add tagged fields at a version we serve; Kafka skips unknown tags."""
    from kio.schema.api_versions.v3.response import ApiVersionsResponse
    from kio.schema.metadata.v12.response import MetadataResponse

    from support.wire import decode_response

    unknown = b"\x02" + b"\x07\x03abc" + b"\x09\x00"  # two unknown tags (7: 3 bytes, 9: empty)
    api_versions = _header_v2(18, 3) + b"\x02a\x021" + unknown
    # Metadata v12: topics null (all), allow auto-create false, include authorized ops false, unknown tags.
    metadata = _header_v2(3, 12) + b"\x00" + b"\x00" + b"\x00" + unknown
    with WireClient(bootstrap) as c:
        c.send_raw(struct.pack(">i", len(api_versions)) + api_versions)
        _, av = decode_response(c.recv_frame(), 18, 3)
        c.send_raw(struct.pack(">i", len(metadata)) + metadata)
        _, md = decode_response(c.recv_frame(), 3, 12)
    assert isinstance(av, ApiVersionsResponse) and av.error_code == 0
    assert isinstance(md, MetadataResponse) and md.brokers
