"""pytest fixtures for users' own Spark + Kafka jobs: a Kafka cluster, a topic factory, a SparkSession.

Enable in a ``conftest.py``::

    pytest_plugins = ["pyspark_kafka.testing.pytest_plugin"]

Fixtures (all session-scoped except ``kafka_topic``):

- ``kafka_bootstrap_servers`` (str): a running cluster, chosen by ``--kafka-backend`` or
  ``$PYSPARK_KAFKA_BACKEND`` (default ``embedded``):

  - ``embedded``: :class:`pyspark_kafka.broker.EmbeddedBroker` (127.0.0.1, free port, temp dir);
  - ``apache-kafka`` / ``apache-kafka-cluster``: Apache Kafka from Maven Central's jars, one or
    three nodes (:class:`pyspark_kafka.testing.apache_kafka.ApacheKafka`; ``KAFKA_VERSION``
    picks the version); skipped with the reason when Java, Maven or Maven Central is missing;
  - ``env``: the existing cluster at ``$KAFKA_BOOTSTRAP_SERVERS`` (skipped when unset).

- ``kafka_topic``: a factory ``kafka_topic(partitions=1, config=None) -> str`` creating a
  topic with a fresh name (``test-<random>``) and waiting until every partition has a leader;
  replication factor 3 on ``apache-kafka-cluster``, else 1.
- ``spark_session``: ``local[2]`` SparkSession whose Python workers run this interpreter (so
  they import ``pyspark_kafka``); stopped at the end of the session.

Not done: testcontainers and an embedded three-node cluster are not offered here (the
integration suite of this project has the container backend).
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

BACKEND_ENV = "PYSPARK_KAFKA_BACKEND"
BACKENDS = ("embedded", "apache-kafka", "apache-kafka-cluster", "env")
TOPIC_TIMEOUT_S = 30.0


def pytest_addoption(parser):
    parser.addoption("--kafka-backend", choices=BACKENDS, default=None,
                     help=f"Kafka cluster of the kafka_bootstrap_servers fixture (default ${BACKEND_ENV} or embedded)")


def _backend(config) -> str:
    backend = config.getoption("--kafka-backend") or os.environ.get(BACKEND_ENV) or "embedded"
    if backend not in BACKENDS:
        raise pytest.UsageError(f"{BACKEND_ENV}={backend!r} is not one of {', '.join(BACKENDS)}")
    return backend


@pytest.fixture(scope="session")
def kafka_cluster_nodes(request) -> int:
    """How many brokers the chosen backend runs (3 for ``apache-kafka-cluster``, else 1)."""
    return 3 if _backend(request.config) == "apache-kafka-cluster" else 1


@pytest.fixture(scope="session")
def kafka_bootstrap_servers(request, tmp_path_factory):
    backend = _backend(request.config)
    if backend == "embedded":
        from pyspark_kafka.broker import EmbeddedBroker

        with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("kafka")) as broker:
            yield broker.bootstrap_servers
    elif backend == "env":
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
        if not bootstrap:
            pytest.skip("KAFKA_BOOTSTRAP_SERVERS is not set (needed by --kafka-backend env)")
        yield bootstrap
    else:
        from pyspark_kafka.testing.apache_kafka import ApacheKafka
        from pyspark_kafka.testing.maven import MavenUnavailable

        kafka = ApacheKafka(nodes=3 if backend == "apache-kafka-cluster" else 1)
        try:
            kafka.start()
        except MavenUnavailable as e:
            pytest.skip(f"{backend}: Apache Kafka {kafka.version} from Maven Central unavailable: {e}")
        try:
            yield kafka.bootstrap_servers
        finally:
            kafka.stop()


@pytest.fixture
def kafka_topic(kafka_bootstrap_servers, kafka_cluster_nodes):
    """``kafka_topic(partitions=1, config=None) -> name``: create a fresh topic (not deleted after)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap_servers})

    def create(partitions: int = 1, config: dict | None = None) -> str:
        name = f"test-{uuid.uuid4().hex[:12]}"
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                                replication_factor=min(kafka_cluster_nodes, 3), config=config or {})],
                                      operation_timeout=15, request_timeout=20)
        futures[name].result(timeout=TOPIC_TIMEOUT_S)
        deadline = time.monotonic() + TOPIC_TIMEOUT_S
        while True:  # Apache Kafka elects leaders asynchronously after CreateTopics
            md = admin.list_topics(name, timeout=10).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions and all(
                    p.leader >= 0 for p in md.partitions.values()):
                return name
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name} has no leader for every partition after {TOPIC_TIMEOUT_S:g} s")
            time.sleep(0.1)

    return create


@pytest.fixture(scope="session")
def spark_session():
    from pyspark_kafka.spark import get_spark

    session = get_spark("pyspark-kafka-tests")
    yield session
    session.stop()
