"""Compression of a RecordBatch's records section for the broker: the shared codecs with the broker's errors.

The codecs (gzip, xerial-framed or raw snappy, LZ4 frame, zstd; bounded decompression that
stops a compression bomb at ``limit`` bytes; compression as Kafka's own compressors write it)
are :mod:`pyspark_kafka.kafka.record_codecs`, one implementation shared with the connector's
columnar reader. Here their errors become the broker's: :class:`CorruptRecordError`
(CORRUPT_MESSAGE) for undecodable or oversized data, :class:`UnsupportedCompressionError`
(UNSUPPORTED_COMPRESSION_TYPE) for codec ids Kafka does not define (5-7).
"""

from __future__ import annotations

from pyspark_kafka.kafka import record_codecs as codecs
from pyspark_kafka.broker.errors import CorruptRecordError, UnsupportedCompressionError
from pyspark_kafka.kafka.record_codecs import CODEC_IDS

__all__ = ["CODEC_IDS", "compress", "decompress"]


def decompress(codec: int, data: bytes | memoryview, limit: int) -> bytes:
    """:func:`pyspark_kafka.kafka.record_codecs.decompress`: at most ``limit`` bytes of ``codec`` (1-4) records.

    Raises CorruptRecordError when the data is not a valid stream of that codec, is truncated,
    or expands past ``limit``; UnsupportedCompressionError for codec ids outside 1-4.
    """
    try:
        return codecs.decompress(codec, data, limit)
    except codecs.UnknownCodecError as exc:
        raise UnsupportedCompressionError(str(exc)) from None
    except codecs.CorruptCompressedDataError as exc:
        raise CorruptRecordError(str(exc)) from None


def compress(codec: int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """:func:`pyspark_kafka.kafka.record_codecs.compress`: ``data`` compressed with ``codec`` (1-4) at ``level``
    (None: Kafka's default). Raises UnsupportedCompressionError for other ids."""
    try:
        return codecs.compress(codec, data, level)
    except codecs.UnknownCodecError as exc:
        raise UnsupportedCompressionError(str(exc)) from None
