"""Kafka wire protocol on top of kio: framing, headers, request decoding, response encoding.

kio (generated from Kafka's JSON message schemas) does all field encoding; this module only

- splits a frame (after its 4-byte big-endian size prefix) into request header and body,
- reads the request header and writes the response header by the rule of
  :mod:`pyspark_kafka.kafka.wire_header` (defined there once for every client and server),
- turns the plain ``dict``/``list`` values the handlers return into kio dataclasses of the
  negotiated version (:func:`build`), so one handler serves every version it advertises,
- encodes a response into a list of chunks where each fetched record set may stay a file
  slice (:class:`FileChunk`) that the server sends with ``sendfile`` (zero copy).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import os
import struct
import typing
import uuid
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from pyspark_kafka.broker.request_bounds import FrameBoundsError, check_frame
from pyspark_kafka.kafka.wire_header import API_VERSIONS_KEY, request_header_class, response_header_class  # noqa: F401 - API_VERSIONS_KEY re-exported for the server
from pyspark_kafka.kafka.wire_header import encode_uvarint as _uvarint

_INT16_INT16_INT32 = struct.Struct(">hhi")
_UTC = datetime.timezone.utc


class ProtocolError(Exception):
    """A frame that cannot be parsed as a Kafka request; the connection is closed."""


@dataclass(frozen=True)
class RequestHeader:
    """The parsed request header: api key, api version, correlation id (int32), client id."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """Return ``(api_key, api_version, correlation_id)`` from the first 8 bytes of ``frame``.

    These three fields have the same layout in every request header version, so they can be
    read before knowing whether the version is supported. Raises :class:`ProtocolError` when
    the frame is shorter than 8 bytes.
    """
    if len(frame) < 8:
        raise ProtocolError(f"request frame of {len(frame)} bytes is shorter than a request header")
    return _INT16_INT16_INT32.unpack_from(frame, 0)


@functools.cache
def request_schema(api_key: int, version: int) -> type:
    """The kio request dataclass for ``api_key`` at ``version`` (KeyError-free: raises ProtocolError).

    Cached: kio resolves the schema module by name on every call, which costs more than decoding
    a small request.
    """
    try:
        return load_request_schema(api_key, version)
    except Exception as exc:  # kio raises its own index errors or import errors
        raise ProtocolError(f"no schema for api key {api_key} version {version}: {exc}") from None


@functools.cache
def response_schema(api_key: int, version: int) -> type:
    """The kio response dataclass for ``api_key`` at ``version`` (cached); kio's errors pass through."""
    return load_response_schema(api_key, version)


def decode_request(frame: bytes, api_key: int, version: int) -> tuple[RequestHeader, Any]:
    """Decode a whole request frame (without size prefix) into ``(header, kio request entity)``.

    The request header is v2 when the request version is flexible, else v1. Raises
    :class:`ProtocolError` when the bytes do not match the schema, or when a count or length
    cannot fit the frame or a non-nullable field is null (:mod:`request_bounds`, checked first). Trailing bytes are ignored,
    as Kafka's own parser does (librdkafka sends a few extra bytes with Metadata v12).
    """
    schema = request_schema(api_key, version)
    header_schema = request_header_class(schema.__flexible__)
    try:
        frame = check_frame(frame, header_schema, schema)  # before the native decoder: no lying counts reach it
    except FrameBoundsError as exc:
        raise ProtocolError(f"malformed {schema.__name__} v{version}: {exc}") from None
    try:
        header, used = entity_reader(header_schema)(frame, 0)
        body, _ = entity_reader(schema)(frame, used)
    except Exception as exc:
        raise ProtocolError(f"malformed {schema.__name__} v{version}: {exc}") from None
    return (
        RequestHeader(header.request_api_key, header.request_api_version, header.correlation_id, header.client_id),
        body,
    )


# --- building kio entities from plain values ---------------------------------------------


@dataclass(frozen=True)
class _FieldPlan:
    name: str
    kafka_type: str | None
    entity: type | None  # nested kio entity class, if any
    is_tuple: bool
    has_default: bool


_PLANS: dict[type, list[_FieldPlan]] = {}


