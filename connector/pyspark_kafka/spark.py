"""SparkSession construction that works in a virtual environment.

Spark starts its Python workers with ``python3`` from PATH unless told otherwise;
in a virtualenv that interpreter lacks this package and Spark reports
``DATA_SOURCE_NOT_FOUND``. :func:`get_spark` points workers at ``sys.executable``.
"""

from __future__ import annotations

import os
import re
import sys
import warnings

PANDAS_NOTICE = "PySpark does not yet fully support pandas"
"""Start of the FutureWarning pyspark 4.x gives on every pandas conversion under pandas >= 3.0.0."""


def ensure_worker_python() -> None:
    """Set ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` to this interpreter unless already set.

    ``PYSPARK_DRIVER_PYTHON`` becomes :func:`pyspark_kafka.worker_daemon.launcher` of this
    interpreter: Spark runs the driver-side Python processes of a Python data source with it (the
    planner workers, and the source runner each new streaming query starts as a fresh process),
    and through the launcher they import the installed pyspark's bytecode instead of compiling
    ``pyspark.zip`` again (about 0.6 s of CPU per new streaming query, docs/benchmark-analysis.md).
    These processes run on the driver's machine whatever the master. Values set by the user are
    kept as they are.
    """
    if "PYSPARK_DRIVER_PYTHON" not in os.environ:
        from pyspark_kafka.worker_daemon import launcher

        os.environ["PYSPARK_DRIVER_PYTHON"] = launcher(sys.executable) or sys.executable
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def quiet_pandas_notice() -> None:
    """Filter pyspark's :data:`PANDAS_NOTICE` FutureWarning in this process and, through
    ``PYTHONWARNINGS`` (inherited), in the Python workers Spark starts afterwards.

    pyspark repeats it on every pandas conversion when pandas >= 3.0.0 is installed; this package's
    test suite runs on pandas 3.1, so the notice says nothing a user of ``pykafka`` can act on.
    Other warnings are untouched.
    """
    warnings.filterwarnings("ignore", message=re.escape(PANDAS_NOTICE), category=FutureWarning)
    rule = f"ignore:{PANDAS_NOTICE}:FutureWarning"
    current = os.environ.get("PYTHONWARNINGS", "")
    if rule not in current.split(","):
        os.environ["PYTHONWARNINGS"] = f"{current},{rule}" if current else rule


def get_spark(app_name: str = "pyspark-kafka", master: str = "local[2]", conf: dict | None = None):
    """Return a SparkSession (``getOrCreate``) with workers on this interpreter.

    ``conf`` adds Spark settings (string keys and values). Defaults keep small
    local jobs quick: 2 shuffle partitions, no UI, loopback driver host, and Python
    workers started by :mod:`pyspark_kafka.worker_daemon` (``spark.python.daemon.module``),
    which import the installed pyspark's compiled bytecode instead of compiling
    ``pyspark.zip`` again in every new worker (about 1 s each); ``conf`` can set
    ``spark.python.daemon.module`` back to ``pyspark.daemon``. On POSIX, Spark talks to its Python
    processes over Unix domain sockets (``spark.python.unix.domain.socket.enabled``, SPARK-51688,
    Spark 4.1+) instead of loopback TCP: over TCP each Python task of a small micro-batch waited
    about 40 ms (Nagle's algorithm against delayed ACK, the stall SPARK-51667 fixed for the
    state server), measured in docs/benchmark-analysis.md; ``conf`` can
    set it back to ``false``. pyspark's FutureWarning about pandas >= 3 is filtered
    (:func:`quiet_pandas_notice`).
    """
    ensure_worker_python()
    quiet_pandas_notice()
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.daemon.module", "pyspark_kafka.worker_daemon")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if os.name == "posix":
        builder = builder.config("spark.python.unix.domain.socket.enabled", "true")
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
