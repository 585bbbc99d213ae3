"""Spark as a distributed engine for the integration suite: a standalone cluster.

The master and workers are started from the installed pyspark's own launcher (``bin/spark-class``), bind to 127.0.0.1, keep their logs in files shown when they fail to
start, and are stopped by pid (SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT_S`) when the
``with`` block ends, also on failure.

- :func:`standalone_cluster`: a ``Master`` and ``workers`` ``Worker`` processes (1 core,
  1 GiB each); executors run in their own JVMs with their own Python workers. Yields the
  master URL ``spark://127.0.0.1:PORT``.

The workers are started *without* ``PYSPARK_PYTHON`` in their environment: jobs must say which
Python the executors run (``spark.pyspark.python``), as a user's job on a real cluster must.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


class SparkProcessError(RuntimeError):
    """A Spark process did not start; the message has its command line and log tail."""


def spark_home() -> Path:
    """The installed pyspark's folder (it ships ``bin/`` and ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["SPARK_HOME"] = str(spark_home())
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


class _Process:
    def __init__(self, cmd: list[str], log_path: Path, cwd: Path):
        self.cmd = cmd
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=_env(), cwd=cwd,
                                     start_new_session=True)

    def wait_for(self, pattern: str, what: str) -> re.Match:
        deadline = time.monotonic() + START_TIMEOUT_S
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            match = regex.search(self.log_path.read_text(errors="replace"))
            if match:
                return match
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])
        raise SparkProcessError(f"{what} did not start within {START_TIMEOUT_S:g} s (exit {self.proc.poll()});\n"
                                f"command: {' '.join(self.cmd)}\nlog tail:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the JVM and anything it started
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(STOP_TIMEOUT_S)
        self._log.close()


@contextlib.contextmanager
def standalone_cluster(work_dir: Path, workers: int = 2) -> Iterator[str]:
    """Start a standalone master and ``workers`` workers; yield the master URL."""
    spark_class = str(spark_home() / "bin" / "spark-class")
    started: list[_Process] = []
    try:
        master = _Process([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                           "--port", "0", "--webui-port", "0"], work_dir / "master.log", work_dir)
        started.append(master)
        url = master.wait_for(r"Starting Spark master at (spark://[0-9.]+:\d+)", "Spark master").group(1)
        for i in range(workers):
            wdir = work_dir / f"worker-{i}"
            wdir.mkdir()
            worker = _Process([spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                               "--port", "0", "--webui-port", "0", "--cores", "1", "--memory", "1g",
                               "--work-dir", str(wdir)], work_dir / f"worker-{i}.log", work_dir)
            started.append(worker)
            worker.wait_for(r"Successfully registered with master", f"Spark worker {i}")
        yield url
    finally:
        for p in reversed(started):
            p.stop()
