"""Kafka clusters to test against: start one by backend name, ask what it serves, create topics.

Used by the pytest plugin (:mod:`pyspark_kafka.testing.pytest_plugin`, for users' suites) and by
this project's integration suite. Four backends (:data:`BACKENDS`); :func:`start` returns the
context manager of one, which yields a :class:`Cluster` or raises :class:`BackendUnavailable`
with the reason it cannot run here:

- ``embedded``: :class:`pyspark_kafka.broker.EmbeddedBroker` on 127.0.0.1, a free port and a
  temporary data directory (always available);
- ``apache-kafka``: Apache Kafka, one combined broker+controller node in KRaft mode, started
  from Maven Central's jars by :class:`pyspark_kafka.testing.apache_kafka.ApacheKafka`
  (``KAFKA_VERSION`` picks the version); where Java, Maven or Maven Central is missing and a
  Docker engine answers, the ``apache/kafka`` image through testcontainers instead;
- ``apache-kafka-cluster``: three combined nodes from Maven Central's jars (3-voter quorum,
  replication factor 3, ``min.insync.replicas=2``);
- ``env``: an existing cluster named by ``KAFKA_BOOTSTRAP_SERVERS`` (nothing is started).

Two more names are started only when a test asks for them: ``embedded-cluster`` (the replicated
embedded cluster) and ``apache-kafka-dedicated-controller`` (three broker-only Apache Kafka nodes
beside one controller-only node, ``ApacheKafka(nodes=3, controllers=1)``).

Example::

    with start("apache-kafka", tmp_dir) as cluster:
        topic = cluster.create_topic(partitions=3)
        run_my_job(cluster.bootstrap, topic)

:func:`api_versions` asks a broker which API keys and versions it serves (ApiVersions v0,
KIP-35); :meth:`Cluster.require` skips a test when the cluster lacks an API it needs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
import os
import socket
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterator

from pyspark_kafka.kafka.sockets import recv_exactly

APACHE_KAFKA_IMAGE = "apache/kafka:3.9.1"
"""Default image of the ``apache-kafka`` backend (KRaft, single node); ``KAFKA_IMAGE`` overrides."""
CONTAINER_START_TIMEOUT_S = 180
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
BACKENDS = ("embedded", "apache-kafka", "apache-kafka-cluster", "env")
"""The names :func:`start` knows."""
RETENTION_CHECK_MS = 500
"""``log.retention.check.interval.ms`` of the started backends, so retention tests finish quickly."""
EMBEDDED_CONFIG = {"log.retention.check.interval.ms": str(RETENTION_CHECK_MS),
                   "log.cleaner.backoff.ms": str(RETENTION_CHECK_MS),
                   "group.initial.rebalance.delay.ms": "0"}
"""The embedded backend's settings: retention checked and the log cleaner run every 0.5 s; no initial rebalance
delay, as on the Apache Kafka backends (``apache_kafka.TEST_DEFAULTS``, and Kafka's own test harness): with
Kafka's default of 3000 ms every first join of a new group waited 3 s on the embedded backend only."""


def api_name(key: int) -> str:
    """Kafka's name of an API key, e.g. ``InitProducerId`` for 22 (from kio's schema index)."""
    from kio.schema.index import api_key_map

    name = api_key_map.get(key)
    return "".join(w.capitalize() for w in name.split("_")) if name else f"api {key}"


class BackendUnavailable(Exception):
    """A backend cannot run here; the message is the reason (reported as the skip reason)."""


def send_request(bootstrap: str, request, response_type, timeout_s: float = 10.0):
    """Send one kio ``request`` to the first bootstrap address over a plain socket; return the
    decoded ``response_type`` entity (headers by :mod:`pyspark_kafka.kafka.wire_header`). Raises OSError when the
    broker cannot be reached or closes the connection."""
    from pyspark_kafka.kafka import wire_header

    host, port = bootstrap.split(",")[0].strip().rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(wire_header.encode_request(request, 1, "pyspark-kafka-testing"))
        size = struct.unpack(">i", recv_exactly(sock, 4, "during ApiVersions"))[0]
        frame = recv_exactly(sock, size, "during ApiVersions")
    return wire_header.decode_response(frame, request.__api_key__, response_type)[1]


def api_versions(bootstrap: str, timeout_s: float = 10.0) -> dict[int, tuple[int, int]]:
    """``{api_key: (min_version, max_version)}`` the broker at ``bootstrap`` advertises.

    Sends ApiVersions v0 (every Kafka broker answers it, KIP-35). Raises OSError when the
    broker cannot be reached and RuntimeError when it answers with an error code.
    """
    from kio.schema.api_versions.v0.request import ApiVersionsRequest
    from kio.schema.api_versions.v0.response import ApiVersionsResponse

    response = send_request(bootstrap, ApiVersionsRequest(), ApiVersionsResponse, timeout_s)
    if response.error_code != 0:
        raise RuntimeError(f"ApiVersions from {bootstrap} failed with error code {int(response.error_code)}")
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}




