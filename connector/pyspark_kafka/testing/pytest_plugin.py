"""pytest fixtures for users' own Spark + Kafka jobs: a Kafka cluster, a topic factory, a SparkSession.

Enable in a ``conftest.py``::

    pytest_plugins = ["pyspark_kafka.testing.pytest_plugin"]

Fixtures (all session-scoped except ``kafka_topic``):

- ``kafka_cluster`` (:class:`pyspark_kafka.testing.clusters.Cluster`): a running cluster,
  chosen by ``--kafka-backend`` or ``$PYSPARK_KAFKA_BACKEND`` (default ``embedded``) and
  started by :func:`pyspark_kafka.testing.clusters.start` (the same code this project's
  integration suite runs on):

  - ``embedded``: :class:`pyspark_kafka.broker.EmbeddedBroker` (127.0.0.1, free port, temp dir);
  - ``apache-kafka`` / ``apache-kafka-cluster``: Apache Kafka from Maven Central's jars, one or
    three nodes (:class:`pyspark_kafka.testing.apache_kafka.ApacheKafka`; ``KAFKA_VERSION``
    picks the version); without Java, Maven or Maven Central, one node runs the
    ``apache/kafka`` image through testcontainers where a Docker engine answers;
  - ``env``: the existing cluster at ``$KAFKA_BOOTSTRAP_SERVERS``.

  A backend that cannot run here skips the tests that use it, with the reason.
- ``kafka_bootstrap_servers`` (str): ``kafka_cluster.bootstrap``.
- ``kafka_cluster_nodes`` (int): brokers of the chosen backend (3 for ``apache-kafka-cluster``, else 1).
- ``kafka_topic``: a factory ``kafka_topic(partitions=1, config=None) -> str`` creating a
  topic with a fresh name (``test-<random>``) and waiting until every partition has a leader
  (:meth:`~pyspark_kafka.testing.clusters.Cluster.create_topic`); replication factor 3 on
  ``apache-kafka-cluster``, else 1.
- ``spark_session``: ``local[2]`` SparkSession whose Python workers run this interpreter (so
  they import ``pyspark_kafka``); stopped at the end of the session.

Not done: an embedded three-node cluster.
"""

from __future__ import annotations

import contextlib
import os

import pytest

from pyspark_kafka.testing import clusters

BACKEND_ENV = "PYSPARK_KAFKA_BACKEND"
BACKENDS = clusters.BACKENDS


def pytest_addoption(parser):
    parser.addoption("--kafka-backend", choices=BACKENDS, default=None,
                     help=f"Kafka cluster of the kafka_cluster fixture (default ${BACKEND_ENV} or embedded)")


def _backend(config) -> str:
    backend = config.getoption("--kafka-backend") or os.environ.get(BACKEND_ENV) or "embedded"
    if backend not in BACKENDS:
        raise pytest.UsageError(f"{BACKEND_ENV}={backend!r} is not one of {', '.join(BACKENDS)}")
    return backend


@pytest.fixture(scope="session")
def kafka_cluster(request, tmp_path_factory):
    """The chosen backend's :class:`~pyspark_kafka.testing.clusters.Cluster`, stopped at the end of the session."""
    backend = _backend(request.config)
    with contextlib.ExitStack() as stack:
        try:
            cluster = stack.enter_context(clusters.start(backend, tmp_path_factory.mktemp("kafka")))
        except clusters.BackendUnavailable as e:
            pytest.skip(f"{backend}: {e}")
        yield cluster


@pytest.fixture(scope="session")
def kafka_bootstrap_servers(kafka_cluster) -> str:
    return kafka_cluster.bootstrap


@pytest.fixture(scope="session")
def kafka_cluster_nodes(request) -> int:
    """How many brokers the chosen backend runs (3 for ``apache-kafka-cluster``, else 1)."""
    return 3 if _backend(request.config) == "apache-kafka-cluster" else 1


@pytest.fixture
def kafka_topic(kafka_cluster):
    """``kafka_topic(partitions=1, config=None) -> name``: create a fresh topic (not deleted after)."""

    def create(partitions: int = 1, config: dict | None = None) -> str:
        return kafka_cluster.create_topic(partitions, config, prefix="test")

    return create


@pytest.fixture(scope="session")
def spark_session():
    from pyspark_kafka.spark import get_spark

    session = get_spark("pyspark-kafka-tests")
    yield session
    session.stop()
