"""Table sinks ``pykafka-delta`` (deltalake) and ``pykafka-iceberg`` (pyiceberg): offsets in the table's own commit.

Task attempts are simulated by calling the writer's ``write`` with Arrow batches (what Spark's
Python worker does); Spark-driven tests read from the embedded broker. Tables are read back with
the libraries' own readers (deltalake, pyiceberg), and the offsets are checked in the commit
history: Delta ``txn`` actions in the ``_delta_log`` JSON, Iceberg snapshot summaries.
"""

from __future__ import annotations

import glob
import json
import shutil
import sys

import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from pyspark_kafka.errors import OptionError
from pyspark_kafka.sinks import starting_offsets, stored_offsets
from pyspark_kafka.sinks.common import SinkError, SinkMismatchError
from support.sink_rows import arrow, recs

deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")

from pyspark_kafka.sinks import delta as dsink  # noqa: E402
from pyspark_kafka.sinks import iceberg as isink  # noqa: E402

SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("value", StringType()),
    ]
)
KINDS = ["delta", "iceberg"]


class Target:
    """One table under test: its writer options, independent reader and stored offsets."""

    def __init__(self, kind, tmp_path, name="events"):
        self.kind = kind
        if kind == "delta":
            self.path = str(tmp_path / name)
            self.options = {"path": self.path}
        else:
            self.catalog = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
            self.table = f"kafka.{name}"
            self.options = {"table": self.table, **{f"catalog.{k}": v for k, v in self.catalog.items()}}

    def source(self, **opts):
        cls = dsink.DeltaSinkDataSource if self.kind == "delta" else isink.IcebergSinkDataSource
        return cls({**self.options, **opts})

    def writer(self, schema=SCHEMA, stream=True, **opts):
        src = self.source(**opts)
        return src.streamWriter(schema, False) if stream else src.writer(schema, False)

    def read(self):
        """The table's rows as a pyarrow.Table, read by deltalake / pyiceberg."""
        if self.kind == "delta":
            return deltalake.DeltaTable(self.path).to_pyarrow_table()
        return isink.read_table(self.table, self.catalog)

    def keys(self):
        t = self.read()
        return sorted(zip(t["topic"].to_pylist(), t["partition"].to_pylist(), t["offset"].to_pylist()))

    def store(self, sink_id=None):
        if self.kind == "delta":
            return {"path": self.path, "sink_id": sink_id}
        return {"iceberg": self.table, "catalog": self.catalog, "sink_id": sink_id}

    def offsets(self, sink_id=None):
        return stored_offsets(**self.store(sink_id))

    def history_offsets(self):
        """Offsets as the commit history records them, oldest commit first.

        Delta: the ``txn`` actions of each ``_delta_log/*.json`` commit ({app id: version}).
        Iceberg: the ``pykafka.offsets`` summary property of each snapshot.
        """
        out = []
        if self.kind == "delta":
            for f in sorted(glob.glob(f"{self.path}/_delta_log/*.json")):
                txns = {}
                for line in open(f):
                    action = json.loads(line)
                    if "txn" in action:
                        txns[action["txn"]["appId"]] = action["txn"]["version"]
                if txns:
                    out.append(txns)
            return out
        t = isink.load_catalog(self.catalog).load_table(self.table)
        return [json.loads(s.summary["pykafka.offsets"]) for s in t.snapshots()]


