"""Corruption matrix for the columnar reader's decoders (issue 34): crafted RecordBatch v2 straight into
``select_batches`` + ``decode`` + ``headers_array``, numba and numpy, no broker.

Every field of the batch header and of a record is rewritten to a value too small, too large,
negative and huge (int32/int64 extremes; 2^31 and 2^63-1 as 5- and 10-byte varints where the
field is a varint; over-long varints), batches are cut at every length, and compressed payloads
are damaged. Each damaged answer is read twice:

- ``check_crcs=True``, the CRC left as it was: every damage inside the CRC (bytes 21..end) must
  raise ``CorruptRecordError``; damage outside it (baseOffset, partitionLeaderEpoch) must read as
  the reference reads it; a lying batchLength must raise.
- ``check_crcs=False``, the CRC recomputed after the damage, so only structural checks can catch
  it: the answer is CorruptRecordError or rows that the reference parser (kafka-python's
  ``DefaultRecordBatch``, see ``support/record_oracle.py``) also accepts and decodes identically;
  where the contract names the rule (lengths < -1, offset deltas, counts, varint sizes, ...) it
  must be CorruptRecordError, and harmless damage must leave the rows as they were.

Always: no other exception type, numba and numpy give the same verdict and the same rows, and a
CorruptRecordError's first line says "corrupt" and names the topic-partition.
"""

from __future__ import annotations

import struct

import pytest

from support.record_oracle import (BATCH_FIELDS, CODECS, HEADER_SIZE, Outcome, Rec, assemble, compress,
                                   control_batch, corrupt_error_class, corrupt_message_problem, encode_records,
                                   fix_crc, overlong, reference_outcome, run_ours, varint)

DECODERS = ("numba", "numpy")
RAISE, SAME, ORACLE = "raise", "same", "oracle"

RECORDS = [
    Rec(0, 0, b"k0", b"v0", (("h", b"x"),)),
    Rec(1, 5, None, b""),  # null key, empty value, no headers
    Rec(2, 7, b"key-2", b"value-2" * 3, (("a", None), ("bb", b"yy"))),
]
TRAILER = assemble(encode_records([Rec(0, 0, b"t", b"trailer")])[0], record_count=1, last_offset_delta=0,
                   base_offset=100)
"""A valid batch after the damaged one, so damage is never hidden as a truncated tail (offset 100: a
damaged baseOffset or lastOffsetDelta of the first batch never overlaps it)."""
I32, I64 = (1 << 31), (1 << 63)


def batch_of(codec: str, section: bytes, **header) -> bytes:
    args = dict(record_count=len(RECORDS), last_offset_delta=len(RECORDS) - 1, attributes=CODECS[codec])
    args.update(header)
    return assemble(compress(codec, section), **args)


SECTION, LAYOUTS = encode_records(RECORDS)
BASES = {codec: batch_of(codec, SECTION) for codec in CODECS}


# ---------------------------------------------------------------- the damage tables

def _int_values(fmt: str, v: int) -> dict:
    bits = struct.calcsize(fmt) * 8
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return {"small": v - 1, "large": v + 1, "negative": -1, "min": lo, "huge": hi}


# batch header field -> (expectation per damage name in check_crcs=False mode; default for others)
HEADER_RULES = {
    "base_offset": ({}, ORACLE),
    "batch_length": ({}, RAISE),
    "partition_leader_epoch": ({}, SAME),
    "magic": ({}, RAISE),
    "crc": ({}, SAME),  # check_crcs=False: the damaged CRC is not looked at
    "attributes": ({}, ORACLE),
    # huge: the batch then claims offsets up to 2^31-1, past the next batch's base offset (100): rows as
    # Kafka reads them, or refused as a log whose batches overlap
    "last_offset_delta": ({"large": SAME, "huge": ORACLE}, RAISE),
    "base_timestamp": ({}, ORACLE),
    "max_timestamp": ({}, SAME),
    "producer_id": ({}, SAME),
    "producer_epoch": ({}, SAME),
    "base_sequence": ({}, SAME),
    "record_count": ({}, RAISE),
}
OUTSIDE_CRC = {"base_offset", "batch_length", "partition_leader_epoch"}


