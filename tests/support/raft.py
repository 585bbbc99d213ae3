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
