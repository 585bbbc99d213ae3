"""Compression of a RecordBatch's records section (gzip, snappy, lz4, zstd): bounded decompression, and compression.

One codec implementation for both halves of the package: the embedded broker
(:mod:`pyspark_kafka.broker.log.compression` turns this module's errors into the broker's Kafka
errors) and the connector's columnar reader (:mod:`pyspark_kafka.read.record_decoder`). It
imports nothing from the package but :mod:`pyspark_kafka.kafka.record_format` (``tests/connector/test_import_graph.py``).

Producers compress the records of a batch as a whole (attribute bits 0-2: 1 gzip, 2 snappy,
3 lz4, 4 zstd). The broker decompresses untrusted bytes to validate them
(:mod:`~pyspark_kafka.broker.log.validator`) and to compact them (the cleaner), so every codec
here stops at ``limit`` bytes of output: a batch that would expand past it (a compression
bomb) raises :class:`CorruptCompressedDataError` instead of filling memory, and sizes a codec
reads from the data itself (snappy's preamble) are checked before a native decoder may reserve
them.

Formats, as Kafka writes and reads them: gzip members (``GZIPOutputStream``); snappy in
xerial's framing (``\\x82SNAPPY\\x00`` + version words + int32-length-prefixed raw blocks; Java
and librdkafka producers) or a raw snappy block; the LZ4 frame format; zstd frames.

Raises :class:`CorruptCompressedDataError` for undecodable or oversized data and
:class:`UnknownCodecError` for codec ids Kafka does not define (5-7).

:func:`compress` writes the same formats the way Kafka's own compressors do (its
``Compression`` classes), for a topic whose ``compression.type`` names a codec: the broker then
recompresses each produced batch to it (Kafka's ``LogValidator``), and the cleaner keeps a
rewritten batch's codec (Kafka's ``MemoryRecords.filterTo``).
"""

from __future__ import annotations

import struct
import zlib

from pyspark_kafka.kafka.record_format import VarintError, read_uvarint


class CodecError(ValueError):
    """Compressed records that cannot be read or written (base of this module's errors)."""


class CorruptCompressedDataError(CodecError):
    """The data is not a valid stream of its codec, is truncated, or expands past the limit
    (the broker answers CORRUPT_MESSAGE)."""


class UnknownCodecError(CodecError):
    """A codec id Kafka does not define (the broker answers UNSUPPORTED_COMPRESSION_TYPE)."""


CODEC_NAMES = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CODEC_IDS = {"none": 0, "uncompressed": 0, **{name: codec for codec, name in CODEC_NAMES.items()}}
"""Codec id (batch attribute bits 0-2) by name; ``uncompressed`` is the topic config's name for none."""
DEFAULT_LEVELS = {1: -1, 3: 9, 4: 3}
"""Kafka's default levels: ``compression.gzip.level`` -1 (zlib's default, 6), ``compression.lz4.level``
9, ``compression.zstd.level`` 3; snappy has none."""
XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's SnappyOutputStream default block size
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER_SIZE = 16  # magic (8) + version (4) + compatible version (4)


def decompress(codec: int, data: bytes | memoryview, limit: int) -> bytes:
    """The records section of a batch compressed with ``codec`` (1-4), at most ``limit`` bytes.

    Raises CorruptCompressedDataError when the data is not a valid stream of that codec, is
    truncated, or expands past ``limit``; UnknownCodecError for codec ids outside 1-4.
    """
    name = CODEC_NAMES.get(codec)
    if name is None:
        raise UnknownCodecError(f"record batch uses compression codec id {codec}: Kafka defines "
                                "0 none, 1 gzip, 2 snappy, 3 lz4 and 4 zstd")
    try:
        out = _DECODERS[codec](bytes(data), limit)
    except CodecError:
        raise
    except Exception as exc:  # each codec library has its own error types
        raise CorruptCompressedDataError(f"the {name}-compressed records of a batch cannot be decompressed: "
                                         f"{type(exc).__name__}: {exc}") from None
    if len(out) > limit:
        raise _too_large(name, limit)
    return out


