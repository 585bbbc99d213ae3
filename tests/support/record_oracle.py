"""RecordBatch v2 with a field map, our columnar decoders run end to end, and a reference parser that is not ours.

Shared by the corruption matrix (``tests/connector/read/test_corrupt_batches.py``) and the
coverage-guided fuzz target (``tests/support/fuzz_decoders.py``).

- :func:`encode_records` writes records (Kafka's ``DefaultRecord``) and returns, beside the bytes,
  where each field of each record lies, so a test can rewrite one field and nothing else;
  :func:`assemble` wraps records into a batch (compressed with kafka-python's codec functions, not
  ours) and :func:`fix_crc` recomputes a batch's CRC-32C.
- :func:`run_ours` runs ``select_batches`` + ``decode`` + ``binary_array`` + ``headers_array`` on a
  fetch answer's records and returns an :class:`Outcome`: rows, a CorruptRecordError, or any other
  exception (always a bug).
- :func:`reference_rows` parses the same bytes with kafka-python's ``DefaultRecordBatch``
  (``kafka.record.default_records``), framed the way Kafka's Java consumer frames a fetch answer.

Why kafka-python and not kio's ``kio.records`` reader: kio reads no compressed batch, keeps
timestamps only to the second (``datetime`` with ``microsecond=0``) and refuses a record whose
timestamp is above the batch's maxTimestamp, which Kafka accepts; kafka-python decompresses all
four codecs, refuses damaged input with its own ``CorruptRecordError`` and checks what Kafka's
``DefaultRecord.readFrom`` checks (header count >= 0, header key length >= 0, a record's fields
end at its length, the batch's records end at its end). Two places where kafka-python departs
from Kafka's Java client are mended here, without copying its parser:

- it reads a record's ``attributes`` (an int8) as a varint, so an attributes byte >= 0x80 shifts
  every later field; :class:`ReferenceBatch` makes that one call read a single byte;
- it decodes header keys as strict UTF-8 (refusing the record), where Java's
  ``Utils.utf8`` replaces malformed bytes; :class:`_ReplacingBuffer` makes it replace them.

Framing (not in kafka-python's batch class; Kafka's ``ByteBufferLogInputStream`` and
``DefaultRecordBatch.ensureValid``): a tail shorter than 17 bytes or a batch that does not fit
ends the answer; batchLength < 14 is refused even in the tail, batchLength < 49 is refused;
magic must be 2; with ``check_crcs`` the CRC-32C of bytes 21..end must match; an answer with
bytes but no complete batch is refused ("no complete records were found"). The reference is
deliberately *lenient* where our contract is stricter (offset-delta order, lengths < -1 read as
null, varints longer than 5 bytes, negative record counts over empty sections) and skips the
records of control batches: it is an oracle for "rows we return are rows Kafka returns", not for
"everything we refuse is refused by Kafka".
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import crc32c
import pyarrow as pa

MAX_OFFSET = (1 << 63) - 1
HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
TOPIC = "corrupt-topic"
PARTITION = 7

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = 61
CONTROL = 0x20
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# batch header fields: name -> (byte position, struct format)
BATCH_FIELDS = {
    "base_offset": (0, ">q"), "batch_length": (8, ">i"), "partition_leader_epoch": (12, ">i"),
    "magic": (16, ">b"), "crc": (17, ">I"), "attributes": (21, ">h"), "last_offset_delta": (23, ">i"),
    "base_timestamp": (27, ">q"), "max_timestamp": (35, ">q"), "producer_id": (43, ">q"),
    "producer_epoch": (51, ">h"), "base_sequence": (53, ">i"), "record_count": (57, ">i"),
}


# ---------------------------------------------------------------- encoding


def uvarint(raw: int) -> bytes:
    """Unsigned LEB128 of ``raw`` (0 <= raw < 2**64 for a 10-byte varlong; larger values make longer varints)."""
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def varint(value: int) -> bytes:
    """Zigzag varint of ``value`` (any size: 2**31 takes 5 bytes, 2**63-1 takes 10)."""
    return uvarint((value << 1) if value >= 0 else ((-value) << 1) - 1)


def overlong(value: int, size: int) -> bytes:
    """``value``'s zigzag varint padded with continuation bytes to ``size`` bytes (an over-long encoding)."""
    enc = bytearray(varint(value))
    while len(enc) < size:
        enc[-1] |= 0x80
        enc.append(0)
    return bytes(enc)


