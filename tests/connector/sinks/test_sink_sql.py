"""SQL sink ``pykafka-sql``: the commit protocol on SQLite and a throwaway PostgreSQL server.

Task attempts are simulated by calling the writer's ``write`` with Arrow batches
(exactly what Spark's Python worker does); Spark-driven tests check the wiring.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid

import pyarrow as pa
import pytest
import sqlalchemy as sa
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from pyspark_kafka.sinks import starting_offsets, stored_offsets
from pyspark_kafka.sinks.common import SinkError, SinkMismatchError, SinkUnavailableError
from pyspark_kafka.sinks.sql import SqlSinkDataSource, reset_sink, spark_to_sql_type, staging_table_name
from support.sink_rows import arrow, recs

SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("value", StringType()),
    ]
)




def stream_writer(url, table, schema=SCHEMA, **opts):
    return SqlSinkDataSource({"url": url, "table": table, **opts}).streamWriter(schema, False)


def batch_writer(url, table, overwrite=False, **opts):
    return SqlSinkDataSource({"url": url, "table": table, **opts}).writer(SCHEMA, overwrite)


def count(url, sql):
    eng = sa.create_engine(url)
    try:
        with eng.connect() as conn:
            return conn.exec_driver_sql(sql).scalar()
    finally:
        eng.dispose()


def target_offsets(url, table):
    eng = sa.create_engine(url)
    try:
        with eng.connect() as conn:
            rows = conn.exec_driver_sql(f'SELECT topic, "partition", "offset" FROM {table}').fetchall()
    finally:
        eng.dispose()
    return sorted((t, int(p), int(o)) for t, p, o in rows)


def staged(url, table, sink_id=None):
    return count(url, f"SELECT COUNT(*) FROM {staging_table_name('pykafka_offsets', sink_id or table)}")


# ------------------------------------------------------------------ PostgreSQL


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pg_url():
    """A throwaway PostgreSQL server on 127.0.0.1 (Debian binaries), stopped in finally."""
    initdb = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not initdb:
        pytest.skip("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
    pytest.importorskip("psycopg2", reason="psycopg2 missing: pip install 'pyspark-kafka[postgres]'")
    bindir = os.path.dirname(initdb[-1])
    root = tempfile.mkdtemp(prefix="pykafka-pg-")
    as_user = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        os.chmod(root, 0o755)
        shutil.chown(root, "postgres", "postgres")
    data, port = os.path.join(root, "data"), _free_port()
    run = lambda *cmd: subprocess.run([*as_user, *cmd], check=True, capture_output=True, timeout=120)  # noqa: E731
    started = False
    try:
        run(f"{bindir}/initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
        run(
            f"{bindir}/pg_ctl", "-D", data, "-l", os.path.join(root, "log"), "-w", "-t", "60", "-o",
            f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off", "start",
        )
        started = True
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    finally:
        if started:
            run(f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/sink.db"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def table():
    return f"out_{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------ protocol


def test_replay_with_new_batch_id_is_idempotent(db_url, table):
    """Checkpoint lost: batch ids restart at 0 and old data is re-read; only new offsets land."""
    w = stream_writer(db_url, table)
    m1 = w.write(iter([arrow(recs("t", 0, 0, 10) + recs("t", 1, 0, 5))]))
    stream_writer(db_url, table).commit([m1], 7)
    # restarted query without checkpoint: batch 0 re-reads everything plus new records
    w2 = stream_writer(db_url, table)
    m2 = w2.write(iter([arrow(recs("t", 0, 0, 15))]))
    m3 = w2.write(iter([arrow(recs("t", 1, 0, 8))]))
    stream_writer(db_url, table).commit([m2, m3], 0)
    assert target_offsets(db_url, table) == recs("t", 0, 0, 15) + recs("t", 1, 0, 8)
    assert stored_offsets(url=db_url, table=table) == {("t", 0): 15, ("t", 1): 8}
    assert staged(db_url, table) == 0


def test_replayed_batch_id_commits_nothing_twice(db_url, table):
    w = stream_writer(db_url, table)
    m = w.write(iter([arrow(recs("t", 0, 0, 10))]))
    w.commit([m], 3)
    again = w.write(iter([arrow(recs("t", 0, 0, 10))]))
    stream_writer(db_url, table).commit([again], 3)
    assert target_offsets(db_url, table) == recs("t", 0, 0, 10)


def test_failed_task_attempts_never_appear(db_url, table):
    w = stream_writer(db_url, table)
    failed = w.write(iter([arrow(recs("t", 0, 0, 6))]))  # attempt 0 of the task: its message is lost
    speculative = w.write(iter([arrow(recs("t", 0, 0, 6))]))  # a duplicate attempt Spark did not pick
    winner = w.write(iter([arrow(recs("t", 0, 0, 6))]))
    assert staged(db_url, table) == 18 and failed.attempt_id != winner.attempt_id != speculative.attempt_id
    stream_writer(db_url, table).commit([winner, None], 0)
    assert target_offsets(db_url, table) == recs("t", 0, 0, 6)
    assert staged(db_url, table) == 0


def test_abort_cleans_staging_and_commits_nothing(db_url, table):
    w = stream_writer(db_url, table)
    m = w.write(iter([arrow(recs("t", 0, 0, 4))]))
    stream_writer(db_url, table).abort([m, None], 0)
    assert staged(db_url, table) == 0
    assert count(db_url, f"SELECT COUNT(*) FROM {table}") == 0
    assert stored_offsets(url=db_url, table=table) == {}


def test_offsets_from_batch_uses_batch_id(db_url, table):
    schema = StructType([StructField("word", StringType()), StructField("n", LongType())])
    w = stream_writer(db_url, table, schema=schema, offsetsFrom="batch")
    rows = pa.record_batch({"word": ["a", "b"], "n": pa.array([1, 2], pa.int64())})
    w.commit([w.write(iter([rows]))], 0)
    w.commit([w.write(iter([rows]))], 0)  # replay of batch 0
    w.commit([w.write(iter([rows]))], 1)
    assert count(db_url, f"SELECT COUNT(*) FROM {table}") == 4


def test_mismatch_refused_and_nothing_half_committed(db_url, table):
    w = stream_writer(db_url, table, sinkId="job-a", topics="t")
    w.commit([w.write(iter([arrow(recs("t", 0, 0, 3))]))], 0)
    # same sink id, other table: a different query
    other = stream_writer(db_url, table + "_x", sinkId="job-a", topics="t")
    with pytest.raises(SinkMismatchError, match="target table") as e:
        other.commit([other.write(iter([arrow(recs("t", 0, 3, 6))]))], 1)
    assert "sinkId" in str(e.value)
    # same sink id, other declared topics
    w2 = stream_writer(db_url, table, sinkId="job-a", topics="u")
    with pytest.raises(SinkMismatchError, match=r"topics \['t'\].*declares topics \['u'\]"):
        w2.commit([w2.write(iter([arrow(recs("u", 0, 0, 3))]))], 1)
    # rows of an undeclared topic
    w3 = stream_writer(db_url, table, sinkId="job-a", topics="t")
    with pytest.raises(SinkMismatchError, match=r"rows from topics \['v'\]"):
        w3.commit([w3.write(iter([arrow(recs("t", 0, 3, 6) + recs("v", 0, 0, 2))]))], 1)
    assert target_offsets(db_url, table) == recs("t", 0, 0, 3)
    assert stored_offsets(url=db_url, sink_id="job-a") == {("t", 0): 3}
    # the fix the message names: forget the sink's offsets, then the other query may use the id
    reset_sink(db_url, "job-a")
    assert stored_offsets(url=db_url, sink_id="job-a") == {}
    w2.commit([w2.write(iter([arrow(recs("u", 0, 0, 3))]))], 0)
    assert stored_offsets(url=db_url, sink_id="job-a") == {("u", 0): 3}


NO_TOPIC = StructType([f for f in SCHEMA.fields if f.name != "topic"])


def test_fixed_topic_option_without_topic_column(db_url, table):
    """Option topic: offsets stored under that topic, replays filtered, mismatch refused, resume works."""
    no_topic = lambda rows: arrow(rows).drop_columns(["topic"])  # noqa: E731
    w = stream_writer(db_url, table, schema=NO_TOPIC, topic="t", topics="t")
    w.commit([w.write(iter([no_topic(recs("t", 0, 0, 10) + recs("t", 1, 0, 5))]))], 0)
    # checkpoint lost: batch ids restart and t-0 is re-read from 0 (mixed), t-1 all old
    w = stream_writer(db_url, table, schema=NO_TOPIC, topic="t", topics="t")
    w.commit([w.write(iter([no_topic(recs("t", 0, 0, 12))])), w.write(iter([no_topic(recs("t", 1, 0, 5))]))], 0)
    assert count(db_url, f"SELECT COUNT(*) FROM {table}") == 17
    assert count(db_url, f"SELECT COUNT(DISTINCT value) FROM {table}") == 17
    assert stored_offsets(url=db_url, table=table) == {("t", 0): 12, ("t", 1): 5}
    assert starting_offsets(url=db_url, table=table, topics=["t"]) == '{"t":{"0":12,"1":5}}'
    # the same sink id for another source topic is another query
    other = stream_writer(db_url, table, schema=NO_TOPIC, topic="u", topics="u")
    with pytest.raises(SinkMismatchError, match=r"topics \['t'\].*declares topics \['u'\]"):
        other.commit([other.write(iter([no_topic(recs("u", 0, 0, 3))]))], 1)
    assert count(db_url, f"SELECT COUNT(*) FROM {table}") == 17
    assert stored_offsets(url=db_url, table=table) == {("t", 0): 12, ("t", 1): 5}
    # a topic column next to option topic is refused before anything is written
    with pytest.raises(SinkError, match="also has a 'topic' column"):
        stream_writer(db_url, table, topic="t")


def test_unreachable_database_is_a_clear_error(tmp_path):
    with pytest.raises(SinkUnavailableError, match="cannot connect.*directory exists"):
        stream_writer(f"sqlite:///{tmp_path}/no/such/dir/x.db", "t")
    port = _free_port()  # nothing listens there
    with pytest.raises(SinkUnavailableError, match=rf"postgres:\*\*\*@127.0.0.1:{port}.*server runs"):
        stream_writer(f"postgresql+psycopg2://postgres:secret@127.0.0.1:{port}/db", "t")
    with pytest.raises(SinkUnavailableError, match="cannot use the database URL"):
        stream_writer("nosuchdialect://x/y", "t")


def test_missing_target_table_without_create(db_url, table):
    with pytest.raises(SinkError, match=f"table '{table}' does not exist.*createTable=true"):
        stream_writer(db_url, table, createTable="false")


def test_batch_overwrite_replaces_rows_and_offsets(db_url, table):
    w = batch_writer(db_url, table)
    w.commit([w.write(iter([arrow(recs("t", 0, 0, 5))]))])
    w = batch_writer(db_url, table, overwrite=True)
    w.commit([w.write(iter([arrow(recs("t", 0, 2, 4))]))])
    assert target_offsets(db_url, table) == recs("t", 0, 2, 4)
    assert stored_offsets(url=db_url, table=table) == {("t", 0): 4}


def test_concurrent_tasks_share_one_sqlite_file(tmp_path, table):
    """Two processes stage into one SQLite file at once (WAL + busy timeout), the driver commits."""
    import multiprocessing as mp

    url = f"sqlite:///{tmp_path}/sink.db"
    w = stream_writer(url, table)
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        msgs = pool.starmap(_stage_in_process, [(url, table, p) for p in range(4)])
    w.commit(msgs, 0)
    assert count(url, f"SELECT COUNT(*) FROM {table}") == 4 * 300


def _stage_in_process(url, table, partition):
    w = stream_writer(url, table)
    return w.write(iter([arrow(recs("t", partition, i, i + 30)) for i in range(0, 300, 30)]))


# ------------------------------------------------------------------ through Spark


def test_spark_batch_write_twice_adds_nothing(spark, tmp_path):
    url = f"sqlite:///{tmp_path}/spark.db"
    df = spark.createDataFrame(
        [("t", i % 3, i // 3, f"v{i}") for i in range(60)],
        "topic string, kafka_partition int, kafka_offset long, value string",
    )

    def save(frame):
        (
            frame.write.format("pykafka-sql")  # static registration through pyspark_kafka_sql
            .option("url", url)
            .option("table", "flights")
            .option("partitionColumn", "kafka_partition")
            .option("offsetColumn", "kafka_offset")
            .mode("append")
            .save()
        )

    save(df.repartition(2))
    save(df.repartition(3))
    assert count(url, "SELECT COUNT(*) FROM flights") == 60
    assert count(url, "SELECT COUNT(DISTINCT value) FROM flights") == 60
    assert starting_offsets(url=url, table="flights") == '{"t":{"0":20,"1":20,"2":20}}'
    # another job reusing the sink id for a different table is refused through Spark, nothing written
    refused = "sinkId 'flights' in offsets table .* holds target table 'flights'.*different query"
    with pytest.raises(Exception, match=refused):
        (
            df.write.format("pykafka-sql").option("url", url).option("table", "other").option("sinkId", "flights")
            .option("partitionColumn", "kafka_partition").option("offsetColumn", "kafka_offset")
            .mode("append").save()
        )
    assert count(url, "SELECT COUNT(*) FROM other") == 0


def test_spark_missing_offset_columns_error(spark, tmp_path):
    df = spark.createDataFrame([("a", 1)], "word string, n long")
    with pytest.raises(Exception, match=r"no column\(s\) \['topic', 'partition', 'offset'\].*offsetsFrom=batch"):
        df.write.format("pykafka-sql").option("url", f"sqlite:///{tmp_path}/x.db").option("table", "w").mode(
            "append"
        ).save()


def test_store_reflects_existing_table_with_extra_columns(db_url, table):
    eng = sa.create_engine(db_url)
    with eng.begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE {table} (id INTEGER, topic TEXT, "partition" INTEGER, "offset" BIGINT, value TEXT)'
        )
    eng.dispose()
    w = stream_writer(db_url, table, createTable="false")
    w.commit([w.write(iter([arrow(recs("t", 0, 0, 3))]))], 0)
    assert target_offsets(db_url, table) == recs("t", 0, 0, 3)


def test_reader_schema_types_round_trip(db_url, table):
    """All columns of the pykafka reader (binary key/value, UTC timestamp) store and read back."""
    import datetime as dt

    from pyspark_kafka.read import kafka_schema

    schema = kafka_schema(include_headers=False)
    ts = dt.datetime(2013, 1, 1, 5, 0, 0, 123000, tzinfo=dt.timezone.utc)
    batch = pa.record_batch(
        [
            pa.array([b"k", None], pa.binary()),
            pa.array([b"\x00\xff", b"v"], pa.binary()),
            pa.array(["t", "t"]),
            pa.array([0, 0], pa.int32()),
            pa.array([0, 1], pa.int64()),
            pa.array([ts, ts], pa.timestamp("us", tz="UTC")).cast(pa.timestamp("us", tz="Asia/Tokyo")),
            pa.array([0, 0], pa.int32()),
        ],
        names=schema.fieldNames(),
    )
    w = stream_writer(db_url, table, schema=schema)
    w.commit([w.write(iter([batch]))], 0)
    eng = sa.create_engine(db_url)
    try:
        with eng.connect() as conn:
            got = sa.Table(table, sa.MetaData(), autoload_with=conn)
            rows = conn.execute(sa.select(got).order_by(got.c.offset)).mappings().all()
    finally:
        eng.dispose()
    assert [bytes(r["value"]) for r in rows] == [b"\x00\xff", b"v"]
    assert rows[0]["key"] is not None and bytes(rows[0]["key"]) == b"k" and rows[1]["key"] is None
    stored_ts = rows[0]["timestamp"]
    if isinstance(stored_ts, str):  # SQLite reflection without the declared type's processor
        stored_ts = dt.datetime.fromisoformat(stored_ts)
    if stored_ts.tzinfo is not None:  # PostgreSQL timestamptz
        stored_ts = stored_ts.astimezone(dt.timezone.utc)
    assert stored_ts.replace(tzinfo=None) == ts.replace(tzinfo=None)  # SQLite keeps UTC wall time


# ------------------------------------------------------------------ Kafka → Spark → SQL (embedded broker)


def _produce(bootstrap, topic, n, start=0, partitions=2):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def _stream_once(spark, bootstrap, topic, url, table, checkpoint, sink_id):
    start = starting_offsets(url=url, sink_id=sink_id, topics=[topic], bootstrap_servers=bootstrap)
    q = (
        spark.readStream.format("pykafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", start)
        .option("maxOffsetsPerTrigger", "150")
        .load()
        .selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value", "timestamp")
        .writeStream.format("pykafka-sql")
        .option("url", url)
        .option("table", table)
        .option("sinkId", sink_id)
        .option("topics", topic)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(240), "streaming query did not finish within 240 s"
    assert q.exception() is None


@pytest.mark.slow
def test_stream_from_kafka_checkpoint_lost_exactly_once(spark, bootstrap, make_topic, db_url, table, tmp_path):
    """Micro-batches into SQLite/PostgreSQL; the checkpoint is deleted and the query resumes from the sink."""
    topic = make_topic(2)
    sink_id = f"orders-etl-{'x' * 60}-{table}"  # long ids still give valid staging table names
    _produce(bootstrap, topic, 400)
    checkpoint = str(tmp_path / "chk")
    _stream_once(spark, bootstrap, topic, db_url, table, checkpoint, sink_id)
    shutil.rmtree(checkpoint)
    _produce(bootstrap, topic, 100, start=400)
    _stream_once(spark, bootstrap, topic, db_url, table, checkpoint, sink_id)
    assert count(db_url, f"SELECT COUNT(*) FROM {table}") == 500
    assert count(db_url, f"SELECT COUNT(DISTINCT value) FROM {table}") == 500
    assert stored_offsets(url=db_url, sink_id=sink_id) == {(topic, 0): 250, (topic, 1): 250}


@pytest.mark.slow
def test_aggregation_complete_mode_with_batch_ids(spark, bootstrap, make_topic, tmp_path):
    """offsetsFrom=batch: a stateful query (no offset columns) in complete mode replaces the table per batch."""
    topic = make_topic(2)
    _produce(bootstrap, topic, 60)
    url = f"sqlite:///{tmp_path}/agg.db"
    q = (
        spark.readStream.format("pykafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "25")
        .load()
        .groupBy("partition")
        .count()
        .writeStream.format("pykafka-sql")
        .outputMode("complete")
        .option("url", url)
        .option("table", "counts")
        .option("offsetsFrom", "batch")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(240), "streaming query did not finish within 240 s"
    eng = sa.create_engine(url)
    try:
        with eng.connect() as conn:
            got = dict(conn.exec_driver_sql('SELECT "partition", count FROM counts').fetchall())
            last = conn.exec_driver_sql("SELECT last_batch_id FROM pykafka_offsets_sinks").scalar()
    finally:
        eng.dispose()
    assert got == {0: 30, 1: 30}
    assert last >= 2  # 60 records at 25 per trigger: at least three micro-batches


def test_all_mapped_types_round_trip(db_url, table):
    """Every Spark type the sink maps (decimal, date, boolean, floats, small ints, timestamp_ntz) stores and
    reads back through SQLAlchemy with the declared column types (SQLite takes the tuple fast path)."""
    import datetime as dt
    import decimal

    from pyspark.sql.types import (
        BooleanType,
        ByteType,
        DateType,
        DecimalType,
        DoubleType,
        FloatType,
        ShortType,
        TimestampNTZType,
    )

    fields = [("d", DecimalType(10, 2), pa.decimal128(10, 2), decimal.Decimal("12345.67")),
              ("day", DateType(), pa.date32(), dt.date(2013, 11, 3)),
              ("ok", BooleanType(), pa.bool_(), True),
              ("x", DoubleType(), pa.float64(), 0.1),
              ("f", FloatType(), pa.float32(), 0.5),
              ("s", ShortType(), pa.int16(), -7),
              ("b", ByteType(), pa.int8(), 3),
              ("at", TimestampNTZType(), pa.timestamp("us"), dt.datetime(2013, 1, 1, 5, 0, 1, 250000))]
    schema = StructType([StructField(n, t) for n, t, _, _ in fields] + list(SCHEMA.fields))
    arrays = [pa.array([v, None], at) for _, _, at, v in fields]
    batch = pa.record_batch(arrays + arrow(recs("t", 0, 0, 2)).columns, names=schema.fieldNames())
    w = stream_writer(db_url, table, schema=schema)
    w.commit([w.write(iter([batch]))], 0)
    eng = sa.create_engine(db_url)
    try:
        with eng.connect() as conn:
            md = sa.MetaData()
            declared = [sa.Column(n, spark_to_sql_type(t)) for n, t, _, _ in fields]
            got = sa.Table(table, md, *declared, sa.Column("offset", sa.BigInteger))
            rows = conn.execute(sa.select(got).order_by(got.c.offset)).mappings().all()
    finally:
        eng.dispose()
    assert [rows[0][n] for n, _, _, _ in fields] == [pytest.approx(v) if isinstance(v, float) else v
                                                     for _, _, _, v in fields]
    assert all(rows[1][n] is None for n, _, _, _ in fields)
