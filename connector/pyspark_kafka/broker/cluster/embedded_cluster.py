"""EmbeddedCluster: a replicated cluster of node processes on 127.0.0.1, for tests and the ``cluster`` command.

Layout (KRaft's split roles): dedicated controller processes (``process.roles=controller``, node ids 3000,
3001, ... like Kafka's examples) and N broker processes, node ids 0..N-1, each with its own data directory
``<data dir>/node-<id>`` and log file ``node-<id>/node.log``. One controller is the single voter of the metadata
log (``SingleVoterMetadataLog``); with ``controllers=3`` the three are the voters of a
:class:`~pyspark_kafka.broker.raft.RaftMetadataLog` (each voter's Raft listener on its own port), the active
controller is the Raft leader, and any node (a controller too) may be killed, restarted or paused. ``<data dir>/cluster.json`` lists every node:
id, role, port, pid, data dir and the exact command that restarts it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from pyspark_kafka.kafka.sockets import recv_exactly

CONTROLLER_ID = 3000  # the first controller's node id (Kafka's examples); the others follow: 3001, 3002
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on ``host`` a moment ago (bind to 0, read, close)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_port_block(n: int, host: str = "127.0.0.1", low: int = 20000, high: int = 32000) -> int:
    """The first of ``n`` consecutive ports that were free on ``host`` a moment ago (``--port P`` uses P..P+n-1).

    Drawn at random below Linux's ephemeral range (``ip_local_port_range`` starts at 32768), so an outgoing
    connection of another process cannot take P+1 between this check and the bind, as it could with P from
    :func:`free_port` (seen in CI: a cluster node exiting with "address already in use"). Raises OSError when
    no block was found in 200 tries.
    """
    import random

    for _ in range(200):
        base = random.randrange(low, high - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind((host, p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise OSError(f"no {n} consecutive free ports in {low}..{high} on {host}")


def _node_port(host: str, taken: set[int]) -> int:
    """A listening port for one node: free a moment ago, below Linux's ephemeral range (so no other process's
    outgoing connection takes it before the node binds it: a CI run saw a node exit with "address already in
    use" on a port from :func:`free_port`), and not in ``taken`` (added to it)."""
    for _ in range(200):
        candidate = free_port_block(1, host)
        if candidate not in taken:
            taken.add(candidate)
            return candidate
    raise OSError(f"no free port for a node on {host}")


def _check_listeners(listeners: dict[str, str], config: dict[str, str]) -> dict[str, str]:
    """``listeners`` of :class:`EmbeddedCluster` checked: upper-case names other than PLAINTEXT, each with a
    security protocol Kafka knows; ``config`` must leave ``listeners`` and its protocol map to the cluster.
    Returns ``{NAME: PROTOCOL}``; raises ValueError naming the bad entry and the fix."""
    from pyspark_kafka.broker.security.listeners import PROTOCOLS

    if listeners and ("listeners" in config or "listener.security.protocol.map" in config):
        raise ValueError("config sets listeners or listener.security.protocol.map, and so does listeners=: give the "
                         "extra client listeners only as listeners={name: protocol}")
    out = {}
    for name, protocol in listeners.items():
        name, protocol = str(name).upper(), str(protocol).upper()
        if not name.replace("_", "").isalnum() or not name.isascii() or name == "PLAINTEXT":
            raise ValueError(f"listeners: {name!r} is not a listener name to add: use upper-case letters, digits and "
                             "_ (every broker already has PLAINTEXT)")
        if protocol not in PROTOCOLS:
            raise ValueError(f"listeners: {name} has security protocol {protocol!r}: use one of {', '.join(PROTOCOLS)}")
        out[name] = protocol
    return out


