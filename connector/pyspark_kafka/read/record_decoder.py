"""RecordBatch v2 → Arrow columns, with no Python object per record (the columnar read path).

Input: the ``records`` bytes of one partition of a Fetch response (a run of RecordBatch v2, the
last possibly truncated), the offset range wanted and the partition's aborted transactions.
:func:`select_batches` walks the batch headers (one ``struct`` unpack per batch): it skips control
batches and, under ``read_committed``, the batches of aborted transactions the way Kafka's Java
consumer does (``CompletedFetch``: aborted transactions are taken in first-offset order up to each
batch's last offset; a producer id is aborted until its ABORT marker), decompresses each kept batch
with the codec functions the broker uses (:mod:`pyspark_kafka.kafka.record_codecs`) and returns
the kept records sections as :class:`Segments` of one buffer. :func:`decode` then parses every
record of those sections and gathers keys and values into Arrow binary buffers:

- with numba (``@njit(cache=True)``), one compiled kernel parses and copies everything;
- without it, or with ``PYSPARK_KAFKA_DECODER=numpy``, a Python loop chains the record
  boundaries (one varint per record) and numpy decodes the fields of all records at once.

Record layout (Kafka's ``DefaultRecord``): length varint, attributes int8, timestampDelta varlong,
offsetDelta varint, key length varint + key (-1: null), value length varint + value (-1: null),
header count varint, headers (key length varint + key, value length varint + value). Varints are
zigzag-encoded. Timestamps are the batch's base timestamp plus the delta, or the batch's max
timestamp when the batch says LOG_APPEND_TIME (attribute bit 3).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pyspark_kafka.errors import CorruptRecordError, PySparkKafkaError
from pyspark_kafka.errors import corrupt_record_error as corrupt
from pyspark_kafka.kafka.record_format import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_ABORT,
    CONTROL_BIT,
    CONTROL_COMMIT,
    CONTROL_KEY,
    HEADER,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    MAX_VARINT_BYTES,
    MAX_VARLONG_BYTES,
    MIN_BATCH_LENGTH,
    MIN_RECORD_BODY,
    MIN_RECORD_SIZE,
    OFFSET_LENGTH,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    VARINT_PAD,
    VarintError,
    batch_crc,
    read_zigzag,
    zigzag_varints,
)

HEADER_SIZE = BATCH_HEADER_SIZE
"""Bytes of a RecordBatch v2 header, up to and including its record count."""
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
DECOMPRESS_LIMIT = 1 << 31
"""Most bytes one batch's records may decompress to (a Fetch answer is at most 2 GiB too)."""

DECODER_ENV = "PYSPARK_KAFKA_DECODER"
"""Environment variable choosing the record decoder: ``numba`` (default when numba is installed)
or ``numpy`` (the vectorized baseline)."""

CorruptBatchError = CorruptRecordError
"""Former name of :class:`~pyspark_kafka.errors.CorruptRecordError` here."""

BAD_REASONS = {
    1: "a record's length varint is malformed or smaller than a record's 6-byte minimum",
    2: "a record runs past the end of its batch",
    3: "a varint inside a record is malformed, too long or runs past the record",
    4: "a record's key length is below -1 or runs past the record",
    5: "a record's value length is below -1 or runs past the record",
    6: "a record's header count is negative or larger than the record can hold",
    7: "a record header's key or value length is invalid or runs past the record",
    8: "a record's fields do not end where its length says it ends",
    9: "the batch holds fewer records than its recordCount",
    10: "bytes are left in the batch after its recordCount records",
    11: "a record's offset delta is negative, not increasing, or past the batch's lastOffsetDelta",
}
"""Reasons the decoders report (code → sentence), the same codes in the numba kernel and the numpy path."""


