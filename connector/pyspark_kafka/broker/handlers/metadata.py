"""Metadata (key 3), DescribeCluster (key 60) and DescribeTopicPartitions (key 75): the live brokers,
the topics and their partitions, as the broker's :class:`~pyspark_kafka.broker.metadata_cache.MetadataCache`
knows them (the metadata image's leaders, replicas and ISR; on a one-node cluster this broker leads every
partition, its only replica and in-sync replica).

Unknown topics are auto-created with ``num.partitions`` partitions when
``auto.create.topics.enable`` is true and the request allows it (``allow_auto_topic_creation``,
v4+; always allowed before v4, as in Kafka), through the controller
(answered LEADER_NOT_AVAILABLE until the metadata has them, clients retry; an internal topic with its own
partitions, replication factor and configs). Topic ids are served from v10 on.
DescribeTopicPartitions (KIP-966) never creates topics and pages through partitions with a cursor.

Authorization (with an authorizer, as Kafka's ``KafkaApis.handleTopicMetadataRequest``): a topic
the principal may not DESCRIBE is left out of an all-topics answer and answered
TOPIC_AUTHORIZATION_FAILED (29, no topic id) when named; auto-creating a topic needs CREATE on the
cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED. DescribeTopicPartitions applies the same
DESCRIBE rule. ``*_authorized_operations`` are answered when the request asks for them.
DescribeCluster needs no ACL (as in Kafka).
"""

from __future__ import annotations

from pyspark_kafka.broker.topic_config import validate_topic_name
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.coordinator.internal_topics import INTERNAL_TOPICS
from pyspark_kafka.broker.metadata_cache import BrokerEndpoint, TopicMetadata
from pyspark_kafka.broker.protocol import ProtocolError
from pyspark_kafka.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType

NO_AUTHORIZED_OPERATIONS = -(2**31)  # "not requested" in Kafka's protocol
ALL_TOPIC_OPERATIONS = 3576
"""Bitfield of every topic ACL operation (READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11): what Kafka without an authorizer answers where the request
has no "include authorized operations" flag (DescribeTopicPartitions; measured on Kafka 4.3.1)."""
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
"""Kafka's ``max.request.partition.size.limit`` default: most partitions one DescribeTopicPartitions answers."""


def broker_entry(endpoint: BrokerEndpoint) -> dict:
    """A live broker as a Metadata/DescribeCluster broker entry (host and port as advertised on the
    listener the request came in on: Kafka answers with the endpoint of the same listener name)."""
    return {"node_id": endpoint.node_id, "broker_id": endpoint.node_id, "host": endpoint.host,
            "port": endpoint.port, "rack": endpoint.rack}


def topic_entry(topic: TopicMetadata) -> dict:
    """The Metadata entry of an existing topic: its partitions' leaders (NO_LEADER -1: offline, answered
    LEADER_NOT_AVAILABLE), leader epochs, replicas, ISR and offline replicas, from the metadata cache."""
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name.startswith("__"),
        "partitions": [
            {
                "error_code": ErrorCode.none if p.leader >= 0 else ErrorCode.leader_not_available,
                "partition_index": p.index,
                "leader_id": p.leader,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr),
                "offline_replicas": list(p.offline_replicas),
            }
            for p in topic.partitions
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


def _lookup(ctx: RequestContext, name: str, allow_create: bool) -> dict | None:
    """The Metadata entry of requested topic ``name``; None when it is missing and is to be auto-created."""
    broker = ctx.broker
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
        return _error_entry(name, ErrorCode.topic_authorization_failed)
    try:
        validate_topic_name(name)
        topic = broker.metadata_cache.topic(name)
        if topic is None:
            auto_create = allow_create and broker.config.get_bool("auto.create.topics.enable")
            if auto_create and not _may_create(ctx, name):
                return _error_entry(name, ErrorCode.topic_authorization_failed)
            return None if auto_create else _error_entry(name, ErrorCode.unknown_topic_or_partition)
    except KafkaError as exc:
        return _error_entry(name, exc.error_code)
    return topic_entry(topic)


async def _auto_create(broker, names: list[str]) -> dict[str, int]:
    """Create the missing topics ``names`` (Kafka's ``AutoTopicCreationManager``); the error code answered for
    each that has no entry yet. The broker asks the controller and answers LEADER_NOT_AVAILABLE (clients retry
    until the metadata has them). An internal topic (``__consumer_offsets``, ``__transaction_state``) is created
    with its own partitions, replication factor and configs, as Kafka's ``AutoTopicCreationManager`` does."""
    async def forwarded(manager) -> dict[str, int]:
        for name in names:
            if name in INTERNAL_TOPICS:  # its own configs; the controller refuses it as a plain topic
                await broker.coordinators.create_internal_topic(name)
        others = [{"name": n} for n in names if n not in INTERNAL_TOPICS]
        try:
            if others:
                await manager.call({"op": "create_topics", "topics": others})
        except ConnectionError:
            pass
        return {n: ErrorCode.leader_not_available for n in names}

    return await forwarded(broker.forwarding)


