"""The numba kernel of :mod:`pyspark_kafka.read.record_decoder`: every record of a run of RecordBatch v2
records sections parsed, checked, filtered to an offset range and gathered into Arrow buffers in one
compiled pass.

Imported only when numba is installed (``ImportError`` otherwise); ``cache=True`` keeps the machine
code next to this file, so only the first worker on a machine compiles it (about 2 s).

Nothing is trusted: every varint is read no further than the record's end and at most 5 bytes
(int32 fields, value within int32) or 10 (the varlong timestampDelta); every length is compared
with the bytes left *before* it is added to a position, so no position arithmetic can overflow
(all values are int32 and positions int64), and no position moves backwards or past its record's
end. A record's fields must end exactly at its end, a
batch must hold exactly its recordCount records and nothing after them, offset deltas must
increase within ``[0, lastOffsetDelta]``. The first violation stops the kernel and is reported as a
code of :data:`pyspark_kafka.read.record_decoder.BAD_REASONS` with the section it is in; the numpy
path of that module applies the same rules with the same codes.

Speed: the checks of a record's fields are gathered and tested once per record, and a record
without headers (a single 0 byte before its end) skips the header walk; an early ``break`` after
each field made the kernel 2.4 times slower (42 → 101 ns per 100-byte record on this machine's
2 cores), the gathered form costs nothing measurable against the unchecked kernel of round 3.
"""

from __future__ import annotations

import numba
import numpy as np

_INT32_RAW_MAX = np.uint64(0xFFFFFFFF)


@numba.njit(cache=True, inline="always")
def _varint(buf, p, end, max_bytes):
    """Zigzag varint at ``p``, read no further than ``end`` nor ``max_bytes`` (5: int32, 10: int64):
    ``(value, next position, ok)``; ``ok`` False when it runs past either limit or overflows its type.

    The kernel's only varint decoder: a numba-compiled copy of the one definition,
    :func:`pyspark_kafka.kafka.record_format.read_zigzag` (its spec: same values and next positions where
    that returns, ``ok`` False exactly where that raises), kept here because a compiled kernel cannot
    call a Python function. tests/connector/test_varints.py checks them bit for bit against each
    other and :func:`~pyspark_kafka.kafka.record_format.zigzag_varints` on valid and malformed varints."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    i = 0
    while p < end and i < max_bytes:
        b = np.uint64(buf[p])
        p += 1
        i += 1
        raw |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            if max_bytes == 5:
                if raw > _INT32_RAW_MAX:
                    return np.int64(0), p, False
            elif i == 10 and b > np.uint64(1):
                return np.int64(0), p, False
            return np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1)), p, True
        shift += np.uint64(7)
    return np.int64(0), p, False


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
def decode_records(buf, seg_start, seg_end, seg_count, seg_base, seg_ts, seg_append, seg_log_append, seg_last_delta,
                   lo, hi):
    """Records of the sections ``[seg_start[s], seg_end[s])`` of ``buf`` (uint8) with ``lo <= offset < hi``.

    Per section (int64 arrays): ``seg_count`` records, ``seg_base`` base offset, ``seg_ts`` base
    timestamp (ms), ``seg_append`` the batch's maxTimestamp, ``seg_log_append`` 1 when the batch uses
    LOG_APPEND_TIME (every record then has ``seg_append``), ``seg_last_delta`` the
    batch's lastOffsetDelta. ``buf`` must hold ``sum(seg_count)`` at most ``len(buf) // 7`` records
    (the caller checks recordCount against the bytes). Returns ``(n, bad, bad_section, offsets,
    timestamps_ms, timestamp_types, key_valid, key_offsets int32, key_data, value_valid,
    value_offsets int32, value_data, header_start, record_end)``; arrays are at least ``n`` long;
    ``bad`` 0, or the reason code of the first violation and ``bad_section`` its section.
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
    bad = 0
    bad_seg = -1
    kbytes = 0
    vbytes = 0
    for s in range(seg_count.shape[0]):
        p = seg_start[s]
        end = seg_end[s]
        last_delta = seg_last_delta[s]
        prev_od = np.int64(-1)
        for _ in range(seg_count[s]):
            if p >= end:
                bad = 9
                break
            length, p, ok = _varint(buf, p, end, 5)
            if not ok or length < 6:
                bad = 1
                break
            if length > end - p:
                bad = 2
                break
            rec_end = p + length
            p += 1  # attributes
            tsd, p, ok1 = _varint(buf, p, rec_end, 10)
            od, p, ok2 = _varint(buf, p, rec_end, 5)
            kl, p, ok3 = _varint(buf, p, rec_end, 5)
            kp = p
            okk = kl >= -1 and kl <= rec_end - p
            if kl > 0 and okk:
                p += kl
            vl, p, ok4 = _varint(buf, p, rec_end, 5)
            vp = p
            okv = vl >= -1 and vl <= rec_end - p
            if vl > 0 and okv:
                p += vl
            hp = p
            if not (ok1 and ok2 and ok3 and ok4 and okk and okv):
                bad = 3 if not (ok1 and ok2 and ok3 and ok4) else (4 if not okk else 5)
                break
            if od <= prev_od or od > last_delta:
                bad = 11
                break
            prev_od = od
            if p != rec_end - 1 or buf[p] != 0:
                hc, p, ok = _varint(buf, p, rec_end, 5)
                if not ok:
                    bad = 3
                    break
                if hc < 0 or hc > (rec_end - p) // 2:
                    bad = 6
                    break
                for _h in range(hc):
                    hk, p, ok = _varint(buf, p, rec_end, 5)
                    if not ok or hk < 0 or hk > rec_end - p:
                        bad = 7
                        break
                    p += hk
                    hv, p, ok = _varint(buf, p, rec_end, 5)
                    if not ok or hv < -1 or hv > rec_end - p:
                        bad = 7
                        break
                    if hv > 0:
                        p += hv
                if bad:
                    break
                if p != rec_end:
                    bad = 8
                    break
            o = seg_base[s] + od
            if o >= lo and o < hi:
                offs[n] = o
                if seg_log_append[s]:
                    ts[n] = seg_append[s]
                    tst[n] = 1
                else:
                    ts[n] = seg_ts[s] + tsd
                    tst[n] = 0
                kpos[n] = kp
                klen[n] = kl
                vpos[n] = vp
                vlen[n] = vl
                hpos[n] = hp
                hend[n] = rec_end
                if kl > 0:
                    kbytes += kl
                if vl > 0:
                    vbytes += vl
                n += 1
            p = rec_end
        if not bad and p != end:
            bad = 10
        if bad:
            bad_seg = s
            break
    kvalid, koffs, kdata = _gather(buf, kpos, klen, n, kbytes)
    vvalid, voffs, vdata = _gather(buf, vpos, vlen, n, vbytes)
    return n, bad, bad_seg, offs, ts, tst, kvalid, koffs, kdata, vvalid, voffs, vdata, hpos, hend
