"""Parquet sink ``pykafka-parquet``: commit manifests, offsets filter, recovery, visibility."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from pyspark_kafka.errors import OptionError
from pyspark_kafka.sinks import register, starting_offsets, stored_offsets
from pyspark_kafka.sinks.common import SinkError, SinkMismatchError, SinkUnavailableError
from pyspark_kafka.sinks.files import (
    LOG_DIR,
    TMP_DIR,
    ManifestLog,
    ParquetSinkDataSource,
    committed_files,
    file_verdict,
    read_committed,
)
from support.sink_rows import arrow, recs

SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("value", StringType()),
    ]
)




def writer(path, schema=SCHEMA, stream=True, **opts):
    src = ParquetSinkDataSource({"path": str(path), **opts})
    return src.streamWriter(schema, False) if stream else src.writer(schema, False)


def committed(path):
    t = read_committed(str(path))
    return sorted(zip(t["topic"].to_pylist(), t["partition"].to_pylist(), t["offset"].to_pylist()))


def test_replay_with_new_batch_id_filters_by_offsets(tmp_path):
    w = writer(tmp_path)
    w.commit([w.write(iter([arrow(recs("t", 0, 0, 10))])), w.write(iter([arrow(recs("t", 1, 0, 4))]))], 5)
    # checkpoint lost: batch 0 re-reads t-0 from 0 (mixed file: filtered row by row) and t-1 (all old)
    mixed = w.write(iter([arrow(recs("t", 0, 0, 12))]))
    old = w.write(iter([arrow(recs("t", 1, 0, 4))]))
    w.commit([mixed, old], 0)
    assert committed(tmp_path) == recs("t", 0, 0, 12) + recs("t", 1, 0, 4)
    assert stored_offsets(path=str(tmp_path)) == {("t", 0): 12, ("t", 1): 4}
    assert os.listdir(tmp_path / TMP_DIR) == []


def test_failed_attempts_invisible_to_spark_and_cleaned(spark, tmp_path):
    w = writer(tmp_path)
    w.write(iter([arrow(recs("t", 0, 0, 5))]))  # failed attempt: its message never reaches commit
    winner = w.write(iter([arrow(recs("t", 0, 0, 5))]))
    assert sum(pq.read_metadata(f).num_rows for f in (tmp_path / TMP_DIR).rglob("*.parquet")) == 10
    w.commit([winner, None], 0)
    assert spark.read.parquet(str(tmp_path)).count() == 5
    assert committed(tmp_path) == recs("t", 0, 0, 5)
    assert os.listdir(tmp_path / TMP_DIR) == []
    # staged but uncommitted rows of the next batch: Spark's reader does not see them
    writer(tmp_path).write(iter([arrow(recs("t", 0, 5, 9))]))
    assert spark.read.parquet(str(tmp_path)).count() == 5


def test_abort_cleans_staged_files(tmp_path):
    w = writer(tmp_path)
    m = w.write(iter([arrow(recs("t", 0, 0, 5))]))
    w.abort([m], 0)
    assert os.listdir(tmp_path / TMP_DIR) == []
    assert committed_files(str(tmp_path)) == []


def test_commit_interrupted_after_manifest_is_rolled_forward(tmp_path, monkeypatch):
    w = writer(tmp_path)
    m = w.write(iter([arrow(recs("t", 0, 0, 5))]))

    publish = ManifestLog.publish

    def publish_then_die(self, manifest):
        publish(self, manifest)
        raise KeyboardInterrupt("killed between manifest and rename")

    with monkeypatch.context() as mp:
        mp.setattr(ManifestLog, "publish", publish_then_die)
        with pytest.raises(KeyboardInterrupt):
            w.commit([m], 0)
    # published manifest: committed for read_committed, file still under its staged name
    assert committed(tmp_path) == recs("t", 0, 0, 5)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".parquet")]
    # an abort of the next attempt must not lose it: it rolls forward first
    w.abort([], 1)
    assert [n for n in os.listdir(tmp_path) if n.endswith(".parquet")]
    assert committed(tmp_path) == recs("t", 0, 0, 5)


def test_offsets_from_batch_skips_replayed_batch(tmp_path):
    schema = StructType([StructField("word", StringType()), StructField("n", LongType())])
    w = writer(tmp_path, schema=schema, offsetsFrom="batch")
    rows = pa.record_batch({"word": ["a", "b"], "n": pa.array([1, 2], pa.int64())})
    w.commit([w.write(iter([rows]))], 0)
    w.commit([w.write(iter([rows]))], 0)
    w.commit([w.write(iter([rows]))], 1)
    assert read_committed(str(tmp_path)).num_rows == 4


def test_mismatched_topics_refused(tmp_path):
    w = writer(tmp_path, topics="t")
    w.commit([w.write(iter([arrow(recs("t", 0, 0, 3))]))], 0)
    w2 = writer(tmp_path, topics="u")
    with pytest.raises(SinkMismatchError, match="different query"):
        w2.commit([w2.write(iter([arrow(recs("u", 0, 0, 3))]))], 1)
    w3 = writer(tmp_path, offsetsFrom="batch")
    with pytest.raises(SinkMismatchError, match="offsetsFrom"):
        w3.commit([], 1)
    assert len(ManifestLog(str(tmp_path)).sequence()) == 1
    assert committed(tmp_path) == recs("t", 0, 0, 3)


def test_fixed_topic_option_without_topic_column(tmp_path):
    """Option topic: offsets stored under that topic, a mixed replay filtered, mismatch refused, resume works."""
    no_topic = StructType([f for f in SCHEMA.fields if f.name != "topic"])
    rows = lambda r: arrow(r).drop_columns(["topic"])  # noqa: E731
    w = writer(tmp_path, schema=no_topic, topic="t", topics="t")
    w.commit([w.write(iter([rows(recs("t", 0, 0, 10))])), w.write(iter([rows(recs("t", 1, 0, 4))]))], 0)
    mixed = w.write(iter([rows(recs("t", 0, 0, 12))]))  # checkpoint lost: t-0 re-read from 0
    w.commit([mixed, w.write(iter([rows(recs("t", 1, 0, 4))]))], 0)
    table = read_committed(str(tmp_path))
    assert table.column_names == ["partition", "offset", "value"]
    assert sorted(zip(table["partition"].to_pylist(), table["offset"].to_pylist())) == [
        (p, o) for _, p, o in recs("t", 0, 0, 12) + recs("t", 1, 0, 4)
    ]
    assert stored_offsets(path=str(tmp_path)) == {("t", 0): 12, ("t", 1): 4}
    assert starting_offsets(path=str(tmp_path), topics=["t"]) == '{"t":{"0":12,"1":4}}'
    other = writer(tmp_path, schema=no_topic, topic="u", topics="u")
    with pytest.raises(SinkMismatchError, match=r"topics \['t'\].*declares topics \['u'\]"):
        other.commit([other.write(iter([rows(recs("u", 0, 0, 3))]))], 1)
    assert len(ManifestLog(str(tmp_path)).sequence()) == 2
    with pytest.raises(SinkError, match=r"no column\(s\) \['topic'\].*option 'topic'"):
        writer(tmp_path, schema=no_topic)


def test_manifest_is_published_once_per_sequence(tmp_path):
    log = ManifestLog(str(tmp_path))
    doc = {"seq": 0, "files": [], "offsets": {}, "topics": [], "offsets_from": "rows", "batch_id": 0}
    log.publish(doc)
    with pytest.raises(Exception, match="another writer"):
        log.publish(doc)
    assert [n for n in os.listdir(tmp_path / LOG_DIR)] == ["00000000000000000000.json"]


def test_bad_input_errors(tmp_path):
    with pytest.raises(OptionError, match="appends only"):
        ParquetSinkDataSource({"path": str(tmp_path)}).writer(SCHEMA, True)
    assert starting_offsets(path=str(tmp_path / "first-run")) == "earliest"
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SinkUnavailableError, match="not a directory"):
        stored_offsets(path=str(blocker))
    with pytest.raises(SinkUnavailableError, match="writable path"):
        writer(blocker / "sub")


def test_spark_batch_backfill_twice_adds_nothing(spark, tmp_path):
    register(spark)  # explicit registration works alongside the static one
    df = spark.createDataFrame(
        [("t", i % 2, i // 2, f"v{i}") for i in range(40)], "topic string, partition int, offset long, value string"
    )
    out = str(tmp_path / "out")
    df.write.format("pykafka-parquet").mode("append").save(out)
    df.repartition(3).write.format("pykafka-parquet").mode("append").save(out)
    assert spark.read.parquet(out).count() == 40
    assert json.loads(starting_offsets(path=out)) == {"t": {"0": 20, "1": 20}}


def test_rerun_with_nothing_new_publishes_no_manifest(tmp_path):
    w = writer(tmp_path, stream=False)
    w.commit([w.write(iter([arrow(recs("t", 0, 0, 3))]))])
    w = writer(tmp_path, stream=False)
    w.commit([w.write(iter([arrow(recs("t", 0, 0, 3))])), w.write(iter([]))])
    assert ManifestLog(str(tmp_path)).sequence() == [0]
    assert committed(tmp_path) == recs("t", 0, 0, 3)


@pytest.mark.parametrize(
    "span,stored,expected",
    [
        ({("t", 0): (0, 9)}, {}, "new"),
        ({("t", 0): (0, 9)}, {("t", 0): 10}, "old"),
        ({("t", 0): (0, 9), ("t", 1): (0, 3)}, {("t", 0): 10}, "mixed"),
        ({("t", 0): (5, 9)}, {("t", 0): 7}, "mixed"),
        ({("t", 0): (10, 12)}, {("t", 0): 10, ("t", 1): 99}, "new"),
    ],
)
def test_file_verdict(span, stored, expected):
    assert file_verdict(span, stored) == expected