def compress(codec: int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """``data`` (a batch's records section) compressed with ``codec`` (1-4) at ``level`` (None: Kafka's default).

    gzip: one gzip member; snappy: xerial framing with 32 KiB blocks (what Java clients and
    Kafka write); lz4: an LZ4 frame with 64 KiB independent blocks and no checksums (Kafka's
    ``Lz4BlockOutputStream``); zstd: one frame. Raises UnknownCodecError for other ids.
    """
    if codec not in CODEC_NAMES:
        raise UnknownCodecError(f"cannot compress with codec id {codec}: Kafka defines 1 gzip, 2 snappy, "
                                "3 lz4 and 4 zstd")
    data = bytes(data)
    level = DEFAULT_LEVELS.get(codec) if level is None else level
    if codec == 1:
        packer = zlib.compressobj(level, zlib.DEFLATED, 31)  # wbits 31: a gzip container
        return packer.compress(data) + packer.flush()
    if codec == 2:
        import snappy

        out = bytearray(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
        for start in range(0, len(data), XERIAL_BLOCK_SIZE):
            block = snappy.compress(data[start:start + XERIAL_BLOCK_SIZE])
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == 3:
        import lz4.frame

        return lz4.frame.compress(data, compression_level=level, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                  block_linked=False, content_checksum=False, store_size=False)
    import zstandard

    return zstandard.ZstdCompressor(level=level).compress(data)


def _too_large(name: str, limit: int) -> CorruptCompressedDataError:
    return CorruptCompressedDataError(f"the {name}-compressed records of a batch expand to more than {limit} bytes "
                                      f"(the broker's bound: 64 x max.message.bytes); produce smaller batches")


def _gzip(data: bytes, limit: int) -> bytes:
    """gzip members only, as Kafka's ``GZIPInputStream``: a zlib stream or raw deflate flagged gzip is refused
    (Kafka: "Not in GZIP format"), since readers such as kafka-python's ``gzip`` module cannot read it."""
    if data[:2] != b"\x1f\x8b":
        raise CorruptCompressedDataError("the records of a batch flagged gzip are not in gzip format (no gzip magic "
                                         "1f 8b: a zlib or raw deflate stream?): compress them as a gzip member")
    out = bytearray()
    while data:
        d = zlib.decompressobj(31)  # a gzip container only
        out += d.decompress(data, limit + 1 - len(out))
        if len(out) > limit:
            return bytes(out)
        if not d.eof:
            if d.unconsumed_tail:
                return bytes(out) + b"\x00"  # more output than the limit allows
            raise CorruptCompressedDataError("the gzip-compressed records of a batch end before the gzip "
                                             "stream does")
        data = d.unused_data
    return bytes(out)


def _uvarint_le(data: bytes, pos: int) -> tuple[int, int]:
    """``(length, position after it)`` of a raw snappy block's preamble, the uncompressed length (< 2^32)
    as a "little-endian varint" (snappy's ``format_description.txt``): the same LEB128 bytes as Kafka's
    unsigned varint, so read by :func:`pyspark_kafka.kafka.record_format.read_uvarint` (at most 5 bytes,
    within ``data``). Raises :class:`CorruptCompressedDataError` when it is longer or ``data`` ends first."""
    try:
        return read_uvarint(data, pos, len(data))
    except VarintError:
        raise CorruptCompressedDataError("a snappy block has a malformed length preamble") from None


def _snappy_block(block: bytes, budget: int) -> bytes:
    import snappy

    length, _ = _uvarint_le(block, 0)
    if length > budget:
        raise CorruptCompressedDataError(f"a snappy block declares {length} bytes of output, more than the "
                                         f"{budget} bytes the batch may still expand to")
    return snappy.uncompress(block)


def _snappy(data: bytes, limit: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_block(data, limit)
    out = bytearray()
    pos = XERIAL_HEADER_SIZE
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptCompressedDataError("the snappy (xerial) records of a batch end inside a block length")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptCompressedDataError(f"a snappy (xerial) block claims {size} bytes, "
                                             f"{len(data) - pos} are left")
        out += _snappy_block(data[pos:pos + size], limit - len(out))
        pos += size
    return bytes(out)


def _lz4(data: bytes, limit: int) -> bytes:
    import lz4.frame

    d = lz4.frame.LZ4FrameDecompressor()
    out = d.decompress(data, max_length=limit + 1)
    if len(out) <= limit and not d.eof:
        raise CorruptCompressedDataError("the lz4-compressed records of a batch end before the lz4 frame does")
    return out


def _zstd(data: bytes, limit: int) -> bytes:
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    out = reader.read(limit + 1)
    return out


_DECODERS = {1: _gzip, 2: _snappy, 3: _lz4, 4: _zstd}
