"""Bounds check of a request frame before kio's native decoder sees it.

kio decodes requests in native code (Rust). A lying array count (a legacy int32 or a compact
uvarint of up to 2^32-1) makes it reserve memory for that many elements before reading one:
a 160-byte Fetch request asking for 2^32 topics ended the whole broker process with an
allocation failure (``memory allocation of 34359738352 bytes failed``, SIGABRT), which no
``except`` can catch. This module walks the same schema in Python (kio's entity classes and
field metadata, in kio's field order) without building anything, and refuses the frame when

- an array count, string length or bytes length is negative (other than the null marker) or
  larger than the bytes left in the frame (an array of ``n`` elements needs at least ``n``
  times the smallest encoding of one element);
- a field that Kafka's schema does not declare nullable is null (Kafka's generated parsers
  fail with "non-nullable field ... was serialized as null");
- a varint runs past 5 bytes, or the frame ends inside a field;
- the tagged-fields section of a flexible struct counts more tags than bytes left, or a tag's
  size runs past the frame (known tags are checked inside their size).

Tagged fields the schema does not know are removed from the frame (KIP-482: a receiver
ignores unknown tags, so newer clients may send them at versions we serve; kio would refuse).

Everything it accepts, kio can decode without reserving more than the frame's own size, so a
bad frame costs a :class:`FrameBoundsError` (the server closes the connection, as Kafka does for
a request it cannot parse) and never the process. Values are not interpreted: semantic checks
stay in the handlers.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from kio.serial._introspect import (  # kio's own field classification, so both walk the same shape
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from pyspark_kafka.kafka.record_format import VarintError
from pyspark_kafka.kafka.wire_header import encode_uvarint as _uvarint
from pyspark_kafka.kafka.wire_header import read_uvarint

_FIXED = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16, "error_code": 2,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# Field kinds of a plan entry.
_PRIM, _PRIM_ARRAY, _ENTITY, _ENTITY_ARRAY = range(4)


class FrameBoundsError(ValueError):
    """The frame's counts or lengths do not fit its size, or a non-nullable field is null."""


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    kind: int
    kafka_type: str | None  # primitives
    entity: type | None  # nested entity class
    nullable: bool
    client_id_legacy: bool  # RequestHeader.client_id: always a legacy nullable string


@dataclasses.dataclass(frozen=True)
class _Plan:
    flexible: bool
    fields: tuple[_Field, ...]
    tagged: dict[int, _Field]
    min_size: int


@functools.cache
def _plan(entity: type) -> _Plan:
    flexible = bool(entity.__flexible__)
    is_header = entity.__name__ == "RequestHeader"
    fields, tagged = [], {}
    for f in dataclasses.fields(entity):
        tag = get_field_tag(f)
        cls = classify_field(f)
        if isinstance(cls, PrimitiveField):
            kind, kt, sub = _PRIM, f.metadata.get("kafka_type"), None
        elif isinstance(cls, PrimitiveTupleField):
            kind, kt, sub = _PRIM_ARRAY, f.metadata.get("kafka_type"), None
        elif isinstance(cls, EntityField):
            kind, kt, sub = _ENTITY, None, cls.type_
        else:
            assert isinstance(cls, EntityTupleField)
            kind, kt, sub = _ENTITY_ARRAY, None, cls.type_
        field = _Field(f.name, kind, kt, sub, tag is None and is_optional(f), is_header and f.name == "client_id")
        if tag is None:
            fields.append(field)
        else:
            tagged[int(tag)] = field
    plan = _Plan(flexible, tuple(fields), tagged, 0)
    return dataclasses.replace(plan, min_size=_min_size(plan))


def _min_prim(kafka_type: str | None, flexible: bool) -> int:
    if kafka_type in _FIXED:
        return _FIXED[kafka_type]
    if kafka_type == "string":
        return 1 if flexible else 2
    return 1 if flexible else 4  # bytes, records


def _min_size(plan: _Plan) -> int:
    size = 1 if plan.flexible else 0  # the tagged-fields count
    for f in plan.fields:
        if f.client_id_legacy:
            size += 2
        elif f.kind == _PRIM:
            size += _min_prim(f.kafka_type, plan.flexible)
        elif f.kind == _ENTITY:
            size += 1 if f.nullable else _plan(f.entity).min_size
        else:
            size += 1 if plan.flexible else 4
    return size


