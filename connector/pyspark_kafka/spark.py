"""SparkSession construction that works in a virtual environment.

Spark starts its Python workers with ``python3`` from PATH unless told otherwise;
in a virtualenv that interpreter lacks this package and Spark reports
``DATA_SOURCE_NOT_FOUND``. :func:`get_spark` points workers at ``sys.executable``.
"""

from __future__ import annotations

import os
import sys

HIDE_TRACEBACK = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"
LOG4J_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
"""The driver JVM's log4j 2 configuration that :func:`get_spark` uses."""


def ensure_worker_python() -> None:
    """Set ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` to this interpreter unless already set.

    ``PYSPARK_DRIVER_PYTHON`` becomes :func:`pyspark_kafka.worker_daemon.launcher` of this
    interpreter: Spark runs the driver-side Python processes of a Python data source with it (the
    planner workers, and the source runner each new streaming query starts as a fresh process),
    and through the launcher they import the installed pyspark's bytecode instead of compiling
    ``pyspark.zip`` again (about 0.6 s of CPU per new streaming query, docs/benchmark-analysis.md).
    These processes run on the driver's machine whatever the master. Values set by the user are
    kept as they are. With that launcher, on Linux, it also starts the session's
    :mod:`pyspark_kafka.runner_zygote` (once per process). Call it before building your own
    ``SparkSession`` to get both without :func:`get_spark`.
    """
    if "PYSPARK_DRIVER_PYTHON" not in os.environ:
        from pyspark_kafka.worker_daemon import launcher

        os.environ["PYSPARK_DRIVER_PYTHON"] = launcher(sys.executable) or sys.executable
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if _our_launcher(os.environ.get("PYSPARK_DRIVER_PYTHON")):
        from pyspark_kafka import runner_zygote

        runner_zygote.start()  # before the JVM starts: it passes the socket's path on to the launcher


def _our_launcher(path: str | None) -> bool:
    """True when ``path`` is a launcher written by :func:`pyspark_kafka.worker_daemon.launcher`."""
    if not path or not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "Written by pyspark_kafka.worker_daemon.launcher" in f.read(400)
    except OSError:
        return False


def driver_java_options(given: str | None) -> str | None:
    """``spark.driver.extraJavaOptions`` for :func:`get_spark`: ``given`` (the caller's, or None) with
    ``-Dlog4j2.configurationFile=file:`` :data:`LOG4J_CONFIG` added, unless ``given`` already names a
    log4j 2 configuration. Returns ``given`` unchanged when the file is missing.

    Added, not replaced: a caller that sets JVM flags of its own (the flights example sets JIT flags)
    kept Spark's start-up lines ("Using Spark's default log4j profile", the native Hadoop library
    warning) on every run when its options replaced ours.
    """
    if (given and "log4j2.configurationFile" in given) or not os.path.exists(LOG4J_CONFIG):
        return given
    return " ".join(p for p in (given, f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}") if p)


def get_spark(app_name: str = "pyspark-kafka", master: str = "local[2]", conf: dict | None = None):
    """Return a SparkSession (``getOrCreate``) with workers on this interpreter.

    When a session is already active it is returned as it is, with the runtime settings of
    ``conf`` applied (Spark cannot change the others on a running session).

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
    set it back to ``false``.

    What a user sees first when a job fails, and on a normal run (each can be set back by ``conf``):

    - ``spark.sql.execution.pyspark.udf.hideTraceback.enabled=true``: an error raised in Python (a
      data source's, a UDF's) reaches the driver as its message only, so a wrong
      ``kafka.bootstrap.servers`` or a missing topic shows ``BootstrapUnreachableError: cannot
      reach ...`` in the first lines, not after the Python traceback printed twice (once as the
      exception's frames, pyspark 4's ``recover_python_exception``, once in the message). The
      driver JVM and its Python processes also get ``SPARK_HIDE_TRACEBACK=1`` (unless set), since
      the streaming source runner reads only that variable. Set the conf to ``false`` to see the
      tracebacks of your own UDFs;
    - the driver JVM logs with :data:`LOG4J_CONFIG` (added to ``spark.driver.extraJavaOptions``, see
      :func:`driver_java_options`): Spark's defaults at WARN without the start-up lines and the
      per-query AQE warning of streaming;
    - ``SPARK_LOCAL_IP=127.0.0.1`` for a ``local`` master (unless set): Spark otherwise warns on
      every start that the host name resolves to a loopback address.

    On Linux, with the launcher above as ``PYSPARK_DRIVER_PYTHON``, a new session also starts a
    :mod:`pyspark_kafka.runner_zygote`: a Python process with pyspark, pyarrow and this package
    imported that forks each new streaming query's source runner instead of Spark starting a fresh
    interpreter (about 0.35 s of CPU and wall time per query). ``PYSPARK_KAFKA_RUNNER_ZYGOTE=0``
    turns it off.
    """
    ensure_worker_python()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        # getOrCreate would warn "Using an existing Spark session" on every call; set what can be set
        for k, v in (conf or {}).items():
            if active.conf.isModifiable(k):
                active.conf.set(k, v)
        return active
    conf = dict(conf or {})
    hide = str(conf.get(HIDE_TRACEBACK, "true")).lower() == "true"
    conf[HIDE_TRACEBACK] = "true" if hide else "false"
    if hide:
        os.environ.setdefault("SPARK_HIDE_TRACEBACK", "1")
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_options = driver_java_options(conf.get("spark.driver.extraJavaOptions"))
    if java_options:
        conf["spark.driver.extraJavaOptions"] = java_options

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
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
