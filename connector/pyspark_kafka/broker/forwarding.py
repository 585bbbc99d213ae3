"""Requests the controller owns, forwarded to the active controller (Kafka's ``ForwardingManager`` and
``KafkaApis.maybeForwardToController``, KIP-590; a Kafka KRaft broker forwards them too).

A handler of a controller-owned request (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
IncrementalAlterConfigs, ElectLeaders, AlterPartitionReassignments, CreateAcls, DeleteAcls, DescribeQuorum and
the topic auto-creation of Metadata) sends it through ``broker.forwarding``, a :class:`ForwardingManager`
built with the broker: :meth:`~ForwardingManager.forward`, :meth:`~ForwardingManager.call` and
:meth:`~ForwardingManager.forward_by_topic` reach the active controller through the
:class:`~pyspark_kafka.broker.cluster.broker_lifecycle.BrokerLifecycle`'s channel (a combined node's channel is
in-process). There is one path: no handler asks which kind of node it runs in.
"""

from __future__ import annotations

import asyncio
from typing import Iterable

from pyspark_kafka.broker.errors import ErrorCode

TOPIC_WAIT_S = 5.0  # how long a forwarded CreateTopics waits for the new topics in this broker's metadata


class ForwardingManager:
    """``ForwardingManager(lifecycle)``: a broker forwards controller-owned requests to the active controller.

    ``lifecycle`` is the broker's :class:`~pyspark_kafka.broker.cluster.broker_lifecycle.BrokerLifecycle`
    (its channel to the active controller and its metadata image). Requests are the controller channel's
    dicts (``{"op": "create_topics", ...}``, see :mod:`~pyspark_kafka.broker.controller.quorum_controller`).
    """

    def __init__(self, lifecycle) -> None:
        self.lifecycle = lifecycle

    async def call(self, request: dict, timeout_s: float = 10) -> dict:
        """Send ``request`` to the active controller and return its answer (no wait for the metadata);
        ConnectionError when no controller answers within ``timeout_s`` s."""
        return await self.lifecycle.call(request, timeout_s)

    async def forward(self, request: dict) -> dict:
        """Send ``request`` to the active controller; once answered, wait (at most 5 s) until this broker's
        metadata has the change, so the client's next request sees it. ConnectionError when no controller
        answers."""
        return await self.lifecycle.forward(request)

    async def forward_by_topic(self, request: dict, names: Iterable[str]) -> dict[str, dict]:
        """:meth:`forward` a topic admin ``request``; the controller's per-topic answers by name, or
        NOT_CONTROLLER for each of ``names`` when no controller answers."""
        try:
            answer = await self.forward(request)
            return {r["name"]: r for r in answer["topics"]}
        except ConnectionError as exc:
            return {n: {"error_code": int(ErrorCode.not_controller), "error_message": str(exc)} for n in names}

    async def wait_for_topics(self, names: Iterable[str], timeout_s: float = TOPIC_WAIT_S) -> None:
        """Wait until this broker's metadata image has every topic of ``names`` (at most ``timeout_s`` s)."""
        names = list(names)
        image = self.lifecycle.image
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while any(n not in image.topics for n in names) and loop.time() < deadline:
            await asyncio.sleep(0.02)
