"""Apache Kafka itself, from Maven Central's jars, as a local test cluster (no Docker).

:class:`ApacheKafka` starts one or three Kafka JVMs the way Kafka's own scripts do
(``bin/kafka-storage.sh format`` then ``bin/kafka-server-start.sh``: a main class run with every
jar of ``libs/`` on the classpath), in KRaft mode, each node a combined broker and controller
(default) or, with ``controllers=N``, broker-only nodes beside N controller-only nodes:

- jars: :func:`pyspark_kafka.testing.maven.kafka_classpath` (``KAFKA_VERSION`` or 4.4.0;
  resolved once into ``~/.cache/pyspark-kafka/maven``);
- storage: ``kafka.tools.StorageTool format -t <cluster id> -c server.properties`` (the class
  ``kafka-storage.sh`` runs, in ``kafka_2.13`` for 3.9.x and 4.x);
- server: ``kafka.Kafka server.properties``;
- a static controller quorum (``controller.quorum.voters``, every node a voter), listeners
  ``PLAINTEXT`` and ``CONTROLLER`` on 127.0.0.1 free ports, data and logs in a temporary folder
  (removed on :meth:`ApacheKafka.stop`), each node's log in ``<dir>/node-N/server.log``.

Dedicated controllers: ``ApacheKafka(nodes=3, controllers=1)`` runs ``process.roles=controller``
node(s) 3000, 3001... (``listeners=CONTROLLER://...`` only; ``<dir>/controller-3000/server.log``) as
the static quorum (``controller.quorum.voters``) and ``nodes`` ``process.roles=broker`` nodes 1..N
(``listeners=PLAINTEXT://...`` only; ``controller.listener.names=CONTROLLER`` names the listener
they reach the quorum on, as Kafka's ``config/broker.properties`` and ``config/controller.properties``
do). Killing brokers then leaves the quorum alone, as on a production cluster; ``kill``,
``restart``, ``pids``, ``node_ids`` and ``bootstrap_servers`` are about the brokers
(``controller_ids`` and ``controller_pids`` about the controllers; ``kill``/``restart`` take either id).

``with ApacheKafka(nodes=3) as kafka: kafka.bootstrap_servers`` gives a three-node cluster with
a three-voter quorum, ``default.replication.factor=3``, ``min.insync.replicas=2`` and internal
topics (``__consumer_offsets``, ``__transaction_state``) replicated three times.

Secured mode: ``ApacheKafka(sasl_ssl=SaslSsl(...))`` adds a ``SASL_SSL`` client listener (SCRAM
users created at format time with ``kafka-storage format --add-scram``, a PKCS12 or PEM key store,
optionally Kafka's ``StandardAuthorizer`` with ``super.users``); the PLAINTEXT listener stays on
127.0.0.1 as the admin, inter-broker and controller channel (principal ``User:ANONYMOUS``, a super
user when the authorizer is on). See :class:`SaslSsl`.

What it does not do: SSL-only or SASL_PLAINTEXT client listeners by itself (``config=`` or a
subclass overriding :meth:`ApacheKafka.properties` can add them), mutual TLS, ``sasl_ssl`` together
with ``controllers``, dynamic (KIP-853) quorums, ZooKeeper.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_kafka.testing import maven

SERVER_MAIN = "kafka.Kafka"
"""Main class of ``kafka-server-start.sh`` (core jar ``kafka_2.13``, 3.x and 4.x)."""
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"
"""Main class of ``kafka-storage.sh`` (``kafka_2.13`` 3.9.x and 4.x)."""
JVM_OPTIONS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
               "-Xshare:auto", "-Djava.awt.headless=true")
"""JVM flags: a modest heap, and the client compiler only and serial GC, which start fast on two
cores (Kafka's scripts default to ``-Xmx1G`` and G1; throughput is not what tests need)."""
START_TIMEOUT_S = 120.0
"""Bound for a node to answer metadata with every node registered (seconds)."""
STOP_TIMEOUT_S = 15.0
"""SIGTERM grace (seconds) before :meth:`ApacheKafka.stop` sends SIGKILL."""
FORMAT_TIMEOUT_S = 120.0
LOG_TAIL_LINES = 40
CONTROLLER_ID_BASE = 3000
"""``node.id`` of the first dedicated controller (``controllers=``): 3000, 3001... apart from broker ids 1..N."""

TEST_DEFAULTS = {
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "log.initial.task.delay.ms": "0",
}
"""Broker settings that differ from Kafka's defaults, for fast tests: no group join delay, 5
partitions instead of 50 for the internal topics, a dead node fenced after 3 s instead of 9 s
(``broker.session.timeout.ms``), fewer threads, the first retention check at once instead of
30 s after start (``log.initial.task.delay.ms``). ``config=`` overrides any of them."""

_LOG4J2 = """status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
"""
_LOG4J1 = """log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
"""The SASL/SCRAM mechanisms Kafka's broker serves (RFC 7677 / KIP-84)."""
AUTHORIZER_CLASS = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
"""Kafka's ACL authorizer for KRaft clusters (KIP-801)."""


@dataclass(frozen=True)
class SaslSsl:
    """A ``SASL_SSL`` client listener for :class:`ApacheKafka` (SCRAM, TLS, optional ACLs).

    - ``keystore_location``: the broker's key store (its certificate chain and private key), a
      PKCS12 file (``keystore_type="PKCS12"``, ``keystore_password`` required) or a PEM file with
      the chain and an unencrypted PKCS8 key (``keystore_type="PEM"``); set as the listener's
      ``listener.name.sasl_ssl.ssl.keystore.*``.
    - ``users``: ``{user name: password}``; each user gets a SCRAM credential for every mechanism of
      ``mechanisms`` at format time (``kafka-storage format --add-scram
      'SCRAM-SHA-512=[name=U,password=P,iterations=N]'``: the credentials exist before the first
      start, no admin call needed). Names and passwords may not contain ``,``, ``[``, ``]``, ``=``
      or ``"`` (the storage tool's syntax); ``ValueError`` otherwise.
    - ``mechanisms``: ``sasl.enabled.mechanisms`` (a subset of :data:`SCRAM_MECHANISMS`; each gets
      the JAAS entry Kafka requires, ``ScramLoginModule required;``).
    - ``iterations``: SCRAM iterations (4096 is Kafka's minimum).
    - ``authorizer``: ``authorizer.class.name=`` :data:`AUTHORIZER_CLASS` with
      ``allow.everyone.if.no.acl.found=false``: a principal may do only what an ACL (or
      ``super_users``) allows; ACLs are created through the PLAINTEXT listener (admin API or
      ``kafka-acls``).
    - ``super_users``: ``super.users``; ``User:ANONYMOUS`` (the PLAINTEXT listener's principal,
      used by the broker and controller themselves) must stay in it when ``authorizer`` is on.
    """

    keystore_location: str
    keystore_password: str | None = None
    keystore_type: str = "PKCS12"
    users: dict[str, str] = field(default_factory=dict)
    mechanisms: tuple[str, ...] = SCRAM_MECHANISMS
    iterations: int = 4096
    authorizer: bool = False
    super_users: tuple[str, ...] = ("User:ANONYMOUS",)

    def check(self) -> None:
        """Raise ValueError naming the Kafka config (or argument) that is wrong, before any JVM starts."""
        if not Path(self.keystore_location).is_file():
            raise ValueError(f"listener SASL_SSL: ssl.keystore.location {self.keystore_location!r} is not a file; "
                             "pass the broker's PKCS12 or PEM key store")
        if self.keystore_type.upper() not in ("PKCS12", "PEM", "JKS"):
            raise ValueError(f"listener SASL_SSL: ssl.keystore.type {self.keystore_type!r} is not one of "
                             "PKCS12, PEM, JKS")
        if self.keystore_type.upper() != "PEM" and not self.keystore_password:
            raise ValueError(f"listener SASL_SSL: ssl.keystore.password is required for a "
                             f"{self.keystore_type.upper()} key store")
        unknown = [m for m in self.mechanisms if m not in SCRAM_MECHANISMS]
        if unknown or not self.mechanisms:
            raise ValueError(f"listener SASL_SSL: sasl.enabled.mechanisms {list(self.mechanisms)} must be a non-empty "
                             f"subset of {list(SCRAM_MECHANISMS)} (this backend creates SCRAM users only)")
        if self.iterations < 4096:
            raise ValueError(f"SCRAM iterations {self.iterations} is below Kafka's minimum 4096")
        for name, password in self.users.items():
            if not name or not password or any(c in name + password for c in ',[]="'):
                raise ValueError(f"SCRAM user {name!r}: name and password must be non-empty without , [ ] = or \" "
                                 "(kafka-storage format --add-scram syntax); password not shown")
        if self.authorizer and "User:ANONYMOUS" not in self.super_users:
            raise ValueError("super.users must keep User:ANONYMOUS with the authorizer on: the broker and the "
                             "controller talk over the PLAINTEXT listener as ANONYMOUS")

    def properties(self, port: int) -> dict[str, str]:
        """The broker settings this listener adds (listener list entries excluded)."""
        prefix = "listener.name.sasl_ssl."
        props = {f"{prefix}ssl.keystore.location": str(self.keystore_location),
                 f"{prefix}ssl.keystore.type": self.keystore_type.upper(),
                 "sasl.enabled.mechanisms": ",".join(self.mechanisms)}
        if self.keystore_password:
            props[f"{prefix}ssl.keystore.password"] = self.keystore_password
        for mechanism in self.mechanisms:
            props[f"{prefix}{mechanism.lower()}.sasl.jaas.config"] = \
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        if self.authorizer:
            props["authorizer.class.name"] = AUTHORIZER_CLASS
            props["allow.everyone.if.no.acl.found"] = "false"
            props["super.users"] = ";".join(self.super_users)
        return props

    def format_arguments(self) -> list[str]:
        """``--add-scram`` arguments of ``kafka-storage format`` for every user and mechanism."""
        args = []
        for name, password in self.users.items():
            for mechanism in self.mechanisms:
                args += ["--add-scram", f"{mechanism}=[name={name},password={password},iterations={self.iterations}]"]
        return args


class KafkaStartError(RuntimeError):
    """A Kafka node did not start (or the storage could not be formatted); the message carries
    the command line and the tail of the node's log."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def random_cluster_id() -> str:
    """A cluster id as Kafka's ``Uuid.randomUuid().toString()`` writes it: 16 random bytes, URL-safe
    base64 without padding (22 characters), drawn again when it starts with ``-`` as Kafka does
    (such an id reads as an option on the storage tool's command line: 1 start in 32 failed)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: have the kernel SIGKILL the JVM when the thread that started it ends, so a killed
    test run leaves no Kafka behind (prctl PR_SET_PDEATHSIG). The signal follows the creating
    *thread*, not the process: :class:`ApacheKafka` starts every JVM from one launcher thread that
    lives until :meth:`ApacheKafka.stop` (a node restarted from a short-lived thread was killed
    when that thread returned)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:
        pass


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    folder: Path
    process: subprocess.Popen | None = None
    sasl_ssl_port: int | None = None
    roles: str = "broker,controller"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.folder / "server.log"


class ApacheKafka:
    """Apache Kafka (``nodes`` combined broker+controller JVMs, KRaft) for the life of a ``with`` block.

    ``ApacheKafka(nodes=1, version=None, config=None, java_options=None, start_timeout_s=120)``:
    ``nodes`` 1 or more (3 gives a three-voter quorum, ``default.replication.factor=3``,
    ``min.insync.replicas=2``); ``version`` an Apache Kafka version on Maven Central (default
    ``$KAFKA_VERSION`` or :data:`~pyspark_kafka.testing.maven.DEFAULT_KAFKA_VERSION`);
    ``config`` broker settings by Kafka's names, applied to every node over :data:`TEST_DEFAULTS`;
    ``sasl_ssl`` a :class:`SaslSsl` listener added to every node (``sasl_ssl_bootstrap_servers``);
    ``controllers`` 0 (combined nodes) or the number of dedicated controller nodes (then the
    ``nodes`` are broker-only; ``sasl_ssl`` cannot be combined with it).

    Attributes once started: ``bootstrap_servers`` (``"127.0.0.1:P1,127.0.0.1:P2,..."``),
    ``node_ids`` (``[1, 2, 3]``), ``pids`` (``{node_id: pid or None when not running}``),
    ``command`` (the server's command line, for messages), ``folder`` (the temporary folder).

    Raises :class:`~pyspark_kafka.testing.maven.MavenUnavailable` when java, mvn or Maven
    Central is missing (turn it into a skip), :class:`KafkaStartError` (command line and log
    tail, and first the log's configuration error when there is one, e.g. a wrong key store
    password names ``listener.name.sasl_ssl.ssl.keystore.password``) when a node does not start
    within ``start_timeout_s`` seconds; ValueError for a bad :class:`SaslSsl`. Nodes are stopped on
    exit (SIGTERM, SIGKILL after :data:`STOP_TIMEOUT_S`), also when the block raises.
    """

    def __init__(self, nodes: int = 1, version: str | None = None, config: dict[str, str] | None = None,
                 java_options: tuple[str, ...] | None = None, start_timeout_s: float = START_TIMEOUT_S,
                 sasl_ssl: SaslSsl | None = None, controllers: int = 0):
        if nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {nodes}")
        if controllers < 0:
            raise ValueError(f"controllers must be 0 (combined broker+controller nodes) or more, got {controllers}")
        if controllers and sasl_ssl is not None:
            raise ValueError("sasl_ssl with dedicated controllers is not supported: use controllers=0 "
                             "(combined nodes) for a SASL_SSL listener")
        self.controllers = controllers
        if sasl_ssl is not None:
            sasl_ssl.check()
        self.sasl_ssl = sasl_ssl
        self.nodes = nodes
        self.version = version or maven.kafka_version()
        self.config = dict(config or {})
        self.java_options = tuple(JVM_OPTIONS if java_options is None else java_options)
        self.start_timeout_s = start_timeout_s
        self.folder: Path | None = None
        self.cluster_id = random_cluster_id()
        self._nodes: dict[int, _Node] = {}  # brokers (or combined nodes)
        self._controllers: dict[int, _Node] = {}  # dedicated controllers
        self._classpath: str | None = None
        self._launcher: ThreadPoolExecutor | None = None  # the one thread every JVM is started from

    # ------------------------------------------------------------------ public API

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client listener, comma-separated."""
        return ",".join(n.address for n in self._nodes.values())

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """Every node's SASL_SSL listener, comma-separated (ValueError without ``sasl_ssl``)."""
        if self.sasl_ssl is None:
            raise ValueError("this ApacheKafka has no SASL_SSL listener: pass sasl_ssl=SaslSsl(...)")
        return ",".join(f"127.0.0.1:{n.sasl_ssl_port}" for n in self._nodes.values())

    @property
    def node_ids(self) -> list[int]:
        return list(self._nodes)

    @property
    def pids(self) -> dict[int, int | None]:
        """``{node_id: pid}`` of the running JVMs (None for a node that is not running)."""
        return _pids(self._nodes)

    @property
    def controller_ids(self) -> list[int]:
        """Ids of the dedicated controllers (``[]`` with combined nodes)."""
        return list(self._controllers)

    @property
    def controller_pids(self) -> dict[int, int | None]:
        """``{controller id: pid}`` of the dedicated controllers (None for one not running)."""
        return _pids(self._controllers)

    def _node(self, node_id: int) -> _Node:
        return self._nodes[node_id] if node_id in self._nodes else self._controllers[node_id]

    def address(self, node_id: int) -> str:
        """``127.0.0.1:PORT`` of one node's client listener."""
        return self._nodes[node_id].address

    def log_path(self, node_id: int) -> Path:
        """One node's log file (stdout and stderr of its JVM, log4j at INFO); brokers and dedicated controllers."""
        return self._node(node_id).log_path

    @property
    def command(self) -> list[str]:
        """The command line that starts node 1 (others differ only in their properties file)."""
        return self._server_command(next(iter(self._nodes.values())))

    def start(self) -> "ApacheKafka":
        """Resolve the jars, format every node's storage, start every node, wait until all are
        registered. Raises MavenUnavailable or KafkaStartError (after stopping what started)."""
        if self.folder is not None:
            raise RuntimeError("ApacheKafka is already started")
        self._classpath = maven.kafka_classpath(self.version)
        self.folder = Path(tempfile.mkdtemp(prefix="pyspark-kafka-apache-"))
        try:
            ports = [(_free_port(), _free_port()) for _ in range(self.nodes)]
            for i in range(self.controllers):
                port, node_id = _free_port(), CONTROLLER_ID_BASE + i
                self._controllers[node_id] = _Node(node_id, port, port, self.folder / f"controller-{node_id}",
                                                   roles="controller")
            for i, (port, cport) in enumerate(ports):
                self._nodes[i + 1] = _Node(i + 1, port, cport, self.folder / f"node-{i + 1}",
                                           sasl_ssl_port=_free_port() if self.sasl_ssl is not None else None,
                                           roles="broker" if self.controllers else "broker,controller")
            voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}"
                              for n in (self._controllers or self._nodes).values())
            for node in self._all():
                node.folder.mkdir()
                self._write_properties(node, voters)
            self._format_all()
            for node in self._all():  # controllers first: brokers register with them
                self._launch(node)
            self._wait_ready(list(self._nodes))
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, node_id: int, sig: int = signal.SIGKILL, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Send ``sig`` (default SIGKILL: a crash, no controlled shutdown) to one node and wait
        (at most ``timeout_s`` s) for it to exit. Raises KeyError for an unknown node,
        TimeoutError if it does not exit."""
        node = self._node(node_id)
        if node.process is None or node.process.poll() is not None:
            return
        node.process.send_signal(sig)
        try:
            node.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"Kafka node {node_id} (pid {node.process.pid}) did not exit within "
                               f"{timeout_s:g} s of signal {sig}") from None

    def restart(self, node_id: int) -> None:
        """Start a stopped (or killed) node again on the same ports and data, and wait until the
        cluster lists it as a live broker (a controller: until every broker is listed again).
        Raises KafkaStartError."""
        node = self._node(node_id)
        if node.process is not None and node.process.poll() is None:
            raise RuntimeError(f"Kafka node {node_id} is running (pid {node.process.pid}); kill it first")
        self._launch(node)
        self._wait_ready([node_id] if node_id in self._nodes else list(self._nodes))

    def stop(self) -> None:
        """Stop every node (SIGTERM to all, SIGKILL to those still running after
        :data:`STOP_TIMEOUT_S`; brokers before dedicated controllers, whose quorum a broker's
        controlled shutdown needs) and remove the temporary folder."""
        for group in (self._nodes, self._controllers):
            running = [n.process for n in group.values() if n.process is not None and n.process.poll() is None]
            for p in running:
                p.terminate()
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for p in running:
                try:
                    p.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(STOP_TIMEOUT_S)
        for n in self._all():
            if n.process is not None and n.process.stdout is not None:
                n.process.stdout.close()
        if self._launcher is not None:
            self._launcher.shutdown()
            self._launcher = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None

    def __enter__(self) -> "ApacheKafka":
        return self.start() if self.folder is None else self  # ``with kafka.start():`` works too

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals

    def _all(self) -> list[_Node]:
        """Every node, dedicated controllers first."""
        return [*self._controllers.values(), *self._nodes.values()]

    def properties(self, node_id: int, voters: str) -> dict[str, str]:
        """The ``server.properties`` of one node: its KRaft roles, listeners, replication
        settings for the cluster size, :data:`TEST_DEFAULTS`, then ``config``. A dedicated
        controller gets only the ``CONTROLLER`` listener; a broker-only node only ``PLAINTEXT``
        (``controller.listener.names`` then names the listener it dials the quorum on)."""
        node = self._node(node_id)
        rf, min_isr = str(min(3, self.nodes)), "2" if self.nodes >= 3 else "1"
        props = {"process.roles": node.roles, "node.id": str(node_id), "controller.quorum.voters": voters,
                 "controller.listener.names": "CONTROLLER", "log.dirs": str(node.folder / "data"),
                 # on the controller too: it creates topics (Kafka 4.x warns when only brokers have them)
                 "default.replication.factor": rf, "min.insync.replicas": min_isr,
                 "offsets.topic.replication.factor": rf, "transaction.state.log.replication.factor": rf,
                 "transaction.state.log.min.isr": min_isr, "share.coordinator.state.topic.replication.factor": rf,
                 "share.coordinator.state.topic.min.isr": min_isr}
        if node.roles == "controller":
            return {**props, "listeners": f"CONTROLLER://127.0.0.1:{node.port}",
                    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT", **TEST_DEFAULTS, **self.config}
        props["listeners"] = f"PLAINTEXT://127.0.0.1:{node.port}"
        if node.roles != "broker":
            props["listeners"] += f",CONTROLLER://127.0.0.1:{node.controller_port}"
        props.update({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
                      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                      "inter.broker.listener.name": "PLAINTEXT"})
        if self.sasl_ssl is not None:
            listener = f"SASL_SSL://127.0.0.1:{node.sasl_ssl_port}"
            props["listeners"] += "," + listener
            props["advertised.listeners"] += "," + listener
            props["listener.security.protocol.map"] += ",SASL_SSL:SASL_SSL"
            props.update(self.sasl_ssl.properties(node.sasl_ssl_port))
        props.update(TEST_DEFAULTS)
        props.update(self.config)
        return props

    def _write_properties(self, node: _Node, voters: str) -> None:
        text = "".join(f"{k}={v}\n" for k, v in self.properties(node.node_id, voters).items())
        (node.folder / "server.properties").write_text(text)
        (node.folder / "log4j2.properties").write_text(_LOG4J2)
        (node.folder / "log4j.properties").write_text(_LOG4J1)

    def _java(self, node: _Node, main: str, *args: str) -> list[str]:
        java = shutil.which("java") or "java"
        return [java, *self.java_options,
                f"-Dlog4j2.configurationFile={node.folder / 'log4j2.properties'}",
                f"-Dlog4j.configuration=file:{node.folder / 'log4j.properties'}",
                f"-Dkafka.logs.dir={node.folder}",
                "-cp", self._classpath, main, *args]

    def _server_command(self, node: _Node) -> list[str]:
        return self._java(node, SERVER_MAIN, str(node.folder / "server.properties"))

    def _format_all(self) -> None:
        """Format every node's log dir at once (one JVM each, in parallel)."""
        procs = []
        for node in self._all():
            cmd = self._java(node, STORAGE_TOOL_MAIN, "format", "-t", self.cluster_id,
                             "-c", str(node.folder / "server.properties"),
                             *(self.sasl_ssl.format_arguments() if self.sasl_ssl is not None else ()))
            out = open(node.folder / "format.log", "wb")
            procs.append((node, cmd, subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                                      stdin=subprocess.DEVNULL), out))
        for node, cmd, proc, out in procs:
            try:
                rc = proc.wait(FORMAT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc = None
            out.close()
            if rc != 0:
                raise KafkaStartError(
                    f"Kafka {self.version}: formatting node {node.node_id}'s storage "
                    f"{'timed out' if rc is None else f'exited with {rc}'}\ncommand: {_quote(_redacted(cmd))}\n"
                    f"{_tail(node.folder / 'format.log')}")

    def _launch(self, node: _Node) -> None:
        """Start ``node``'s JVM from the launcher thread (see :func:`_die_with_parent`)."""
        if self._launcher is None:
            self._launcher = ThreadPoolExecutor(1, thread_name_prefix="apache-kafka-launcher")
        self._launcher.submit(self._popen, node).result()

    def _popen(self, node: _Node) -> None:
        log = open(node.log_path, "ab")
        try:
            node.process = subprocess.Popen(
                self._server_command(node), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=node.folder, preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        finally:
            log.close()

    def _wait_ready(self, node_ids: list[int]) -> None:
        """Poll (bounded by ``start_timeout_s``) until each of ``node_ids`` accepts connections and
        answers a Metadata request listing every node as a live broker (KRaft lists a broker
        only once it is registered and unfenced)."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.start_timeout_s
        pending = list(node_ids)
        while pending:
            node = self._nodes[pending[0]]
            for n in (node, *self._controllers.values()):
                if n.process is not None and n.process.poll() is not None:
                    raise self._start_error(n, f"exited with {n.process.returncode} while starting")
            if time.monotonic() > deadline:
                raise self._start_error(node, f"was not ready within {self.start_timeout_s:g} s")
            if _accepts(node.port):
                admin = AdminClient({"bootstrap.servers": node.address, "log_level": 0,
                                     "logger": _SILENT})
                try:
                    brokers = admin.list_topics(timeout=2).brokers
                except Exception:
                    brokers = {}
                if len(brokers) == self.nodes:
                    pending.pop(0)
                    continue
            time.sleep(0.2)

    def _start_error(self, node: _Node, what: str) -> KafkaStartError:
        cause = _config_error(node.log_path)
        if cause and self.sasl_ssl is not None and "keystore" in cause.lower():
            cause += (" -- check the SaslSsl key store: listener.name.sasl_ssl.ssl.keystore.location, "
                      "listener.name.sasl_ssl.ssl.keystore.password, listener.name.sasl_ssl.ssl.keystore.type")
        return KafkaStartError(f"Apache Kafka {self.version} node {node.node_id} {what}\n"
                               + (f"cause: {cause}\n" if cause else "") +
                               f"command: {_quote(self._server_command(node))}\n"
                               f"log ({node.log_path}), last {LOG_TAIL_LINES} lines:\n{_tail(node.log_path)}")


def _pids(nodes: dict[int, _Node]) -> dict[int, int | None]:
    return {i: (n.process.pid if n.process is not None and n.process.poll() is None else None)
            for i, n in nodes.items()}


class _Silent:
    """A logging.Logger stand-in for confluent-kafka: drops librdkafka's connection-refused noise
    while a node starts."""

    def log(self, *args, **kwargs) -> None:
        pass


_SILENT = _Silent()


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(text.splitlines()[-lines:])


_CONFIG_ERROR_MARKERS = ("ConfigException", "Invalid value", "Failed to load SSL keystore", "KafkaException:",
                         "IllegalArgumentException", "Missing required configuration")


def _config_error(path: Path) -> str | None:
    """What a node's log says is wrong with its configuration, or None: the first line with a
    configuration error (Kafka's ``ConfigException: Invalid value ... for configuration <name>``, a
    key store that cannot be loaded...) and the root ``Caused by:`` line after it (e.g.
    ``keystore password was incorrect``)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for i, line in enumerate(lines):
        if any(m in line for m in _CONFIG_ERROR_MARKERS):
            causes = [ln.strip() for ln in lines[i + 1:i + 200] if ln.strip().startswith("Caused by:")]
            return line.strip()[:600] + (f" ({causes[-1][:300]})" if causes else "")
    return None


def _redacted(cmd: list[str]) -> list[str]:
    """``cmd`` with SCRAM passwords of ``--add-scram`` arguments replaced by ``***``."""
    import re

    return [re.sub(r"password=[^,\]]*", "password=***", c) for c in cmd]


def _quote(cmd: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(c) for c in cmd)


if __name__ == "__main__":  # python -m pyspark_kafka.testing.apache_kafka [nodes [controllers]]: start, print, wait
    _args = [int(a) for a in sys.argv[1:3]]
    with ApacheKafka(nodes=_args[0] if _args else 1, controllers=_args[1] if len(_args) > 1 else 0) as _kafka:
        print(_kafka.bootstrap_servers, _kafka.pids, _kafka.controller_pids, flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
