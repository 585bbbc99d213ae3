"""Coverage-guided fuzzing of the columnar reader's decoders (atheris / libFuzzer), issue 34.

Each input is the ``records`` bytes of one partition of a Fetch answer (a run of RecordBatch v2,
the last possibly truncated). For each input the target runs our read path
(``select_batches`` + ``decode`` + ``binary_array`` + ``headers_array``) with the numba kernel and
with the numpy decoder, with ``check_crcs`` on and off, and once more under ``read_committed``;
when ours returns rows it reads the same bytes with the reference parser of
:mod:`support.record_oracle` (kafka-python's ``DefaultRecordBatch`` framed as Kafka's Java
consumer frames an answer; why kafka-python rather than kio is said there). It fails (libFuzzer
saves the input as ``crash-*``) when

- an exception other than ``CorruptRecordError`` escapes ours (IndexError, MemoryError,
  OverflowError, struct.error, ...), or the process dies in native code (libFuzzer reports the
  deadly signal), or a CorruptRecordError's first line lacks "corrupt" or the topic-partition;
- numba and numpy disagree (one raises and the other not, or different rows);
- ours returns rows the reference refuses, or rows different from the reference's, with the same
  ``check_crcs`` setting (with CRCs checked: for CRC-valid input; without: for any input, which is
  the "wrong but well-formed rows" allowance of ``check.crcs=false``, checked against Kafka's reading);
- rows read with ``check_crcs=True`` differ from the rows read with it off.

A custom mutator keeps the search near valid batches: besides libFuzzer's own mutations it writes
boundary values into batch header fields and mutates the *decompressed* records of a compressed
batch (recompressed with kafka-python's codecs), and most of the time recomputes every complete
batch's CRC-32C afterwards, so that structural checks (not the CRC) are what is fuzzed.

Run: ``python tests/support/fuzz_decoders.py -runs=200000 -seed=1 [CORPUS_DIR]`` (libFuzzer flags;
the seed batches are generated and added as a read-only corpus directory;
``tests/connector/read/test_fuzz_decoders.py`` runs it bounded in CI).
"""

from __future__ import annotations

import os
import random
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for ``support``

import atheris  # noqa: E402

# the numba kernel must be imported (and compiled or loaded from cache) before instrumentation:
# numba compiles a function's bytecode, and atheris's inserted calls are not numba-compilable
import pyspark_kafka.read.decode_kernel  # noqa: E402,F401

with atheris.instrument_imports(include=["pyspark_kafka.read.record_decoder", "pyspark_kafka.kafka.record_codecs",
                                         "pyspark_kafka.kafka.record_format"]):
    from pyspark_kafka.read import record_decoder  # noqa: F401

from support.record_oracle import (BATCH_FIELDS, CODECS, HEADER_SIZE, Rec, assemble, compress,  # noqa: E402
                                   control_batch, corrupt_message_problem, decompress, encode_records,
                                   fix_all_crcs, fix_crc, reference_outcome, run_ours)

MAX_LEN = 4096


class DecoderBug(Exception):
    """Our decoders broke the contract on this input."""


# ---------------------------------------------------------------- seeds


