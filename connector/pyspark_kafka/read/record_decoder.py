"""RecordBatch v2 → Arrow columns, with no Python object per record (the columnar read path).

Input: the ``records`` bytes of one partition of a Fetch response (a run of RecordBatch v2, the
last possibly truncated), the offset range wanted and the partition's aborted transactions.
:func:`select_batches` walks the batch headers (one ``struct`` unpack per batch): it skips control
batches and, under ``read_committed``, the batches of aborted transactions the way Kafka's Java
consumer does (``CompletedFetch``: aborted transactions are taken in first-offset order up to each
batch's last offset; a producer id is aborted until its ABORT marker), decompresses each kept batch
with the codec functions the broker uses (:mod:`pyspark_kafka.record_codecs`) and returns
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
import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pyspark_kafka.errors import PySparkKafkaError

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = 61
"""Bytes of a RecordBatch v2 header, up to and including its record count."""
_CONTROL = 0x20
_TRANSACTIONAL = 0x10
_LOG_APPEND_TIME = 0x08
_CODEC = 0x07

DECODER_ENV = "PYSPARK_KAFKA_DECODER"
"""Environment variable choosing the record decoder: ``numba`` (default when numba is installed)
or ``numpy`` (the vectorized baseline)."""


class CorruptBatchError(PySparkKafkaError):
    """A fetched record batch cannot be parsed (bad magic, or a record runs past its batch)."""


@dataclass
class Segments:
    """Records sections to decode, all in ``buf`` (a ``numpy.uint8`` array).

    Per section (numpy arrays of equal length): ``start``/``end`` byte positions, ``count``
    records, ``base_offset``, ``base_ts`` (ms), ``append_ts`` (the batch's max timestamp when it
    uses LOG_APPEND_TIME, else -1). ``next_offset``: the offset after the last complete batch
    (control and aborted batches included), or None when the bytes held no complete batch.
    """

    buf: np.ndarray
    start: np.ndarray
    end: np.ndarray
    count: np.ndarray
    base_offset: np.ndarray
    base_ts: np.ndarray
    append_ts: np.ndarray
    next_offset: int | None


def select_batches(records, from_offset: int, read_committed: bool, aborted) -> Segments:
    """The batches of ``records`` (bytes of one partition's Fetch answer) that hold records to read.

    ``aborted``: the partition's ``(producer_id, first_offset)`` aborted transactions (Fetch
    response), used when ``read_committed``. Batches ending below ``from_offset`` are passed over.
    Raises CorruptBatchError for a batch whose magic is not 2 (message formats v0/v1: use
    ``readPath=consumer``), and the codec's CorruptCompressedDataError for undecodable compressed data.
    """
    view = memoryview(records)
    size = len(view)
    pos = 0
    kept: list = []  # (start, end, count, base_offset, base_ts, append_ts, piece or None)
    compressed = False
    next_offset = None
    pending = sorted(aborted, key=lambda a: a[1]) if read_committed and aborted else []
    aborted_ids: set = set()
    while pos + HEADER_SIZE <= size:
        (base, length, _epoch, magic, _crc, attrs, last_delta, base_ts, max_ts, pid, _pe, _seq,
         count) = _HEADER.unpack_from(view, pos)
        end = pos + 12 + length
        if end > size:
            break  # a truncated batch at the end of the answer (partition_max_bytes)
        if magic != 2:
            raise CorruptBatchError(f"a fetched record batch at offset {base} has magic {magic}: the columnar "
                                    "reader reads RecordBatch v2 only; use .option('readPath', 'consumer')")
        last = base + last_delta
        start, pos = pos + HEADER_SIZE, end
        next_offset = last + 1
        if last < from_offset:
            continue
        if read_committed and pid >= 0:
            while pending and pending[0][1] <= last:
                aborted_ids.add(pending.pop(0)[0])
            if attrs & _CONTROL:
                if _is_abort_marker(view, start, end):
                    aborted_ids.discard(pid)
                continue
            if attrs & _TRANSACTIONAL and pid in aborted_ids:
                continue
        if attrs & _CONTROL or count <= 0:
            continue
        append_ts = max_ts if attrs & _LOG_APPEND_TIME else -1
        codec = attrs & _CODEC
        if codec:
            from pyspark_kafka.record_codecs import decompress

            piece = decompress(codec, view[start:end], 1 << 31)
            compressed = True
            kept.append((0, len(piece), count, base, base_ts, append_ts, piece))
        else:
            kept.append((start, end, count, base, base_ts, append_ts, None))
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
    return Segments(buf, starts, ends, np.array([k[2] for k in kept], np.int64),
                    np.array([k[3] for k in kept], np.int64), np.array([k[4] for k in kept], np.int64),
                    np.array([k[5] for k in kept], np.int64), next_offset)


def _is_abort_marker(view, start: int, end: int) -> bool:
    """Whether the control batch's first record is an ABORT marker (key: version int16, type int16; 0 abort)."""
    buf = bytes(view[start:min(end, start + 64)])
    p = _varint_py(buf, 0)[1] + 1  # record length, attributes
    for _ in range(2):  # timestampDelta, offsetDelta
        p = _varint_py(buf, p)[1]
    key_len, p = _varint_py(buf, p)
    return key_len >= 4 and struct.unpack_from(">h", buf, p + 2)[0] == 0


