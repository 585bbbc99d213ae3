"""Metadata (key 3), DescribeCluster (key 60) and DescribeTopicPartitions (key 75): this single
broker, its topics and partitions.

Every partition is led by this broker (node ``node.id``) with itself as the only replica and
in-sync replica. Unknown topics are auto-created with ``num.partitions`` partitions when
``auto.create.topics.enable`` is true and the request allows it (``allow_auto_topic_creation``,
v4+; always allowed before v4, as in Kafka). Topic ids are served from v10 on.
DescribeTopicPartitions (KIP-966) never creates topics and pages through partitions with a cursor.

Authorization (with an authorizer, as Kafka's ``KafkaApis.handleTopicMetadataRequest``): a topic
the principal may not DESCRIBE is left out of an all-topics answer and answered
TOPIC_AUTHORIZATION_FAILED (29, no topic id) when named; auto-creating a topic needs CREATE on the
cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED. DescribeTopicPartitions applies the same
DESCRIBE rule. ``*_authorized_operations`` are answered when the request asks for them.
DescribeCluster needs no ACL (as in Kafka).
"""

from __future__ import annotations

import uuid

from pyspark_kafka.broker.config import validate_topic_name
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.protocol import ProtocolError
from pyspark_kafka.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType

NO_AUTHORIZED_OPERATIONS = -(2**31)  # "not requested" in Kafka's protocol
ALL_TOPIC_OPERATIONS = 3576
"""Bitfield of every topic ACL operation (READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11): what Kafka without an authorizer answers where the request
has no "include authorized operations" flag (DescribeTopicPartitions; measured on Kafka 4.3.1)."""
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
"""Kafka's ``max.request.partition.size.limit`` default: most partitions one DescribeTopicPartitions answers."""


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


def _may_create(ctx: RequestContext, name: str) -> bool:
    """Auto-creation by Metadata needs CREATE on the cluster or on the topic (Kafka's ``handleTopicMetadataRequest``)."""
    return ctx.authorized(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or \
        ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, name)


def _lookup(ctx: RequestContext, name: str, allow_create: bool) -> dict:
    broker = ctx.broker
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
        return _error_entry(name, ErrorCode.topic_authorization_failed)
    try:
        validate_topic_name(name)
        replica_manager = broker.replica_manager
        if replica_manager.logs.topic(name) is None:
            if allow_create and broker.config.get_bool("auto.create.topics.enable") and not _may_create(ctx, name):
                return _error_entry(name, ErrorCode.topic_authorization_failed)
            if not (allow_create and replica_manager.auto_create(name)):
                return _error_entry(name, ErrorCode.unknown_topic_or_partition)
    except KafkaError as exc:
        return _error_entry(name, exc.error_code)
    return topic_entry(broker, name)


def _cluster_brokers(broker) -> list[dict]:
    """Replicated cluster: every live (unfenced) broker of the metadata image (Kafka lists only those)."""
    return [{"node_id": b.id, "broker_id": b.id, "host": b.host, "port": b.port, "rack": None}
            for b in broker.lifecycle.image.live_brokers()]


def cluster_topic_entry(broker, name: str) -> dict:
    """Replicated cluster: topic ``name`` from the metadata image: leaders (-1 offline, LEADER_NOT_AVAILABLE),
    leader epochs, replicas, ISR and the replicas on fenced brokers as offline replicas."""
    image = broker.lifecycle.image
    t = image.topics[name]
    live = {b.id for b in image.live_brokers()}
    partitions = []
    for p, st in sorted(t.partitions.items()):
        partitions.append({
            "error_code": ErrorCode.none if st.leader >= 0 else ErrorCode.leader_not_available,
            "partition_index": p, "leader_id": st.leader, "leader_epoch": st.leader_epoch,
            "replica_nodes": list(st.replicas), "isr_nodes": list(st.isr),
            "offline_replicas": [r for r in st.replicas if r not in live]})
    return {"error_code": ErrorCode.none, "name": name, "topic_id": uuid.UUID(t.topic_id),
            "is_internal": name.startswith("__"), "partitions": partitions,
            "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS}


async def _cluster_metadata(ctx: RequestContext, request) -> dict:
    """Metadata in a replicated cluster, from the broker's metadata image; unknown topics are created through
    the controller when allowed (answered LEADER_NOT_AVAILABLE until the image has them, clients retry)."""
    broker = ctx.broker
    image = broker.lifecycle.image
    requested = request.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        names = [n for n in sorted(image.topics) if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, n)]
    else:
        names = [t.name if t.name is not None else next(
            (n for n, x in image.topics.items() if uuid.UUID(x.topic_id) == t.topic_id), None) for t in requested]
    allow_create = getattr(request, "allow_auto_topic_creation", True)
    topics = []
    missing = []
    for name in names:
        if name is None:
            topics.append(_error_entry(None, ErrorCode.unknown_topic_id))
        elif not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            topics.append(_error_entry(name, ErrorCode.topic_authorization_failed))
        elif name in image.topics:
            topics.append(cluster_topic_entry(broker, name))
        else:
            try:
                validate_topic_name(name)
            except KafkaError as exc:
                topics.append(_error_entry(name, exc.error_code))
                continue
            if allow_create and broker.config.get_bool("auto.create.topics.enable") and not _may_create(ctx, name):
                topics.append(_error_entry(name, ErrorCode.topic_authorization_failed))
            elif allow_create and broker.config.get_bool("auto.create.topics.enable"):
                missing.append(name)
                topics.append(_error_entry(name, ErrorCode.leader_not_available))
            else:
                topics.append(_error_entry(name, ErrorCode.unknown_topic_or_partition))
    if missing:
        try:
            await broker.lifecycle.call({"op": "create_topics", "topics": [{"name": n} for n in missing]})
        except ConnectionError:
            pass
    return {"throttle_time": 0, "brokers": _cluster_brokers(broker), "cluster_id": broker.cluster_id,
            "controller_id": broker.node_id, "topics": topics,
            "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS}


@register(api_key=3, min_version=0, max_version=12)
async def metadata(ctx: RequestContext, request) -> dict:
    """Brokers, cluster id, controller and the requested topics (all topics when null/v0 empty)."""
    broker = ctx.broker
    if broker.lifecycle is not None:
        return await _cluster_metadata(ctx, request)
    requested = request.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        topics = [topic_entry(broker, name) for name in sorted(broker.replica_manager.logs.topics())
                  if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name)]
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
                if name and not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                    # Kafka: topic ids are not secret, so TOPIC_AUTHORIZATION_FAILED with the id and no name
                    topics.append(_error_entry(None, ErrorCode.topic_authorization_failed, topic_id))
                else:
                    topics.append(topic_entry(broker, name) if name else
                                  _error_entry(None, ErrorCode.unknown_topic_id, topic_id))
            else:
                topics.append(_lookup(ctx, t.name, allow_create))
    if getattr(request, "include_topic_authorized_operations", False):
        for entry in topics:
            if entry["error_code"] == ErrorCode.none:
                entry["topic_authorized_operations"] = ctx.authorized_operations(ResourceType.TOPIC, entry["name"])
    return {
        "throttle_time": 0,
        "brokers": [broker_entry(broker, ctx)],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
        if getattr(request, "include_cluster_authorized_operations", False) else NO_AUTHORIZED_OPERATIONS,
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
        "brokers": _cluster_brokers(broker) if broker.lifecycle is not None else [broker_entry(broker, ctx)],
        "cluster_authorized_operations": ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
        if getattr(request, "include_cluster_authorized_operations", False) else NO_AUTHORIZED_OPERATIONS,
    }