@dataclass
class Segments:
    """Records sections to decode, all in ``buf`` (a ``numpy.uint8`` array).

    Per section (numpy ``int64`` arrays of equal length): ``start``/``end`` byte positions,
    ``count`` records, ``base_offset``, ``base_ts`` (ms), ``log_append`` (1 when the batch uses
    LOG_APPEND_TIME, else 0: a negative maxTimestamp is still that batch's timestamp), ``append_ts`` (the batch's max timestamp
    when it uses LOG_APPEND_TIME, else -1), ``last_delta`` (the batch's lastOffsetDelta).
    ``next_offset``: the offset after the last complete batch (control and aborted batches
    included), or None when the bytes held no complete batch. ``topic``/``partition`` name the
    partition in errors.
    """

    buf: np.ndarray
    start: np.ndarray
    end: np.ndarray
    count: np.ndarray
    base_offset: np.ndarray
    base_ts: np.ndarray
    append_ts: np.ndarray
    next_offset: int | None
    last_delta: np.ndarray | None = None
    topic: str = ""
    partition: int = -1
    log_append: np.ndarray | None = None

    def __post_init__(self):
        if self.last_delta is None:
            self.last_delta = np.full(self.start.shape[0], _INT32_MAX, np.int64)
        if self.log_append is None:
            self.log_append = (self.append_ts >= 0).astype(np.int64)


