"""Damage one record batch of a stopped broker's ``.log`` segment, as a disk or a copy would.

A segment file is a sequence of RecordBatch v2 entries, each ``baseOffset`` (int64) and
``batchLength`` (int32, the bytes that follow) then ``batchLength`` bytes; the batch header is 61
bytes (``partitionLeaderEpoch``, ``magic``, ``crc`` (CRC-32C of everything from ``attributes`` to
the end), ``attributes``, ``lastOffsetDelta``, timestamps, producer fields, ``recordsCount``), then
the records (uncompressed: varint-framed, Kafka's ``DefaultRecord``; compressed: one codec frame).
:func:`batches` walks the 12-byte prefixes only; :func:`damage` changes one batch in one of the
ways of :data:`DAMAGES` and says what it changed.

The same bytes are damaged on every broker (the embedded broker writes Kafka's format), so the
readers are compared on the same kind of damage, not the same file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

HEADER_BYTES = 61
"""RecordBatch v2 header, ``baseOffset`` through ``recordsCount``."""
PREFIX_BYTES = 12
"""``baseOffset`` + ``batchLength``: the bytes before the length counts."""
ATTRIBUTES_AT = 21
"""Offset of ``attributes`` (int16) in a batch; bits 0-2 are the codec."""
DAMAGES = ("flip_value_byte", "length_plus_8")
"""``flip_value_byte``: one byte of a record's value inverted (uncompressed batch; in a compressed one,
a byte in the middle of the codec frame): the stored CRC-32C no longer matches. ``length_plus_8``:
``batchLength`` raised by 8, so the batch claims the first 8 bytes of the next one (its
``baseOffset``) and the CRC covers bytes it was not computed over."""


@dataclass(frozen=True)
class Batch:
    """One batch of a segment: file ``position``, ``base_offset``, ``length`` (``batchLength``),
    ``records`` (``recordsCount``), ``codec`` (attributes bits 0-2)."""

    position: int
    base_offset: int
    length: int
    records: int
    codec: int

    @property
    def end(self) -> int:
        return self.position + PREFIX_BYTES + self.length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.records - 1


def batches(data: bytes) -> list[Batch]:
    """Every batch of a segment's bytes, walking the 12-byte prefixes (ValueError when a length
    runs past the end: the file is not a clean segment)."""
    out, pos = [], 0
    while pos + PREFIX_BYTES <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        if length < HEADER_BYTES - PREFIX_BYTES or pos + PREFIX_BYTES + length > len(data):
            raise ValueError(f"batch at position {pos} claims {length} bytes; the segment has {len(data) - pos} left")
        attributes, = struct.unpack_from(">h", data, pos + ATTRIBUTES_AT)
        records, = struct.unpack_from(">i", data, pos + HEADER_BYTES - 4)
        out.append(Batch(pos, base_offset, length, records, attributes & 0x7))
        pos += PREFIX_BYTES + length
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes after the last batch")
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``: ``(value, position after it)``."""
    raw, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def first_value_span(data: bytes, batch: Batch) -> tuple[int, int]:
    """``(file position, length)`` of the value of the first record of an uncompressed batch."""
    pos = batch.position + HEADER_BYTES
    _length, pos = _varint(data, pos)
    pos += 1  # attributes
    _ts_delta, pos = _varint(data, pos)
    _offset_delta, pos = _varint(data, pos)
    key_length, pos = _varint(data, pos)
    pos += max(key_length, 0)
    value_length, pos = _varint(data, pos)
    if value_length <= 0:
        raise ValueError(f"the first record of the batch at {batch.position} has no value to damage")
    return pos, value_length


@dataclass(frozen=True)
class Damage:
    """What :func:`damage` did: the ``kind``, the damaged batch, the file ``position`` changed and a
    sentence for reports."""

    kind: str
    batch: Batch
    position: int
    description: str


def damage(segment: Path, kind: str) -> Damage:
    """Damage the middle batch of ``segment`` in place (the broker must be stopped); see :data:`DAMAGES`."""
    data = bytearray(segment.read_bytes())
    found = batches(bytes(data))
    if len(found) < 3:
        raise ValueError(f"{segment} has {len(found)} batches; a middle one needs at least 3")
    batch = found[len(found) // 2]
    if kind == "flip_value_byte":
        if batch.codec == 0:
            start, length = first_value_span(bytes(data), batch)
            at, where = start + length // 2, "a value byte of its first record"
        else:
            at, where = batch.position + HEADER_BYTES + (batch.length + PREFIX_BYTES - HEADER_BYTES) // 2, \
                "a byte in the middle of its compressed records"
        data[at] ^= 0xFF
    elif kind == "length_plus_8":
        at, where = batch.position + 8, f"batchLength {batch.length} -> {batch.length + 8}"
        struct.pack_into(">i", data, at, batch.length + 8)
    else:
        raise ValueError(f"unknown damage {kind!r}; one of {DAMAGES}")
    segment.write_bytes(bytes(data))
    return Damage(kind, batch, at, f"{segment.name}: batch {len(found) // 2 + 1} of {len(found)} (offsets "
                                   f"{batch.base_offset}-{batch.last_offset}, position {batch.position}): {where} "
                                   f"(file position {at})")
