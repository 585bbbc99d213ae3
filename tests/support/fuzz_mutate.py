"""Seeded mutations of Kafka request frames, for the network fuzzer.

``Mutator(seed).mutate(frame) -> (name, bytes)``: the bytes are what goes on the wire *with*
its 4-byte size prefix (some mutations lie in that prefix). Strategies (one per call, chosen
by the seeded generator, so a run is reproducible from its seed):

- ``bitflip``: 1 to 8 random bits flipped (header and body);
- ``interesting``: a byte, int16 or int32 overwritten with a boundary value (0, -1, max, min);
- ``huge_varint``: an unsigned varint of 2^32-1 spliced in (lying compact lengths and counts);
- ``truncate``: the frame cut short, size prefix consistent with the cut;
- ``size_lie``: the size prefix larger or smaller than the frame;
- ``null_out``: an int16/int32 length or count set to -1 (null string, null array);
- ``version``: api key or version replaced by an out-of-range or neighbouring value;
- ``splice``: the header of one seed with the body of another;
- ``batch``: the first RecordBatch v2 in the frame changed in a field the CRC covers (record
  count, last offset delta, attributes/compression, a record length), CRC recomputed, so only
  the broker's own validation can catch it;
- ``bomb``: the first RecordBatch's records replaced by garbage or by a compressed payload that
  expands far beyond the batch (gzip / zstd of many zero bytes), CRC recomputed.
"""

from __future__ import annotations

import gzip
import random
import struct

import crc32c

INTERESTING_8 = (0x00, 0x01, 0x7F, 0x80, 0xFF)
INTERESTING_16 = (0, 1, -1, 0x7FFF, -0x8000, 0x100)
INTERESTING_32 = (0, 1, -1, 0x7FFFFFFF, -0x80000000, 0x10000, 0x7FFFFF00, 100_000_000)
HUGE_UVARINT = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F])
MAGIC_V2 = 2


def find_batch(frame: bytes) -> int | None:
    """Offset of the first plausible RecordBatch v2 in ``frame``: magic byte 2 at +16 whose
    batchLength fits the frame and whose CRC32C matches. None when there is none."""
    pos = frame.find(b"\x02", 16)
    while pos != -1:
        start = pos - 16
        if start >= 0 and start + 61 <= len(frame):
            (length,) = struct.unpack_from(">i", frame, start + 8)
            end = start + 12 + length
            if 49 <= length and end <= len(frame):
                (crc,) = struct.unpack_from(">I", frame, start + 17)
                if crc32c.crc32c(frame[start + 21:end]) == crc:
                    return start
        pos = frame.find(b"\x02", pos + 1)
    return None


def _recrc(buf: bytearray, start: int) -> None:
    (length,) = struct.unpack_from(">i", buf, start + 8)
    end = start + 12 + length
    struct.pack_into(">I", buf, start + 17, crc32c.crc32c(bytes(buf[start + 21:end])))


def _set_batch_length(buf: bytearray, start: int, frame_size_delta: int) -> None:
    (length,) = struct.unpack_from(">i", buf, start + 8)
    struct.pack_into(">i", buf, start + 8, length + frame_size_delta)


