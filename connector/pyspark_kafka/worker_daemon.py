"""Spark's Python worker daemon, started so that workers import pyspark's compiled bytecode.

Spark starts every Python worker daemon with ``$SPARK_HOME/python/lib/pyspark.zip`` first on
``PYTHONPATH`` (``PythonUtils.sparkPythonPath``). The zip of a pip-installed pyspark holds only
``.py`` files and Python never caches bytecode for modules imported from a zip, so every new
worker process compiles the pyspark modules it imports again (``pyspark/daemon.py`` imports the
worker module in each forked worker): about 1 s of CPU per worker process, measured in
docs/benchmarks.md ("Where the time goes"). A session starts several (executor workers and one
per planner module: create, plan, streaming source, write, commit).

Run as ``python -m pyspark_kafka.worker_daemon`` (Spark setting ``spark.python.daemon.module``,
which :func:`pyspark_kafka.spark.get_spark` sets), this module removes that zip from
``sys.path`` when it is the zip *of the installed pyspark package it sits in*
(``<pkg>/python/lib/pyspark.zip`` with ``<pkg>/__init__.py`` beside it: the same files, so the
same version) and the package's own jars (:func:`bundled_pyspark_archive`), then runs ``pyspark.daemon`` (its ``worker`` ends quietly on a socket Spark has closed). A zip of a separate Spark distribution
(``SPARK_HOME`` elsewhere) is kept. Importing this module does nothing but define functions;
:mod:`pyspark_kafka` itself does not import pyspark, so nothing is compiled from the zip before.
"""

from __future__ import annotations

import os
import sys

PYSPARK_DAEMON = "pyspark.daemon"


def bundled_pyspark_archive(entry: str) -> bool:
    """True when ``entry`` (a ``sys.path`` item) is an archive of a pyspark package ``<pkg>`` installed beside it
    (``<pkg>/__init__.py`` exists): ``<pkg>/python/lib/pyspark.zip`` (the same files as the package) or a jar
    in ``<pkg>/jars/``. Spark puts the jar of spark-core on ``PYTHONPATH`` (``PythonUtils.sparkPythonPath``
    adds ``SparkContext.jarOfObject``); it holds no Python module (checked on pyspark 4.2.0 and 4.3.0:
    5,854 and 5,973 entries, none ``.py``), but Python keeps a zip importer for it once any import has looked there,
    and each ``importlib.invalidate_caches()`` reads its whole directory again: 17 ms per importer, two
    importers (the jar and its ``org`` namespace package), in each Python task and each source runner
    (pyspark's ``worker_util.setup_spark_files`` calls it)."""
    name = os.path.basename(entry)
    if name == "pyspark.zip":
        lib = os.path.dirname(os.path.abspath(entry))
        package = os.path.dirname(os.path.dirname(lib))
        return (os.path.basename(os.path.dirname(lib)) == "python" and os.path.basename(lib) == "lib"
                and os.path.basename(package) == "pyspark" and os.path.isfile(os.path.join(package, "__init__.py")))
    if name.endswith(".jar"):
        jars = os.path.dirname(os.path.abspath(entry))
        package = os.path.dirname(jars)
        return (os.path.basename(jars) == "jars" and os.path.basename(package) == "pyspark"
                and os.path.isfile(os.path.join(package, "__init__.py")))
    return False


def without_bundled_archives(path: list[str]) -> list[str]:
    """``path`` without the entries :func:`bundled_pyspark_archive` accepts (order kept)."""
    return [entry for entry in path if not bundled_pyspark_archive(entry)]


