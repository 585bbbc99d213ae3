"""Fixtures of the integration suite.

- ``kafka_cluster``: a :class:`~pyspark_kafka.testing.clusters.Cluster` started by the
  package's :func:`~pyspark_kafka.testing.clusters.start` (as the users' pytest plugin does; one
  implementation), parametrized over the backends ``embedded`` (always), ``apache-kafka`` and
  ``apache-kafka-cluster`` (Apache Kafka from Maven Central's jars, 1 and 3 nodes, when Java
  and Maven are there; one node falls back to testcontainers) and ``env``
  (``KAFKA_BOOTSTRAP_SERVERS``). A backend that cannot start skips its tests with the reason.
  The Apache Kafka backends carry the ``slow`` mark (not in the quick loop).
  Session-scoped: each backend starts at most once per pytest process (per xdist worker) and runs
  to the end of the session (``_backend_pool``).
- ``apache_kafka_cluster``: the three-node Apache Kafka backend alone (failover tests).
- ``embedded_cluster``: the embedded backend only (conformance matrix).
- ``spark``: the shared ``local[2]`` SparkSession (``getOrCreate``: the same one as ``tests/``).
- ``checkpoint_dir``: a fresh checkpoint path per test.
"""

from __future__ import annotations

import contextlib

import pytest

from integration_tests import clusters
from support.read_paths import READ_PATHS, use_read_path
from support.suite_schedule import longest_files_first


def _start(backend: str, stack: contextlib.ExitStack, tmp_path_factory) -> clusters.Cluster:
    return stack.enter_context(clusters.start(backend, tmp_path_factory.mktemp(backend)))


# Apache Kafka backends are JVM starts (6-12 s each) and a second and third run of every backend test: they run in
# the full suite (CI), not in the quick loop ``pytest -m "not slow"``, which runs every behaviour on the embedded
# broker (and on ``env`` when KAFKA_BOOTSTRAP_SERVERS is set)
_BACKEND_PARAMS = [pytest.param(b, id=b, marks=pytest.mark.slow) if b.startswith("apache-kafka") else b
                   for b in clusters.BACKENDS]


@pytest.fixture(scope="session")
def _backend_pool(tmp_path_factory):
    """Start each backend at most once per pytest process and keep it to the end of the session.

    Returns ``get(name) -> Cluster`` (raises :class:`clusters.BackendUnavailable`, remembered, when the
    backend cannot start here). A parametrized session fixture alone is torn down whenever the next test
    wants another backend; under pytest-xdist (``-n``, whole files per worker) a worker's files switch
    backends often, so the pool keeps what it started (the JVMs of Apache Kafka idle at a few % of a core).
    """
    started: dict[str, clusters.Cluster | clusters.BackendUnavailable] = {}
    with contextlib.ExitStack() as stack:
        def get(name: str) -> clusters.Cluster:
            if name not in started:
                try:
                    started[name] = _start(name, stack, tmp_path_factory)
                except clusters.BackendUnavailable as e:
                    started[name] = e
            found = started[name]
            if isinstance(found, clusters.BackendUnavailable):
                raise found
            return found

        yield get


@pytest.fixture(scope="session", params=_BACKEND_PARAMS)
def kafka_cluster(request, _backend_pool):
    try:
        return _backend_pool(request.param)
    except clusters.BackendUnavailable as e:
        pytest.skip(f"backend {request.param} unavailable: {e}")


@pytest.fixture(scope="module")
def apache_kafka_cluster(tmp_path_factory):
    """A three-node Apache Kafka per test module (failover tests kill and restart its nodes and
    leave every node running)."""
    with contextlib.ExitStack() as stack:
        try:
            cluster = _start("apache-kafka-cluster", stack, tmp_path_factory)
        except clusters.BackendUnavailable as e:
            pytest.skip(f"backend apache-kafka-cluster unavailable: {e}")
        yield cluster


@pytest.fixture(scope="session")
def embedded_cluster(tmp_path_factory):
    with clusters.start("embedded", tmp_path_factory.mktemp("conformance-broker")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark():
    from pyspark_kafka.spark import get_spark

    session = get_spark("pyspark-kafka-integration", conf={"spark.default.parallelism": "2"})
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _active_spark_session():
    """Before each test: the session's SparkSession is the JVM's active one on this thread
    (support/spark_active.py: a streaming write resolves ``pykafka`` through it)."""
    from support.spark_active import pin_active_session

    pin_active_session()


@pytest.fixture
def checkpoint_dir(tmp_path):
    return str(tmp_path / "checkpoint")


@pytest.fixture(params=READ_PATHS)
def read_path(request, monkeypatch) -> str:
    """Run the test once per executor read path (``columnar``, ``consumer``); see support/read_paths.py."""
    return use_read_path(monkeypatch, request.param)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """Longest test files first (support/suite_schedule.py), also when ``integration_tests`` runs alone."""
    longest_files_first(items)