def header_values(name: str, base: bytes) -> dict:
    """Damage name -> new value of batch header field ``name`` of ``base``."""
    pos, fmt = BATCH_FIELDS[name]
    (v,) = struct.unpack_from(fmt, base, pos)
    if name == "crc":
        return {"flip": v ^ 1, "zero": 0, "ones": 0xFFFFFFFF}
    if name == "magic":
        return {"v0": 0, "v1": 1, "v3": 3, "negative": -1, "huge": 127}
    values = _int_values(fmt, v)
    if name == "attributes":
        codec = v & 0x07
        values.update({f"codec{c}": c for c in (5, 6, 7)})
        values.update({"log_append_time": codec | 0x08, "transactional": codec | 0x10, "control": codec | 0x20,
                       "unknown_bit": codec | 0x4000})
    return {label: new for label, new in values.items() if new != v}


def header_expectation(name: str, label: str, new: int, codec: str) -> str:
    if name == "batch_length" and codec != "none" and label == "large":
        # a compressed stream followed by one stray byte (the next batch's first, which then reads as a
        # truncated tail): Kafka's decompressors stop at the stream's end, so only the CRC can tell
        return ORACLE
    if name == "attributes":
        return RAISE if new & 0x07 >= 5 else ORACLE
    per, default = HEADER_RULES[name]
    return per.get(label, default)


HEADER_CASES = list(dict.fromkeys((name, label) for base in BASES.values() for name in BATCH_FIELDS
                                  for label in header_values(name, base)))


# record field -> how to judge a value: "length" and "offset_delta" any change raises; lengths
# below their floor raise; a varint longer than 5 bytes (10 for timestampDelta) raises
VARINT_FLOOR = {"key_length": -1, "value_length": -1, "header_count": 0, "header0_key_length": 0,
                "header0_value_length": -1}


def _record_values(name: str, v: int) -> dict:
    if name == "attributes":
        return {"one": 1, "max": 0x7F, "high_bit": 0x80, "ones": 0xFF}
    values = {"small": v - 1, "large": v + 1, "negative": -2 if v - 1 != -2 else -3, "min32": -I32,
              "huge31": I32, "huge63": I64 - 1}
    if name in VARINT_FLOOR or name in ("length", "offset_delta"):
        values["null"] = -1
    return {label: new for label, new in values.items() if new != v}


def record_expectation(name: str, new: int, encoded: bytes, record_length: int) -> str:
    if name == "attributes":
        return SAME
    if name == "timestamp_delta":
        return RAISE if len(encoded) > 10 else ORACLE
    if len(encoded) > 5 or name in ("length", "offset_delta"):
        return RAISE
    if new < VARINT_FLOOR[name] or new > record_length:
        return RAISE
    return ORACLE


RECORD_FIELDS = ("length", "attributes", "timestamp_delta", "offset_delta", "key_length", "value_length",
                 "header_count", "header0_key_length", "header0_value_length")
BYTE_FIELDS = ("key", "value", "header0_key", "header0_value")


def record_cases():
    for target in (0, 2):
        spans = LAYOUTS[target].spans
        for name in RECORD_FIELDS:
            a, b = spans[name]
            if name == "attributes":
                v = SECTION[a]
            else:
                from kafka.record.util import decode_varint

                v, _ = decode_varint(bytearray(SECTION), a)
            record_length = max(end for _, end in spans.values()) - spans["length"][1]
            for label, new in _record_values(name, v).items():
                encoded = bytes([new & 0xFF]) if name == "attributes" else varint(new)
                yield pytest.param(target, name, encoded, record_expectation(name, new, encoded, record_length),
                                   id=f"rec{target}-{name}-{label}")
            if name != "attributes":
                # an over-long encoding of the same value: 6 bytes (11 for the varlong timestampDelta)
                yield pytest.param(target, name, overlong(v, 11 if name == "timestamp_delta" else 6), RAISE,
                                   id=f"rec{target}-{name}-overlong")
        for name in BYTE_FIELDS:
            if name in spans:
                a, b = spans[name]
                flipped = bytes([SECTION[a] ^ 0x20]) + SECTION[a + 1:b]
                yield pytest.param(target, name, flipped, ORACLE, id=f"rec{target}-{name}-flip")
        # a 6th byte in a field that is fine otherwise: the record's fields no longer end at its end
        yield pytest.param(target, "value", SECTION[slice(*spans["value"])] + b"!", RAISE,
                           id=f"rec{target}-value-extra-byte")