_LAUNCHER = """#!/bin/sh
# Written by pyspark_kafka.worker_daemon.launcher: runs {python} with PYTHONPATH minus the
# installed pyspark package's own pyspark.zip (<pkg>/python/lib/pyspark.zip beside <pkg>/__init__.py),
# so that it imports pyspark's compiled bytecode instead of compiling the zip's modules again, and minus
# that package's jars (<pkg>/jars/*.jar: Spark adds spark-core's; no Python module in it).
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
  case "$entry" in
    */pyspark/python/lib/pyspark.zip) [ -f "${{entry%/python/lib/pyspark.zip}}/__init__.py" ] && continue ;;
    */pyspark/jars/*.jar) [ -f "${{entry%/jars/*}}/__init__.py" ] && continue ;;
  esac
  kept="${{kept:+$kept:}}$entry"
done
unset IFS
if [ -n "$kept" ]; then PYTHONPATH=$kept; export PYTHONPATH; else unset PYTHONPATH; fi
# a new streaming query's source runner: forked by the session's zygote when it listens (pyspark_kafka.runner_zygote)
if [ "$1" = "-m" ] && [ "$2" = "{runner}" ] && [ -n "${{PYSPARK_KAFKA_RUNNER_ZYGOTE:-}}" ] && [ -S "$PYSPARK_KAFKA_RUNNER_ZYGOTE" ]; then
  PYSPARK_KAFKA_ZYGOTE_PYTHON={quoted}; export PYSPARK_KAFKA_ZYGOTE_PYTHON
  exec {quoted} -I -S {client} "$PYSPARK_KAFKA_RUNNER_ZYGOTE" "$@"
fi
# the daemon of the planner workers: pyspark.daemon with its worker ending quietly on a socket Spark closed
if [ "$1" = "-m" ] && [ "$2" = "{daemon}" ]; then
  shift 2
  exec {quoted} -m pyspark_kafka.worker_daemon "$@"
fi
exec {quoted} "$@"
"""


def launcher(python: str, directory: str | None = None) -> str | None:
    """Path of an executable ``/bin/sh`` script that runs ``python`` (all arguments passed on) without
    the installed pyspark's own ``pyspark.zip`` on ``PYTHONPATH`` (the rule of :func:`bundled_pyspark_archive`).

    For ``PYSPARK_DRIVER_PYTHON``: Spark starts the driver-side Python processes of a Python data
    source with that interpreter and the zip first on ``PYTHONPATH``, where
    ``spark.python.daemon.module`` does not reach: the planner workers (forked from
    ``pyspark.daemon``) and the source runner that each new streaming query starts as a fresh
    process (about 0.6 s of CPU compiling pyspark's modules, docs/benchmark-analysis.md).
    ``-m pyspark.daemon`` (the daemon of the planner workers, which ``spark.python.daemon.module``
    does not choose) becomes ``-m pyspark_kafka.worker_daemon``, whose worker ends quietly on a socket
    Spark closed (:func:`quiet_on_closed_socket`): a planner worker's ``BrokenPipeError`` traceback
    ended a job's output at ``spark.stop()`` now and then (the flights example). Written
    once per interpreter into ``directory`` (default ``<tempdir>/pyspark-kafka-<uid>``, mode 0700), atomically. None on a
    platform without ``/bin/sh`` (Windows) or when the directory cannot be written.
    """
    import hashlib
    import shlex
    import tempfile

    if os.name != "posix" or not os.path.exists("/bin/sh"):
        return None
    directory = directory or os.path.join(tempfile.gettempdir(), f"pyspark-kafka-{os.getuid()}")
    client = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner_zygote_client.py")
    text = _LAUNCHER.format(python=python, quoted=shlex.quote(python), client=shlex.quote(client),
                            runner="pyspark.sql.streaming.python_streaming_source_runner", daemon=PYSPARK_DAEMON)
    path = os.path.join(directory, f"python-{hashlib.sha256(text.encode()).hexdigest()[:16]}")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if os.stat(directory).st_uid != os.getuid():
            return None  # someone else's directory: do not run scripts from it
        if not os.path.isfile(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, 0o700)
            os.replace(tmp, path)
    except OSError:
        return None
    return path


KEEP_ZIP_ENV = "PYSPARK_KAFKA_KEEP_PYSPARK_ZIP"
"""Set to any non-empty value to keep pyspark's zip on ``sys.path`` (turns :func:`startup_hook` off)."""

STARTUP_PTH = "_pyspark_kafka_startup.pth"
"""The ``.pth`` file the package installs into ``site-packages`` (``setup.py``); its one line calls
:func:`startup_hook` when ``PYTHONPATH`` names a ``pyspark.zip``. Python's ``site`` runs ``.pth`` files in
sorted name order: this name sorts after setuptools' ``__editable__.*.pth`` (an editable install's path is
set by then) and before most others (``distutils-precedence.pth``, ``_virtualenv.pth``, ``*-nspkg.pth``,
``easy-install.pth``), so a plain session's source-runner stand-in hands itself to the runner zygote
before other packages' start-up hooks cost it time (they still run in the forked runner's zygote)."""