def _varint_py(buf, p: int) -> tuple[int, int]:
    """Zigzag varint at ``p`` of ``buf``: ``(value, position after it)``."""
    raw = shift = 0
    while True:
        b = buf[p]
        p += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), p
        shift += 7


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

    ``decoder``: ``"numba"`` or ``"numpy"`` (default: :func:`default_decoder`). Raises
    CorruptBatchError when a record runs past its batch.
    """
    decoder = decoder or default_decoder()
    if decoder == "numba":
        kernel = _numba_kernel()
        out = kernel(seg.buf, seg.start, seg.end, seg.count, seg.base_offset, seg.base_ts, seg.append_ts,
                     from_offset, until_offset)
    else:
        out = _decode_numpy(seg, from_offset, until_offset)
    (n, bad, offs, ts, tst, kvalid, koffs, kdata, vvalid, voffs, vdata, hpos, hend) = out
    if bad:
        raise CorruptBatchError("a fetched record runs past the end of its record batch (corrupt data)")
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


def _vvarint(buf: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at positions ``p`` of ``buf`` (padded with 10 zero bytes), all at once."""
    raw = np.zeros(p.shape[0], np.uint64)
    done = np.zeros(p.shape[0], np.bool_)
    length = np.zeros(p.shape[0], np.int64)
    for i in range(10):
        b = buf[p + i].astype(np.uint64)
        live = ~done
        raw |= np.where(live, (b & np.uint64(0x7F)) << np.uint64(7 * i), np.uint64(0))
        length += live
        done |= b < 0x80
        if done.all():
            break
    value = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return value, p + length


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


def _decode_numpy(seg: Segments, lo: int, hi: int):
    """The numpy decoder: record boundaries chained in Python, every field decoded vectorized."""
    raw = seg.buf.tobytes()
    bodies, ends, seg_of = [], [], []
    for s in range(seg.start.shape[0]):
        p, end = int(seg.start[s]), int(seg.end[s])
        for _ in range(int(seg.count[s])):
            if p >= end:
                break
            length, p = _varint_py(raw, p)
            bodies.append(p)
            p += length
            ends.append(p)
            seg_of.append(s)
            if p > end:
                return (0, True) + (np.zeros(0, np.int64),) * 11
    body = np.array(bodies, np.int64)
    rec_end = np.array(ends, np.int64)
    which = np.array(seg_of, np.int64)
    buf = np.concatenate([seg.buf, np.zeros(10, np.uint8)])
    tsd, p = _vvarint(buf, body + 1)
    od, p = _vvarint(buf, p)
    kl, p = _vvarint(buf, p)
    kp = p
    vl, p = _vvarint(buf, p + np.maximum(kl, 0))
    vp = p
    hp = p + np.maximum(vl, 0)
    bad = bool((hp > rec_end).any())
    offs = seg.base_offset[which] + od
    keep = (offs >= lo) & (offs < hi)
    append = seg.append_ts[which]
    ts = np.where(append >= 0, append, seg.base_ts[which] + tsd)[keep]
    tst = (append >= 0).astype(np.int32)[keep]
    kvalid, koffs, kdata = _gather(buf, kp[keep], kl[keep])
    vvalid, voffs, vdata = _gather(buf, vp[keep], vl[keep])
    return (int(keep.sum()), bad, offs[keep], ts, tst, kvalid, koffs, kdata, vvalid, voffs, vdata,
            hp[keep], rec_end[keep])


def binary_array(column: tuple) -> pa.Array:
    """An Arrow ``binary`` array from ``(valid, int32 offsets, data)`` (no copy of the data)."""
    valid, offs, data = column
    n = valid.shape[0]
    nulls = int(n - np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(offs), pa.py_buffer(data)], nulls)


def headers_array(dec: Decoded, arrow_type: pa.DataType) -> pa.Array:
    """The ``headers`` column (``array<struct<key string, value binary>>``; null when a record has none).

    Header parts are parsed in Python, only for records that carry headers."""
    raw = dec.buf.tobytes()
    out = []
    for start, end in zip(dec.header_spans[0].tolist(), dec.header_spans[1].tolist()):
        count, p = _varint_py(raw, start)
        if count <= 0:
            out.append(None)
            continue
        items = []
        for _ in range(count):
            kl, p = _varint_py(raw, p)
            key = raw[p:p + kl].decode("utf-8", "replace")
            p += kl
            vl, p = _varint_py(raw, p)
            value = None if vl < 0 else raw[p:p + vl]
            p += max(vl, 0)
            items.append((key, value))
        if p > end:
            raise CorruptBatchError("a fetched record's headers run past the record (corrupt data)")
        out.append(items)
    return pa.array(out, arrow_type)