@dataclass
class Rec:
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()  # ((str key, bytes | None value), ...)
    attributes: int = 0


@dataclass
class Layout:
    """Where the fields of one record lie in the records section: name -> (start, end) byte positions."""

    spans: dict = field(default_factory=dict)


def encode_records(recs: list[Rec]) -> tuple[bytes, list[Layout]]:
    """The records section of ``recs`` and, per record, the byte span of every field."""
    out = bytearray()
    layouts = []
    for r in recs:
        spans: dict = {}
        body = bytearray()

        def put(name: str, data: bytes) -> None:
            spans[name] = (len(body), len(body) + len(data))
            body.extend(data)

        put("attributes", bytes([r.attributes & 0xFF]))
        put("timestamp_delta", varint(r.timestamp_delta))
        put("offset_delta", varint(r.offset_delta))
        put("key_length", varint(-1 if r.key is None else len(r.key)))
        if r.key:
            put("key", r.key)
        put("value_length", varint(-1 if r.value is None else len(r.value)))
        if r.value:
            put("value", r.value)
        put("header_count", varint(len(r.headers)))
        for i, (hk, hv) in enumerate(r.headers):
            hkb = hk.encode()
            put(f"header{i}_key_length", varint(len(hkb)))
            if hkb:
                put(f"header{i}_key", hkb)
            put(f"header{i}_value_length", varint(-1 if hv is None else len(hv)))
            if hv:
                put(f"header{i}_value", hv)
        length = varint(len(body))
        start = len(out) + len(length)
        layout = Layout({"length": (len(out), start)})
        layout.spans.update({k: (start + a, start + b) for k, (a, b) in spans.items()})
        layouts.append(layout)
        out += length + body
    return bytes(out), layouts


def compress(codec: str, data: bytes) -> bytes:
    """``data`` compressed by kafka-python's codec functions (xerial snappy, LZ4 frame, zstd frame, gzip)."""
    from kafka import codec as kc

    return {"none": lambda d: d, "gzip": kc.gzip_encode, "snappy": kc.snappy_encode, "lz4": kc.lz4_encode,
            "zstd": kc.zstd_encode}[codec](data)


def decompress(codec_id: int, data: bytes) -> bytes:
    """kafka-python's decompression of a records section (raises whatever its codec raises)."""
    from kafka import codec as kc

    return {1: kc.gzip_decode, 2: kc.snappy_decode, 3: kc.lz4_decode, 4: kc.zstd_decode}[codec_id](bytes(data))


def assemble(section: bytes, *, record_count: int, last_offset_delta: int, base_offset: int = 0,
             base_timestamp: int = 1_700_000_000_000, max_timestamp: int | None = None, attributes: int = 0,
             producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
             partition_leader_epoch: int = 5) -> bytes:
    """A RecordBatch v2 around an (already compressed, when ``attributes`` says so) records section, CRC set."""
    if max_timestamp is None:
        max_timestamp = base_timestamp + 100
    head = HEADER.pack(base_offset, HEADER_SIZE - 12 + len(section), partition_leader_epoch, 2, 0, attributes,
                       last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
                       record_count)
    return fix_crc(bytearray(head + section))


def fix_crc(batch: bytearray | bytes, position: int = 0) -> bytes:
    """``batch`` with the CRC-32C of the batch at ``position`` recomputed over the extent its batchLength claims."""
    batch = bytearray(batch)
    (length,) = struct.unpack_from(">i", batch, position + 8)
    end = min(len(batch), position + 12 + max(length, 0))
    struct.pack_into(">I", batch, position + 17, crc32c.crc32c(bytes(batch[position + 21:end])))
    return bytes(batch)


def fix_all_crcs(records: bytes) -> bytes:
    """Every complete batch of a fetch answer with its CRC recomputed (the fuzzer's "CRC-valid" inputs)."""
    buf = bytearray(records)
    pos = 0
    while pos + HEADER_SIZE <= len(buf):
        (length,) = struct.unpack_from(">i", buf, pos + 8)
        if length < HEADER_SIZE - 12 or pos + 12 + length > len(buf):
            break
        buf = bytearray(fix_crc(buf, pos))
        pos += 12 + length
    return bytes(buf)


def control_batch(base_offset: int, producer_id: int, commit: bool, coordinator_epoch: int = 3) -> bytes:
    """A transaction marker batch (control + transactional bits, one control record)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    section, _ = encode_records([Rec(0, 0, key, value)])
    return assemble(section, record_count=1, last_offset_delta=0, base_offset=base_offset, attributes=0x30,
                    producer_id=producer_id, producer_epoch=1, base_sequence=-1)


# ---------------------------------------------------------------- running ours


@dataclass
class Outcome:
    """``kind``: ``rows`` (``rows`` set), ``corrupt`` (a CorruptRecordError, ``detail`` its message) or
    ``other`` (any other exception: ``detail`` its type and message)."""

    kind: str
    rows: list | None = None
    detail: str = ""

    def __eq__(self, other) -> bool:  # the message may differ between decoders; the verdict may not
        return isinstance(other, Outcome) and self.kind == other.kind and self.rows == other.rows


def corrupt_error_class():
    """``pyspark_kafka.errors.CorruptRecordError``, or a class nothing raises while it does not exist yet."""
    from pyspark_kafka import errors

    return getattr(errors, "CorruptRecordError", None) or type("MissingCorruptRecordError", (Exception,), {})


def _headers(item):
    return None if item is None else tuple((h["key"], h["value"]) for h in item)


def run_ours(records: bytes, decoder: str, *, check_crcs: bool = True, from_offset: int = 0,
             until_offset: int = MAX_OFFSET, read_committed: bool = False, aborted=(),
             topic: str = TOPIC, partition: int = PARTITION) -> Outcome:
    """Our columnar read of ``records`` (a fetch answer's bytes), as the reader runs it, with ``decoder``."""
    from pyspark_kafka.read.record_decoder import binary_array, decode, headers_array, select_batches

    corrupt = corrupt_error_class()
    try:
        seg = select_batches(records, from_offset, read_committed, list(aborted), check_crcs=check_crcs,
                             topic=topic, partition=partition)
        dec = decode(seg, from_offset, until_offset, decoder)
        keys = binary_array(dec.keys).to_pylist()
        values = binary_array(dec.values).to_pylist()
        headers = headers_array(dec, HEADERS_TYPE).to_pylist()
        n = dec.rows
        columns = (dec.offsets.tolist(), dec.timestamps_ms.tolist(), dec.timestamp_types.tolist(), keys, values,
                   [_headers(h) for h in headers])
        if any(len(c) != n for c in columns):
            return Outcome("other", detail=f"columns of unequal length for {n} rows: {[len(c) for c in columns]}")
        return Outcome("rows", rows=list(zip(*columns)))
    except corrupt as exc:
        return Outcome("corrupt", detail=str(exc))
    except Exception as exc:  # noqa: BLE001 - every other exception is the finding
        return Outcome("other", detail=f"{type(exc).__name__}: {exc}")


def corrupt_message_problem(message: str, topic: str = TOPIC, partition: int = PARTITION) -> str | None:
    """Why a CorruptRecordError message breaks the contract (first line names "corrupt" and the
    topic-partition), or None."""
    first = message.splitlines()[0] if message else ""
    if "corrupt" not in first.lower():
        return f"first line does not say 'corrupt': {first!r}"
    if f"{topic}-{partition}" not in first:
        return f"first line does not name {topic}-{partition}: {first!r}"
    return None


# ---------------------------------------------------------------- the reference


class Refused(Exception):
    """The reference parser refuses the input."""


class _Slice(bytearray):
    def decode(self, encoding="utf-8", errors="strict"):  # Java's Utils.utf8 replaces malformed input
        return bytearray.decode(self, encoding, "replace")


class _ReplacingBuffer(bytearray):
    def __getitem__(self, index):
        item = bytearray.__getitem__(self, index)
        return _Slice(item) if isinstance(index, slice) else item


def _reference_batch_class():
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.util import decode_varint

    class ReferenceBatch(DefaultRecordBatch):
        """kafka-python's batch parser; a record's attributes read as one byte (Kafka's int8), header
        keys decoded with replacement (Java's ``Utils.utf8``)."""

        __slots__ = ()

        def _maybe_uncompress(self):
            super()._maybe_uncompress()
            self._buffer = _ReplacingBuffer(self._buffer)

        def _read_msg(self):
            calls = [0]

            def read_varint(buf, pos):
                calls[0] += 1
                if calls[0] == 2:  # the attributes byte (an int8 in DefaultRecord; unused)
                    buf[pos]  # IndexError past the end, as any read
                    return 0, pos + 1
                return decode_varint(buf, pos)

            return super()._read_msg(decode_varint=read_varint)

    return ReferenceBatch


_REF: list = []


def wrap64(value: int) -> int:
    """``value`` as a Java long (two's complement wrap-around)."""
    return ((value + (1 << 63)) % (1 << 64)) - (1 << 63)


def reference_rows(records: bytes, *, check_crcs: bool = True, from_offset: int = 0,
                   until_offset: int = MAX_OFFSET) -> list:
    """Rows (as :func:`run_ours` gives them) of a fetch answer by the reference, read_uncommitted; Refused otherwise."""
    if not _REF:
        _REF.append(_reference_batch_class())
    batch_class = _REF[0]
    records = bytes(records)
    size = len(records)
    pos = complete = 0
    rows = []
    while size - pos >= 17:
        (length,) = struct.unpack_from(">i", records, pos + 8)
        if length < 14:
            raise Refused(f"batchLength {length} at byte {pos}")
        if pos + 12 + length > size:
            break  # the truncated tail of the answer
        if length < HEADER_SIZE - 12:
            raise Refused(f"batchLength {length} < 49 at byte {pos}")
        if records[pos + 16] != 2:
            raise Refused(f"magic {records[pos + 16]} at byte {pos}")
        batch = batch_class(records[pos:pos + 12 + length])
        if check_crcs and not batch.validate_crc():
            raise Refused(f"CRC mismatch at byte {pos}")
        if not batch.is_control_batch:
            try:
                for rec in batch:
                    offset = wrap64(rec.offset)
                    if from_offset <= offset < until_offset:
                        headers = tuple(rec.headers) or None
                        rows.append((offset, wrap64(rec.timestamp), rec.timestamp_type, rec.key, rec.value,
                                     headers))
            except Exception as exc:  # noqa: BLE001 - kafka-python's CorruptRecordError, codec errors
                raise Refused(f"{type(exc).__name__}: {exc}") from None
        pos += 12 + length
        complete += 1
    if size and not complete:
        raise Refused("no complete record batch in a non-empty answer")
    return rows


def reference_outcome(records: bytes, **kwargs) -> Outcome:
    try:
        return Outcome("rows", rows=reference_rows(records, **kwargs))
    except Refused as exc:
        return Outcome("corrupt", detail=str(exc))
