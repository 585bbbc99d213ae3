"""The backends of ``kafka_cluster``: each one that cannot run says why (the skip reason)."""

from __future__ import annotations

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


def test_apache_kafka_backend_without_docker_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(C.BackendUnavailable, match="no Docker engine is reachable"):
        with C.apache_kafka():
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