def select_batches(records, from_offset: int, read_committed: bool, aborted, *, check_crcs: bool = True,
                   topic: str = "", partition: int = -1, high_watermark: int | None = None,
                   until_offset: int | None = None) -> Segments:
    """The batches of ``records`` (bytes of one partition's Fetch answer for ``from_offset``) that
    hold records to read, with every batch header checked.

    ``aborted``: the partition's ``(producer_id, first_offset)`` aborted transactions (Fetch
    response), used when ``read_committed``. ``check_crcs``: verify each batch's CRC-32C (Kafka's
    ``check.crcs``, default true). ``high_watermark``: the answer's high watermark, when known.
    ``until_offset``: the end of the range being read; batches starting at or after it are neither
    checked nor kept (Kafka's consumer checks only the batches it reads into, so a range ending just
    before a damaged batch reads, as on Spark's connector).
    Checks (Kafka's ``DefaultRecordBatch.ensureValid`` and the Java consumer's ``CompletedFetch``):
    batchLength at least 49; a non-empty answer holds at least one complete batch (KIP-74: the
    broker always sends the first batch whole; a truncated *last* batch is normal and dropped);
    magic 2; the CRC; recordCount 0 or more and at most what the bytes can hold; batches in offset
    order, the first one holding an offset at or past ``from_offset``, none starting at or past the
    high watermark; compressed records decompress. Raises :class:`CorruptRecordError` naming
    ``topic``-``partition``, the batch's offsets and the reason.
    """
    view = memoryview(records)
    size = len(view)
    pos = 0
    kept: list = []  # (start, end, count, base_offset, base_ts, append_ts, last_delta, log_append, piece or None)
    compressed = False
    next_offset = None
    pending = sorted(aborted, key=lambda a: a[1]) if read_committed and aborted else []
    aborted_ids: set = set()

    def bad(first, last, reason):
        return corrupt(topic, partition, first, last, reason)

    while pos + LOG_OVERHEAD <= size:
        base, length = OFFSET_LENGTH.unpack_from(view, pos)
        # where the batch should start: its own baseOffset may be what is damaged
        expected = from_offset if next_offset is None else next_offset
        if until_offset is not None and base >= until_offset and (next_offset is None or base >= next_offset):
            # past the range: Kafka's consumer never iterates (nor checks) a batch it does not read into
            if high_watermark is not None and base >= high_watermark >= 0:
                raise bad(expected, None, f"the batch there says base offset {base}, at or past the partition's "
                                          f"high watermark {high_watermark}")
            if next_offset is None:
                next_offset = base  # [from_offset, until_offset) holds no record (compacted away)
            break
        if length < MIN_BATCH_LENGTH:
            raise bad(expected, None, f"the batch there has batchLength {length}, below the {MIN_BATCH_LENGTH}-byte "
                                      f"minimum (its header says base offset {base})")
        end = pos + LOG_OVERHEAD + length
        if end > size:  # Kafka's ByteBufferLogInputStream.nextBatch: a cut batch still shows a valid magic
            if pos + MAGIC_OFFSET < size and view[pos + MAGIC_OFFSET] != MAGIC:
                raise bad(expected, None, f"a cut batch at the end of the answer has magic {view[pos + MAGIC_OFFSET]} "
                                          f"(its header says base offset {base})")
            if next_offset is None:
                raise bad(expected, None, f"the Fetch answer holds {size - pos} bytes from this batch on but its "
                                          f"batchLength says {LOG_OVERHEAD + length}: no complete record batch (a "
                                          "broker always sends the first batch whole, KIP-74)")
            break  # a truncated batch at the end of the answer (partition_max_bytes)
        (base, length, _epoch, magic, crc, attrs, last_delta, base_ts, max_ts, pid, _pe, _seq,
         count) = HEADER.unpack_from(view, pos)
        last = base + last_delta
        if magic != MAGIC:
            raise bad(base, last, f"it has magic {magic}: the columnar reader reads RecordBatch v2 (magic 2) only "
                                  "(for the message sets of brokers older than 0.11 use .option('readPath', "
                                  "'consumer'))")
        if check_crcs:
            actual = batch_crc(view, pos, end - pos)
            if actual != crc:
                raise bad(base, last, f"its CRC-32C is {actual:#010x} but the batch says {crc:#010x}")
        if count < 0 or last_delta < 0 or base < 0 or last > _INT64_MAX:
            raise bad(base, last, f"its header is inconsistent (recordCount {count}, lastOffsetDelta {last_delta}, "
                                  f"baseOffset {base})")
        if count > (length - MIN_BATCH_LENGTH) // MIN_RECORD_SIZE and not attrs & COMPRESSION_MASK:
            raise bad(base, last, f"its recordCount {count} is more than its {length - MIN_BATCH_LENGTH} bytes of "
                                  "records can hold")
        if count > last_delta + 1:
            raise bad(base, last, f"its recordCount {count} is more than its {last_delta + 1} offsets")
        if next_offset is None and last < from_offset:
            raise bad(base, last, f"the broker was asked for offset {from_offset} but its first batch ends before it")
        if next_offset is not None and base < next_offset:
            raise bad(base, last, f"it starts before the end of the previous batch (offset {next_offset})")
        if high_watermark is not None and base >= high_watermark >= 0:
            raise bad(base, last, f"it starts at or past the partition's high watermark {high_watermark}")
        start, pos = pos + HEADER_SIZE, end
        next_offset = last + 1
        marker = -1
        if attrs & CONTROL_BIT and not (count == 0 and start == end):  # the cleaner keeps emptied markers
            if count != 1 or attrs & COMPRESSION_MASK or pid < 0:
                raise bad(base, last, f"it is marked as a control batch but holds {count} records, codec "
                                      f"{attrs & COMPRESSION_MASK} and producer id {pid} (a transaction marker is "
                                      "one uncompressed record of a producer, or none once the log cleaner "
                                      "emptied it: Kafka's BatchRetention.RETAIN_EMPTY)")
            marker = _control_type(view, start, end, lambda r: bad(base, last, r))
        if read_committed and pid >= 0:
            while pending and pending[0][1] <= last:
                aborted_ids.add(pending.pop(0)[0])
            if attrs & CONTROL_BIT:
                if marker == 0:  # ABORT
                    aborted_ids.discard(pid)
                continue
            if attrs & TRANSACTIONAL_BIT and pid in aborted_ids:
                continue
        if attrs & CONTROL_BIT or (count == 0 and start == end):
            continue
        log_append = 1 if attrs & TIMESTAMP_TYPE_BIT else 0
        append_ts = max_ts if log_append else -1
        codec = attrs & COMPRESSION_MASK
        if codec:
            from pyspark_kafka.kafka.record_codecs import CodecError, decompress

            try:
                piece = decompress(codec, view[start:end], DECOMPRESS_LIMIT)
            except CodecError as exc:
                raise bad(base, last, str(exc)) from None
            if count > len(piece) // MIN_RECORD_SIZE:
                raise bad(base, last, f"its recordCount {count} is more than its {len(piece)} decompressed bytes "
                                      "can hold")
            compressed = True
            kept.append((0, len(piece), count, base, base_ts, append_ts, last_delta, log_append, piece))
        else:
            kept.append((start, end, count, base, base_ts, append_ts, last_delta, log_append, None))
    if size and next_offset is None:
        raise bad(None, None, f"the Fetch answer for offset {from_offset} holds {size} bytes but no complete record "
                              "batch")
    if compressed:
        pieces, spans, at = [], [], 0
        for start, end, *_rest, piece in kept:
            chunk = piece if piece is not None else view[start:end]
            pieces.append(chunk)
            spans.append((at, at + (end - start)))
            at += end - start
        buf = np.frombuffer(b"".join(pieces), np.uint8)
        starts = np.array([s for s, _ in spans], np.int64)
        ends = np.array([e for _, e in spans], np.int64)
    else:
        buf = np.frombuffer(records, np.uint8) if size else np.zeros(0, np.uint8)
        starts = np.array([k[0] for k in kept], np.int64)
        ends = np.array([k[1] for k in kept], np.int64)
    return Segments(buf, starts, ends, *(np.array([k[i] for k in kept], np.int64) for i in (2, 3, 4, 5)),
                    next_offset, np.array([k[6] for k in kept], np.int64), topic, partition,
                    np.array([k[7] for k in kept], np.int64))


