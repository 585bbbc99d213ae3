"""The varints of Kafka's formats, defined once in pyspark_kafka.kafka.record_format, agree everywhere.

One corpus of valid and malformed varints (every int32/int64 edge value, non-canonical but valid
encodings, truncations, over-long encodings, values outside their type, random bytes), each read
by the scalar decoder (``read_zigzag``), the vectorized one (``zigzag_varints``, all cases in one
call) and, when numba is installed, the columnar reader's compiled copy (``decode_kernel._varint``):
same value and next position where one accepts, the same refusals. Each case sits between other
cases' bytes, so a decoder that reads past its ``end`` sees foreign bytes. The unsigned varint of
the wire protocol (``read_uvarint``) is checked against its encoder and the request-bounds
checker's messages. Runs in well under a second (the kernel compiles once, then is cached on disk).
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2

from pyspark_kafka.broker import protocol
from pyspark_kafka.broker.request_bounds import FrameBoundsError, check_frame
from pyspark_kafka.kafka.record_codecs import CorruptCompressedDataError, _uvarint_le
from pyspark_kafka.kafka.record_format import (
    MAX_VARINT_BYTES,
    MAX_VARLONG_BYTES,
    VARINT_PAD,
    VarintError,
    encode_uvarint,
    encode_zigzag,
    read_uvarint,
    read_zigzag,
    zigzag_varints,
)

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)


def _edge_values() -> list[int]:
    values = {0, 1, -1, *INT32, *INT64}
    for k in range(1, 64):
        values.update({(1 << k) - 1, 1 << k, -(1 << k), -(1 << k) - 1})
    return sorted(v for v in values if INT64[0] <= v <= INT64[1])


def _corpus() -> list[tuple[bytes, int]]:
    """``(bytes, end)`` cases: the decoders read at 0 and no further than ``end`` (<= len(bytes))."""
    rng = random.Random(38)
    cases = []
    for value in _edge_values() + [rng.randrange(*INT64) for _ in range(200)]:
        enc = encode_zigzag(value)
        cases.append((enc, len(enc)))
        cases.append((enc + b"\x01", len(enc)))  # a byte after the end: must not be read
        cases.append((enc, len(enc) - 1))  # truncated: the end falls inside the varint
    for size in range(1, 12):  # non-canonical (valid up to the type's size) and over-long encodings of 0 and -1
        for last in (0x00, 0x01, 0x02, 0x0F, 0x10, 0x7F):
            enc = b"\x80" * (size - 1) + bytes([last])
            cases.append((enc, len(enc)))
    cases += [(b"", 0), (b"\x80", 1), (b"\xff" * 12, 12), (b"\xff" * 12, 3), (b"\x00", 0)]
    for _ in range(800):  # random bytes, biased to continuation bits
        data = bytes(rng.choice([rng.randrange(256), rng.randrange(128, 256)]) for _ in range(rng.randrange(13)))
        cases.append((data, rng.randrange(len(data) + 1)))
    return cases


CASES = _corpus()


def _scalar(buf: bytes, pos: int, end: int, max_bytes: int):
    try:
        value, after = read_zigzag(buf, pos, end, max_bytes)
    except VarintError:
        return None
    return value, after


@pytest.mark.parametrize("max_bytes", [MAX_VARINT_BYTES, MAX_VARLONG_BYTES])
def test_scalar_vectorized_and_kernel_decoders_agree(max_bytes):
    # All cases in one buffer, each followed by the next case's bytes (a read past ``end`` sees them).
    starts, limits, chunks, at = [], [], [], 0
    for data, end in CASES:
        starts.append(at)
        limits.append(at + end)
        chunks.append(data)
        at += len(data)
    joined = b"".join(chunks)
    scalar = [_scalar(joined, s, e, max_bytes) for s, e in zip(starts, limits)]

    buf = np.frombuffer(joined + bytes(VARINT_PAD), np.uint8)
    values, after, ok = zigzag_varints(buf, np.array(starts, np.int64), np.array(limits, np.int64), max_bytes)
    vector = [(int(v), int(a)) if k else None for v, a, k in zip(values, after, ok)]
    assert vector == scalar

    low, high = INT32 if max_bytes == MAX_VARINT_BYTES else INT64
    accepted = [r for r in scalar if r is not None]
    assert all(low <= v <= high for v, _ in accepted)
    assert len(accepted) > 300 and len(scalar) - len(accepted) > 300  # both outcomes exercised

    kernel = pytest.importorskip("pyspark_kafka.read.decode_kernel")
    unpadded = np.frombuffer(joined, np.uint8)
    for s, e, expected in zip(starts, limits, scalar):
        value, pos, good = kernel._varint(unpadded, np.int64(s), np.int64(e), max_bytes)
        assert ((int(value), int(pos)) if good else None) == expected, (joined[s:e].hex(), max_bytes)


def test_encoders_round_trip_and_refuse_what_they_cannot_hold():
    for value in _edge_values():
        enc = encode_zigzag(value)
        assert read_zigzag(enc, 0, len(enc)) == (value, len(enc))
        assert len(enc) <= (MAX_VARINT_BYTES if INT32[0] <= value <= INT32[1] else MAX_VARLONG_BYTES)
    for n in (0, 1, 127, 128, 300, 16383, 16384, (1 << 32) - 1):
        enc = encode_uvarint(n)
        assert read_uvarint(enc, 0, len(enc)) == (n, len(enc))
    assert encode_zigzag(-1) == b"\x01" and encode_zigzag(300) == b"\xd8\x04"  # Kafka's ByteUtils.writeVarlong
    with pytest.raises(ValueError, match="outside int64"):
        encode_zigzag(1 << 63)
    with pytest.raises(ValueError, match="cannot hold -1"):
        encode_uvarint(-1)


def test_unsigned_varint_refusals_name_their_cause():
    assert read_uvarint(b"\x80\x80\x80\x80\x0f", 0, 5) == (0xF << 28, 5)
    with pytest.raises(VarintError, match="longer than 5 bytes") as exc:
        read_uvarint(b"\x80" * 6, 0, 6)
    assert not exc.value.truncated
    with pytest.raises(VarintError, match="runs past") as exc:
        read_uvarint(b"\x80\x80\x01", 0, 2)
    assert exc.value.truncated
    # snappy's length preamble is the same LEB128 varint (snappy's format_description.txt)
    assert _uvarint_le(b"\xfe\xff\x7f", 0) == (2097150, 3)
    for bad in (b"\x80" * 6, b"\x80\x80"):
        with pytest.raises(CorruptCompressedDataError, match="malformed length preamble"):
            _uvarint_le(bad, 0)


@pytest.mark.parametrize(("tags", "message"), [(b"\x80" * 6, "varint longer than 5 bytes"),
                                                (b"\x80\x80", "the frame ends inside a varint")])
def test_request_bounds_names_an_overlong_or_truncated_varint(tags, message):
    """A flexible request header whose tagged-fields count is malformed (FindCoordinator v6)."""
    schema = protocol.request_schema(10, 6)
    frame = struct.pack(">hhih", 10, 6, 1, 1) + b"c" + tags
    with pytest.raises(FrameBoundsError, match=message):
        check_frame(frame, RequestHeaderV2, schema)
