"""DescribeQuorum (55, KIP-595) on a broker listener: the metadata quorum, as ``kafka-metadata-quorum.sh
--bootstrap-server ... describe --status`` asks it.

Kafka's broker forwards DescribeQuorum to the active controller (``KafkaApis.handleDescribeQuorumRequest``) after
checking DESCRIBE on the CLUSTER resource; here the broker asks its controller over the controller channel
(``describe_quorum``; a combined node asks its own controller in process) and answers with the
``__cluster_metadata``-0 partition.
"""

from __future__ import annotations

import uuid

from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType

METADATA_TOPIC = "__cluster_metadata"
NO_DIRECTORY_ID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: no KIP-853 directory ids here


def _answer(error: int, message: str | None, quorum: dict | None = None) -> dict:
    q = quorum or {}

    def state(r: dict) -> dict:
        return {"replica_id": r["replica_id"], "replica_directory_id": NO_DIRECTORY_ID,
                "log_end_offset": r["log_end_offset"], "last_fetch_timestamp": r["last_fetch_timestamp"],
                "last_caught_up_timestamp": r["last_caught_up_timestamp"]}

    partition = {"partition_index": 0, "error_code": error, "error_message": message,
                 "leader_id": q.get("leader_id", -1), "leader_epoch": q.get("leader_epoch", -1),
                 "high_watermark": q.get("high_watermark", -1),
                 "current_voters": [state(r) for r in q.get("voters", [])],
                 "observers": [state(r) for r in q.get("observers", [])]}
    return {"error_code": ErrorCode.none, "error_message": None,
            "topics": [{"topic_name": METADATA_TOPIC, "partitions": [partition]}],
            "nodes": q.get("nodes") or [{"node_id": r["replica_id"], "listeners": []} for r in q.get("voters", [])]}


@register(api_key=55, min_version=0, max_version=2)
async def describe_quorum(ctx: RequestContext, request) -> dict:
    """DescribeQuorum: CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on the cluster; else the controller's view
    of the metadata quorum (leader, epoch, high watermark, voters' progress), or the controller's error."""
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"error_code": ErrorCode.cluster_authorization_failed, "error_message": None, "topics": [], "nodes": []}

    async def forwarded(manager) -> dict:
        try:
            quorum = await manager.call({"op": "describe_quorum"})
        except ConnectionError as exc:
            return _answer(ErrorCode.not_controller, str(exc))
        if quorum.get("error_code"):
            return _answer(quorum["error_code"], quorum.get("error_message"))
        return _answer(ErrorCode.none, None, quorum)

    return await forwarded(ctx.broker.forwarding)
