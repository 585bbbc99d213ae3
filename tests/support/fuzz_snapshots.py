"""Coverage-guided fuzzing of the metadata snapshot file reader (atheris / libFuzzer).

Each input is the bytes of one snapshot file (``broker/controller/snapshots.py``: header, length-prefixed
records, CRC-32 and end magic). ``decode_snapshot`` must either raise ``SnapshotError`` or return records
that :func:`encode_snapshot` writes back to exactly the same bytes (the format has one encoding, so an
accepted file is a file our writer could have written). Anything else (struct.error, IndexError,
MemoryError, a hang) is a crash that libFuzzer saves. No other parser of this format exists to compare
against: the round trip through our writer is the oracle.

A custom mutator recomputes the CRC after libFuzzer's mutation most of the time, so that the structural
checks behind the checksum (record count, each record length, trailing bytes, end offset) are what is fuzzed,
and writes boundary values (0, -1, 2^31-1, huge) into the count and length fields.

Run: ``python tests/support/fuzz_snapshots.py -runs=200000 -seed=1 [CORPUS_DIR]``;
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

with atheris.instrument_imports(include=["pyspark_kafka.broker.controller.snapshots"]):
    from pyspark_kafka.broker.controller.snapshots import SnapshotError, decode_snapshot, encode_snapshot

_HEAD = 8 + 8 + 4 + 4  # magic, end offset, epoch, record count
_TAIL = 4 + 8  # crc, end magic


def _fix_crc(data: bytes) -> bytes:
    if len(data) < _HEAD + _TAIL:
        return data
    body = data[:-_TAIL]
    return body + struct.pack(">I", zlib.crc32(body)) + data[-8:]


def mutate(data: bytes, max_size: int, seed: int) -> bytes:
    rnd = random.Random(seed)
    data = bytearray(atheris.Mutate(data, max_size))
    if len(data) >= _HEAD + _TAIL and rnd.random() < 0.5:  # a boundary value into the count or a record length
        value = rnd.choice([0, 1, -1, 2**31 - 1, -2**31, len(data), len(data) - _HEAD])
        where = 20 if rnd.random() < 0.5 else rnd.randrange(_HEAD, max(_HEAD + 1, len(data) - _TAIL - 3))
        if where + 4 <= len(data) - _TAIL:
            data[where:where + 4] = struct.pack(">i", value)
    if rnd.random() < 0.8:
        data = bytearray(_fix_crc(bytes(data)))
    return bytes(data[:max_size])


def test_one(data: bytes) -> None:
    try:
        end_offset, epoch, records = decode_snapshot(data, "fuzz")
    except SnapshotError:
        return
    again = encode_snapshot(end_offset, epoch, records)
    if again != data:
        raise AssertionError(f"accepted a file our writer would not write: {len(data)} bytes in, "
                             f"{len(again)} out, {len(records)} records")


def seeds() -> str:
    directory = tempfile.mkdtemp(prefix="fuzz-snapshots-seeds-")
    samples = [encode_snapshot(0, 0, []), encode_snapshot(42, 3, [b"a", b"", b"xyz"]),
               encode_snapshot(10**6, 7, [b'{"type": "topic", "name": "t", "topic_id": "x"}'] * 5)]
    for i, sample in enumerate(samples):
        with open(os.path.join(directory, f"seed-{i}"), "wb") as f:
            f.write(sample)
    return directory


if __name__ == "__main__":
    args = list(sys.argv)
    args.append(seeds())  # a read-only corpus directory after the writable one given
    atheris.Setup(args, test_one, custom_mutator=mutate)
    atheris.Fuzz()
