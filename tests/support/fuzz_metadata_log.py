"""Coverage-guided fuzzing of the one-voter metadata log's two file parsers (atheris / libFuzzer).

``broker/controller/single_voter_log.py`` reads ``metadata.log`` (frames ``length (int32) | crc32 | bytes``, parsed
by ``_frames``) and ``metadata.log.positions`` (``LogPositions.decode``). The first input byte picks the parser:

- even: ``_frames`` of the rest. It must not raise; the frames it returns, written again, must be exactly the
  bytes it consumed; and the bytes it stopped at must not start a whole frame (a frame it could have read).
- odd: ``LogPositions.decode`` of the rest. It must either raise ValueError or return entries that
  ``LogPositions.encode`` writes back to exactly the same bytes (the format has one encoding).

Anything else (another exception, a hang, a huge allocation) is a crash that libFuzzer saves. No other parser
of these formats exists to compare against: the round trip through our writer is the oracle. A custom mutator
fixes the CRCs after libFuzzer's mutation most of the time, so the checks behind them are what is fuzzed.

Run: ``python tests/support/fuzz_metadata_log.py -runs=200000 -seed=1 [CORPUS_DIR]``;
``tests/broker/raft/test_metadata_snapshots.py`` runs it bounded in CI.
"""

from __future__ import annotations

import os
import random
import struct
import sys
import tempfile
import zlib

import atheris

with atheris.instrument_imports(include=["pyspark_kafka.broker.controller.single_voter_log"]):
    from pyspark_kafka.broker.controller.single_voter_log import LogPositions, _frames

_HEAD = struct.Struct(">iI")


def _frame(record: bytes) -> bytes:
    return _HEAD.pack(len(record), zlib.crc32(record)) + record


def _fix_frames(data: bytes) -> bytes:
    """Recompute each frame's CRC while its length fits (so the length and later checks get fuzzed)."""
    out, position = bytearray(data), 0
    while position + _HEAD.size <= len(out):
        size = _HEAD.unpack_from(out, position)[0]
        if size < 0 or size > len(out) - position - _HEAD.size:
            break
        body = bytes(out[position + _HEAD.size: position + _HEAD.size + size])
        _HEAD.pack_into(out, position, size, zlib.crc32(body))
        position += _HEAD.size + size
    return bytes(out)


def _fix_positions(data: bytes) -> bytes:
    """Recompute the positions file's ``crc32`` line over the lines above it, when there is one."""
    text = data.decode("latin-1")
    head, sep, _ = text.rpartition("crc32 ")
    if not sep:
        return data
    return (head + f"crc32 {zlib.crc32(head.encode('latin-1')):08x}\n").encode("latin-1")


def mutate(data: bytes, max_size: int, seed: int) -> bytes:
    rnd = random.Random(seed)
    data = bytearray(atheris.Mutate(data, max_size))
    if len(data) > 1 and rnd.random() < 0.8:
        rest = bytes(data[1:])
        data = bytearray(data[:1] + (_fix_frames(rest) if data[0] % 2 == 0 else _fix_positions(rest)))
    return bytes(data[:max_size])


def test_one(data: bytes) -> None:
    if not data:
        return
    rest = data[1:]
    if data[0] % 2 == 0:
        records, consumed, last = _frames(rest)
        again = b"".join(_frame(r) for r in records)
        if again != rest[:consumed]:
            raise AssertionError(f"frames do not write back to the {consumed} bytes consumed")
        if last != ((len(records[-1]), zlib.crc32(records[-1])) if records else None):
            raise AssertionError("the last frame's (length, crc) is not the last record's")
        more, _, _ = _frames(rest[consumed:], 1)
        if more:
            raise AssertionError(f"stopped at byte {consumed} before a whole, valid frame")
        return
    try:
        entries = LogPositions.decode(rest)
    except ValueError:
        return
    if LogPositions.encode(entries) != rest:
        raise AssertionError(f"accepted a positions file our writer would not write: {rest!r}")


def seeds() -> str:
    directory = tempfile.mkdtemp(prefix="fuzz-metadata-log-seeds-")
    samples = [b"\x00" + b"".join(_frame(r) for r in (b"", b"a", b'{"type": "topic", "name": "t"}')),
               b"\x00" + _frame(b"xyz")[:-1],
               b"\x01" + LogPositions.encode({}),
               b"\x01" + LogPositions.encode({100: (3700, 32, 0xDEADBEEF), 250: (9250, 35, 7)})]
    for i, sample in enumerate(samples):
        with open(os.path.join(directory, f"seed-{i}"), "wb") as f:
            f.write(sample)
    return directory


if __name__ == "__main__":
    args = list(sys.argv)
    args.append(seeds())  # a read-only corpus directory after the writable one given
    atheris.Setup(args, test_one, custom_mutator=mutate)
    atheris.Fuzz()
