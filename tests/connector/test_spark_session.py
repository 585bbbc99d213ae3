"""``get_spark``: no pandas FutureWarning from pyspark on every run (issue 27)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_no_pandas_future_warning_in_driver_or_workers():
    pandas = pytest.importorskip("pandas")
    if int(pandas.__version__.split(".")[0]) < 3:
        pytest.skip("pyspark warns only under pandas >= 3")
    code = ("import pandas as pd\n"
            "from pyspark_kafka.spark import get_spark\n"
            "spark = get_spark('pandas-notice')\n"
            "df = spark.createDataFrame(pd.DataFrame({'a': [1, 2]}))\n"
            "assert df.toPandas()['a'].tolist() == [1, 2]\n"
            "from pyspark.sql.functions import pandas_udf\n"
            "plus = pandas_udf(lambda s: s + 1, 'long')\n"
            "assert [r[0] for r in df.select(plus('a')).collect()] == [2, 3]\n"
            "spark.stop()\n")
    r = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "does not yet fully support pandas" not in r.stderr, r.stderr[-3000:]


def test_a_streaming_write_from_a_thread_needs_the_active_session(spark, tmp_path):
    """Spark's behaviour, pinned (docs/writer.md): a streaming write's ``format("pykafka")`` is resolved
    through the JVM thread's active session; a Python thread started after the session has none
    (pinned-thread mode), so ``start()`` fails with DATA_SOURCE_NOT_FOUND there until
    ``SparkSession.setActiveSession`` names the session. Reads are resolved through the session itself."""
    import threading

    outcome: dict = {}

    def start(tag: str, pin: bool) -> None:
        try:
            if pin:
                spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            q = (spark.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS value")
                 .writeStream.format("pykafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
                 .option("topic", "t").option("checkpointLocation", str(tmp_path / tag)).start())
            q.stop()
            outcome[tag] = "started"
        except Exception as e:  # noqa: BLE001 - the outcome is what the test compares
            outcome[tag] = "DATA_SOURCE_NOT_FOUND" if "DATA_SOURCE_NOT_FOUND" in str(e) else repr(e)[:300]

    for tag, pin in (("thread", False), ("thread-pinned", True)):
        t = threading.Thread(target=start, args=(tag, pin))
        t.start()
        t.join(120)
    assert outcome == {"thread": "DATA_SOURCE_NOT_FOUND", "thread-pinned": "started"}


@pytest.mark.skipif(os.name != "posix", reason="get_spark uses Unix domain sockets on POSIX only")
def test_python_workers_talk_to_the_jvm_over_a_unix_domain_socket(spark):
    """``get_spark`` turns on ``spark.python.unix.domain.socket.enabled`` (SPARK-51688): over loopback TCP each
    Python task of a small micro-batch stalled about 40 ms (Nagle against delayed ACK, docs/benchmark-analysis.md).
    The worker must really be connected to the JVM through a Unix domain socket, not only have the setting."""
    assert spark.conf.get("spark.python.unix.domain.socket.enabled") == "true"

    def probe(_):
        import os
        import socket
        import stat

        names = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                if not stat.S_ISSOCK(os.fstat(int(fd)).st_mode):
                    continue
                s = socket.socket(fileno=os.dup(int(fd)))
            except OSError:
                continue
            with s:
                if s.family == socket.AF_UNIX and s.type == socket.SOCK_STREAM:
                    names.append(s.getsockname())
        return os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED"), names

    [(enabled, names)] = spark.sparkContext.parallelize([0], 1).map(probe).collect()
    assert str(enabled).lower() == "true"
    assert any(isinstance(n, str) and n.endswith(".sock") for n in names), names