def startup_hook() -> None:
    """Run at interpreter start by :data:`STARTUP_PTH`: drop the installed pyspark's own zip and jars from ``sys.path``.

    Spark starts each Python process (executor workers and their daemon, the planner workers, the
    source runner of every new streaming query) with ``<pkg>/python/lib/pyspark.zip`` first on
    ``PYTHONPATH``. Python caches no bytecode for modules imported from a zip, so each of those
    processes compiles pyspark's modules again: about 0.5 s of CPU per new streaming query in a
    ``SparkSession`` built without :func:`pyspark_kafka.spark.get_spark` (measured in
    docs/benchmark-analysis.md). The zip holds the same files as the installed package beside it
    (the rule of :func:`bundled_pyspark_archive`), so importing the package's compiled bytecode
    instead changes nothing else; a zip of a separate Spark distribution (``SPARK_HOME``
    elsewhere) is kept. The same rule as :func:`main` and :func:`launcher`, for sessions the user
    builds.

    In Spark's worker daemons it also turns on quick ACKs for the workers' TCP input
    (:func:`pyspark_kafka.quick_ack.install`: 40 ms less per Python task in a session that talks TCP).
    In a session built without ``get_spark()``, the daemon of the ``create_data_source`` planner starts
    the session's runner zygote and each new streaming query's source runner hands itself to it
    (:func:`pyspark_kafka.runner_zygote.start_session_zygote`, :func:`~pyspark_kafka.runner_zygote_client.hand_off_runner`).

    The zip is kept when :data:`KEEP_ZIP_ENV` is set. Never raises: an interpreter start must not
    fail because of this hook.
    """
    try:
        argv = getattr(sys, "orig_argv", [])
        if argv[1:3] == ["-m", "pyspark.sql.streaming.python_streaming_source_runner"]:
            # first, and with the standard library only: this process waits for the forked runner from here on
            from pyspark_kafka.runner_zygote_client import hand_off_runner

            status = hand_off_runner(argv)
            if status is not None:  # the session zygote ran this query's source runner: its exit status is ours
                os._exit(status)
        from pyspark_kafka import quick_ack

        quick_ack.install()
        if argv[1:4] == ["-m", "pyspark.daemon", "pyspark.sql.worker.create_data_source"]:
            from pyspark_kafka import runner_zygote

            runner_zygote.start_session_zygote(argv)
    except Exception:  # noqa: BLE001 - see the docstring
        pass
    try:
        if os.environ.get(KEEP_ZIP_ENV):
            return
        kept = without_bundled_archives(sys.path)
        if len(kept) != len(sys.path):
            dropped = [entry for entry in sys.path if entry not in kept]
            sys.path[:] = kept
            # the interpreter's start already made zip importers for them: forget those too, or
            # every importlib.invalidate_caches() (pyspark calls it in each Python task and source
            # runner, worker_util.setup_spark_files) reads each archive's whole directory again
            for key in [k for k in sys.path_importer_cache
                        if any(k == d or k.startswith(d + os.sep) for d in dropped)]:
                del sys.path_importer_cache[key]
    except Exception:  # noqa: BLE001 - see the docstring
        pass


def quiet_on_closed_socket(worker):
    """``pyspark.daemon.worker`` that ends quietly when Spark has closed the worker's socket.

    When a query is stopped or the driver exits while a Python task is finishing, the JVM closes the
    socket and the forked worker's last ``flush`` raises ``BrokenPipeError``; pyspark's daemon prints
    that traceback on stderr (the flights job ended with two of them). The JVM already knows the task
    is gone, so the worker ends as after a failed task (code 1: the daemon waits for the socket to
    close and lets the process exit), without a traceback.
    """
    def run(sock, authenticated):
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            return 1

    return run


def main() -> None:
    """Drop the installed pyspark's own zip and jars from ``sys.path``, then run ``pyspark.daemon``'s manager
    with :func:`quiet_on_closed_socket` around its ``worker`` (its arguments, e.g. the worker module,
    are left in ``sys.argv``)."""
    sys.path[:] = without_bundled_archives(sys.path)
    import importlib

    daemon = importlib.import_module(PYSPARK_DAEMON)
    daemon.worker = quiet_on_closed_socket(daemon.worker)
    daemon.manager()


if __name__ == "__main__":
    main()
