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
same version), then runs ``pyspark.daemon`` unchanged. A zip of a separate Spark distribution
(``SPARK_HOME`` elsewhere) is kept. Importing this module does nothing but define functions;
:mod:`pyspark_kafka` itself does not import pyspark, so nothing is compiled from the zip before.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Sequence

PYSPARK_DAEMON = "pyspark.daemon"


def bundled_pyspark_zip(entry: str) -> bool:
    """True when ``entry`` (a ``sys.path`` item) is ``<pkg>/python/lib/pyspark.zip`` of a pyspark
    package ``<pkg>`` installed beside it (``<pkg>/__init__.py`` exists)."""
    if os.path.basename(entry) != "pyspark.zip":
        return False
    lib = os.path.dirname(os.path.abspath(entry))
    package = os.path.dirname(os.path.dirname(lib))
    return (os.path.basename(os.path.dirname(lib)) == "python" and os.path.basename(lib) == "lib"
            and os.path.basename(package) == "pyspark" and os.path.isfile(os.path.join(package, "__init__.py")))


def without_bundled_zip(path: Sequence[str]) -> list[str]:
    """``path`` without the entries :func:`bundled_pyspark_zip` accepts (order kept)."""
    return [entry for entry in path if not bundled_pyspark_zip(entry)]


def main() -> None:
    """Drop the installed pyspark's own zip from ``sys.path``, then run ``pyspark.daemon`` as ``__main__``
    (its arguments, e.g. the worker module, are left in ``sys.argv``)."""
    sys.path[:] = without_bundled_zip(sys.path)
    runpy.run_module(PYSPARK_DAEMON, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
