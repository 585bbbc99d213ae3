"""Arrow columns → the producer's per-row arguments (the projection of Spark's ``KafkaRowWriter``).

One conversion per column of an Arrow batch: values and keys as Python ``bytes``
(:func:`as_bytes_list`), timestamps in ms (:func:`timestamps_ms`), headers as
confluent-kafka lists (:func:`headers_list`). Each raises
:class:`~pyspark_kafka.errors.RecordError` for a value Kafka cannot take, before any row of
the batch is produced.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_kafka.errors import RecordError


def as_bytes_list(column: pa.Array) -> list:
    """Python ``bytes`` (or None) per row; a string column is viewed as its UTF-8 bytes
    (zero-copy), which is cheaper than building ``str`` objects the producer re-encodes."""
    if pa.types.is_string(column.type):
        column = column.view(pa.binary())
    return column.to_pylist()


def timestamps_ms(column: pa.Array) -> list[int]:
    """Record timestamps in ms since the epoch; null → 0 (librdkafka: current time).

    Raises RecordError for a timestamp before the epoch (Kafka rejects negative CreateTime).
    """
    if pa.types.is_timestamp(column.type):
        us = column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
    else:  # double seconds, truncated to micros like Spark's CAST(double AS TIMESTAMP)
        us = pc.multiply(column, 1_000_000.0).cast(pa.int64(), safe=False)
    low = pc.min(us).as_py()
    if low is not None and low < 0:
        raise RecordError(
            f"timestamp {low} us is before 1970-01-01; Kafka record timestamps must be >= 0 "
            "(fix the 'timestamp' column or drop it to use the current time)"
        )
    return pc.divide(us, 1000).fill_null(0).to_pylist()


def headers_list(column: pa.Array) -> list:
    """Headers per row as confluent-kafka ``[(key, value), ...]`` lists (None for null).

    Raises RecordError for a header with a null key (Kafka requires header keys).
    """
    if column.null_count < len(column):
        keys = pc.list_flatten(column).field("key")
        if keys.null_count:
            raise RecordError("a header has a null 'key'; Kafka header keys must be non-null strings")
    return [None if h is None else [(e["key"], e["value"]) for e in h] for h in column.to_pylist()]