def missing_apis(served: dict[int, tuple[int, int]], needed: tuple[int, ...]) -> list[str]:
    """Names (``"InitProducerId (22)"``) of the ``needed`` API keys that ``served`` lacks."""
    return [f"{api_name(k)} ({k})" for k in needed if k not in served]


@dataclass
class Cluster:
    """A running Kafka-protocol cluster: ``name`` (backend), ``bootstrap`` ("host:port"),
    ``apis`` (from :func:`api_versions`). ``broker`` is the EmbeddedBroker for ``embedded``,
    ``kafka`` the :class:`~pyspark_kafka.testing.apache_kafka.ApacheKafka` of the Maven-started
    backends (kill/restart nodes), ``replication_factor`` what :meth:`create_topic` uses."""

    name: str
    bootstrap: str
    apis: dict[int, tuple[int, int]] = field(default_factory=dict)
    broker: object = None
    kafka: object = None
    replication_factor: int = 1

    def require(self, needed: tuple[int, ...], what: str) -> None:
        """``pytest.skip`` naming the missing APIs when this cluster does not serve ``needed``."""
        missing = missing_apis(self.apis, needed)
        if missing:
            import pytest

            pytest.skip(f"{self.name} does not serve {', '.join(missing)}, needed for {what}")

    def create_topic(self, partitions: int = 3, config: dict | None = None, prefix: str = "it") -> str:
        """Create a fresh topic (unique name) with confluent-kafka's AdminClient; return its name."""
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=self.replication_factor,
                      config=config or {})],
            operation_timeout=15, request_timeout=20)
        futures[name].result(timeout=30)
        _wait_for_leaders(self.bootstrap, name, partitions)
        return name