@pytest.mark.parametrize("kind", KINDS)
def test_replayed_and_partly_new_batches_commit_only_new_rows(tmp_path, kind):
    target = Target(kind, tmp_path)
    opts = {"partitionBy": "partition"} if kind == "delta" else {}
    w = target.writer(**opts)
    w.commit([w.write(iter([arrow(recs("t", 0, 0, 10))])), w.write(iter([arrow(recs("t", 1, 0, 4))]))], 5)
    # checkpoint lost: batch 0 re-reads t-0 from 0 (mixed: only 10, 11 are new) and t-1 (all old)
    w = target.writer(**opts)
    batch = [w.write(iter([arrow(recs("t", 0, 0, 12))])), w.write(iter([arrow(recs("t", 1, 0, 4))]))]
    w.commit(batch, 0)
    replay = [w.write(iter([arrow(recs("t", 0, 0, 12))]))]  # the same micro-batch once more: nothing new
    w.commit(replay, 0)
    assert target.keys() == recs("t", 0, 0, 12) + recs("t", 1, 0, 4)
    assert target.offsets() == {("t", 0): 12, ("t", 1): 4}
    if kind == "delta":
        assert target.history_offsets() == [
            {"pykafka:pykafka:t:0": 10, "pykafka:pykafka:t:1": 4},
            {"pykafka:pykafka:t:0": 12},  # only advanced partitions get a txn action
        ]
        assert deltalake.DeltaTable(target.path).version() == 2  # create + 2 commits, the replay made none
        parquet = glob.glob(f"{target.path}/**/*.parquet", recursive=True)
        assert len(parquet) == len(deltalake.DeltaTable(target.path).file_uris())  # dropped files deleted
    else:
        assert target.history_offsets() == [{"t": {"0": 10, "1": 4}}, {"t": {"0": 12, "1": 4}}]
    assert starting_offsets(**target.store(), topics=["t"]) == '{"t":{"0":12,"1":4}}'


@pytest.mark.parametrize("kind", KINDS)
def test_offsets_from_batch_skips_replayed_batch(tmp_path, kind):
    import pyarrow as pa

    schema = StructType([StructField("word", StringType()), StructField("n", LongType())])
    target = Target(kind, tmp_path)
    w = target.writer(schema=schema, offsetsFrom="batch")
    rows = pa.record_batch({"word": ["a", "b"], "n": pa.array([1, 2], pa.int64())})
    w.commit([w.write(iter([rows]))], 0)
    w.commit([w.write(iter([rows]))], 0)
    w.commit([w.write(iter([rows]))], 1)
    assert target.read().num_rows == 4
    if kind == "delta":
        assert deltalake.DeltaTable(target.path).transaction_version("pykafka:pykafka:batch") == 1


@pytest.mark.parametrize("kind", KINDS)
def test_concurrent_commit_of_same_sink_is_decided_again(tmp_path, kind, monkeypatch):
    """A commit prepared on a stale snapshot loses to a concurrent one: refused, re-read, only new rows added."""
    target = Target(kind, tmp_path)
    w = target.writer()
    w.commit([w.write(iter([arrow(recs("t", 0, 0, 5))]))], 0)
    spec = w.spec
    stale = spec.open_table() if kind == "delta" else spec.load_table()
    other = target.writer()
    other.commit([other.write(iter([arrow(recs("t", 0, 5, 10))]))], 1)  # the other writer wins
    loads = []
    name = "open_table" if kind == "delta" else "load_table"
    real = getattr(type(spec), name)

    def first_stale(self):
        loads.append(1)
        return stale if len(loads) == 1 else real(self)

    monkeypatch.setattr(type(spec), name, first_stale)
    w.commit([w.write(iter([arrow(recs("t", 0, 5, 12))]))], 1)
    monkeypatch.undo()
    assert len(loads) >= 3  # stale try, refused, fresh try (+ the version read after it)
    assert target.keys() == recs("t", 0, 0, 12)
    assert target.offsets() == {("t", 0): 12}


@pytest.mark.parametrize("kind", KINDS)
def test_mismatches_refused_and_nothing_committed(tmp_path, kind):
    target = Target(kind, tmp_path)
    w = target.writer(topics="t")
    w.commit([w.write(iter([arrow(recs("t", 0, 0, 3))]))], 0)
    w2 = target.writer(topics="u")
    with pytest.raises(SinkMismatchError, match="different query"):
        w2.commit([w2.write(iter([arrow(recs("u", 0, 0, 3))]))], 1)
    other_schema = StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                               StructField("offset", LongType()), StructField("value", LongType())])
    with pytest.raises(SinkError, match="does not fit"):
        target.writer(schema=other_schema)
    with pytest.raises(OptionError, match="appends only"):
        target.source().writer(SCHEMA, True)
    # another sink id on the same table is another query: its own offsets
    w3 = target.writer(topics="u", sinkId="second")
    w3.commit([w3.write(iter([arrow(recs("u", 0, 0, 3))]))], 0)
    assert target.keys() == recs("t", 0, 0, 3) + recs("u", 0, 0, 3)
    assert target.offsets() == {("t", 0): 3}
    assert target.offsets("second") == {("u", 0): 3}


