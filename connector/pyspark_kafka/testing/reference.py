"""Spark's own Kafka connector (``format("kafka")``) as a reference to compare ``pykafka`` with.

:func:`reference_spark` finds the jars (:func:`~pyspark_kafka.testing.maven.spark_kafka_libs`)
and the Python that runs them. The connector is published on Maven Central per Spark version;
when the installed pyspark's version is not served (4.3.0 is not, here), the nearest lower
served version is used *with a matching pyspark* in a separate virtual environment
(``~/.cache/pyspark-kafka/venv-pyspark-<version>``, created once with ``--system-site-packages``
so that only pyspark itself is downloaded; the other dependencies are the installed ones).
Callers run the reference job with :attr:`ReferenceSpark.python` as a separate driver process
and must say which Spark version the reference was (:attr:`ReferenceSpark.note`).

Raises :class:`~pyspark_kafka.testing.maven.MavenUnavailable` (missing java/mvn, nothing served)
or :class:`ReferenceUnavailable` (the environment cannot be built, e.g. PyPI unreachable).
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pyspark_kafka.testing.maven import cache_root, installed_spark_version, require_tools, spark_kafka_libs

PIP_TIMEOUT_S = 600


class ReferenceUnavailable(Exception):
    """The environment of the reference connector cannot be built; the message says why."""


@dataclass(frozen=True)
class ReferenceSpark:
    """``version``: Spark version of the connector jars and of the pyspark that runs them;
    ``installed``: the pyspark of this interpreter; ``python``: interpreter of the reference job;
    ``jars``: for ``spark.jars`` (already downloaded: nothing is fetched at query time)."""

    version: str
    installed: str
    python: str
    jars: tuple[Path, ...]

    @property
    def note(self) -> str:
        """One sentence naming the reference, for test output and reports."""
        if self.version == self.installed:
            return f"reference: Spark {self.version}'s format('kafka') on the installed pyspark {self.installed}"
        return (f"reference: Spark {self.version}'s format('kafka') (Maven Central does not serve "
                f"spark-sql-kafka-0-10 {self.installed}) run by pyspark {self.version} in {Path(self.python).parent.parent}; "
                f"pykafka is compared on that same pyspark {self.version}")


def venv_root(version: str) -> Path:
    """``~/.cache/pyspark-kafka/venv-pyspark-<version>`` (next to the Maven cache folder)."""
    return cache_root().parent / f"venv-pyspark-{version}"


def pyspark_python(version: str) -> str:
    """An interpreter whose pyspark is ``version``: this one when it matches, else the cached venv
    (built on first use: ``python -m venv --system-site-packages``, ``pip install pyspark==version``;
    about 45 s here). Raises :class:`ReferenceUnavailable` with pip's output tail."""
    if version == installed_spark_version():
        return sys.executable
    root = venv_root(version)
    python = root / "bin" / "python"
    marker = root / ".complete"
    if not marker.exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        with open(root.parent / f".venv-{version}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not marker.exists():
                _build_venv(root, version)
                marker.write_text(f"pyspark=={version}\n")
    return str(python)


def _build_venv(root: Path, version: str) -> None:
    steps = [[sys.executable, "-m", "venv", "--clear", "--system-site-packages", str(root)],
             [str(root / "bin" / "python"), "-m", "pip", "install", "-q", f"pyspark=={version}"]]
    for cmd in steps:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ReferenceUnavailable(f"{' '.join(cmd)} did not finish within {PIP_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
            raise ReferenceUnavailable(f"{' '.join(cmd)} failed (exit {proc.returncode}; is PyPI reachable?):\n{tail}")


def reference_spark() -> ReferenceSpark:
    """The reference connector for the installed pyspark (see the module docstring).

    Raises MavenUnavailable or ReferenceUnavailable."""
    require_tools("java")
    installed = installed_spark_version()
    version, jars = spark_kafka_libs(installed)
    return ReferenceSpark(version, installed, pyspark_python(version), tuple(jars))
