"""The connector through Spark Connect: a Connect server started from the installed pyspark
(``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``, local[2],
127.0.0.1, a free port), a client ``SparkSession.builder.remote("sc://127.0.0.1:PORT")``.

What a user must set: the server's Python workers must import ``pyspark_kafka`` (here
``PYSPARK_PYTHON`` = this interpreter and ``PYTHONPATH`` = the package's folder in the server's
environment); nothing is registered from the client: Spark finds ``pykafka`` by static
registration (a top-level ``pyspark_*`` module defining ``DefaultSource``) on the server.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from integration_tests.helpers import consume_all, produce

pytestmark = pytest.mark.slow

CONNECTOR = str(Path(__file__).resolve().parents[1] / "connector")
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


@pytest.fixture(scope="module")
def remote_spark(connect_url):
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(connect_url).getOrCreate()
    yield session
    session.stop()


def test_batch_write_read_and_exactly_once_sql_sink_through_spark_connect(remote_spark, kafka_cluster, tmp_path):
    if kafka_cluster.name not in ("embedded", "apache-kafka"):
        pytest.skip("Spark Connect runs on the embedded and apache-kafka backends only (CI time)")
    import sqlalchemy as sa

    spark, bootstrap = remote_spark, kafka_cluster.bootstrap
    topic = kafka_cluster.create_topic(2)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(30)], "key string, value string")
    df.write.format("pykafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic) \
        .mode("append").save()
    assert sorted(m.value() for m in consume_all(bootstrap, topic)) == sorted(b"v%d" % i for i in range(30))

    produce(bootstrap, topic, [{"value": b"w%d" % i, "partition": i % 2} for i in range(10)])
    read = spark.read.format("pykafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
    assert read.count() == 40

    url = f"sqlite:///{tmp_path}/sink.db"
    query = (spark.readStream.format("pykafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "15")
             .load().selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS v")
             .writeStream.format("pykafka-sql").option("url", url).option("table", "events")
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(180), "the streaming query did not finish in 180 s"
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql('SELECT "partition", "offset", v FROM events').fetchall()
    finally:
        engine.dispose()
    assert len(rows) == len({(p, o) for p, o, _ in rows}) == 40
    assert sorted(v for *_, v in rows) == sorted([f"v{i}" for i in range(30)] + [f"w{i}" for i in range(10)])