def metadata(bootstrap: str, topics: list[str] | None = None, timeout_s: float = 5.0):
    """Metadata v12 from the broker at ``bootstrap`` (``host:port``): kio's ``MetadataResponse``.

    ``topics`` None = every topic (never auto-creates). Raises OSError when the broker does not answer.
    """
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse
    from pyspark_kafka.kafka import wire_header

    request = MetadataRequest(topics=None if topics is None else tuple(MetadataRequestTopic(topic_id=None, name=t)
                                                                          for t in topics),
                              allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(wire_header.encode_request(request, 1, "embedded-cluster"))
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
        frame = recv_exactly(sock, size)
    return wire_header.decode_response(frame, request.__api_key__, MetadataResponse)[1]




_CLUSTER_JSON_LOCK = threading.Lock()


class EmbeddedCluster:
    """``EmbeddedCluster(brokers=3, data_dir=None, port=None, config=None)`` as a context manager.

    ``brokers``: N broker processes (node ids 0..N-1) on ports ``port``..``port+N-1`` (free ports when None);
    ``data_dir`` None → a temporary directory removed on :meth:`stop`; ``config``: Kafka broker configs for every
    node (``{"min.insync.replicas": "2", "default.replication.factor": "3"}``).

    ``controllers``: 1 (node 3000, a single-voter metadata log) or 3 (nodes 3000-3002, a Raft quorum).

    ``listeners``: more client listeners on every broker besides the PLAINTEXT one of ``port``, as
    ``{name: security protocol}`` (``{"SASL_PLAINTEXT": "SASL_PLAINTEXT"}``), each on a free port of its own
    (:meth:`bootstrap_on`, ``listener_ports``); their SASL or TLS settings go in ``config`` by Kafka's names. The
    PLAINTEXT listener stays first: brokers replicate over it. ValueError for a bad name or protocol, or when
    ``config`` sets ``listeners`` or ``listener.security.protocol.map`` itself.

    API: ``bootstrap_servers``; :meth:`active_controller`, :meth:`controller_quorum`; :meth:`kill` (SIGKILL), :meth:`restart`, :meth:`pause` / :meth:`resume`
    (SIGSTOP / SIGCONT: a hung broker), :meth:`leader`, :meth:`isr`, :meth:`wait_for`. Every process it started is
    stopped by pid in :meth:`stop` (SIGTERM, then SIGKILL after 30 s), also when a ``with`` block fails.
    :meth:`start` raises TimeoutError (with the node's log tail) when a node does not come up within 60 s.
    """

    def __init__(self, brokers: int = 3, data_dir: str | Path | None = None, port: int | None = None,
                 config: dict[str, str] | None = None, host: str = "127.0.0.1", controllers: int = 1,
                 listeners: dict[str, str] | None = None) -> None:
        if brokers < 1:
            raise ValueError(f"brokers={brokers}: a cluster needs at least one broker")
        if controllers not in (1, 3):
            raise ValueError(f"controllers={controllers}: give 1 (a single-voter metadata log) or 3 (a Raft quorum "
                             "of 3 voters, which survives the loss of one)")
        self.listeners = _check_listeners(dict(listeners or {}), dict(config or {}))
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="pyspark-kafka-cluster-")) if data_dir is None else Path(data_dir)
        self.host = host
        self.config = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
                       "replica.lag.time.max.ms": "5000", "replica.fetch.backoff.ms": "200",
                       # Kafka's defaults (3, 3, 2) capped for smaller clusters, as Kafka's own test clusters do
                       "offsets.topic.replication.factor": str(min(3, brokers)),
                       "transaction.state.log.replication.factor": str(min(3, brokers)),
                       "transaction.state.log.min.isr": str(min(2, brokers)),
                       **dict(config or {})}
        self.broker_ids = list(range(brokers))
        taken: set[int] = set()
        self.ports = {i: (port + i if port else _node_port(host, taken)) for i in self.broker_ids}
        #: broker id -> {listener name: port} of the extra client listeners (``listeners``)
        self.listener_ports = {i: {name: _node_port(host, taken) for name in self.listeners} for i in self.broker_ids}
        self.controller_ids = [CONTROLLER_ID + i for i in range(controllers)]
        for c in self.controller_ids:
            self.ports[c] = _node_port(host, taken)  # the controller channel
        # Raft mode: each voter's Raft listener (its controller.quorum.voters address)
        self.raft_ports = {c: _node_port(host, taken) for c in self.controller_ids} if controllers > 1 else {}
        self.procs: dict[int, subprocess.Popen] = {}
        self.paused: set[int] = set()

    # --- addresses and commands ----------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every broker, for ``bootstrap.servers``."""
        return ",".join(f"{self.host}:{self.ports[i]}" for i in self.broker_ids)

    def bootstrap_on(self, listener: str) -> str:
        """``host:port,...`` of every broker's ``listener`` (a name given in ``listeners``, or ``PLAINTEXT``).
        Raises KeyError naming the listeners there are."""
        if listener == "PLAINTEXT":
            return self.bootstrap_servers
        if listener not in self.listeners:
            have = ", ".join(["PLAINTEXT", *self.listeners])
            raise KeyError(f"no listener {listener!r}: the brokers have {have} (give more with listeners=)")
        return ",".join(f"{self.host}:{self.listener_ports[i][listener]}" for i in self.broker_ids)

    def address(self, node_id: int) -> str:
        return f"{self.host}:{self.ports[node_id]}"

    def node_dir(self, node_id: int) -> Path:
        """The data directory of ``node_id`` (``<data dir>/node-<id>``)."""
        return self.data_dir / f"node-{node_id}"

    def command(self, node_id: int) -> list[str]:
        """The exact command that (re)starts ``node_id``."""
        role = "controller" if node_id in self.controller_ids else "broker"
        cmd = [sys.executable, "-m", "pyspark_kafka.broker.cluster.node", "--node-id", str(node_id), "--roles", role,
               "--data-dir", str(self.node_dir(node_id)), "--host", self.host, "--port", str(self.ports[node_id]),
               "--voters", self.voters]
        if self.raft_ports and role == "broker":
            cmd += ["--controller-channels", ",".join(f"{c}@{self.address(c)}" for c in self.controller_ids)]
        if self.listeners and role == "broker":  # PLAINTEXT first: the address other brokers replicate from
            ports = self.listener_ports[node_id]
            cmd += ["--config", "listeners=" + ",".join(
                        [f"PLAINTEXT://{self.host}:{self.ports[node_id]}",
                         *(f"{name}://{self.host}:{ports[name]}" for name in self.listeners)]),
                    "--config", "listener.security.protocol.map=" + ",".join(
                        ["PLAINTEXT:PLAINTEXT", *(f"{name}:{protocol}" for name, protocol in self.listeners.items())])]
        for key, value in sorted(self.config.items()):
            cmd += ["--config", f"{key}={value}"]
        return cmd

    # --- lifecycle -----------------------------------------------------------------------------

    @property
    def voters(self) -> str:
        """``controller.quorum.voters`` (``id@host:port,...``): the Raft listeners, or the one controller's channel."""
        ports = self.raft_ports or self.ports
        return ",".join(f"{c}@{self.host}:{ports[c]}" for c in self.controller_ids)

    def start(self, wait_live: bool = True) -> "EmbeddedCluster":
        """Start the controllers (with 3: until one is active), then the brokers; wait until every broker is
        registered and unfenced and lists every broker. ``wait_live=False`` returns as soon as every broker's port
        accepts connections (a client connecting then is answered once its broker is unfenced, as Kafka's).
        Raises RuntimeError naming the node and its error (the last line of its log first) when a node exits,
        TimeoutError when a node does not listen or register within 60 s; every node started is stopped then."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            for c in self.controller_ids:
                self._spawn(c)
            for c in self.controller_ids:
                self._wait_port(c)
            self.wait_for(lambda: self.active_controller() != -1, START_TIMEOUT_S, "an active controller")
            for i in self.broker_ids:
                self._spawn(i)
            if not wait_live:
                for i in self.broker_ids:
                    self._wait_port(i)
                return self
            for i in self.broker_ids:
                self._wait_live(i)
            # each broker's metadata image must list every broker too, or a client's first Metadata
            # answer may still lack a broker that registered a moment ago (seen in CI)
            everyone = set(self.broker_ids)
            self.wait_for(lambda: all(everyone <= self._listed_brokers(i) for i in self.broker_ids),
                          START_TIMEOUT_S, "every broker to list every broker")
        except BaseException:
            self.stop()
            raise
        return self

    def _listed_brokers(self, node_id: int) -> set[int]:
        """The broker ids ``node_id``'s Metadata answer lists (empty if it cannot be asked)."""
        try:
            return {b.node_id for b in metadata(self.address(node_id), topics=[]).brokers}
        except OSError:
            return set()

    def _spawn(self, node_id: int) -> None:
        self.node_dir(node_id).mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        with open(self.node_dir(node_id) / "node.log", "ab") as out:
            self.procs[node_id] = subprocess.Popen(self.command(node_id), stdout=out, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.paused.discard(node_id)
        self.write_cluster_json()

    def write_cluster_json(self) -> Path:
        """Write ``<data dir>/cluster.json`` (every node's id, role, port, pid, data dir and restart command)."""
        path = self.data_dir / "cluster.json"
        # Nodes may be restarted from several threads at once (a test killing two replicas together):
        # each writer gets its own temporary file, and the lock keeps the newest state last.
        with _CLUSTER_JSON_LOCK:
            nodes = []
            for node_id in [*self.controller_ids, *self.broker_ids]:
                proc = self.procs.get(node_id)
                nodes.append({"id": node_id, "role": "controller" if node_id in self.controller_ids else "broker",
                              "host": self.host, "port": self.ports[node_id], "raft_port": self.raft_ports.get(node_id),
                              "listener_ports": self.listener_ports.get(node_id, {}),
                              "pid": proc.pid if proc is not None and proc.poll() is None else None,
                              "data_dir": str(self.node_dir(node_id)), "command": self.command(node_id)})
            fd, tmp = tempfile.mkstemp(prefix="cluster.", suffix=".tmp", dir=self.data_dir)
            with os.fdopen(fd, "w") as out:
                out.write(json.dumps({"bootstrap_servers": self.bootstrap_servers, "nodes": nodes}, indent=2))
            os.replace(tmp, path)
        return path

    def _log_tail(self, node_id: int) -> str:
        try:
            return (self.node_dir(node_id) / "node.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def _check_alive(self, node_id: int) -> None:
        proc = self.procs.get(node_id)
        if proc is None or proc.poll() is not None:
            tail = self._log_tail(node_id)
            lines = tail.strip().splitlines()
            # the cause first (a traceback's last line, e.g. "OSError: [Errno 98] ... address already in use"):
            # a caller that shows one line (the cluster command's error) still names it
            cause = lines[-1] if lines else "no output in its node.log"
            raise RuntimeError(f"node {node_id} exited (code {None if proc is None else proc.returncode}): {cause}"
                               f" (port {self.ports[node_id]}; {self.node_dir(node_id) / 'node.log'}, last lines:)\n"
                               f"{tail}")

    def _wait_port(self, node_id: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            self._check_alive(node_id)
            try:
                socket.create_connection((self.host, self.ports[node_id]), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"node {node_id} did not listen within {START_TIMEOUT_S:g} s:\n{self._log_tail(node_id)}")

    def _wait_live(self, node_id: int, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until ``node_id`` answers Metadata listing itself (registered and unfenced)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive(node_id)
            if node_id in self._listed_brokers(node_id):
                return
            time.sleep(0.05)
        raise TimeoutError(f"broker {node_id} did not register within {timeout_s:g} s:\n{self._log_tail(node_id)}")

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (a broker or a controller; a crash: no controlled shutdown, no flush), reap it."""
        self._require_node(node_id)
        proc = self.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(STOP_TIMEOUT_S)
        self.paused.discard(node_id)
        self.write_cluster_json()

    def restart(self, node_id: int, wait: bool = True) -> None:
        """Start node ``node_id`` again with its command (killing it first if it runs); wait until it is live
        (a broker: registered and unfenced; a controller: listening)."""
        self._require_node(node_id)
        proc = self.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            self.kill(node_id)
        self._spawn(node_id)
        if wait:
            if node_id in self.controller_ids:
                self._wait_port(node_id)
            else:
                self._wait_live(node_id)

    def pause(self, node_id: int) -> None:
        """SIGSTOP node ``node_id``: it hangs (no heartbeats, no fetches, no votes) until :meth:`resume`."""
        self._require_node(node_id)
        os.kill(self.procs[node_id].pid, signal.SIGSTOP)
        self.paused.add(node_id)

    def resume(self, node_id: int) -> None:
        """SIGCONT a paused broker."""
        os.kill(self.procs[node_id].pid, signal.SIGCONT)
        self.paused.discard(node_id)

    def _require_node(self, node_id: int) -> None:
        if node_id not in self.broker_ids and node_id not in self.controller_ids:
            raise ValueError(f"node {node_id} is not a node of this cluster (brokers {self.broker_ids}, controllers "
                             f"{self.controller_ids})")

    def stop(self) -> None:
        """Stop every process this cluster started, by pid: SIGCONT the paused, SIGTERM (controlled shutdown),
        SIGKILL after 30 s; brokers first, the controller last. Removes a temporary data directory."""
        brokers = [i for i in self.broker_ids if i in self.procs]
        for group in (brokers, [c for c in self.controller_ids if c in self.procs]):
            for i in group:
                proc = self.procs[i]
                if proc.poll() is None:
                    if i in self.paused:
                        os.kill(proc.pid, signal.SIGCONT)
                    proc.terminate()
            for i in group:
                proc = self.procs.pop(i)
                try:
                    proc.wait(STOP_TIMEOUT_S / 3)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGUSR1)  # the node's stacks into its node.log, then a crash stop
                    if i not in self.controller_ids:
                        os.kill(proc.pid, signal.SIGUSR2)  # and its asyncio tasks
                    try:
                        proc.wait(STOP_TIMEOUT_S * 2 / 3)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(STOP_TIMEOUT_S)
        self.paused.clear()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "EmbeddedCluster":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # --- observation -----------------------------------------------------------------------------

    def controller_quorum(self, node_id: int, timeout_s: float = 2.0) -> dict | None:
        """What controller ``node_id`` knows of the quorum: ``{"node_id", "leader_id", "leader_epoch", "active"}``
        (its ``quorum`` answer on the controller channel); None when it does not answer."""
        return self.controller_call(node_id, {"op": "quorum"}, timeout_s)

    def controller_call(self, node_id: int, request: dict, timeout_s: float = 2.0) -> dict | None:
        """Send one controller-channel request (see ``broker/controller/channel.py``) to controller ``node_id``
        and return its answer dict; None when it does not answer within ``timeout_s`` seconds."""
        body = json.dumps(request).encode()
        try:
            with socket.create_connection((self.host, self.ports[node_id]), timeout=timeout_s) as sock:
                sock.settimeout(timeout_s)
                sock.sendall(struct.pack(">i", len(body)) + body)
                size = struct.unpack(">i", recv_exactly(sock, 4))[0]
                return json.loads(recv_exactly(sock, size))
        except (OSError, ValueError):
            return None

    def active_controller(self) -> int:
        """The node id of the active controller (the one that says it leads and is active; -1: none now)."""
        for c in self.controller_ids:
            proc = self.procs.get(c)
            if proc is None or proc.poll() is not None or c in self.paused:
                continue
            answer = self.controller_quorum(c)
            if answer is not None and answer.get("leader_id") == c and answer.get("active", c == CONTROLLER_ID):
                return c
        return -1

    def _live_bootstrap(self) -> list[str]:
        return [self.address(i) for i in self.broker_ids
                if i in self.procs and self.procs[i].poll() is None and i not in self.paused]

    def partition_metadata(self, topic: str, partition: int):
        """The Metadata entry of ``topic``/``partition`` as a live broker answers it (None when unknown)."""
        for address in self._live_bootstrap():
            try:
                response = metadata(address, [topic])
            except OSError:
                continue
            for t in response.topics:
                for p in t.partitions:
                    if p.partition_index == partition:
                        return p
            return None
        return None

    def leader(self, topic: str, partition: int) -> int:
        """The leader's node id of ``topic``/``partition`` (-1: offline or unknown)."""
        p = self.partition_metadata(topic, partition)
        return -1 if p is None else int(p.leader_id)

    def isr(self, topic: str, partition: int) -> list[int]:
        """The in-sync replicas of ``topic``/``partition`` (node ids; [] when unknown)."""
        p = self.partition_metadata(topic, partition)
        return [] if p is None else [int(r) for r in p.isr_nodes]

    def wait_for(self, condition, timeout_s: float = 30.0, what: str = "condition") -> None:
        """Poll ``condition()`` every 50 ms until true; TimeoutError naming ``what`` after ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.05)
        raise TimeoutError(f"{what} not reached within {timeout_s:g} s")
