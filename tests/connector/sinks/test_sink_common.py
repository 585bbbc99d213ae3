"""Pure rules of the exactly-once sinks (no Spark, no I/O)."""

import json

import pyarrow as pa
import pytest

from pyspark_kafka.errors import OptionError
from pyspark_kafka.sinks.common import (
    SinkColumns,
    SinkError,
    SinkIdentity,
    SinkMismatchError,
    advance,
    check_offset_columns,
    check_same,
    check_topics,
    classify_span,
    merge_spans,
    offsets_json,
    parse_sink_config,
    span_of_arrow,
)


@pytest.mark.parametrize(
    "lo,hi,stored,expected",
    [
        (0, 9, None, "new"),
        (10, 19, 10, "new"),
        (0, 9, 10, "old"),
        (5, 14, 10, "mixed"),
        (9, 9, 10, "old"),
        (10, 10, 10, "new"),
    ],
)
def test_classify_span(lo, hi, stored, expected):
    assert classify_span(lo, hi, stored) == expected


def test_advance_never_moves_backwards():
    stored = {("t", 0): 50, ("t", 1): 5}
    span = {("t", 0): (10, 20), ("t", 1): (5, 9), ("u", 0): (0, 0)}
    assert advance(stored, span) == {("t", 0): 50, ("t", 1): 10, ("u", 0): 1}


def test_merge_spans():
    a = {("t", 0): (3, 7)}
    b = {("t", 0): (0, 4), ("t", 1): (9, 9)}
    assert merge_spans([a, b, {}]) == {("t", 0): (0, 7), ("t", 1): (9, 9)}


def test_span_of_arrow_and_nulls():
    batch = pa.record_batch(
        {"topic": ["a", "a", "b"], "partition": [0, 0, 2], "offset": [7, 3, 11], "v": [1, 2, 3]}
    )
    assert span_of_arrow(batch, SinkColumns()) == {("a", 0): (3, 7), ("b", 2): (11, 11)}
    bad = pa.record_batch({"topic": ["a"], "partition": [0], "offset": pa.array([None], pa.int64())})
    with pytest.raises(SinkError, match="column 'offset' has null values"):
        span_of_arrow(bad, SinkColumns())


def test_offsets_json_fills_earliest_and_filters():
    stored = {("t", 1): 42, ("old", 0): 9}
    assert json.loads(offsets_json(stored, {"t": [0, 1, 2]})) == {"t": {"0": -2, "1": 42, "2": -2}}
    assert json.loads(offsets_json(stored)) == {"old": {"0": 9}, "t": {"1": 42}}
    assert offsets_json({}) == "earliest"


SINK = SinkIdentity("sinkId 's' in db", "use another sinkId", "reset it")


def test_check_topics():
    assert check_topics(SINK, frozenset(), None, {"a"}) == {"a"}
    assert check_topics(SINK, frozenset({"a"}), None, {"b"}) == {"a", "b"}
    assert check_topics(SINK, frozenset({"a", "b"}), frozenset({"a", "b"}), {"a"}) == {"a", "b"}
    with pytest.raises(SinkMismatchError, match=r"sinkId 's' in db holds .*different query.*use another sinkId"):
        check_topics(SINK, frozenset({"a"}), frozenset({"b"}), set())
    with pytest.raises(SinkMismatchError, match="add them to option 'topics'"):
        check_topics(SINK, frozenset(), frozenset({"a"}), {"a", "c"})


def test_check_same():
    check_same(SINK, "target table", None, "t")
    check_same(SINK, "target table", "t", "t")
    with pytest.raises(SinkMismatchError, match="holds target table 'x', but this query has target table 't'"):
        check_same(SINK, "target table", "x", "t")


def test_parse_config_and_missing_columns():
    cfg = parse_sink_config({"partitionColumn": "kafka_partition", "OFFSETCOLUMN": "kafka_offset", "topics": "a, b"})
    assert cfg.columns == SinkColumns("topic", "kafka_partition", "kafka_offset")
    assert cfg.topics == {"a", "b"}
    with pytest.raises(OptionError, match="offsetsFrom"):
        parse_sink_config({"offsetsFrom": "group"})
    with pytest.raises(SinkError, match=r"no column\(s\) \['offset'\].*offsetColumn"):
        check_offset_columns(["topic", "partition", "value"], parse_sink_config({}))
    check_offset_columns(["value"], parse_sink_config({"offsetsFrom": "batch"}))


def test_registration_packages_are_packaged():
    """setup.cfg's ``packages = find:`` ships the static-registration shims next to pyspark_kafka."""
    import os

    from setuptools import find_packages

    import pyspark_kafka_parquet
    import pyspark_kafka_sql
    from pyspark_kafka.sinks.files import ParquetSinkDataSource
    from pyspark_kafka.sinks.sql import SqlSinkDataSource

    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "connector")
    assert {"pyspark_kafka_sql", "pyspark_kafka_parquet", "pyspark_kafka.sinks"} <= set(find_packages(where=root))
    assert pyspark_kafka_sql.DefaultSource is SqlSinkDataSource and SqlSinkDataSource.name() == "pykafka-sql"
    assert pyspark_kafka_parquet.DefaultSource is ParquetSinkDataSource
    assert ParquetSinkDataSource.name() == "pykafka-parquet"


def test_fixed_topic_option_replaces_the_topic_column():
    cfg = parse_sink_config({"TOPIC": "flights", "partitionColumn": "p", "offsetColumn": "o", "topics": "flights"})
    assert cfg.columns.fixed_topic == "flights" and cfg.columns.names() == ["p", "o"]
    check_offset_columns(["p", "o", "v"], cfg)
    batch = pa.record_batch({"p": pa.array([1, 0, 1], pa.int32()), "o": pa.array([9, 4, 7], pa.int64())})
    assert span_of_arrow(batch, cfg.columns) == {("flights", 0): (4, 4), ("flights", 1): (7, 9)}


@pytest.mark.parametrize(
    "options,match",
    [
        ({"topic": "a", "topicColumn": "t"}, r"'topic' and 'topicColumn' both.*Fix"),
        ({"topic": "a", "offsetsFrom": "batch"}, r"offsetsFrom=batch uses no offset columns.*remove option 'topic'"),
        ({"topic": "a", "topics": "b,c"}, r"topic='a' is not among the declared topics \['b', 'c'\].*Fix"),
        ({"topic": " "}, r"option 'topic' must name the source topic"),
    ],
)
def test_fixed_topic_contradictions_are_refused(options, match):
    with pytest.raises(OptionError, match=match):
        parse_sink_config(options)


def test_fixed_topic_and_topic_column_both_present_or_neither_is_refused():
    both = parse_sink_config({"topic": "a"})
    with pytest.raises(SinkError, match=r"topic='a'.*also has a 'topic' column.*Fix: drop the option 'topic'"):
        check_offset_columns(["topic", "partition", "offset"], both)
    with pytest.raises(SinkError, match=r"no column\(s\) \['topic'\].*option 'topic'"):
        check_offset_columns(["partition", "offset"], parse_sink_config({}))
