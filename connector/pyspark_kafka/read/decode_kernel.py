"""The numba kernel of :mod:`pyspark_kafka.read.record_decoder`: every record of a run of RecordBatch v2
records sections parsed, filtered to an offset range and gathered into Arrow buffers in one compiled pass.

Imported only when numba is installed (``ImportError`` otherwise); ``cache=True`` keeps the machine
code next to this file, so only the first worker on a machine compiles it (about 2 s). Bytes are
never read past a section's end: a record or varint that would is reported as corrupt.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, inline="always")
def _varint(buf, p, end):
    """Zigzag varint at ``p``: ``(value, next position)``; next position ``end + 1`` when it runs past ``end``."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    while p < end:
        b = np.uint64(buf[p])
        p += 1
        raw |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            return np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1)), p
        shift += np.uint64(7)
    return np.int64(0), end + 1


@numba.njit(cache=True, inline="always")
def _gather(buf, pos, lens, n, nbytes):
    """Arrow binary buffers of ``n`` fields ``buf[pos[i]:pos[i] + lens[i]]`` (length -1: null), ``nbytes`` in all:
    ``(valid bool, offsets int32, data uint8)``."""
    valid = np.empty(n, np.bool_)
    offs = np.empty(n + 1, np.int32)
    data = np.empty(nbytes, np.uint8)
    at = 0
    offs[0] = 0
    for i in range(n):
        length = lens[i]
        valid[i] = length >= 0
        if length > 0:
            data[at:at + length] = buf[pos[i]:pos[i] + length]
            at += length
        offs[i + 1] = at
    return valid, offs, data


@numba.njit(cache=True)
def decode_records(buf, seg_start, seg_end, seg_count, seg_base, seg_ts, seg_append, lo, hi):
    """Records of the sections ``[seg_start[s], seg_end[s])`` of ``buf`` (uint8) with ``lo <= offset < hi``.

    Per section: ``seg_count`` records, ``seg_base`` base offset, ``seg_ts`` base timestamp (ms),
    ``seg_append`` the LOG_APPEND_TIME timestamp or -1. Returns ``(n, bad, offsets, timestamps_ms,
    timestamp_types, key_valid, key_offsets int32, key_data, value_valid, value_offsets int32,
    value_data, header_start, record_end)``; arrays are at least ``n`` long; ``bad`` when a record
    runs past its section.
    """
    total = 0
    for s in range(seg_count.shape[0]):
        total += seg_count[s]
    offs = np.empty(total, np.int64)
    ts = np.empty(total, np.int64)
    tst = np.empty(total, np.int32)
    kpos = np.empty(total, np.int64)
    klen = np.empty(total, np.int64)
    vpos = np.empty(total, np.int64)
    vlen = np.empty(total, np.int64)
    hpos = np.empty(total, np.int64)
    hend = np.empty(total, np.int64)
    n = 0
    bad = False
    kbytes = 0
    vbytes = 0
    for s in range(seg_count.shape[0]):
        p = seg_start[s]
        end = seg_end[s]
        for _ in range(seg_count[s]):
            if p >= end:
                break
            length, p = _varint(buf, p, end)
            rec_end = p + length
            if rec_end > end or length < 6:
                bad = True
                break
            p += 1  # attributes
            tsd, p = _varint(buf, p, rec_end)
            od, p = _varint(buf, p, rec_end)
            kl, p = _varint(buf, p, rec_end)
            kp = p
            if kl > 0:
                p += kl
            vl, p = _varint(buf, p, rec_end)
            vp = p
            if vl > 0:
                p += vl
            if p > rec_end:
                bad = True
                break
            o = seg_base[s] + od
            if o >= lo and o < hi:
                offs[n] = o
                if seg_append[s] >= 0:
                    ts[n] = seg_append[s]
                    tst[n] = 1
                else:
                    ts[n] = seg_ts[s] + tsd
                    tst[n] = 0
                kpos[n] = kp
                klen[n] = kl
                vpos[n] = vp
                vlen[n] = vl
                hpos[n] = p
                hend[n] = rec_end
                if kl > 0:
                    kbytes += kl
                if vl > 0:
                    vbytes += vl
                n += 1
            p = rec_end
        if bad:
            break
    kvalid, koffs, kdata = _gather(buf, kpos, klen, n, kbytes)
    vvalid, voffs, vdata = _gather(buf, vpos, vlen, n, vbytes)
    return n, bad, offs, ts, tst, kvalid, koffs, kdata, vvalid, voffs, vdata, hpos, hend
