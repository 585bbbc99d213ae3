"""The backends of ``kafka_cluster``: each one that cannot run says why (the skip reason)."""

from __future__ import annotations

import shutil
import socket

import pytest

from integration_tests import clusters as C


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_env_backend_needs_the_variable(monkeypatch):
    monkeypatch.delenv(C.BOOTSTRAP_ENV, raising=False)
    with pytest.raises(C.BackendUnavailable, match="KAFKA_BOOTSTRAP_SERVERS is not set"):
        with C.from_env():
            pass


def test_env_backend_names_an_unreachable_cluster(monkeypatch):
    address = f"127.0.0.1:{_closed_port()}"
    monkeypatch.setenv(C.BOOTSTRAP_ENV, address)
    with pytest.raises(C.BackendUnavailable, match=f"KAFKA_BOOTSTRAP_SERVERS={address} does not answer ApiVersions"):
        with C.from_env():
            pass


def test_apache_kafka_container_without_docker_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(C.BackendUnavailable, match="no Docker engine is reachable"):
        with C.apache_kafka_container():
            pass


def _path_with_only(monkeypatch, tmp_path, *tools: str) -> None:
    """PATH = a folder holding links to ``tools`` and nothing else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(bin_dir))


@pytest.mark.parametrize("nodes", [1, 3])
def test_apache_kafka_backends_without_maven_say_so(monkeypatch, tmp_path, nodes):
    if shutil.which("java") is None:
        pytest.skip("java is not on PATH")
    monkeypatch.setenv("PYSPARK_KAFKA_CACHE", str(tmp_path / "empty-cache"))  # nothing resolved yet
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    _path_with_only(monkeypatch, tmp_path, "java")
    with pytest.raises(C.BackendUnavailable, match=r"from Maven Central: mvn is not on PATH \(install") as e:
        with C.apache_kafka(nodes):
            pass
    assert ("no Docker engine is reachable" in str(e.value)) == (nodes == 1)  # the single node's fallback


def test_apache_kafka_backend_without_java_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    _path_with_only(monkeypatch, tmp_path)
    with pytest.raises(C.BackendUnavailable, match="java is not on PATH"):
        with C.apache_kafka(3):
            pass


@pytest.mark.slow
def test_apache_kafka_backend_names_a_version_maven_central_does_not_serve(monkeypatch, tmp_path):
    if shutil.which("mvn") is None or shutil.which("java") is None:
        pytest.skip("java or mvn is not on PATH")
    monkeypatch.setenv("PYSPARK_KAFKA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KAFKA_VERSION", "0.0.404")
    with pytest.raises(C.BackendUnavailable, match=r"Apache Kafka 0\.0\.404 from Maven Central: Maven could not "
                                                  r"resolve org\.apache\.kafka:kafka_2\.13:0\.0\.404"):
        with C.apache_kafka(3):
            pass


def test_env_backend_reads_what_the_cluster_serves(monkeypatch, embedded_cluster):
    monkeypatch.setenv(C.BOOTSTRAP_ENV, embedded_cluster.bootstrap)
    with C.from_env() as cluster:
        assert cluster.name == "env" and cluster.apis == embedded_cluster.apis
        assert cluster.apis[C.API_VERSIONS][0] == 0


def test_missing_apis_are_named_as_kafka_names_them():
    served = {C.PRODUCE: (3, 11), C.FETCH: (4, 16)}
    assert C.missing_apis(served, (C.PRODUCE, C.INIT_PRODUCER_ID, C.FIND_COORDINATOR)) == [
        "InitProducerId (22)", "FindCoordinator (10)"]
    assert C.missing_apis(served, (C.FETCH,)) == []
