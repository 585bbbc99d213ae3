"""SparkSession construction that works in a virtual environment.

Spark starts its Python workers with ``python3`` from PATH unless told otherwise;
in a virtualenv that interpreter lacks this package and Spark reports
``DATA_SOURCE_NOT_FOUND``. :func:`get_spark` points workers at ``sys.executable``.
"""

from __future__ import annotations

import os
import sys


def ensure_worker_python() -> None:
    """Set ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` to this interpreter unless already set."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def get_spark(app_name: str = "pyspark-kafka", master: str = "local[2]", conf: dict | None = None):
    """Return a SparkSession (``getOrCreate``) with workers on this interpreter.

    ``conf`` adds Spark settings (string keys and values). Defaults keep small
    local jobs quick: 2 shuffle partitions, no UI, loopback driver host, and Python
    workers started by :mod:`pyspark_kafka.worker_daemon` (``spark.python.daemon.module``),
    which import the installed pyspark's compiled bytecode instead of compiling
    ``pyspark.zip`` again in every new worker (about 1 s each); ``conf`` can set
    ``spark.python.daemon.module`` back to ``pyspark.daemon``.
    """
    ensure_worker_python()
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
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