def _field_plan(cls: type) -> list[_FieldPlan]:
    """How to build each field of kio entity ``cls`` (computed once per class)."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = []
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            entity, is_tuple = _entity_type(hints[f.name])
            plan.append(_FieldPlan(f.name, f.metadata.get("kafka_type"), entity, is_tuple, has_default))
        _PLANS[cls] = plan
    return plan


def _entity_type(tp: Any) -> tuple[type | None, bool]:
    """(nested entity class or None, is_tuple) for a field annotation."""
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin is tuple:
        inner = args[0]
        return (inner if dataclasses.is_dataclass(inner) else None), True
    if args:  # Optional[...] / X | None
        for a in args:
            if a is type(None):
                continue
            sub, is_tuple = _entity_type(a)
            if sub is not None or is_tuple:
                return sub, is_tuple
            if dataclasses.is_dataclass(a):
                return a, False
        return None, False
    return (tp if dataclasses.is_dataclass(tp) else None), False


def _convert(value: Any, field: _FieldPlan, slices: list) -> Any:
    kafka_type = field.kafka_type
    if value is None:
        return None
    if kafka_type == "error_code":
        return ErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64":
        if isinstance(value, datetime.datetime):
            return value
        return None if value < 0 else datetime.datetime.fromtimestamp(value / 1000, tz=_UTC)
    if kafka_type == "records":
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        if value.length == 0:
            return b""
        token = os.urandom(16)
        slices.append((token, value))
        return token
    if kafka_type == "uuid":
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    if field.entity is not None:
        if field.is_tuple:
            return tuple(_build(field.entity, v, slices) for v in value)
        return _build(field.entity, value, slices)
    if field.is_tuple:
        return tuple(value)
    return value


def _build(cls: type, data: Any, slices: list) -> Any:
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return data
    kwargs = {}
    for field in _field_plan(cls):
        if field.name in data:
            kwargs[field.name] = _convert(data[field.name], field, slices)
        elif not field.has_default:
            raise KeyError(f"{cls.__module__}.{cls.__name__} needs field {field.name!r}")
    return cls(**kwargs)


def build(cls: type, data: dict) -> Any:
    """Build kio entity ``cls`` from a ``dict`` of plain values (ints, str, lists of dicts).

    Keys the version does not have are dropped; fields with a schema default may be omitted;
    error codes are ints, durations and timestamps are ints in ms (timestamp -1 = null).
    A ``records`` value may be bytes or an object with ``length`` (a FetchSlice): the latter
    is replaced by a random placeholder — use :func:`encode_response` to send it.
    Raises KeyError when a required field is missing.
    """
    return _build(cls, data, [])


# --- response encoding ----------------------------------------------------------------------


@dataclass(frozen=True)
class FileChunk:
    """A record set to send from a segment file: ``slice.length`` bytes of ``slice.path`` at ``slice.position``."""

    slice: Any  # PartitionLog.read()'s FetchSlice

    @property
    def length(self) -> int:
        return self.slice.length


def encode_response(api_key: int, version: int, correlation_id: int, data: dict | Any) -> list:
    """Encode a response as a list of ``bytes`` and :class:`FileChunk` items, size prefix included.

    ``data`` is a dict (see :func:`build`) or a kio response entity of ``version``. Record sets
    given as FetchSlices become FileChunks: the encoder writes a unique placeholder, then
    splits the encoded bytes at it and rewrites the placeholder's length prefix
    (compact bytes: uvarint(len+1); otherwise int32 len). The size prefix counts all chunks.
    """
    schema = response_schema(api_key, version)
    slices: list = []
    entity = data if isinstance(data, schema) else _build(schema, data, slices)
    buf = io.BytesIO()
    header_cls = response_header_class(api_key, schema.__flexible__)
    entity_writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    entity_writer(schema)(buf, entity)
    body = buf.getvalue()
    chunks: list = []
    start = 0
    prefix_placeholder = _uvarint(17) if schema.__flexible__ else struct.pack(">i", 16)
    for token, fetch_slice in slices:
        pos = body.index(token, start)
        p = len(prefix_placeholder)
        assert body[pos - p : pos] == prefix_placeholder
        if schema.__flexible__:
            prefix = _uvarint(fetch_slice.length + 1)
        else:
            prefix = struct.pack(">i", fetch_slice.length)
        chunks.append(body[start : pos - p] + prefix)
        chunks.append(FileChunk(fetch_slice))
        start = pos + len(token)
    chunks.append(body[start:])
    total = sum(len(c) if isinstance(c, bytes) else c.length for c in chunks)
    chunks[0] = struct.pack(">i", total) + chunks[0]
    return chunks


def encode_error_response(api_key: int, version: int, correlation_id: int, error_code: int) -> list | None:
    """A response of ``api_key``/``version`` whose top-level (or every) error code is ``error_code``.

    Only possible for schemas whose required fields are all an error code, defaults or empty
    lists; returns None otherwise (then the caller closes the connection).
    """
    try:
        schema = response_schema(api_key, version)
    except Exception:
        return None
    data: dict = {}
    for field in _field_plan(schema):
        if field.kafka_type == "error_code":
            data[field.name] = error_code
        elif field.has_default:
            continue
        elif field.kafka_type in ("timedelta_i32", "timedelta_i64", "int32", "int64", "int16"):
            data[field.name] = 0
        elif field.is_tuple:
            data[field.name] = []
        else:
            return None
    try:
        return encode_response(api_key, version, correlation_id, data)
    except Exception:
        return None


def ms(value: Any) -> int:
    """Milliseconds (int) of a kio timedelta, datetime or int field value (None → -1)."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)