class _Walker:
    __slots__ = ("buf", "end", "edits")

    def __init__(self, buf: bytes | memoryview, end: int, edits: list | None = None):
        self.buf = buf
        self.end = end
        # Unknown tagged fields to drop: (start, stop, replacement bytes), in frame order.
        self.edits: list[tuple[int, int, bytes]] = [] if edits is None else edits

    def _need(self, pos: int, n: int, what: str) -> int:
        if n < 0 or pos + n > self.end:
            raise FrameBoundsError(f"{what}: needs {n} bytes at byte {pos}, the frame has {self.end - pos} left")
        return pos + n

    def uvarint(self, pos: int, what: str) -> tuple[int, int]:
        """``(value, position after it)`` of the unsigned varint at ``pos`` (at most 5 bytes, within the
        frame; :func:`pyspark_kafka.kafka.wire_header.read_uvarint`). Raises :class:`FrameBoundsError` naming ``what``."""
        try:
            return read_uvarint(self.buf, pos, self.end)
        except VarintError as exc:
            if exc.truncated:
                raise FrameBoundsError(f"{what}: the frame ends inside a varint") from None
            raise FrameBoundsError(f"{what}: varint longer than 5 bytes") from None

    def length(self, pos: int, flexible: bool, legacy_width: int, what: str) -> tuple[int, int]:
        """(length or -1 for null, position after the prefix)."""
        if flexible:
            n, pos = self.uvarint(pos, what)
            return n - 1, pos
        self._need(pos, legacy_width, what)
        s = _I16 if legacy_width == 2 else _I32
        return s.unpack_from(self.buf, pos)[0], pos + legacy_width

    def prim(self, pos: int, kafka_type: str | None, flexible: bool, nullable: bool, what: str) -> int:
        fixed = _FIXED.get(kafka_type)
        if fixed is not None:
            return self._need(pos, fixed, what)
        width = 2 if kafka_type == "string" else 4
        n, pos = self.length(pos, flexible, width, what)
        if n == -1:
            if not nullable:
                raise FrameBoundsError(f"non-nullable field {what} was serialized as null")
            return pos
        if n < -1:
            raise FrameBoundsError(f"{what}: negative length {n}")
        return self._need(pos, n, what)

    def entity(self, pos: int, entity: type, what: str) -> int:
        plan = _plan(entity)
        for f in plan.fields:  # error messages name the field only: no string building per field
            if f.client_id_legacy:
                pos = self.prim(pos, "string", False, True, f.name)
            else:
                pos = self.field(pos, f, plan.flexible, f.name)
        if plan.flexible:
            pos = self.tags(pos, plan, what)
        return pos

    def field(self, pos: int, f: _Field, flexible: bool, what: str) -> int:
        if f.kind == _PRIM:
            return self.prim(pos, f.kafka_type, flexible, f.nullable, what)
        if f.kind == _ENTITY:
            if f.nullable:
                self._need(pos, 1, what)
                marker = struct.unpack_from(">b", self.buf, pos)[0]
                pos += 1
                if marker == -1:
                    return pos
            return self.entity(pos, f.entity, what)
        count, pos = self.length(pos, flexible, 4, what)
        if count == -1:
            if not f.nullable:
                raise FrameBoundsError(f"non-nullable field {what} was serialized as null")
            return pos
        if count < -1:
            raise FrameBoundsError(f"{what}: negative array length {count}")
        if f.kind == _PRIM_ARRAY:
            elem = _min_prim(f.kafka_type, flexible)
        else:
            elem = _plan(f.entity).min_size
        if count * max(1, elem) > self.end - pos:
            raise FrameBoundsError(f"{what}: array of {count} elements cannot fit in the {self.end - pos} bytes left")
        for _ in range(count):
            if f.kind == _PRIM_ARRAY:
                pos = self.prim(pos, f.kafka_type, flexible, False, what)
            else:
                pos = self.entity(pos, f.entity, what)
        return pos

    def tags(self, pos: int, plan: _Plan, what: str) -> int:
        count_start = pos
        count, pos = self.uvarint(pos, what)
        if count * 2 > self.end - pos:
            raise FrameBoundsError(f"{what}: {count} tagged fields cannot fit in the {self.end - pos} bytes left")
        unknown = []
        for _ in range(count):
            tag_start = pos
            tag, pos = self.uvarint(pos, what)
            size, pos = self.uvarint(pos, what)
            stop = self._need(pos, size, f"{what} tag {tag}")
            field = plan.tagged.get(tag)
            if field is not None:
                inner = _Walker(self.buf, stop, self.edits)
                inner.field(pos, dataclasses.replace(field, nullable=False), True, field.name)
            else:
                unknown.append((tag_start, stop))
            pos = stop
        if unknown:  # KIP-482: a receiver ignores tags it does not know; kio refuses them, so drop them
            self.edits.append((count_start, count_start + len(_uvarint(count)), _uvarint(count - len(unknown))))
            self.edits.extend((start, stop, b"") for start, stop in unknown)
        return pos


def check_frame(frame: bytes, header_schema: type, body_schema: type) -> bytes:
    """Walk ``frame`` (request header + body, without the size prefix) against kio's schemas.

    Returns the frame to decode: ``frame`` itself, or a copy without the tagged fields the
    schema does not know (KIP-482: receivers ignore unknown tags; kio would refuse them).
    Raises :class:`FrameBoundsError` naming the field when a count or length cannot fit the
    frame or a non-nullable field is null. Trailing bytes after the body are allowed (Kafka
    ignores them). Cost: one pass over the fields, records and strings skipped by length.
    """
    walker = _Walker(frame, len(frame))
    pos = walker.entity(0, header_schema, "header")
    walker.entity(pos, body_schema, body_schema.__name__)
    if not walker.edits:
        return frame
    out, last = [], 0
    for start, stop, replacement in sorted(walker.edits, key=lambda e: e[0]):
        out += [frame[last:start], replacement]
        last = stop
    out.append(frame[last:])
    return b"".join(out)



