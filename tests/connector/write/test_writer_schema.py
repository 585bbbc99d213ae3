"""Writer checks that run on the driver before anything is sent: columns, types, options.

No broker is needed: the writer constructors only validate (the producer they build
to check ``kafka.*`` settings never connects before it is discarded).
"""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyspark_kafka.errors import OptionError, SchemaError
from pyspark_kafka.write import (
    KafkaBatchWriter,
    KafkaStreamWriter,
    WriteSpec,
    delivery_timeout_ms,
    parse_delivery_guarantee,
    validate_schema,
)

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
OPTS = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"}


def schema(**cols) -> StructType:
    return StructType([StructField(name, dt) for name, dt in cols.items()])


def test_all_spark_sink_columns_are_accepted():
    s = schema(
        key=StringType(), value=BinaryType(), topic=StringType(), partition=IntegerType(),
        headers=HEADERS, timestamp=TimestampType(),
    )
    assert validate_schema(s, None) == {"key", "value", "topic", "partition", "headers", "timestamp"}


def test_double_timestamp_is_accepted_like_spark():
    assert "timestamp" in validate_schema(schema(value=StringType(), timestamp=DoubleType()), "t")


@pytest.mark.parametrize(
    "cols,message",
    [
        (dict(key=StringType()), r"required column 'value' \(binary or string\) is missing"),
        (dict(value=LongType()), r"column 'value' has type bigint; the Kafka sink expects binary or string"),
        (dict(value=StringType(), key=IntegerType()), r"column 'key' has type int; .*binary or string.*CAST\(key AS STRING\)"),
        (dict(value=StringType(), partition=LongType()), r"column 'partition' has type bigint; .* int\. .*CAST\(partition AS INT\)"),
        (dict(value=StringType(), topic=BinaryType()), r"column 'topic' has type binary; .* string"),
        (dict(value=StringType(), timestamp=LongType()), r"column 'timestamp' has type bigint; .* timestamp"),
        (
            dict(value=StringType(), headers=ArrayType(StructType([StructField("key", StringType()), StructField("value", StringType())]))),
            r"column 'headers' has type array<struct<key:string,value:string>>; .* array<struct<key:string,value:binary>>",
        ),
        (dict(Value=StringType()), r"required column 'value' \(binary or string\) is missing"),
    ],
)
def test_bad_columns_name_the_column_and_expected_type(cols, message):
    with pytest.raises(SchemaError, match=message):
        validate_schema(schema(**cols), "t")


def test_extra_columns_are_ignored_with_one_warning_as_spark_does(caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="pyspark_kafka.write.schema"):
        assert validate_schema(schema(value=StringType(), extra=StringType(), Key=StringType()), "t") == {"value"}
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "ignoring column(s) 'extra', 'Key' (did you mean 'key'?)" in warning


def test_missing_topic_column_and_option():
    with pytest.raises(SchemaError, match=r"no topic: set option 'topic'.*or add a string column 'topic'"):
        validate_schema(schema(value=StringType()), None)


def test_topic_column_is_optional_when_option_is_set():
    assert validate_schema(schema(value=StringType()), "t") == {"value"}


def test_delivery_guarantee_option():
    assert parse_delivery_guarantee({}) == "at-least-once"
    assert parse_delivery_guarantee({"deliveryGuarantee": "AT-LEAST-ONCE"}) == "at-least-once"
    assert parse_delivery_guarantee({"deliveryguarantee": "Exactly-Once"}) == "exactly-once"
    with pytest.raises(OptionError, match=r"must be 'at-least-once' or 'exactly-once', got 'twice'"):
        parse_delivery_guarantee({"deliveryGuarantee": "twice"})


def test_exactly_once_stream_writer_with_contradicting_acks_fails_at_start():
    with pytest.raises(OptionError, match=r"'kafka.acks'='1' contradicts deliveryGuarantee=exactly-once"):
        KafkaStreamWriter({**OPTS, "deliveryGuarantee": "exactly-once", "kafka.acks": "1"},
                          schema(value=StringType()), False)


def test_batch_overwrite_is_rejected_like_spark():
    with pytest.raises(OptionError, match=r"save mode 'overwrite' is not allowed for Kafka.*mode\('append'\)"):
        KafkaBatchWriter(OPTS, schema(value=StringType()), True)


def test_stream_complete_mode_is_allowed():
    assert KafkaStreamWriter(OPTS, schema(value=StringType()), True).spec.topic == "t"


def test_producer_defaults_and_passthrough():
    spec = WriteSpec.from_options({**OPTS, "kafka.linger.ms": "20"}, schema(value=StringType()))
    assert spec.producer["linger.ms"] == "20"
    assert spec.producer["acks"] == "all"
    assert spec.producer["enable.idempotence"] == "true"
    assert spec.timeout_ms == 120000


def test_explicit_acks_1_turns_idempotence_default_off_like_java():
    spec = WriteSpec.from_options({**OPTS, "kafka.acks": "1"}, schema(value=StringType()))
    assert spec.producer["acks"] == "1"
    assert "enable.idempotence" not in spec.producer


def test_message_timeout_alias_is_the_delivery_timeout():
    spec = WriteSpec.from_options({**OPTS, "kafka.message.timeout.ms": "5000"}, schema(value=StringType()))
    assert "delivery.timeout.ms" not in spec.producer
    assert spec.timeout_ms == 5000
    with pytest.raises(OptionError, match="kafka.delivery.timeout.ms' must be an integer"):
        delivery_timeout_ms({"delivery.timeout.ms": "soon"})


def test_missing_bootstrap_servers():
    with pytest.raises(OptionError, match="'kafka.bootstrap.servers' is required"):
        WriteSpec.from_options({"topic": "t"}, schema(value=StringType()))


def test_unknown_kafka_setting_is_named_and_secrets_are_redacted():
    opts = {**OPTS, "kafka.no.such.setting": "1000", "kafka.sasl.password": "hunter2"}
    with pytest.raises(OptionError, match="no.such.setting") as e:
        WriteSpec.from_options(opts, schema(value=StringType()))
    assert "hunter2" not in str(e.value)


def test_unknown_partitioner_fails_on_the_driver():
    with pytest.raises(OptionError, match="option 'partitioner'"):
        WriteSpec.from_options({**OPTS, "partitioner": "nosuch.module.Part"}, schema(value=StringType()))
