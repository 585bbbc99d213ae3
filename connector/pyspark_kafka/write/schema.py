"""The sink's input columns (Spark's ``KafkaWriter.validateQuery``): :func:`validate_schema`.

The columns are those of Spark's built-in Kafka sink:

==============  ==========================================  ==============================
column          type                                        meaning
==============  ==========================================  ==============================
``value``       binary or string (required)                 record value; null = tombstone
``key``         binary or string                            record key (string → UTF-8)
``topic``       string (unless option ``topic`` is set)     target topic; the option wins
``partition``   int                                         explicit partition
``headers``     array<struct<key:string,value:binary>>      record headers
``timestamp``   timestamp (or double: seconds)              CreateTime of the record
==============  ==========================================  ==============================

Any other column is ignored, as Spark's sink ignores it, with one warning naming it (checked
against Spark's sink: ``integration_tests/reference``, case ``write_extra_column``); a column of
a known name with the wrong type is a :class:`~pyspark_kafka.errors.SchemaError` on the driver,
before anything is sent.
"""

from __future__ import annotations

import logging

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DoubleType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from pyspark_kafka.errors import SchemaError

log = logging.getLogger(__name__)

_HEADERS_TYPE = "array<struct<key:string,value:binary>>"
_COLUMN_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "value": ((BinaryType, StringType), "binary or string"),
    "key": ((BinaryType, StringType), "binary or string"),
    "topic": ((StringType,), "string"),
    "partition": ((IntegerType,), "int"),
    "headers": ((ArrayType,), _HEADERS_TYPE),
    "timestamp": ((TimestampType, DoubleType), "timestamp (or double seconds since the epoch)"),
}


def _is_headers_type(dt: DataType) -> bool:
    if not isinstance(dt, ArrayType) or not isinstance(dt.elementType, StructType):
        return False
    fields = dt.elementType.fields
    return (
        len(fields) == 2
        and (fields[0].name, fields[1].name) == ("key", "value")
        and isinstance(fields[0].dataType, StringType)
        and isinstance(fields[1].dataType, BinaryType)
    )


def validate_schema(schema: StructType, topic_option: str | None) -> frozenset[str]:
    """Check the input columns against the sink's table; return the names present.

    Rules (Spark's ``KafkaWriter.validateQuery``): ``value`` is required; ``topic`` is required
    unless ``topic_option`` is set; each sink column has one of the types of the module table
    (nullability ignored). Other columns are ignored, as Spark ignores them, with one warning
    naming them (and the sink column a differently-cased name probably meant). Raises
    SchemaError naming the column, the type found, the type expected and the fix.
    """
    names = [f.name for f in schema.fields if f.name in _COLUMN_TYPES]
    unknown = [f.name for f in schema.fields if f.name not in _COLUMN_TYPES]
    if unknown:
        hints = [f" (did you mean '{n.lower()}'?)" if n.lower() in _COLUMN_TYPES else "" for n in unknown]
        log.warning("ignoring column(s) %s: the Kafka sink writes only %s (as Spark's Kafka sink, extra columns "
                    "are not written)", ", ".join(f"'{n}'{h}" for n, h in zip(unknown, hints)),
                    ", ".join(_COLUMN_TYPES))
    for f in schema.fields:
        if f.name not in _COLUMN_TYPES:
            continue
        types, expected = _COLUMN_TYPES[f.name]
        ok = _is_headers_type(f.dataType) if f.name == "headers" else isinstance(f.dataType, types)
        if not ok:
            raise SchemaError(
                f"column '{f.name}' has type {f.dataType.simpleString()}; the Kafka sink expects "
                f"{expected}. Cast it, e.g. CAST({f.name} AS {_cast_hint(f.name)})"
            )
    if "value" not in names:
        raise SchemaError(
            "required column 'value' (binary or string) is missing; "
            "e.g. df.selectExpr('to_json(struct(*)) AS value')"
        )
    if "topic" not in names and not topic_option:
        raise SchemaError(
            "no topic: set option 'topic' (.option('topic', 'name')) or add a string column 'topic'"
        )
    return frozenset(names)


def _cast_hint(name: str) -> str:
    return {"partition": "INT", "topic": "STRING", "timestamp": "TIMESTAMP", "headers": _HEADERS_TYPE}.get(
        name, "STRING"
    )
