"""The benchmarks' real anchors run, on tiny data, so that their code does not rot.

``bench/spark_connector_bench.py`` (``format("pykafka")`` against Spark's ``format("kafka")`` in
one reference-venv driver) and ``bench/broker_bench.py``'s Apache Kafka anchor. These tests
assert that every row is produced with one figure per repetition on both sides (each figure is
a run the benchmark checked: exact record counts, every flight once), never a speed.
"""

from __future__ import annotations

import math
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import broker_bench  # noqa: E402
import common  # noqa: E402
import read_paths_bench  # noqa: E402
import spark_connector_bench  # noqa: E402


def _figures_ok(values) -> bool:
    return bool(values) and all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in values)


def test_rows_from_a_job_result_name_the_reference_and_put_pykafka_over_spark():
    """Pure: the rows built from the job's seconds (no Spark)."""

    class Ref:
        version, installed, python, note = "4.2.0", "4.3.0", "/venv/bin/python", "reference: Spark 4.2.0 ..."

    result = {"read": {"pykafka": [2.0], "kafka": [1.0]}, "batch_read": {"pykafka": [1.0], "kafka": [1.0]},
              "write": {"pykafka": [1.0], "kafka": [4.0]},
              "flights": {"pykafka": [{"stream": 10.0, "batches": 8.0}], "kafka": [{"stream": 5.0, "batches": 4.0}]}}
    rows = spark_connector_bench.rows(result, Ref, 1000, 1000, 100)
    by_name = {(r["metric"], r["unit"]): r for r in rows}
    assert len(by_name) == len(rows) == 8
    read = by_name[("read vs Spark's connector, AvailableNow (local[2])", "records/s")]
    assert (read["project"], read["anchor"]) == ([500.0], [1000.0])
    assert by_name[("write vs Spark's connector, per core", "records/s/core")]["project"] == [500.0]
    assert by_name[("flights job stream (100 flights), source pykafka vs kafka", "s")]["anchor"] == [5.0]
    for row in rows:
        assert row["anchor_label"] == "Spark 4.2.0 format('kafka') (both on pyspark 4.2.0, not the installed 4.3.0)"
        assert row["reference"] == {"spark": "4.2.0", "installed_pyspark": "4.3.0", "python": "/venv/bin/python",
                                    "note": Ref.note}


@pytest.mark.slow
def test_spark_connector_bench_runs_both_connectors_on_tiny_data():
    """Read, write and the flights job through both connectors in one reference driver (1 repetition)."""
    try:
        rows = spark_connector_bench.measure(2000, 2000, 300, repetitions=1)
    except common.Skipped as e:
        pytest.skip(str(e))
    # five read/write rows, the reads' and the write's CPU per record, three flights rows and the flights'
    # CPU per record, and issue 34's checks on vs kafka.check.crcs=false (both reads: records/s and CPU)
    assert len(rows) == 16
    nocrc = [r for r in rows if "integrity checks on vs kafka.check.crcs=false" in r["metric"]]
    assert len(nocrc) == 4 and all(r["anchor_label"].startswith("pykafka with kafka.check.crcs=false") for r in nocrc)
    assert sum(1 for r in rows if r["metric"].startswith(("write vs Spark's connector: CPU per record",
                                                          "flights job stream (300 flights), source pykafka vs "
                                                          "kafka: CPU per record"))) == 2
    ref = rows[0]["reference"]
    assert ref["spark"] in rows[0]["anchor_label"] and ref["spark"] in rows[0]["note"]
    if ref["spark"] != ref["installed_pyspark"]:
        assert f"not the installed {ref['installed_pyspark']}" in rows[0]["anchor_label"]
    for row in rows:
        assert len(row["project"]) == len(row["anchor"]) == 1, row["metric"]
        assert _figures_ok(row["project"]) and _figures_ok(row["anchor"]), row


@pytest.mark.slow
def test_broker_bench_has_apache_kafka_beside_the_mock_cluster(tmp_path):
    """Produce and fetch against ours, the mock cluster and Apache Kafka (the default version), tiny sizes."""
    broker_bench.SKIPPED.clear()
    rows = broker_bench.throughput(True, str(tmp_path), total_bytes=200_000, fetch_bytes=100_000)
    if "apache-kafka anchor" in broker_bench.SKIPPED:
        pytest.skip(broker_bench.SKIPPED["apache-kafka anchor"])
    labels = {r["anchor_label"] for r in rows}
    assert broker_bench.ANCHOR in labels
    apache = [r for r in rows if r["anchor_label"].startswith("Apache Kafka ")]
    metrics = [f"produce {size} acks={acks}" for size in ("100 B", "1 KiB") for acks in ("1", "all")]
    metrics += ["fetch 100 B", "fetch 1 KiB"]
    assert sorted((r["metric"], r["unit"]) for r in apache) == sorted(
        (m, unit) for m in metrics for unit in ("records/s", "MB/s", broker_bench.CPU_UNIT))
    for row in apache:
        assert len(row["project"]) == len(row["anchor"]) == common.REPETITIONS
        if row["unit"] == broker_bench.CPU_UNIT:  # CPU time counts in clock ticks (10 ms): a tiny run may see none
            values = row["project"] + row["anchor"]
            assert all(math.isfinite(v) and v >= 0 for v in values) and any(v > 0 for v in values), row
            assert row["higher_is_better"] is False
            continue
        assert _figures_ok(row["project"]) and _figures_ok(row["anchor"]), row


def test_small_only_entries_carry_spark_settings_and_bad_ones_are_named():
    assert read_paths_bench.job_entry("/a/connector") == ("/a/connector", True, {})
    assert read_paths_bench.job_entry("source:/a/connector@spark.ui.enabled=true@k=a=b") == (
        "/a/connector", False, {"spark.ui.enabled": "true", "k": "a=b"})
    for bad, named in (("/a@spark.ui.enabled", "'spark.ui.enabled' is not KEY=VALUE"),
                       ("/a@=true", "'=true' is not KEY=VALUE"), ("@k=v", "names no connector/ directory")):
        with pytest.raises(ValueError, match=named):
            read_paths_bench.job_entry(bad)


def test_the_cpu_of_a_query_process_that_exits_after_the_measured_call_is_counted():
    """``read_paths_job._measure`` reads the process tree's CPU only once the source runners started
    during the call have exited (a stopped query's runner outlives ``awaitTermination`` for a moment),
    and an exited, reaped process's CPU is in its parent's cutime: a stand-in runner (its command line
    names the runner module) burning 0.4 s of CPU after the call returned is counted."""
    import subprocess
    import threading

    import read_paths_job

    burn = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"

    def call():
        proc = subprocess.Popen([sys.executable, "-c", burn, "pyspark.sql.streaming.python_streaming_source_runner"])
        threading.Thread(target=proc.wait, daemon=True).start()  # reaped by its parent, as the JVM does

    _, m = read_paths_job._measure(call)
    assert m["unsettled"] == 0
    assert m["cpu"] >= 0.35, m