# ---------------------------------------------------------------- judging


def read_all(answer: bytes, check_crcs: bool) -> Outcome:
    """Our verdict, the same from both decoders (asserted), with CorruptRecordError messages checked."""
    outcomes = {d: run_ours(answer, d, check_crcs=check_crcs) for d in DECODERS}
    for d, out in outcomes.items():
        assert out.kind != "other", f"{d} raised a foreign exception on {answer.hex()}: {out.detail}"
        if out.kind == "corrupt":
            problem = corrupt_message_problem(out.detail)
            assert problem is None, f"{d}: {problem} (input {answer.hex()})"
    assert outcomes["numba"] == outcomes["numpy"], (
        f"numba and numpy disagree on {answer.hex()}:\nnumba {outcomes['numba']}\nnumpy {outcomes['numpy']}")
    return outcomes["numba"]


def judge(damaged: bytes, original: bytes, expect: str, check_crcs: bool) -> None:
    """Assert our reading of ``damaged`` against the expectation (see the module docstring)."""
    ours = read_all(damaged, check_crcs)
    where = f"check_crcs={check_crcs}, input {damaged.hex()}"
    if expect == RAISE:
        assert ours.kind == "corrupt", f"expected CorruptRecordError, got {ours} ({where})"
        return
    if expect == SAME:
        reference = reference_outcome(original, check_crcs=check_crcs)
        assert reference.kind == "rows"
        assert ours == reference, f"harmless damage changed the answer: {ours} ({where})"
        return
    if ours.kind == "rows":
        reference = reference_outcome(damaged, check_crcs=check_crcs)
        assert reference.kind == "rows", f"ours returned {ours.rows}, the reference refuses: {reference.detail} ({where})"
        assert ours.rows == reference.rows, f"ours {ours.rows} != reference {reference.rows} ({where})"


def both_modes(build, original: bytes, expect_without_crc: str, inside_crc: bool = True) -> None:
    """``build(recompute_crc)`` → the damaged answer; judged with and without CRC checks."""
    judge(build(False), original, RAISE if inside_crc else expect_without_crc, True)
    judge(build(True), original, expect_without_crc, False)


ORIGINAL_ANSWERS = {codec: base + TRAILER for codec, base in BASES.items()}


def test_corrupt_record_error_is_the_package_error():
    from pyspark_kafka.errors import CorruptRecordError, PySparkKafkaError

    assert issubclass(CorruptRecordError, PySparkKafkaError)


@pytest.mark.parametrize("codec", list(CODECS))
def test_undamaged_batches_read_as_the_reference_reads_them(codec):
    answer = ORIGINAL_ANSWERS[codec]
    for check in (True, False):
        ours = read_all(answer, check)
        assert ours.kind == "rows" and ours == reference_outcome(answer, check_crcs=check)
        assert len(ours.rows) == 4


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize(("name", "label"), HEADER_CASES, ids=[f"{n}-{lb}" for n, lb in HEADER_CASES])
def test_batch_header_field(codec, name, label):
    pos, fmt = BATCH_FIELDS[name]
    base = BASES[codec]
    values = header_values(name, base)
    if label not in values:
        pytest.skip(f"{label} is the field's own value in this batch")
    new = values[label]
    assert struct.pack(fmt, new) != base[pos:pos + struct.calcsize(fmt)]

    def build(recompute_crc: bool) -> bytes:
        batch = bytearray(base)
        struct.pack_into(fmt, batch, pos, new)
        if recompute_crc and name != "crc":
            batch = bytearray(fix_crc(batch))
        return bytes(batch) + TRAILER

    both_modes(build, ORIGINAL_ANSWERS[codec], header_expectation(name, label, new, codec),
               inside_crc=name not in OUTSIDE_CRC)


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize(("target", "name", "encoded", "expect"), list(record_cases()))
def test_record_field(codec, target, name, encoded, expect):
    a, b = LAYOUTS[target].spans[name]
    section = SECTION[:a] + encoded + SECTION[b:]
    assert section != SECTION
    damaged = batch_of(codec, section)  # batchLength fits the new section; CRC valid for it

    def build(recompute_crc: bool) -> bytes:
        if recompute_crc:
            return damaged + TRAILER
        stale = bytearray(damaged)
        stale[17:21] = BASES[codec][17:21]  # the CRC of the undamaged batch
        return bytes(stale) + TRAILER

    both_modes(build, ORIGINAL_ANSWERS[codec], expect)


