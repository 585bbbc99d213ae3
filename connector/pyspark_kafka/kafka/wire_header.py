"""Kafka's request and response header rule, defined once for every client and server of the package.

The rule (Kafka's ``RequestHeader``/``ResponseHeader`` schemas, KIP-482 flexible versions, KIP-511):

- a request carries header v2 when its API version is flexible, else header v1 (api key, api
  version, correlation id, nullable client id; v2 adds tagged fields);
- a response carries header v1 when its version is flexible, else v0 (correlation id only), except
  ApiVersions (api key 18), whose response header is always v0 so that a client can read it before
  it knows which versions the broker speaks.

Used by the broker's request decoder and response encoder, the Raft transport, the cluster's peer
client, the columnar reader's fetch client and the test-cluster helpers. Imports nothing from the
package but :mod:`pyspark_kafka.kafka.record_format` (a module both sides share, like that one).

The wire's unsigned varint (compact lengths and counts, KIP-482), :func:`encode_uvarint` and
:func:`read_uvarint`, is defined in :mod:`pyspark_kafka.kafka.record_format` next to the record's zigzag
varints that build on it (that module must not import kio: the columnar reader's workers load it)
and re-exported here for the protocol's users.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from pyspark_kafka.kafka.record_format import encode_uvarint, read_uvarint  # noqa: F401 - the wire's unsigned varint, re-exported

API_VERSIONS_KEY = 18
"""ApiVersions: its responses use header v0 whatever the version (KIP-511)."""

_SIZE = struct.Struct(">i")


def request_header_class(flexible: bool) -> type:
    """kio's request header dataclass for a request whose version is (not) flexible: v2 or v1."""
    return RequestHeaderV2 if flexible else RequestHeaderV1


def response_header_version(api_key: int, flexible: bool) -> int:
    """0 or 1: a flexible response uses header v1, except ApiVersions (always v0, KIP-511)."""
    return 1 if flexible and api_key != API_VERSIONS_KEY else 0


def response_header_class(api_key: int, flexible: bool) -> type:
    """kio's response header dataclass (v1 or v0) by :func:`response_header_version`."""
    return ResponseHeaderV1 if response_header_version(api_key, flexible) else ResponseHeaderV0


def encode_request(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """One whole request frame, the 4-byte size prefix included: the header of :func:`request_header_class`
    (api key and version from the kio request dataclass ``request``), then the request body."""
    header_cls = request_header_class(request.__flexible__)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_cls)(buf, header_cls(request_api_key=request.__api_key__,
                                              request_api_version=request.__version__,
                                              correlation_id=correlation_id, client_id=client_id))
    entity_writer(type(request))(buf, request)
    frame = buf.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def decode_response(frame: bytes, api_key: int, response_type: type) -> tuple[int, Any]:
    """``(correlation id, response)`` of a response frame (size prefix removed) to a request of
    ``api_key`` answered as kio dataclass ``response_type``. kio's decoding errors pass through
    (``ValueError``, ``struct.error``, ...): callers name the broker."""
    header_cls = response_header_class(api_key, response_type.__flexible__)
    header, used = entity_reader(header_cls)(frame, 0)
    response, _ = entity_reader(response_type)(frame, used)
    return header.correlation_id, response