def seed_inputs() -> list[bytes]:
    """Valid fetch answers: every codec, keys/null keys/empty values, headers, transactions with markers,
    LOG_APPEND_TIME, several batches, a truncated tail."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    def kp(codec: int, n: int, base: int = 0, pid: int = -1, txn: bool = False, headers=True) -> bytes:
        b = DefaultRecordBatchBuilder(2, codec, txn, pid, 0 if pid >= 0 else -1, 0 if pid >= 0 else -1, 1 << 20)
        for i in range(n):
            b.append(i, 1_700_000_000_000 + 3 * i, None if i % 3 == 0 else b"key-%d" % i,
                     b"" if i % 4 == 1 else b"v%d" % i * (i % 5 + 1),
                     [("h%d" % i, None if i % 2 else b"x" * i)] if headers and i % 2 == 0 else [])
        raw = bytearray(b.build())
        struct.pack_into(">q", raw, 0, base)
        return bytes(raw)

    seeds = [b""]
    for codec in range(5):
        seeds.append(kp(codec, 5))
        seeds.append(kp(codec, 3, headers=False) + kp(codec, 2, base=3))
    seeds.append(kp(0, 3, pid=9, txn=True) + control_batch(3, 9, commit=True) + kp(4, 2, base=4))
    seeds.append(kp(1, 2, pid=11, txn=True) + control_batch(2, 11, commit=False))
    logappend = bytearray(kp(0, 4))
    struct.pack_into(">h", logappend, 21, 0x08)
    seeds.append(fix_crc(logappend))
    section, _ = encode_records([Rec(0, 0, b"k", b"v", (("hk", b"hv"), ("", None))), Rec(1, -5, None, None)])
    seeds.append(assemble(section, record_count=2, last_offset_delta=1))
    whole = kp(3, 4) + kp(0, 3, base=4)
    seeds.append(whole[:-7])  # a truncated last batch
    return seeds


# ---------------------------------------------------------------- mutator


def _batches(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of the complete batches of ``data``."""
    out, pos = [], 0
    while pos + HEADER_SIZE <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        if length < HEADER_SIZE - 12 or pos + 12 + length > len(data):
            break
        out.append((pos, pos + 12 + length))
        pos += 12 + length
    return out


_BOUNDARY = (0, 1, -1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, -0x8000, 0x7FFFFFFF, -0x80000000, (1 << 63) - 1, -(1 << 63))


def _set_header_field(data: bytes, rng: random.Random) -> bytes:
    batches = _batches(data)
    if not batches:
        return data
    start, _ = rng.choice(batches)
    name = rng.choice(list(BATCH_FIELDS))
    pos, fmt = BATCH_FIELDS[name]
    (old,) = struct.unpack_from(fmt, data, start + pos)
    bits = struct.calcsize(fmt) * 8
    new = rng.choice(_BOUNDARY + (old - 1, old + 1, old ^ (1 << rng.randrange(bits))))
    if fmt[-1] in "bhiq":
        new = ((new + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))
    else:
        new %= 1 << bits
    buf = bytearray(data)
    struct.pack_into(fmt, buf, start + pos, new)
    return bytes(buf)


def _mutate_compressed(data: bytes, max_size: int, rng: random.Random) -> bytes:
    """Mutate the decompressed records of one compressed batch, recompress, fix its batchLength."""
    compressed = [(s, e) for s, e in _batches(data) if 1 <= struct.unpack_from(">h", data, s + 21)[0] & 7 <= 4]
    if not compressed:
        return atheris.Mutate(data, max_size)
    start, end = rng.choice(compressed)
    codec = struct.unpack_from(">h", data, start + 21)[0] & 7
    try:
        section = decompress(codec, data[start + HEADER_SIZE:end])
    except Exception:  # noqa: BLE001 - already damaged: mutate the bytes as they are
        return atheris.Mutate(data, max_size)
    section = atheris.Mutate(section, max(len(section) * 2, 64))
    name = {v: k for k, v in CODECS.items()}[codec]
    payload = compress(name, section)
    batch = bytearray(data[start:start + HEADER_SIZE] + payload)
    struct.pack_into(">i", batch, 8, HEADER_SIZE - 12 + len(payload))
    return data[:start] + bytes(batch) + data[end:]


def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    roll = rng.random()
    if roll < 0.15:
        out = _set_header_field(data, rng)
    elif roll < 0.35:
        out = _mutate_compressed(data, max_size, rng)
    else:
        out = atheris.Mutate(data, max_size)
    if rng.random() < 0.7:
        out = fix_all_crcs(out)
    return out[:max_size]


# ---------------------------------------------------------------- target