def test_a_lying_record_count_allocates_nothing_huge():
    """recordCount 2^31-1 over three records: refused, no MemoryError, no 2^31-row allocation."""
    for count in ((1 << 31) - 1, 1 << 20):
        batch = bytearray(BASES["none"])
        struct.pack_into(">i", batch, 57, count)
        for check in (True, False):
            assert read_all(fix_crc(batch) + TRAILER, check).kind == "corrupt"


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_every_prefix_of_an_answer(codec):
    """Cut inside the first batch: refused (no complete batch) unless empty; cut inside the second: the
    first batch's rows (a truncated last batch is normal)."""
    first = BASES[codec]
    answer = first + TRAILER
    full = reference_outcome(answer).rows
    for cut in range(len(answer) + 1):
        prefix = answer[:cut]
        for check in (True, False):
            ours = read_all(prefix, check)
            if cut == 0:
                assert ours == Outcome("rows", rows=[]), ours
            elif cut < len(first):
                assert ours.kind == "corrupt", f"prefix of {cut} bytes: {ours} ({prefix.hex()})"
            elif cut < len(answer):
                assert ours == Outcome("rows", rows=full[:3]), f"prefix of {cut} bytes: {ours} ({prefix.hex()})"
            else:
                assert ours == Outcome("rows", rows=full)


def _payload_damages(payload: bytes):
    yield "empty", b""
    yield "truncated-1", payload[:-1]
    yield "half", payload[: len(payload) // 2]
    yield "garbage-appended", payload + b"\x00garbage"
    yield "garbage", bytes(range(7, 7 + len(payload)))
    for at in (0, 4, len(payload) // 2, len(payload) - 1):
        yield f"flip@{at}", payload[:at] + bytes([payload[at] ^ 0x55]) + payload[at + 1:]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_damaged_compressed_payload(codec):
    payload = compress(codec, SECTION)
    for label, bad in _payload_damages(payload):
        damaged = batch_of(codec, bad)

        def build(recompute_crc: bool, damaged=damaged) -> bytes:
            if recompute_crc:
                return damaged + TRAILER
            stale = bytearray(damaged)
            stale[17:21] = BASES[codec][17:21]
            return bytes(stale) + TRAILER

        try:
            both_modes(build, ORIGINAL_ANSWERS[codec], RAISE if label in ("empty", "half", "garbage") else ORACLE)
        except AssertionError as exc:
            raise AssertionError(f"{codec} payload damage {label}: {exc}") from None


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_batches_built_by_kafka_python_read_identically(codec):
    """kafka-python's DefaultRecordBatchBuilder (its own compressors) against the reference, with control
    batches of both kinds in between (skipped)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, CODECS[codec], False, -1, -1, -1, 1 << 20)
    for i in range(20):
        builder.append(i, 1_700_000_000_000 + i, None if i % 3 == 0 else b"k%d" % i, b"" if i % 4 == 0 else
                       b"value-%d" % i * (i + 1), [("hdr", b"%d" % i)] if i % 5 == 0 else [])
    built = bytes(builder.build())
    answer = built + control_batch(20, 77, commit=True) + control_batch(21, 78, commit=False)
    for check in (True, False):
        ours = read_all(answer, check)
        assert ours == reference_outcome(answer, check_crcs=check) and len(ours.rows) == 20


def test_a_corrupt_record_error_exists_for_every_failure_kind():
    """Sanity of the matrix itself: a CRC flip is caught as CorruptRecordError, not as something else."""
    corrupt = corrupt_error_class()
    bad = bytearray(BASES["none"])
    bad[HEADER_SIZE + 3] ^= 1
    out = run_ours(bytes(bad), "numpy", check_crcs=True)
    assert out.kind == "corrupt", (corrupt, out)