def _describe_partitions_topic(broker, name: str, first: int, limit: int) -> tuple[dict, int]:
    """The DescribeTopicPartitions entry of topic ``name`` from partition ``first``, at most ``limit``
    partitions, and the next partition index (-1 when the topic is complete). Unknown topics get
    UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name) and next -1."""
    info = broker.replica_manager.logs.topic(name)
    if info is None:
        try:
            validate_topic_name(name)
            code = ErrorCode.unknown_topic_or_partition
        except KafkaError as exc:
            code = exc.error_code
        return {**_error_entry(name, code), "topic_authorized_operations": ALL_TOPIC_OPERATIONS}, -1
    entry = topic_entry(broker, name)
    upper = min(info.num_partitions, first + limit)  # a negative first index only shortens the page, as in Kafka
    entry["partitions"] = [{**p, "eligible_leader_replicas": [], "last_known_elr": []}
                           for p in entry["partitions"][max(first, 0):max(upper, 0)]]
    entry["topic_authorized_operations"] = ALL_TOPIC_OPERATIONS
    return entry, upper if upper < info.num_partitions else -1


@register(api_key=75, min_version=0, max_version=0)
async def describe_topic_partitions(ctx: RequestContext, request) -> dict:
    """Topics with their partitions, paged (KIP-966; Kafka's ``DescribeTopicPartitionsRequestHandler``
    and ``KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse``).

    No topics requested: every topic (internal ones too). Topics are answered in name order from
    the cursor's topic on (its partitions from the cursor's index); at most
    min(``response_partition_limit``, 2000) partitions (a limit below 1 counts as 1, as Kafka
    4.3.1 answers). When the limit stops a topic, ``next_cursor`` names it and its next partition;
    when it is reached at a topic boundary, the next topic and partition 0. Unknown topics are
    answered with UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name) only when
    named in the request. A cursor whose topic the requested list lacks: INVALID_REQUEST for every
    requested topic. Leader, leader epoch, replicas and ISR as Metadata; eligible leader replicas
    and last known ELR empty; topic authorized operations: every topic operation (no authorizer).
    """
    broker = ctx.broker
    if broker.lifecycle is not None:  # replicated: topics and partitions from the metadata image
        entries = [cluster_topic_entry(broker, n) for n in sorted(broker.lifecycle.image.topics)
                   if not request.topics or n in {t.name for t in request.topics}]
        for e in entries:
            e["partitions"] = [{**p, "eligible_leader_replicas": [], "last_known_elr": []} for p in e["partitions"]]
            e["topic_authorized_operations"] = ALL_TOPIC_OPERATIONS
        return {"throttle_time": 0, "topics": entries, "next_cursor": None}
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    if fetch_all:
        names = {n for n in broker.replica_manager.logs.topics() if n >= cursor_topic}
    else:
        names = {t.name for t in request.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            return {"throttle_time": 0, "next_cursor": None, "topics": [
                _error_entry(t.name, ErrorCode.invalid_request) for t in request.topics]}
    remaining = max(1, min(MAX_REQUEST_PARTITION_SIZE_LIMIT, request.response_partition_limit))
    topics: list[dict] = []
    next_cursor = None
    for name in sorted(names):
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        first = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            if not fetch_all:
                topics.append(_error_entry(name, ErrorCode.topic_authorization_failed))
            continue
        entry, next_index = _describe_partitions_topic(broker, name, first, remaining)
        if entry["error_code"] != ErrorCode.none and fetch_all:
            continue
        if getattr(broker, "authorizer", None) is not None and entry["error_code"] == ErrorCode.none:
            entry["topic_authorized_operations"] = ctx.authorized_operations(ResourceType.TOPIC, name)
        topics.append(entry)
        if next_index != -1:
            next_cursor = {"topic_name": name, "partition_index": next_index}
            break
        remaining -= len(entry["partitions"])
    return {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor}