def _control_type(view, start: int, end: int, bad) -> int:
    """The type of the control record that fills ``view[start:end]`` (0 ABORT, 1 COMMIT: Kafka's
    ``ControlRecordType``); ``bad(reason)`` makes the error raised when it is anything else (Kafka's
    ``ControlRecordType.parse``: a 4-byte key of version int16 >= 0 and type int16)."""
    try:
        length, p = read_zigzag(view, start, end, MAX_VARINT_BYTES)
        rec_end = p + length
        if length < MIN_RECORD_BODY or rec_end != end:
            raise VarintError("its length does not fill the batch")
        p += 1  # attributes
        p = read_zigzag(view, p, rec_end, MAX_VARLONG_BYTES)[1]
        p = read_zigzag(view, p, rec_end, MAX_VARINT_BYTES)[1]
        key_len, p = read_zigzag(view, p, rec_end, MAX_VARINT_BYTES)
        if key_len != 4 or p + key_len > rec_end:
            raise VarintError(f"its key has {key_len} bytes; a control key has 4")
        version, kind = CONTROL_KEY.unpack_from(view, p)
        if version < 0 or kind not in (CONTROL_ABORT, CONTROL_COMMIT):
            raise VarintError(f"its key says version {version}, type {kind}; a transaction marker is version 0, "
                              "type 0 (abort) or 1 (commit)")
    except VarintError as exc:
        raise bad(f"its control record is malformed: {exc}") from None
    return kind


@dataclass
class Decoded:
    """The records of an offset range, column-wise (numpy arrays / Arrow buffers, ``rows`` long).

    ``offsets``/``timestamps_ms`` int64, ``timestamp_types`` int32 (0 create, 1 log append);
    ``keys``/``values``: ``(valid bool array, int32 Arrow offsets of rows+1, data uint8 array)``;
    ``header_spans``: ``(start, end)`` int64 byte positions in ``buf`` of each record's header part.
    """

    rows: int
    offsets: np.ndarray
    timestamps_ms: np.ndarray
    timestamp_types: np.ndarray
    keys: tuple
    values: tuple
    header_spans: tuple
    buf: np.ndarray


def decode(seg: Segments, from_offset: int, until_offset: int, decoder: str | None = None) -> Decoded:
    """The records of ``seg`` with ``from_offset <= offset < until_offset``, decoded column-wise.

    ``decoder``: ``"numba"`` or ``"numpy"`` (default: :func:`default_decoder`); both apply the same
    checks (see :data:`BAD_REASONS`) to every record of every section, also those outside the
    range. Raises :class:`CorruptRecordError` naming the partition, the batch's offsets and the
    first violation found.
    """
    decoder = decoder or default_decoder()
    if seg.buf.shape[0] > _INT32_MAX:
        raise PySparkKafkaError(f"one Fetch answer of {seg.topic}-{seg.partition} holds {seg.buf.shape[0]} bytes of "
                                "records, more than an Arrow binary column takes (2 GiB): lower "
                                "kafka.max.partition.fetch.bytes")
    if decoder == "numba":
        kernel = _numba_kernel()
        out = kernel(seg.buf, seg.start, seg.end, seg.count, seg.base_offset, seg.base_ts, seg.append_ts,
                     seg.log_append, seg.last_delta, from_offset, until_offset)
    else:
        out = _decode_numpy(seg, from_offset, until_offset)
    (n, bad, bad_seg, offs, ts, tst, kvalid, koffs, kdata, vvalid, voffs, vdata, hpos, hend) = out
    if bad:
        s = int(bad_seg)
        first = int(seg.base_offset[s])
        raise corrupt(seg.topic, seg.partition, first, first + int(seg.last_delta[s]), BAD_REASONS[int(bad)])
    return Decoded(int(n), offs[:n], ts[:n], tst[:n], (kvalid[:n], koffs[:n + 1], kdata),
                   (vvalid[:n], voffs[:n + 1], vdata), (hpos[:n], hend[:n]), seg.buf)


def default_decoder() -> str:
    """``numba`` when it is importable and :data:`DECODER_ENV` does not say ``numpy``, else ``numpy``."""
    wanted = os.environ.get(DECODER_ENV, "").strip().lower()
    if wanted == "numpy":
        return "numpy"
    if wanted not in ("", "numba"):
        raise PySparkKafkaError(f"{DECODER_ENV}={wanted!r}: use 'numba' or 'numpy'")
    return "numba" if _numba_kernel() is not None else "numpy"


_KERNEL: list = []


def _numba_kernel():
    """:func:`pyspark_kafka.read.decode_kernel.decode_records` (numba, compiled on first use and cached on
    disk), or None when numba is not installed."""
    if not _KERNEL:
        try:
            from pyspark_kafka.read.decode_kernel import decode_records
        except ImportError:
            decode_records = None
        _KERNEL.append(decode_records)
    return _KERNEL[0]


def _gather(buf: np.ndarray, pos: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(valid, int32 offsets, data)`` of the byte strings ``buf[pos:pos+len]`` (len -1: null)."""
    valid = lens >= 0
    sizes = np.where(valid, lens, 0)
    offs = np.zeros(pos.shape[0] + 1, np.int64)
    np.cumsum(sizes, out=offs[1:])
    total = int(offs[-1])
    if total:
        index = np.repeat(pos - offs[:-1], sizes) + np.arange(total, dtype=np.int64)
        data = buf[index]
    else:
        data = np.zeros(0, np.uint8)
    return valid, offs.astype(np.int32), data


def _failed(code: int, section: int):
    """The numpy path's answer for a violation: the kernel's tuple shape with ``bad`` set."""
    return (0, code, section) + (np.zeros(0, np.int64),) * 11


def _decode_numpy(seg: Segments, lo: int, hi: int):
    """The numpy decoder: record boundaries chained in Python (one varint per record), every field decoded
    and checked vectorized, header parts of the records that have headers walked in Python; the same
    rules and reason codes as the numba kernel, and its return tuple."""
    raw = seg.buf.tobytes()
    bodies, ends, seg_of = [], [], []
    for s in range(seg.start.shape[0]):
        p, end = int(seg.start[s]), int(seg.end[s])
        for _ in range(int(seg.count[s])):
            if p >= end:
                return _failed(9, s)
            b = raw[p]
            if b < 0x80:  # one- and two-byte lengths inline (records up to 8 KiB): no call per record
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif p + 1 < end and raw[p + 1] < 0x80:
                b = (b & 0x7F) | (raw[p + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                try:
                    length, p = read_zigzag(raw, p, end, MAX_VARINT_BYTES)
                except VarintError:
                    return _failed(1, s)
            if length < MIN_RECORD_BODY:
                return _failed(1, s)
            if length > end - p:
                return _failed(2, s)
            bodies.append(p)
            p += length
            ends.append(p)
            seg_of.append(s)
        if p != end:
            return _failed(10, s)
    body = np.array(bodies, np.int64)
    rec_end = np.array(ends, np.int64)
    which = np.array(seg_of, np.int64)

    def first_bad(ok) -> int:
        return int(which[int(np.argmin(ok))])

    buf = np.concatenate([seg.buf, np.zeros(VARINT_PAD, np.uint8)])
    tsd, p, ok = zigzag_varints(buf, body + 1, rec_end, MAX_VARLONG_BYTES)
    if not ok.all():
        return _failed(3, first_bad(ok))
    od, p, ok = zigzag_varints(buf, p, rec_end, MAX_VARINT_BYTES)
    if not ok.all():
        return _failed(3, first_bad(ok))
    prev = np.empty_like(od)
    if od.shape[0]:
        prev[0] = -1
        prev[1:] = np.where(which[1:] == which[:-1], od[:-1], -1)
    ok = (od > prev) & (od <= seg.last_delta[which])
    if not ok.all():
        return _failed(11, first_bad(ok))
    kl, p, ok = zigzag_varints(buf, p, rec_end, MAX_VARINT_BYTES)
    if not ok.all():
        return _failed(3, first_bad(ok))
    ok = (kl >= -1) & (kl <= rec_end - p)
    if not ok.all():
        return _failed(4, first_bad(ok))
    kp = p
    vl, p, ok = zigzag_varints(buf, p + np.maximum(kl, 0), rec_end, MAX_VARINT_BYTES)
    if not ok.all():
        return _failed(3, first_bad(ok))
    ok = (vl >= -1) & (vl <= rec_end - p)
    if not ok.all():
        return _failed(5, first_bad(ok))
    vp = p
    hp = p + np.maximum(vl, 0)
    hc, p, ok = zigzag_varints(buf, hp, rec_end, MAX_VARINT_BYTES)
    if not ok.all():
        return _failed(3, first_bad(ok))
    ok = (hc >= 0) & (hc <= (rec_end - p) // 2)
    if not ok.all():
        return _failed(6, first_bad(ok))
    for i in np.flatnonzero(hc > 0).tolist():
        code = _walk_headers(raw, int(p[i]), int(rec_end[i]), int(hc[i]))
        if code:
            return _failed(code, int(which[i]))
    ok = (hc > 0) | (p == rec_end)
    if not ok.all():
        return _failed(8, first_bad(ok))
    offs = seg.base_offset[which] + od
    keep = (offs >= lo) & (offs < hi)
    log_append = seg.log_append[which] != 0
    ts = np.where(log_append, seg.append_ts[which], seg.base_ts[which] + tsd)[keep]
    tst = log_append.astype(np.int32)[keep]
    kvalid, koffs, kdata = _gather(buf, kp[keep], kl[keep])
    vvalid, voffs, vdata = _gather(buf, vp[keep], vl[keep])
    return (int(keep.sum()), 0, -1, offs[keep], ts, tst, kvalid, koffs, kdata, vvalid, voffs, vdata,
            hp[keep], rec_end[keep])


def _walk_headers(raw: bytes, p: int, rec_end: int, count: int) -> int:
    """Check ``count`` headers from ``p`` to exactly ``rec_end``: 0, or the reason code (7, 8)."""
    try:
        for _ in range(count):
            key_len, p = read_zigzag(raw, p, rec_end, MAX_VARINT_BYTES)
            if key_len < 0 or key_len > rec_end - p:
                return 7
            value_len, p = read_zigzag(raw, p + key_len, rec_end, MAX_VARINT_BYTES)
            if value_len < -1 or value_len > rec_end - p:
                return 7
            p += max(value_len, 0)
    except VarintError:
        return 7
    return 0 if p == rec_end else 8


def binary_array(column: tuple) -> pa.Array:
    """An Arrow ``binary`` array from ``(valid, int32 offsets, data)`` (no copy of the data)."""
    valid, offs, data = column
    n = valid.shape[0]
    nulls = int(n - np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(offs), pa.py_buffer(data)], nulls)


# The builders below make Arrow arrays from numpy buffers with ``pa.Array.from_buffers``, never with
# ``pa.array`` or ``pa.scalar``: those import pandas when it is installed (pyarrow checks every input
# for a pandas object), 120-170 ms in the first read of every new Python worker and source runner,
# which imports nothing of pandas otherwise.


def fixed_width_array(arrow_type: pa.DataType, values: np.ndarray) -> pa.Array:
    """``values`` (shape ``(n,)``, no nulls) as an Arrow array of the fixed-width ``arrow_type``.

    ``values.dtype`` must have ``arrow_type``'s width (``int32`` for ``pa.int32()``, ``int64`` for
    ``pa.int64()`` and ``pa.timestamp("us")``); raises ValueError otherwise.
    """
    values = np.ascontiguousarray(values)
    if values.ndim != 1 or values.dtype.itemsize * 8 != arrow_type.bit_width:
        raise ValueError(f"{values.dtype} values of shape {values.shape} do not make an Arrow {arrow_type} array")
    return pa.Array.from_buffers(arrow_type, values.shape[0], [None, pa.py_buffer(values)])


def repeated_string_array(text: str, n: int) -> pa.Array:
    """An Arrow ``string`` array holding ``text`` ``n`` times (the ``topic`` column of one partition's rows)."""
    data = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int64) * len(data)
    if offsets[-1] > _INT32_MAX:
        raise PySparkKafkaError(f"{n} rows of topic {text!r} hold more than 2 GiB of topic names")
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                  pa.py_buffer(data * n)])


