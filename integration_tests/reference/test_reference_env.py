"""How the reference connector is found (:mod:`pyspark_kafka.testing.reference`): the bounded
list of versions tried, the fallback to the nearest served one, and the reasons a test skips."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
from pathlib import Path

import pytest

from pyspark_kafka.testing import maven, reference


def test_candidates_are_nearest_lower_first_and_bounded():
    assert maven.spark_version_candidates("4.3.0") == ["4.3.0", "4.2.2", "4.2.1", "4.2.0"]
    assert maven.spark_version_candidates("4.2.1") == ["4.2.1", "4.2.0", "4.1.2", "4.1.1", "4.1.0"]
    assert maven.spark_version_candidates("5.0.0") == ["5.0.0"]


def _path_with_only(monkeypatch, tmp_path, *tools):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(bin_dir))


def test_without_java_says_so(monkeypatch, tmp_path):
    _path_with_only(monkeypatch, tmp_path)
    with pytest.raises(maven.MavenUnavailable, match="java is not on PATH"):
        reference.reference_spark()


def test_without_maven_and_an_empty_cache_says_so(monkeypatch, tmp_path):
    if shutil.which("java") is None:
        pytest.skip("java is not on PATH")
    monkeypatch.setenv(maven.CACHE_ENV, str(tmp_path / "empty-cache"))
    _path_with_only(monkeypatch, tmp_path, "java")
    with pytest.raises(maven.MavenUnavailable, match="mvn is not on PATH"):
        reference.reference_spark()


@pytest.mark.slow
def test_installed_version_not_served_falls_back_to_the_nearest_served():
    """Measured: Maven Central serves spark-sql-kafka-0-10 4.2.0 but not 4.3.0, 4.2.2 or 4.2.1."""
    if shutil.which("mvn") is None:
        pytest.skip("mvn is not on PATH")
    try:
        version, jars = maven.spark_kafka_libs("4.3.0")
    except maven.MavenUnavailable as e:
        pytest.skip(f"Maven Central is not reachable: {e}")
    assert version == "4.2.0"
    assert sorted(j.name.rsplit("-", 1)[0] for j in jars) == [
        "commons-pool2", "kafka-clients", "spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13"]


@pytest.mark.slow
def test_no_pypi_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv(maven.CACHE_ENV, str(tmp_path / "maven"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))  # nothing to install from
    monkeypatch.setattr(reference, "installed_spark_version", lambda: "0.0.0")
    with pytest.raises(reference.ReferenceUnavailable, match=r"pip install -q pyspark==4\.2\.0 failed .*PyPI"):
        reference.pyspark_python("4.2.0")
    assert reference.venv_root("4.2.0").parent == tmp_path


SYSTEM_PYTHON = "/usr/bin/python3"


def _bare_venv(path, expose: str | None = None) -> str:
    """A virtualenv made by a system interpreter without our dependencies; ``expose``: a site
    directory whose packages it gets, as if they were installed in it (a ``.pth`` file)."""
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(path)], check=True, capture_output=True, timeout=120)
    python = str(path / "bin" / "python")
    if expose is not None:
        purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True, timeout=60).stdout.strip()
        with open(f"{purelib}/installed.pth", "w") as f:
            f.write(f"import site; site.addsitedir({expose!r})\n")
    return python


CONNECTOR = str(Path(reference.__file__).resolve().parents[2])
"""This checkout's ``connector`` folder (holding ``pyspark_kafka``)."""


def _ensure_from(python: str, root) -> subprocess.CompletedProcess:
    """``ensure_env(root)`` run by ``python`` with this checkout's ``pyspark_kafka`` importable (also from a
    bare virtualenv when the package is installed in a virtualenv rather than put on ``PYTHONPATH``)."""
    code = ("from pathlib import Path; from pyspark_kafka.testing.reference import ensure_env; "
            f"print(ensure_env(Path({str(root)!r}), []))")
    path = os.pathsep.join(p for p in (CONNECTOR, os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": path})


@pytest.mark.slow
def test_the_environment_built_from_a_virtualenv_sees_its_packages_and_is_rebuilt_when_broken(tmp_path):
    """Issue 27: from a virtualenv whose base interpreter lacks the dependencies, ``--system-site-packages``
    alone gave an environment without pyarrow that stayed cached as complete. Built here from a fresh
    virtualenv of the system interpreter in which this interpreter's packages are installed (made
    visible); checked, broken, and rebuilt."""
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"no {SYSTEM_PYTHON}")
    if subprocess.run([SYSTEM_PYTHON, "-c", "import pyarrow"], capture_output=True).returncode == 0:
        pytest.skip(f"{SYSTEM_PYTHON} has pyarrow: the case needs a base interpreter without it")
    here = next(d for d in site.getsitepackages() if (Path(d) / "pyarrow").is_dir())
    user = _bare_venv(tmp_path / "user-venv", expose=here)
    root = tmp_path / "reference-env"
    built = _ensure_from(user, root)
    assert built.returncode == 0, built.stderr[-2000:]
    python = built.stdout.strip().splitlines()[-1]
    assert (root / ".complete").exists()
    assert reference.check_env(python, None) is None  # pyspark, pyarrow, pandas, confluent_kafka, pyspark_kafka

    pth = next(root.glob(f"lib/python*/site-packages/{reference.VISIBLE_PTH}"))
    pth.unlink()  # broken: the environment no longer sees the virtualenv's packages
    assert "No module named" in reference.check_env(python, None)
    rebuilt = _ensure_from(user, root)
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    assert pth.exists() and reference.check_env(python, None) is None

    bare = _bare_venv(tmp_path / "bare-venv")  # no dependencies at all: refused, not marked complete
    refused = _ensure_from(bare, tmp_path / "refused-env")
    assert refused.returncode != 0 and "cannot run the reference job" in refused.stderr, refused.stderr[-2000:]
    assert not (tmp_path / "refused-env" / ".complete").exists()


def test_each_interpreter_gets_its_own_environment(tmp_path, monkeypatch):
    """Found from a fresh virtualenv (issue 27): with one shared environment, the second virtualenv's
    reference job passed the import check with the packages of the interpreter that built it first
    (its ``.pth`` exposes that one's site directories). The folder now names the interpreter."""
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"no {SYSTEM_PYTHON}")
    monkeypatch.setenv(maven.CACHE_ENV, str(tmp_path / "cache" / "maven"))
    other = _bare_venv(tmp_path / "other-venv")
    code = f"import sys; sys.path.insert(0, {CONNECTOR!r}); from pyspark_kafka.testing import reference; " \
           "print(reference.venv_root('4.2.0'))"
    theirs = subprocess.run([other, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    ours = reference.venv_root("4.2.0")
    assert ours.parent == Path(theirs).parent == tmp_path / "cache"
    assert ours.name.startswith("venv-pyspark-4.2.0-") and Path(theirs).name.startswith("venv-pyspark-4.2.0-")
    assert Path(theirs) != ours
    assert reference.venv_root("4.2.0") == ours  # stable for one interpreter