@register(api_key=3, min_version=0, max_version=12)
async def metadata(ctx: RequestContext, request) -> dict:
    """Brokers, cluster id, controller and the requested topics (all topics when null/v0 empty), from the
    broker's metadata cache; unknown topics are auto-created when allowed."""
    broker = ctx.broker
    cache = broker.metadata_cache
    requested = request.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        topics = [topic_entry(cache.topic(name)) for name in cache.topic_names()
                  if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name)]
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True)
        if ctx.api_version < 12 and any(t.name is None for t in requested):
            # Kafka's KafkaApis: "Topic name can not be null for version N" (topic ids need v12, KIP-516)
            raise ProtocolError(f"Topic name can not be null for Metadata version {ctx.api_version}: "
                                "topic ids need Metadata v12 or later")
        topics = []
        missing: dict[int, str] = {}  # position in topics -> name to auto-create
        for t in requested:
            topic_id = getattr(t, "topic_id", None)
            if t.name is None and topic_id is not None:
                name = cache.topic_name(topic_id)
                if name and not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                    # Kafka: topic ids are not secret, so TOPIC_AUTHORIZATION_FAILED with the id and no name
                    topics.append(_error_entry(None, ErrorCode.topic_authorization_failed, topic_id))
                else:
                    topic = cache.topic(name) if name else None
                    topics.append(topic_entry(topic) if topic else
                                  _error_entry(None, ErrorCode.unknown_topic_id, topic_id))
            else:
                entry = _lookup(ctx, t.name, allow_create)
                if entry is None:
                    missing[len(topics)] = t.name
                topics.append(entry)
        if missing:
            errors = await _auto_create(broker, list(dict.fromkeys(missing.values())))
            for i, name in missing.items():
                topic = None if name in errors else cache.topic(name)
                topics[i] = topic_entry(topic) if topic else _error_entry(
                    name, errors.get(name, ErrorCode.unknown_topic_or_partition))
    if getattr(request, "include_topic_authorized_operations", False):
        for entry in topics:
            if entry["error_code"] == ErrorCode.none:
                entry["topic_authorized_operations"] = ctx.authorized_operations(ResourceType.TOPIC, entry["name"])
    return {
        "throttle_time": 0,
        "brokers": [broker_entry(b) for b in cache.alive_brokers(ctx.listener)],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
        if getattr(request, "include_cluster_authorized_operations", False) else NO_AUTHORIZED_OPERATIONS,
    }


@register(api_key=60, min_version=0, max_version=1)
async def describe_cluster(ctx: RequestContext, request) -> dict:
    """Cluster id, controller (this broker) and the live brokers (KIP-700)."""
    broker = ctx.broker
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": getattr(request, "endpoint_type", 1),
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "brokers": [broker_entry(b) for b in broker.metadata_cache.alive_brokers(ctx.listener)],
        "cluster_authorized_operations": ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
        if getattr(request, "include_cluster_authorized_operations", False) else NO_AUTHORIZED_OPERATIONS,
    }


def _describe_partitions_topic(broker, name: str, first: int, limit: int) -> tuple[dict, int]:
    """The DescribeTopicPartitions entry of topic ``name`` from partition ``first``, at most ``limit``
    partitions, and the next partition index (-1 when the topic is complete). Unknown topics get
    UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name) and next -1."""
    topic = broker.metadata_cache.topic(name)
    if topic is None:
        try:
            validate_topic_name(name)
            code = ErrorCode.unknown_topic_or_partition
        except KafkaError as exc:
            code = exc.error_code
        return {**_error_entry(name, code), "topic_authorized_operations": ALL_TOPIC_OPERATIONS}, -1
    entry = topic_entry(topic)
    upper = min(topic.num_partitions, first + limit)  # a negative first index only shortens the page, as in Kafka
    entry["partitions"] = [{**p, "eligible_leader_replicas": [], "last_known_elr": []}
                           for p in entry["partitions"][max(first, 0):max(upper, 0)]]
    entry["topic_authorized_operations"] = ALL_TOPIC_OPERATIONS
    return entry, upper if upper < topic.num_partitions else -1


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
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    if fetch_all:
        names = {n for n in broker.metadata_cache.topic_names() if n >= cursor_topic}
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
