"""The connector on Spark as a distributed engine: a standalone cluster (Spark Connect:
``test_spark_connect.py``).

Each test runs :mod:`integration_tests.spark_cluster_job` as its own driver process (a
SparkContext is one per JVM, and the suite's own session is ``local[2]``): batch write, batch
read and a streaming query into the exactly-once SQL sink, each checked for exact counts.
Backend: ``embedded`` only. What this module checks is Spark's side (executors in their own JVMs and Python
workers, the sink's commit protocol across them); the connector's Kafka side is checked on every backend by the
end-to-end modules. The ``apache-kafka`` run took 36 s of the suite (2026-11-26) and checked nothing more.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from integration_tests.spark_processes import standalone_cluster

pytestmark = pytest.mark.slow
JOB = Path(__file__).resolve().parent / "spark_cluster_job.py"
ROWS = 900
JOB_TIMEOUT_S = 600
BACKENDS = ("embedded",)


def _run_job(target: list[str], kafka_cluster, workdir: Path) -> dict:
    topic = kafka_cluster.create_topic(3, prefix="distributed")
    cmd = [sys.executable, str(JOB), *target, "--bootstrap", kafka_cluster.bootstrap, "--topic", topic,
           "--workdir", str(workdir), "--rows", str(ROWS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, f"job failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1])


def _check(result: dict) -> None:
    assert result["read"] == ROWS
    assert result["distinct_keys"] == ROWS
    assert result["sink_rows"] == ROWS  # exactly once: nothing lost, nothing twice
    assert result["sink_distinct_offsets"] == ROWS


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    with standalone_cluster(tmp_path_factory.mktemp("standalone"), workers=2) as url:
        yield url


@pytest.mark.parametrize("kafka_cluster", BACKENDS, indirect=True)
def test_standalone_cluster_batch_and_exactly_once_stream(kafka_cluster, standalone, tmp_path):
    result = _run_job(["--master", standalone], kafka_cluster, tmp_path)
    _check(result)
    assert result["executors"] == 2  # the work ran in the workers' executor JVMs