class Mutator:
    """Seeded frame mutator; ``seeds`` are valid frames (splice partners)."""

    def __init__(self, seed: int, seeds: list[bytes] | None = None):
        self.rng = random.Random(seed)
        self.seeds = seeds or []
        self.strategies = [
            ("bitflip", self._bitflip, 4), ("interesting", self._interesting, 4),
            ("huge_varint", self._huge_varint, 2), ("truncate", self._truncate, 2),
            ("size_lie", self._size_lie, 1), ("null_out", self._null_out, 2),
            ("version", self._version, 1), ("splice", self._splice, 1),
            ("batch", self._batch, 3), ("bomb", self._bomb, 1),
        ]
        self._weights = [w for _, _, w in self.strategies]

    def mutate(self, frame: bytes) -> tuple[str, bytes]:
        """One mutation of ``frame``: ``(strategy name, bytes with size prefix)``."""
        name, fn, _ = self.rng.choices(self.strategies, self._weights)[0]
        out = fn(bytearray(frame))
        if isinstance(out, tuple):  # size_lie returns the whole wire bytes itself
            return name, out[0]
        return name, struct.pack(">i", len(out)) + bytes(out)

    def _pos(self, buf: bytearray, width: int = 1) -> int:
        return self.rng.randrange(0, max(1, len(buf) - width + 1))

    def _bitflip(self, buf: bytearray) -> bytearray:
        for _ in range(self.rng.randint(1, 8)):
            i = self._pos(buf)
            buf[i] ^= 1 << self.rng.randrange(8)
        return buf

    def _interesting(self, buf: bytearray) -> bytearray:
        width = self.rng.choice((1, 2, 4))
        if len(buf) < width + 8:
            return buf
        i = self.rng.randrange(8, len(buf) - width + 1)  # keep api key/version: reach the decoder
        if width == 1:
            buf[i] = self.rng.choice(INTERESTING_8)
        elif width == 2:
            struct.pack_into(">h", buf, i, self.rng.choice(INTERESTING_16))
        else:
            struct.pack_into(">i", buf, i, self.rng.choice(INTERESTING_32))
        return buf

    def _huge_varint(self, buf: bytearray) -> bytearray:
        i = self.rng.randrange(8, max(9, len(buf)))
        return buf[:i] + HUGE_UVARINT + buf[i + 1:]

    def _truncate(self, buf: bytearray) -> bytearray:
        return buf[: self.rng.randrange(8, max(9, len(buf)))]

    def _size_lie(self, buf: bytearray) -> tuple[bytes]:
        lie = self.rng.choice((len(buf) + self.rng.randint(1, 64), max(0, len(buf) - self.rng.randint(1, 8)),
                               0x7FFFFFFF, -1, 104857600, 104857601))
        return (struct.pack(">i", lie) + bytes(buf),)

    def _null_out(self, buf: bytearray) -> bytearray:
        width = self.rng.choice((2, 4))
        if len(buf) < width + 8:
            return buf
        i = self.rng.randrange(8, len(buf) - width + 1)
        struct.pack_into(">h" if width == 2 else ">i", buf, i, -1)
        return buf

    def _version(self, buf: bytearray) -> bytearray:
        if self.rng.random() < 0.5:
            api_key, version = struct.unpack_from(">hh", buf)
            struct.pack_into(">h", buf, 2, self.rng.choice((version + 1, version - 1, -1, 0x7FFF, 100)))
        else:
            struct.pack_into(">h", buf, 0, self.rng.choice((-1, 0x7FFF, 99, 1000, self.rng.randrange(0, 100))))
        return buf

    def _splice(self, buf: bytearray) -> bytearray:
        if not self.seeds:
            return buf
        other = self.rng.choice(self.seeds)
        cut_a = self.rng.randrange(8, max(9, len(buf)))
        cut_b = self.rng.randrange(0, max(1, len(other)))
        return buf[:cut_a] + other[cut_b:]

    def _batch(self, buf: bytearray) -> bytearray:
        start = find_batch(bytes(buf))
        if start is None:
            return self._interesting(buf)
        choice = self.rng.randrange(5)
        if choice == 0:  # recordCount lies
            struct.pack_into(">i", buf, start + 57, self.rng.choice((0, -1, 2**31 - 1, 1_000_000, 7)))
        elif choice == 1:  # lastOffsetDelta lies
            struct.pack_into(">i", buf, start + 23, self.rng.choice((-1, 2**31 - 1, 2_000_000_000, 0, 1000)))
        elif choice == 2:  # attributes: other codec, control bit, transactional bit
            struct.pack_into(">h", buf, start + 21, self.rng.choice((1, 2, 3, 4, 5, 7, 0x20, 0x10, 0x30)))
        elif choice == 3:  # a byte inside the records (a record length varint, usually)
            (length,) = struct.unpack_from(">i", buf, start + 8)
            end = start + 12 + length
            if end > start + 61:
                i = self.rng.randrange(start + 61, end)
                buf[i] = self.rng.choice(INTERESTING_8)
        else:  # baseTimestamp / maxTimestamp extremes
            struct.pack_into(">q", buf, start + self.rng.choice((27, 35)),
                             self.rng.choice((-1, -(2**63), 2**63 - 1, 0)))
        _recrc(buf, start)
        return buf

    def _bomb(self, buf: bytearray) -> bytearray:
        start = find_batch(bytes(buf))
        if start is None:
            return self._bitflip(buf)
        (length,) = struct.unpack_from(">i", buf, start + 8)
        end = start + 12 + length
        kind = self.rng.randrange(3)
        if kind == 0:
            codec, payload = self.rng.choice((1, 2, 3, 4)), self.rng.randbytes(self.rng.randint(1, 200))
        elif kind == 1:
            codec, payload = 1, _gzip_bomb()
        else:
            codec, payload = 4, _zstd_bomb()
        out = buf[:start + 61] + payload + buf[end:]
        _set_batch_length(out, start, len(payload) - (end - start - 61))
        attrs = (struct.unpack_from(">h", out, start + 21)[0] & ~0x07) | codec
        struct.pack_into(">h", out, start + 21, attrs)
        _recrc(out, start)
        return out


_ZSTD_BOMB: bytes | None = None
_GZIP_BOMB: bytes | None = None


def _gzip_bomb() -> bytes:
    """A gzip member of 64 MiB of zeros (about 64 KB compressed), made once."""
    global _GZIP_BOMB
    if _GZIP_BOMB is None:
        _GZIP_BOMB = gzip.compress(b"\x00" * (64 << 20), compresslevel=9)
    return _GZIP_BOMB


def _zstd_bomb() -> bytes:
    """A zstd frame of 256 MiB of zeros (a few KB compressed), made once."""
    global _ZSTD_BOMB
    if _ZSTD_BOMB is None:
        import zstandard

        _ZSTD_BOMB = zstandard.ZstdCompressor(level=3).compress(b"\x00" * (256 << 20))
    return _ZSTD_BOMB
