"""Producer ids in a replicated cluster: blocks from the controller (Kafka's ``RPCProducerIdManager``, KIP-730).

Each broker's transaction coordinator hands out ids from a block of 1000 the controller reserved for it in the
metadata log, so ids are unique in the whole cluster (a per-broker file, as on a single node, would let two
brokers give the same id to two producers, and the partition leader would drop one's records as duplicates).
The next block is fetched in the background once half of the current one is used; with none at hand
InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS and the client retries (as Kafka does).
"""

from __future__ import annotations

import asyncio

from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger("pyspark_kafka.broker")


class ProducerIdBlockPending(KafkaError):
    """No producer id block is at hand yet (COORDINATOR_LOAD_IN_PROGRESS): retry."""

    error_code = ErrorCode.coordinator_load_in_progress


class ClusterProducerIdManager:
    """``ClusterProducerIdManager(lifecycle)``: same interface as the coordinator's ``ProducerIdManager``
    (:meth:`next_id`, :meth:`at_least`); blocks come from ``lifecycle.call({"op": "allocate_producer_ids"})``."""

    def __init__(self, lifecycle) -> None:
        self.lifecycle = lifecycle
        self._blocks: list[list[int]] = []  # [next, end) ranges
        self._fetching: asyncio.Task | None = None

    def at_least(self, producer_id: int) -> None:
        """Ids at or below ``producer_id`` are never handed out (blocks are cluster-unique already)."""
        self._blocks = [[max(b[0], producer_id + 1), b[1]] for b in self._blocks if b[1] > producer_id + 1]

    def next_id(self) -> int:
        """The next id; raises ProducerIdBlockPending while the first block is being fetched."""
        while self._blocks and self._blocks[0][0] >= self._blocks[0][1]:
            self._blocks.pop(0)
        left = sum(b[1] - b[0] for b in self._blocks)
        if left < 500:
            self.prefetch()
        if not self._blocks:
            raise ProducerIdBlockPending("waiting for a block of producer ids from the controller: retry")
        block = self._blocks[0]
        block[0] += 1
        return block[0] - 1

    def prefetch(self) -> None:
        """Fetch one more block in the background (at most one request in flight)."""
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.get_running_loop().create_task(self._fetch())

    async def _fetch(self) -> None:
        try:
            answer = await self.lifecycle.call({"op": "allocate_producer_ids", "node_id": self.lifecycle.node_id,
                                                "broker_epoch": self.lifecycle.broker_epoch})
            if answer["error_code"] == 0:
                self._blocks.append([answer["first"], answer["first"] + answer["size"]])
        except ConnectionError as exc:
            log.warning("cannot allocate producer ids: %s", exc)
