"""Spark's own Kafka connector (``format("kafka")``) as a reference to compare ``pykafka`` with.

:func:`reference_spark` finds the jars (:func:`~pyspark_kafka.testing.maven.spark_kafka_libs`)
and the Python that runs them. The connector is published on Maven Central per Spark version;
when the installed pyspark's version is not served (4.3.0 is not, here), the nearest lower
served version is used *with a matching pyspark* in a separate virtual environment, one per
interpreter (``~/.cache/pyspark-kafka/venv-pyspark-<version>-<interpreter>``, :func:`venv_root`,
:func:`pyspark_python`): only pyspark itself is downloaded; the other dependencies are the
running interpreter's, made visible by a ``.pth`` file
(``--system-site-packages`` alone would expose the *base* interpreter's packages, not those of the
virtualenv the package is installed in). The environment is marked complete only once its own
imports (:data:`REQUIRED_MODULES`, pyspark at the right version) work, and a broken one is rebuilt.
Callers run the reference job with :attr:`ReferenceSpark.python` as a separate driver process
and must say which Spark version the reference was (:attr:`ReferenceSpark.note`).

Raises :class:`~pyspark_kafka.testing.maven.MavenUnavailable` (missing java/mvn, nothing served)
or :class:`ReferenceUnavailable` (the environment cannot be built, e.g. PyPI unreachable).
"""

from __future__ import annotations

import fcntl
import hashlib
import site
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
    """``~/.cache/pyspark-kafka/venv-pyspark-<version>-<interpreter>`` (next to the Maven cache folder).

    ``<interpreter>``: 8 hex digits of a hash of the running interpreter's resolved ``sys.prefix``
    (a virtualenv's folder). One environment per interpreter, because its ``.pth`` file exposes the
    packages of the interpreter that built it: shared, a second virtualenv would pass
    :func:`check_env` with the first one's packages (found from a fresh virtualenv, issue 27)."""
    interpreter = hashlib.sha256(str(Path(sys.prefix).resolve()).encode()).hexdigest()[:8]
    return cache_root().parent / f"venv-pyspark-{version}-{interpreter}"


REQUIRED_MODULES = ("pyspark", "pyarrow", "pandas", "confluent_kafka", "pyspark_kafka")
"""What the reference job imports; checked in the environment before it is marked complete."""

VISIBLE_PTH = "_pyspark_kafka_visible.pth"
"""The ``.pth`` file of the reference environment that adds the building interpreter's site directories."""


def pyspark_python(version: str) -> str:
    """An interpreter whose pyspark is ``version``: this one when it matches, else the cached venv
    (built on first use by :func:`ensure_env`: about 45 s here). Raises :class:`ReferenceUnavailable`
    with pip's output tail or the failing import."""
    if version == installed_spark_version():
        return sys.executable
    return ensure_env(venv_root(version), [f"pyspark=={version}"], version)


def ensure_env(root: Path, requirements: list[str], pyspark_version: str | None = None) -> str:
    """The interpreter of a working virtual environment at ``root``; built (or rebuilt) when missing or broken.

    The environment: ``python -m venv --system-site-packages``, ``pip install`` of ``requirements``
    (nothing when empty), then a ``.pth`` file (:data:`VISIBLE_PTH`) adding the running
    interpreter's site directories *after* its own (so its pyspark wins, and what this interpreter
    has installed, e.g. in a virtualenv, is visible). It is marked complete (``.complete``) only
    when :func:`check_env` passes; a complete-marked environment whose check fails is rebuilt once.
    Concurrent callers are serialised by a lock file. Raises ReferenceUnavailable.
    """
    python = root / "bin" / "python"
    marker = root / ".complete"
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and check_env(str(python), pyspark_version) is None:
            return str(python)
        marker.unlink(missing_ok=True)
        _build_venv(root, requirements)
        problem = check_env(str(python), pyspark_version)
        if problem is not None:
            raise ReferenceUnavailable(f"the environment {root} was built but cannot run the reference job: {problem}")
        marker.write_text("".join(f"{r}\n" for r in requirements) or "-\n")
    return str(python)


def check_env(python: str, pyspark_version: str | None) -> str | None:
    """``None`` when ``python`` imports :data:`REQUIRED_MODULES` (and has pyspark ``pyspark_version``),
    else the reason (the failing import, a wrong version, a missing interpreter)."""
    code = ("import importlib, sys\n"
            f"for m in {REQUIRED_MODULES!r}:\n"
            "    importlib.import_module(m)\n"
            "import pyspark\n"
            "print(pyspark.__version__)\n")
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run {python}: {e}"
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    found = proc.stdout.strip()
    if pyspark_version is not None and found != pyspark_version:
        return f"pyspark is {found}, not {pyspark_version}"
    return None


def _visible_site_dirs() -> list[str]:
    """The running interpreter's site directories (a virtualenv's own, then user and system ones)."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if Path(d).is_dir()]


def _build_venv(root: Path, requirements: list[str]) -> None:
    venv_python = str(root / "bin" / "python")
    steps = [[sys.executable, "-m", "venv", "--clear", "--system-site-packages", str(root)]]
    if requirements:
        steps.append([venv_python, "-m", "pip", "install", "-q", *requirements])
    for cmd in steps:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ReferenceUnavailable(f"{' '.join(cmd)} did not finish within {PIP_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
            raise ReferenceUnavailable(f"{' '.join(cmd)} failed (exit {proc.returncode}; is PyPI reachable?):\n{tail}")
    # after pip (which must not see the running interpreter's pyspark as already installed)
    probe = ("import site, sysconfig; print(sysconfig.get_paths()['purelib']); "
             "print(*site.getsitepackages(), sep='\\n')")
    own, *seen = subprocess.run([venv_python, "-c", probe], capture_output=True, text=True, timeout=60,
                                check=True).stdout.split("\n")
    seen_dirs = {str(Path(d).resolve()) for d in [own, *seen] if d}
    lines = [f"import site; site.addsitedir({d!r})" for d in _visible_site_dirs()
             if str(Path(d).resolve()) not in seen_dirs]
    (Path(own) / VISIBLE_PTH).write_text("".join(f"{line}\n" for line in lines))


def reference_spark() -> ReferenceSpark:
    """The reference connector for the installed pyspark (see the module docstring).

    Raises MavenUnavailable or ReferenceUnavailable."""
    require_tools("java")
    installed = installed_spark_version()
    version, jars = spark_kafka_libs(installed)
    return ReferenceSpark(version, installed, pyspark_python(version), tuple(jars))