def _agreeing(data: bytes, **kwargs):
    """Our outcome with numba and with numpy, which must agree; raise DecoderBug otherwise."""
    numba_out = run_ours(data, "numba", **kwargs)
    numpy_out = run_ours(data, "numpy", **kwargs)
    for name, out in (("numba", numba_out), ("numpy", numpy_out)):
        if out.kind == "other":
            raise DecoderBug(f"{name} decoder ({kwargs}) raised {out.detail}")
        if out.kind == "corrupt":
            problem = corrupt_message_problem(out.detail)
            if problem:
                raise DecoderBug(f"{name} decoder ({kwargs}): CorruptRecordError message: {problem}")
    if numba_out != numpy_out:
        raise DecoderBug(f"numba and numpy disagree ({kwargs}):\nnumba: {numba_out}\nnumpy: {numpy_out}")
    return numba_out


def check_input(data: bytes) -> None:
    """Raise DecoderBug when ours breaks the contract on ``data`` (see the module docstring)."""
    checked = _agreeing(data, check_crcs=True)
    unchecked = _agreeing(data, check_crcs=False)
    if checked.kind == "rows" and unchecked != checked:
        raise DecoderBug(f"rows differ with check_crcs on and off:\non: {checked}\noff: {unchecked}")
    for check, ours in ((True, checked), (False, unchecked)):
        if ours.kind == "rows":
            reference = reference_outcome(data, check_crcs=check)
            if reference.kind != "rows":
                raise DecoderBug(f"check_crcs={check}: the reference refuses ({reference.detail}) the answer "
                                 f"ours reads as {len(ours.rows)} rows {ours.rows[:5]}")
            if reference.rows != ours.rows:
                raise DecoderBug(f"check_crcs={check}: {len(ours.rows)} rows differ from the reference's "
                                 f"{len(reference.rows)}:\nours: {ours.rows}\nreference: {reference.rows}")
    _agreeing(data, check_crcs=True, read_committed=True, aborted=[(9, 0), (11, 0)])


FINDINGS_ENV = "FUZZ_DECODERS_FINDINGS"
"""A directory: findings are written there (one input per kind, ``finding-<kind>-<sha1>``, and a
``findings.log``) and the run goes on, for long runs past a known bug. Unset: the first finding
stops the run (libFuzzer's ``crash-*``), as in CI."""
_SEEN: dict = {}


def _kind(message: str) -> str:
    """A finding's kind: its first line with numbers, byte strings and hex dropped."""
    import re

    first = message.splitlines()[0]
    first = re.sub(r"\[.*|:$", "", first)
    return re.sub(r"[^a-z_=]+", "-", re.sub(r"-?\d+|0x[0-9a-f]+", "N", first.lower()))[:80].strip("-")


def test_one_input(data: bytes) -> None:
    findings = os.environ.get(FINDINGS_ENV)
    if not findings:
        check_input(data)
        return
    try:
        check_input(data)
    except DecoderBug as exc:
        import hashlib

        kind = _kind(str(exc))
        _SEEN[kind] = _SEEN.get(kind, 0) + 1
        with open(os.path.join(findings, "findings.log"), "a") as log:
            log.write(f"{kind}\t{data.hex()}\t{str(exc).splitlines()[0][:300]}\n")
        if _SEEN[kind] == 1:
            with open(os.path.join(findings, f"finding-{kind[:40]}-{hashlib.sha1(data).hexdigest()[:12]}"),
                      "wb") as f:
                f.write(data)


def main(argv: list[str]) -> None:
    seeds = tempfile.TemporaryDirectory(prefix="fuzz-decoders-seeds-")
    for i, seed in enumerate(seed_inputs()):
        with open(os.path.join(seeds.name, f"seed-{i:03d}"), "wb") as f:
            f.write(seed)
    args = list(argv)
    if not any(a.startswith("-max_len=") for a in args):
        args.append(f"-max_len={MAX_LEN}")
    args.append(seeds.name)  # the seeds: read-only after CORPUS_DIR when one is named, else the (temporary) corpus
    atheris.Setup(args, test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
