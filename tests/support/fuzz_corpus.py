"""The fuzzers' corpus files: request frames, each stored as a 4-byte big-endian length + the frame.

A frame is a Kafka request without its own size prefix (header + body), as the broker reads it
after the 4-byte size. ``fuzz_corpus/seeds.bin`` holds real clients' frames
(:mod:`fuzz_capture`); ``fuzz_corpus/regressions/*.bin`` hold inputs that once crashed, hung or
misled the broker, one file each, named after what they broke (:mod:`test_fuzz_regressions`).
"""

from __future__ import annotations

import struct
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parents[1] / "broker" / "server" / "fuzz_corpus"
SEEDS_PATH = CORPUS_DIR / "seeds.bin"
REGRESSIONS_DIR = CORPUS_DIR / "regressions"


def write_frames(path: Path, frames: list[bytes]) -> None:
    """Write ``frames`` to ``path`` (length-prefixed, in order)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(struct.pack(">I", len(f)) + f for f in frames))


def read_frames(path: Path) -> list[bytes]:
    """The frames of a corpus file. Raises ValueError when the file is truncated."""
    data = path.read_bytes()
    frames, pos = [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise ValueError(f"{path}: truncated length at byte {pos}")
        (n,) = struct.unpack_from(">I", data, pos)
        if pos + 4 + n > len(data):
            raise ValueError(f"{path}: frame at byte {pos} claims {n} bytes, file has {len(data) - pos - 4}")
        frames.append(data[pos + 4: pos + 4 + n])
        pos += 4 + n
    return frames


def seeds() -> list[bytes]:
    """The captured seed frames."""
    return read_frames(SEEDS_PATH)