def _wait_for_leaders(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
    """Wait (bounded) until metadata shows a leader for every partition of a new topic (Apache
    Kafka elects them asynchronously after CreateTopics)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} has no leader for every partition after {timeout_s:g} s")
        time.sleep(0.1)


# --------------------------------------------------------------------------- backends


@contextlib.contextmanager
def embedded(tmp_dir=None) -> Iterator[Cluster]:
    """The embedded broker in a background thread on ``tmp_dir`` (None: a temporary directory,
    removed on exit); stopped on exit."""
    from pyspark_kafka.broker import EmbeddedBroker

    with EmbeddedBroker(data_dir=tmp_dir, config=EMBEDDED_CONFIG) as broker:
        yield Cluster("embedded", broker.bootstrap_servers, api_versions(broker.bootstrap_servers), broker)


def docker_unavailable_reason() -> str | None:
    """Why no Docker engine can be used here (testcontainers missing, no daemon), or None."""
    try:
        import docker  # installed with testcontainers
        import testcontainers.core.container  # noqa: F401
    except ImportError as e:
        return f"testcontainers is not installed ({e}); pip install 'testcontainers[kafka]'"
    try:
        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as e:  # docker raises DockerException, requests errors, FileNotFoundError
        return f"no Docker engine is reachable ({type(e).__name__}: {e})"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def apache_kafka(nodes: int = 1, controllers: int = 0) -> Iterator[Cluster]:
    """Apache Kafka from Maven Central's jars (:class:`~pyspark_kafka.testing.apache_kafka.ApacheKafka`),
    ``nodes`` combined KRaft nodes, named ``apache-kafka`` (1) or ``apache-kafka-cluster`` (3); with
    ``controllers=N``, ``nodes`` broker-only nodes beside N dedicated controllers, named
    ``apache-kafka-dedicated-controller`` (the fault tests ask for it by name, not one of :data:`BACKENDS`).

    When the jars cannot be had (:class:`~pyspark_kafka.testing.maven.MavenUnavailable`: no
    java, no mvn, Maven Central unreachable, version not served) a single node falls back to
    :func:`apache_kafka_container` where a Docker engine answers; otherwise BackendUnavailable
    carries both reasons. A node that does not start raises KafkaStartError (a failure, not a
    skip: its message has the command line and the log tail). Stopped on exit.
    """
    from pyspark_kafka.testing.apache_kafka import ApacheKafka
    from pyspark_kafka.testing.maven import MavenUnavailable

    name = ("apache-kafka-dedicated-controller" if controllers else
            "apache-kafka" if nodes == 1 else "apache-kafka-cluster")
    kafka = ApacheKafka(nodes=nodes, controllers=controllers,
                        config={"log.retention.check.interval.ms": str(RETENTION_CHECK_MS),
                                "log.cleaner.backoff.ms": str(RETENTION_CHECK_MS)})
    try:
        kafka.start()
    except MavenUnavailable as e:
        docker = docker_unavailable_reason()
        if nodes == 1 and not controllers and docker is None:
            with apache_kafka_container() as cluster:
                yield cluster
            return
        raise BackendUnavailable(f"Apache Kafka {kafka.version} from Maven Central: {e}"
                                 + (f"; and {docker}" if nodes == 1 and not controllers else "")) from e
    try:
        bootstrap = kafka.bootstrap_servers
        yield Cluster(name, bootstrap, api_versions(bootstrap), kafka=kafka, replication_factor=min(nodes, 3))
    finally:
        kafka.stop()


@contextlib.contextmanager
def apache_kafka_container() -> Iterator[Cluster]:
    """Apache Kafka, single node in KRaft mode (``apache/kafka``), in a testcontainers container.

    The client listener is published on the same free host port it listens on inside the
    container, so the advertised address ``127.0.0.1:PORT`` works from the host. Internal
    topics get replication factor 1 and the group rebalance delay is 0 (a single broker).
    Raises BackendUnavailable when Docker is not reachable; the container is removed on exit.
    """
    reason = docker_unavailable_reason()
    if reason is not None:
        raise BackendUnavailable(reason)
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    port = _free_port()
    env = {
        "CLUSTER_ID": "MkU3OEVBNTcwNTJENDM2Qk",  # any base64 UUID; the image's configure script requires one
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": f"PLAINTEXT://0.0.0.0:{port},CONTROLLER://0.0.0.0:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_NUM_PARTITIONS": "1",
        "KAFKA_LOG_RETENTION_CHECK_INTERVAL_MS": str(RETENTION_CHECK_MS),
        "KAFKA_LOG_CLEANER_BACKOFF_MS": str(RETENTION_CHECK_MS),
    }
    image = os.environ.get("KAFKA_IMAGE", APACHE_KAFKA_IMAGE)
    ready = LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(CONTAINER_START_TIMEOUT_S)
    container = DockerContainer(image, env=env).with_bind_ports(port, port).waiting_for(ready)
    try:
        try:
            container.start()  # pulls the image, starts it, waits for the log line
        except Exception as e:  # no image, no network, Kafka did not start in time
            raise BackendUnavailable(f"{image} did not start: {type(e).__name__}: {e}") from e
        bootstrap = f"127.0.0.1:{port}"
        yield Cluster("apache-kafka", bootstrap, api_versions(bootstrap))
    finally:
        container.stop()  # removes the container (no-op when it was never created)


@contextlib.contextmanager
def from_env() -> Iterator[Cluster]:
    """The existing cluster at ``$KAFKA_BOOTSTRAP_SERVERS``; BackendUnavailable when unset or unreachable."""
    bootstrap = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if not bootstrap:
        raise BackendUnavailable(f"{BOOTSTRAP_ENV} is not set (set it to run the suite against an existing cluster)")
    try:
        apis = api_versions(bootstrap)
    except (OSError, RuntimeError) as e:
        raise BackendUnavailable(f"{BOOTSTRAP_ENV}={bootstrap} does not answer ApiVersions: {e}") from e
    yield Cluster("env", bootstrap, apis)


@contextlib.contextmanager
def embedded_replicated(nodes: int = 3, tmp_dir=None) -> Iterator[Cluster]:
    """The replicated embedded cluster (:class:`~pyspark_kafka.broker.cluster.EmbeddedCluster`: a controller and
    ``nodes`` broker processes; docs/replication.md) with ``min.insync.replicas=2`` and replication factor 3,
    like :func:`apache_kafka` with 3 nodes; ``kafka`` is the EmbeddedCluster (kill/restart nodes). Not one of
    :data:`BACKENDS` (it serves no transactions yet): the failover tests ask for it by name."""
    from pyspark_kafka.broker.cluster import EmbeddedCluster

    config = {"min.insync.replicas": "2", "default.replication.factor": str(min(3, nodes)),
              "group.initial.rebalance.delay.ms": EMBEDDED_CONFIG["group.initial.rebalance.delay.ms"]}
    with EmbeddedCluster(nodes, data_dir=None if tmp_dir is None else Path(tmp_dir) / "cluster",
                         config=config) as cluster:
        yield Cluster("embedded-cluster", cluster.bootstrap_servers, api_versions(cluster.address(0)),
                      kafka=cluster, replication_factor=min(3, nodes))


def start(backend: str, tmp_dir=None) -> contextlib.AbstractContextManager[Cluster]:
    """The context manager of ``backend`` (one of :data:`BACKENDS`, or ``embedded-cluster`` /
    ``apache-kafka-dedicated-controller``): ``with start(...) as cluster``.

    ``tmp_dir`` is the data directory of ``embedded`` (None: a temporary one, removed on exit);
    the other backends ignore it. Entering raises :class:`BackendUnavailable` when the backend
    cannot run here; an unknown name raises ValueError at once.
    """
    if backend == "embedded":
        return embedded(tmp_dir)
    if backend == "apache-kafka":
        return apache_kafka(1)
    if backend == "apache-kafka-cluster":
        return apache_kafka(3)
    if backend == "env":
        return from_env()
    if backend == "embedded-cluster":
        return embedded_replicated(3, tmp_dir)
    if backend == "apache-kafka-dedicated-controller":
        return apache_kafka(3, controllers=1)
    raise ValueError(f"unknown Kafka backend {backend!r}, not one of {', '.join(BACKENDS)}")