@pytest.mark.parametrize("kind,module", [("delta", "deltalake"), ("iceberg", "pyiceberg.catalog")])
def test_missing_library_names_pip_command(tmp_path, kind, module, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(SinkError, match=rf'pip install "pyspark-kafka\[{kind}\]"'):
        Target(kind, tmp_path).writer()


def test_delta_first_run_and_storage_errors(tmp_path):
    assert stored_offsets(delta=str(tmp_path / "none")) == {}
    assert starting_offsets(delta=str(tmp_path / "none")) == "earliest"
    with pytest.raises(OptionError, match="partitionBy"):
        Target("delta", tmp_path).writer(partitionBy="nope")


# ------------------------------------------------------------------ Spark + embedded broker


def _produce(bootstrap, topic, n, start=0, partitions=2):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def _rows(spark_reader, bootstrap, topic, start):
    return (
        spark_reader.format("pykafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", start)
    )


def _fmt(kind):
    return f"pykafka-{kind}"


@pytest.mark.parametrize("kind", KINDS)
def test_spark_batch_from_kafka_twice_adds_nothing(spark, bootstrap, make_topic, tmp_path, kind):
    topic = make_topic(2)
    _produce(bootstrap, topic, 200)
    target = Target(kind, tmp_path)
    opts = {**target.options, "topics": topic}
    if kind == "delta":
        opts["partitionBy"] = "partition"
    for _ in range(2):  # a backfill rerun: everything is stored, nothing is added
        start = starting_offsets(**target.store(), topics=[topic], bootstrap_servers=bootstrap)
        df = _rows(spark.read, bootstrap, topic, start).option("endingOffsets", "latest").load()
        df.selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value", "timestamp") \
            .write.format(_fmt(kind)).options(**opts).mode("append").save()
    t = target.read()
    assert t.num_rows == 200 and len(set(t["value"].to_pylist())) == 200
    assert target.offsets() == {(topic, 0): 100, (topic, 1): 100}
    assert len(target.history_offsets()) == 1  # the rerun made no commit
    if kind == "delta":  # the partitioned layout Spark-written Delta tables have
        assert sorted(deltalake.DeltaTable(target.path).metadata().partition_columns) == ["partition"]


def _stream_once(spark, bootstrap, topic, target, checkpoint):
    start = starting_offsets(**target.store(), topics=[topic], bootstrap_servers=bootstrap)
    q = (
        _rows(spark.readStream, bootstrap, topic, start)
        .option("maxOffsetsPerTrigger", "150")
        .load()
        .selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format(_fmt(target.kind))
        .options(**target.options)
        .option("topics", topic)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(240), "streaming query did not finish within 240 s"
    assert q.exception() is None


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_spark_stream_checkpoint_lost_exactly_once(spark, bootstrap, make_topic, tmp_path, kind):
    """Micro-batches into the table; the checkpoint is deleted and the query resumes from the table's offsets."""
    topic = make_topic(2)
    _produce(bootstrap, topic, 400)
    target = Target(kind, tmp_path)
    checkpoint = str(tmp_path / "chk")
    _stream_once(spark, bootstrap, topic, target, checkpoint)
    commits = len(target.history_offsets())
    assert commits >= 2  # 400 records, 150 per trigger
    shutil.rmtree(checkpoint)
    _produce(bootstrap, topic, 100, start=400)
    _stream_once(spark, bootstrap, topic, target, checkpoint)
    t = target.read()
    assert t.num_rows == 500 and len(set(t["value"].to_pylist())) == 500
    assert target.offsets() == {(topic, 0): 250, (topic, 1): 250}
    last = target.history_offsets()[-1]
    if kind == "delta":
        assert max(last.values()) == 250
    else:
        assert last == {topic: {"0": 250, "1": 250}}
