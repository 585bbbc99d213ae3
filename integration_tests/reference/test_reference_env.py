"""How the reference connector is found (:mod:`pyspark_kafka.testing.reference`): the bounded
list of versions tried, the fallback to the nearest served one, and the reasons a test skips."""

from __future__ import annotations

import shutil

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
