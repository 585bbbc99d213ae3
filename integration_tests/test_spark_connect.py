"""The connector through Spark Connect: a Connect server started from the installed pyspark
(``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``, local[2],
127.0.0.1, a free port), a client ``SparkSession.builder.remote("sc://127.0.0.1:PORT")``.

What a user must set: the server's Python workers must import ``pyspark_kafka`` (here
``PYSPARK_PYTHON`` = this interpreter and ``PYTHONPATH`` = the package's folder in the server's
environment); nothing is registered from the client: Spark finds ``pykafka`` by static
registration (a top-level ``pyspark_*`` module defining ``DefaultSource``) on the server.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from integration_tests.helpers import consume_all

pytestmark = pytest.mark.slow

CONNECTOR = str(Path(__file__).resolve().parents[1] / "connector")
JOB = Path(__file__).resolve().parent / "spark_cluster_job.py"
ROWS = 300
JOB_TIMEOUT_S = 600
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    """``sc://127.0.0.1:PORT`` of a Spark Connect server running for this module (stopped by pid)."""
    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    if not os.path.exists(os.path.join(spark_home, "bin", "spark-submit")):
        pytest.skip(f"the installed pyspark has no bin/spark-submit ({spark_home})")
    port = _free_port()
    env = {**os.environ, "SPARK_HOME": spark_home, "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join(filter(None, [CONNECTOR, os.environ.get("PYTHONPATH")]))}
    cmd = [os.path.join(spark_home, "bin", "spark-submit"), "--master", "local[2]",
           "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
           "--conf", f"spark.connect.grpc.binding.port={port}",
           "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
           "spark-internal"]
    log_path = tmp_path_factory.mktemp("spark-connect") / "server.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if server.poll() is not None:
                pytest.fail(f"Spark Connect server exited with {server.returncode}: {' '.join(cmd)}\n"
                            + "\n".join(log_path.read_text(errors="replace").splitlines()[-30:]))
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"Spark Connect server not listening within {START_TIMEOUT_S:g} s: {' '.join(cmd)}")
                time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(STOP_TIMEOUT_S)


@pytest.mark.parametrize("kafka_cluster", ["embedded"], indirect=True)
def test_batch_write_read_and_exactly_once_sql_sink_through_spark_connect(connect_url, kafka_cluster, tmp_path):
    """The client runs as its own process (:mod:`integration_tests.spark_cluster_job` with
    ``--remote``): pyspark refuses a Connect session in a process that already has a classic
    one (``SESSION_ALREADY_EXIST``), and the suite's shared ``local[2]`` session is classic.
    On the embedded backend only: Spark Connect is Spark's side (the server's Python workers find
    ``pykafka``); the connector's Kafka side is checked on every backend by the end-to-end modules."""
    topic = kafka_cluster.create_topic(2, prefix="connect")
    cmd = [sys.executable, str(JOB), "--remote", connect_url, "--bootstrap", kafka_cluster.bootstrap,
           "--topic", topic, "--workdir", str(tmp_path), "--rows", str(ROWS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, f"Connect client failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    result = json.loads(lines[-1])
    assert result["read"] == result["distinct_keys"] == ROWS
    assert result["sink_rows"] == result["sink_distinct_offsets"] == ROWS  # exactly once through Connect
    # what was written, checked with confluent-kafka rather than the connector
    values = sorted(m.value() for m in consume_all(kafka_cluster.bootstrap, topic))
    assert values == sorted(str(i * 2).encode() for i in range(ROWS))
