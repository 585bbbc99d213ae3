"""Controller quorum helpers for tests: free controller ports, in-process voters on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from pyspark_kafka.broker.raft import RaftMetadataLog, Role

#: Short Raft timeouts (ms) so elections take well under a second in tests.
FAST = {"controller.quorum.election.timeout.ms": "300", "controller.quorum.fetch.timeout.ms": "600",
        "controller.quorum.election.backoff.max.ms": "200", "controller.quorum.request.timeout.ms": "500"}


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (bound together, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def voters_string(ports: list[int]) -> str:
    """``controller.quorum.voters`` for voters 0..n-1 on ``ports``."""
    return ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(ports))


class Quorum:
    """In-process nodes of one quorum (voters 0..voters-1, then observers) under ``root/node-<id>``."""

    def __init__(self, root: Path, voters: int, observers: int = 0, overrides: dict | None = None):
        self.root = Path(root)
        self.voters = voters_string(free_ports(voters))
        self.ids = list(range(voters + observers))
        self.overrides = dict(FAST, **(overrides or {}))
        self.nodes: dict[int, RaftMetadataLog] = {}
        self.seen: dict[int, list[tuple[int, bytes]]] = {}

    def make(self, node_id: int) -> RaftMetadataLog:
        node = RaftMetadataLog(self.root / f"node-{node_id}", {
            "node.id": str(node_id), "controller.quorum.voters": self.voters, **self.overrides})
        seen = self.seen[node_id] = []
        node.subscribe(lambda offset, record: seen.append((offset, record)))
        self.nodes[node_id] = node
        return node

    async def start(self, *node_ids: int) -> None:
        for i in node_ids or self.ids:
            await self.make(i).start()

    async def stop(self, *node_ids: int) -> None:
        for i in node_ids or list(self.nodes):
            node = self.nodes.pop(i, None)
            if node is not None:
                await node.stop()

    def leaders(self) -> list[RaftMetadataLog]:
        return [n for n in self.nodes.values() if n.role is Role.LEADER]

    async def wait_leader(self, timeout_s: float = 10.0, above_epoch: int = -1) -> RaftMetadataLog:
        """The one leader every running voter follows, in an epoch above ``above_epoch`` (bounded wait)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            leaders = [n for n in self.leaders() if n.epoch > above_epoch]
            if len(leaders) == 1:
                leader = leaders[0]
                if all(n.leader() == (leader.node_id, leader.epoch) for n in self.nodes.values()) \
                        and leader.committed_offset() > leader._epoch_start_offset:  # its epoch's first batch
                    return leader
            await asyncio.sleep(0.02)
        states = {i: (n.role.value, n.epoch, n.leader_id) for i, n in self.nodes.items()}
        raise AssertionError(f"no single leader above epoch {above_epoch} within {timeout_s} s: {states}")

    async def wait_committed(self, offset: int, node_ids, timeout_s: float = 10.0) -> None:
        """Wait until every node in ``node_ids`` has delivered records below ``offset``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if all(self.nodes[i].committed_offset() >= offset for i in node_ids):
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"nodes {list(node_ids)} did not commit up to {offset} within {timeout_s} s: "
                             f"{ {i: self.nodes[i].committed_offset() for i in node_ids} }")


# --- quorum members as processes (SIGKILL, SIGSTOP) -------------------------------------------

import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import pyspark_kafka  # noqa: E402

PROCESS_DEADLINE_S = 30.0


class RaftProcess:
    """One ``python -m pyspark_kafka.broker.raft.node`` process; ``events`` are its stdout JSON lines.

    Always stopped by the test (``kill``/``stop`` by pid, also on failure through the fixture).
    """

    def __init__(self, data_dir: Path, node_id: int, voters: str, overrides: dict | None = None):
        self.node_id = node_id
        args = [sys.executable, "-m", "pyspark_kafka.broker.raft.node", "--data-dir", str(data_dir),
                "-c", f"node.id={node_id}", "-c", f"controller.quorum.voters={voters}"]
        for name, value in dict(FAST, **(overrides or {})).items():
            args += ["-c", f"{name}={value}"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(Path(pyspark_kafka.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))
        self.log_path = Path(data_dir).with_suffix(f".{time.monotonic_ns()}.log")
        Path(data_dir).parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     text=True, env=env)
        self.events: list[dict] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()
        try:
            self.wait_for(lambda e: e["event"] == "ready", "ready")
        except BaseException:
            self.kill()
            raise

    def _pump(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()

    def wait_for(self, match, what: str, timeout_s: float = PROCESS_DEADLINE_S) -> dict:
        """The first event for which ``match(event)`` holds (bounded wait)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for event in self.events:
                    if match(event):
                        return event
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"node {self.node_id}: no {what} within {timeout_s} s "
                                         f"(exit {self.proc.poll()}); log {self.log_path}")
                self._cond.wait(min(left, 0.2))

    def committed(self) -> list[tuple[int, str]]:
        with self._cond:
            return [(e["offset"], e["value"]) for e in self.events if e["event"] == "committed"]

    def of_kind(self, kind: str) -> list[dict]:
        with self._cond:
            return [e for e in self.events if e["event"] == kind]

    def append(self, text: str) -> None:
        self.proc.stdin.write(f"append {text}\n")
        self.proc.stdin.flush()

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(PROCESS_DEADLINE_S)
        self._log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(PROCESS_DEADLINE_S)
        self._log.close()


def describe_quorum(host: str, port: int, timeout_s: float = 1.0):
    """The DescribeQuorum v1 partition answer of the voter at ``host:port``, or None (no answer in time)."""
    from kio.schema.describe_quorum.v1 import request as dq

    from support.wire import WireClient
    request = dq.DescribeQuorumRequest(topics=(dq.TopicData(topic_name="__cluster_metadata", partitions=(
        dq.PartitionData(partition_index=0),)),))
    try:
        with WireClient(f"{host}:{port}", timeout_s=timeout_s) as client:
            return client.request(request).topics[0].partitions[0]
    except (OSError, AssertionError):
        return None


def find_leader(voters: str, node_ids, above_epoch: int = -1, timeout_s: float = PROCESS_DEADLINE_S):
    """``(leader id, epoch)`` of the voter among ``node_ids`` that answers DescribeQuorum as leader (bounded)."""
    from pyspark_kafka.broker.raft import parse_voters
    addresses = parse_voters(voters)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for node in node_ids:
            p = describe_quorum(*addresses[node], timeout_s=0.5)
            if p is not None and p.error_code == 0 and p.leader_id == node and p.leader_epoch > above_epoch \
                    and p.high_watermark > 0:
                return node, p.leader_epoch
        time.sleep(0.05)
    raise AssertionError(f"no leader above epoch {above_epoch} among nodes {list(node_ids)} within {timeout_s} s")
