"""Metadata (key 3) and DescribeCluster (key 60): this single broker, its topics and partitions.

Every partition is led by this broker (node ``node.id``) with itself as the only replica and
in-sync replica. Unknown topics are auto-created with ``num.partitions`` partitions when
``auto.create.topics.enable`` is true and the request allows it (``allow_auto_topic_creation``,
v4+; always allowed before v4, as in Kafka). Topic ids are served from v10 on.
"""

from __future__ import annotations

from pyspark_kafka.broker.config import validate_topic_name
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.protocol import ProtocolError

NO_AUTHORIZED_OPERATIONS = -(2**31)  # "not requested" in Kafka's protocol


def broker_entry(broker, ctx: RequestContext | None = None) -> dict:
    """This broker as a Metadata/DescribeCluster broker entry: host and port advertised on the
    listener the request came in on (Kafka answers with the endpoint of the same listener name)."""
    host, port = broker.advertised(ctx.listener if ctx is not None else None)
    return {"node_id": broker.node_id, "broker_id": broker.node_id, "host": host, "port": port, "rack": None}


def topic_entry(broker, name: str) -> dict:
    """The Metadata entry of existing topic ``name``: every partition led by this broker."""
    info = broker.replica_manager.logs.topic(name)
    me = broker.node_id
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": info.topic_id,
        "is_internal": name.startswith("__"),
        "partitions": [
            {
                "error_code": ErrorCode.none,
                "partition_index": p,
                "leader_id": me,
                "leader_epoch": 0,
                "replica_nodes": [me],
                "isr_nodes": [me],
                "offline_replicas": [],
            }
            for p in range(info.num_partitions)
        ],
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def _error_entry(name: str | None, error_code: int, topic_id=None) -> dict:
    return {
        "error_code": error_code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def _lookup(broker, name: str, allow_create: bool) -> dict:
    try:
        validate_topic_name(name)
        replica_manager = broker.replica_manager
        if replica_manager.logs.topic(name) is None and not (allow_create and replica_manager.auto_create(name)):
            return _error_entry(name, ErrorCode.unknown_topic_or_partition)
    except KafkaError as exc:
        return _error_entry(name, exc.error_code)
    return topic_entry(broker, name)


@register(api_key=3, min_version=0, max_version=12)
async def metadata(ctx: RequestContext, request) -> dict:
    """Brokers, cluster id, controller and the requested topics (all topics when null/v0 empty)."""
    broker = ctx.broker
    requested = request.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        topics = [topic_entry(broker, name) for name in sorted(broker.replica_manager.logs.topics())]
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True)
        if ctx.api_version < 12 and any(t.name is None for t in requested):
            # Kafka's KafkaApis: "Topic name can not be null for version N" (topic ids need v12, KIP-516)
            raise ProtocolError(f"Topic name can not be null for Metadata version {ctx.api_version}: "
                                "topic ids need Metadata v12 or later")
        topics = []
        for t in requested:
            topic_id = getattr(t, "topic_id", None)
            if t.name is None and topic_id is not None:
                name = broker.replica_manager.topic_name(topic_id)
                topics.append(topic_entry(broker, name) if name else _error_entry(None, ErrorCode.unknown_topic_id, topic_id))
            else:
                topics.append(_lookup(broker, t.name, allow_create))
    return {
        "throttle_time": 0,
        "brokers": [broker_entry(broker, ctx)],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


@register(api_key=60, min_version=0, max_version=1)
async def describe_cluster(ctx: RequestContext, request) -> dict:
    """Cluster id, controller (this broker) and the one broker (KIP-700)."""
    broker = ctx.broker
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": getattr(request, "endpoint_type", 1),
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "brokers": [broker_entry(broker, ctx)],
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }
