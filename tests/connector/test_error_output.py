"""What ``python job.py`` prints when a ``format("pykafka")`` job is wrong, in a plain ``SparkSession``.

``get_spark()`` hides Python tracebacks inside Spark errors (``hideTraceback``); a plain
``SparkSession.builder.getOrCreate()`` does not, and pyspark printed our traceback twice before the
message: for a missing ``subscribe`` the cause was line 37 of 38 of the failure output, against line
13 of 13 for Spark's connector (``tools/error_output_compare.py``). The errors of this package now
reach Spark as their message only (``errors_as_messages``), in any session; other exceptions keep
their traceback.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap

import pytest

from pyspark_kafka.errors import OptionError, errors_as_messages


@pytest.fixture
def in_a_spark_worker(monkeypatch):
    """This process looks like a Spark Python worker (as Spark starts them) with no traceback setting."""
    monkeypatch.setenv("SPARK_PYTHON_RUNTIME", "PYTHON_WORKER")
    monkeypatch.delenv("SPARK_HIDE_TRACEBACK", raising=False)


@errors_as_messages
class _Reader:
    def latestOffset(self, start: dict, limit) -> dict:
        raise OptionError("option 'x' = 'y': must be z")

    def read(self, partition):
        yield 1
        raise OptionError("bad") if partition else ValueError("a bug")

    def partitions(self, start, end):
        raise ValueError("a bug keeps its traceback")


def test_our_errors_hide_the_traceback_in_a_worker_only(in_a_spark_worker, monkeypatch):
    with pytest.raises(OptionError):
        _Reader().latestOffset({}, None)
    assert os.environ.get("SPARK_HIDE_TRACEBACK") == "1"

    monkeypatch.delenv("SPARK_HIDE_TRACEBACK")
    with pytest.raises(ValueError):
        _Reader().partitions(None, None)
    with pytest.raises(ValueError):
        list(_Reader().read(0))
    assert "SPARK_HIDE_TRACEBACK" not in os.environ  # other exceptions keep their traceback

    with pytest.raises(OptionError):
        list(_Reader().read(1))  # raised while Spark iterates the generator
    assert os.environ.get("SPARK_HIDE_TRACEBACK") == "1"

    monkeypatch.delenv("SPARK_HIDE_TRACEBACK")
    monkeypatch.delenv("SPARK_PYTHON_RUNTIME")
    with pytest.raises(OptionError):
        _Reader().latestOffset({}, None)
    assert "SPARK_HIDE_TRACEBACK" not in os.environ  # the driver's process (a test) is left alone


def test_signatures_are_kept():
    """pyspark inspects ``latestOffset``'s parameters to choose the admission-control call."""
    from pyspark_kafka.read import KafkaStreamReader

    assert list(inspect.signature(_Reader().latestOffset).parameters) == ["start", "limit"]
    assert list(inspect.signature(KafkaStreamReader.latestOffset).parameters)[1:] == ["start", "limit"]


JOB = """
import os, sys, traceback
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
for options in ({"kafka.bootstrap.servers": "BOOT"},
                {"kafka.bootstrap.servers": "BOOT", "subscribe": "t", "startingOffsets": "bogus"}):
    try:
        spark.read.format("pykafka").options(**options).load().count()
    except Exception:
        print("@@error@@")
        traceback.print_exc(file=sys.stdout)
"""


@pytest.mark.slow
def test_a_plain_session_shows_the_cause_as_spark_s_connector_does(bootstrap):
    """A plain SparkSession (no get_spark): what Python prints for a missing subscribe and a bad
    startingOffsets has one traceback (the driver's frames) and names the option within 14 lines,
    as Spark's connector (13 lines for the missing subscribe). About 15 s (one Spark session)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_HIDE"))}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(JOB).replace("BOOT", bootstrap)],
                          capture_output=True, text=True, timeout=180, env=env)
    failures = proc.stdout.split("@@error@@\n")[1:]
    assert len(failures) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    for printed, option in zip(failures, ("subscribe", "startingOffsets")):
        lines = printed.strip().splitlines()
        cause = next(i for i, line in enumerate(lines) if "pyspark_kafka.errors.OptionError:" in line)
        assert cause < 14 and option in lines[cause], printed
        assert printed.count("Traceback (most recent call last)") == 1, printed


def test_get_spark_adds_its_log_settings_to_the_caller_s_jvm_options():
    """A caller's own driver JVM flags keep get_spark's log4j 2 configuration (the flights example's JIT
    flags used to bring back Spark's four start-up lines); a caller's own log4j configuration wins."""
    from pyspark_kafka.spark import LOG4J_CONFIG, driver_java_options

    ours = f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}"
    assert driver_java_options(None) == ours
    assert driver_java_options("-XX:TieredStopAtLevel=1") == f"-XX:TieredStopAtLevel=1 {ours}"
    assert driver_java_options("-Dlog4j2.configurationFile=file:/mine.properties") == \
        "-Dlog4j2.configurationFile=file:/mine.properties"


def test_every_class_spark_calls_is_wrapped():
    """Every data source, reader and writer class Spark calls has its public methods wrapped (a class
    left out shows the doubled traceback again in a plain session: the stream reader once was)."""
    import importlib

    classes = {"pyspark_kafka.source": ["KafkaDataSource"], "pyspark_kafka.read": ["KafkaBatchReader", "KafkaStreamReader"],
               "pyspark_kafka.write": ["KafkaBatchWriter", "KafkaStreamWriter"],
               "pyspark_kafka.sinks.sql": ["SqlSinkDataSource", "SqlBatchWriter", "SqlStreamWriter"],
               "pyspark_kafka.sinks.files": ["ParquetSinkDataSource", "ParquetBatchWriter", "ParquetStreamWriter"],
               "pyspark_kafka.sinks.delta": ["DeltaSinkDataSource", "DeltaBatchWriter", "DeltaStreamWriter"],
               "pyspark_kafka.sinks.iceberg": ["IcebergSinkDataSource", "IcebergBatchWriter", "IcebergStreamWriter"]}
    unwrapped = []
    for module, names in classes.items():
        for name in names:
            cls = getattr(importlib.import_module(module), name)
            own = [m for m in dir(cls) if not m.startswith("_") and inspect.isfunction(inspect.getattr_static(cls, m))
                   and not inspect.getattr_static(cls, m).__module__.startswith("pyspark.")]
            unwrapped += [f"{name}.{m}" for m in own if not getattr(getattr(cls, m), "_pyspark_kafka_entry", False)]
            assert own, name
    assert unwrapped == []