def _pieces_array(arrow_type: pa.DataType, pieces: list) -> pa.Array:
    """A ``string`` or ``binary`` array from ``pieces`` (``bytes``, or None for a null)."""
    n = len(pieces)
    valid = np.fromiter((p is not None for p in pieces), np.bool_, n)
    lengths = np.fromiter((len(p) if p is not None else 0 for p in pieces), np.int64, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > _INT32_MAX:
        raise PySparkKafkaError("the headers of one fetched answer hold more than 2 GiB: lower "
                                "kafka.max.partition.fetch.bytes")
    nulls = int(n - np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(arrow_type, n, [bitmap, pa.py_buffer(offsets.astype(np.int32)),
                                                 pa.py_buffer(b"".join(p for p in pieces if p))], nulls)


def headers_array(dec: Decoded, arrow_type: pa.DataType) -> pa.Array:
    """The ``headers`` column (``array<struct<key string, value binary>>``; null when a record has none).

    Header parts are parsed in Python, only for records that carry headers; :func:`decode` has
    checked their structure already, and every read here is bounded by the record's end all the same
    (:class:`CorruptRecordError` if not). Keys are decoded as UTF-8 with U+FFFD for invalid bytes,
    as Kafka's Java client does (``Utils.utf8``).
    """
    raw = dec.buf.tobytes()
    keys: list = []
    values: list = []
    ends = [0]  # per record: the end of its entries in keys/values
    for start, end in zip(dec.header_spans[0].tolist(), dec.header_spans[1].tolist()):
        try:
            count, p = read_zigzag(raw, start, end, MAX_VARINT_BYTES)
            for _ in range(count):
                kl, p = read_zigzag(raw, p, end, MAX_VARINT_BYTES)
                if not 0 <= kl <= end - p:
                    raise VarintError(f"a header key length of {kl}")
                keys.append(raw[p:p + kl].decode("utf-8", "replace").encode("utf-8"))
                vl, p = read_zigzag(raw, p + kl, end, MAX_VARINT_BYTES)
                if not -1 <= vl <= end - p:
                    raise VarintError(f"a header value length of {vl}")
                values.append(None if vl < 0 else raw[p:p + vl])
                p += max(vl, 0)
            if p != end:
                raise VarintError("the headers end before the record does")
        except VarintError as exc:
            raise CorruptRecordError(f"corrupt record: a fetched record's headers do not fit the record: {exc}"
                                     ) from None
        ends.append(len(keys))
    n = len(ends) - 1
    offsets = np.asarray(ends, dtype=np.int32)
    has = offsets[1:] > offsets[:-1]  # a record without headers is null, not an empty list
    nulls = int(n - np.count_nonzero(has))
    struct_type = arrow_type.value_type
    entries = pa.StructArray.from_arrays(
        [_pieces_array(struct_type.field(0).type, keys), _pieces_array(struct_type.field(1).type, values)],
        fields=[struct_type.field(0), struct_type.field(1)])
    bitmap = pa.py_buffer(np.packbits(has, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(arrow_type, n, [bitmap, pa.py_buffer(offsets)], nulls, children=[entries])
