"""Topic administration: CreateTopics (19), DeleteTopics (20), CreatePartitions (37), DescribeConfigs (32),
AlterConfigs (33), IncrementalAlterConfigs (44).

Limits: one CreateTopics or CreatePartitions request may create at most 10,000 partitions in all
(Kafka's controller: POLICY_VIOLATION "Excessively large number of partitions per request."), and
the broker at most as many as its open-file limit allows (POLICY_VIOLATION naming the limit;
:func:`~pyspark_kafka.broker.log.manager.partition_capacity`). DeleteTopics refuses the internal
topics with POLICY_VIOLATION (Apache Kafka deletes them; a deliberate difference).

CreateTopics, CreatePartitions and DeleteTopics are forwarded to the active controller
(placement and Kafka's errors in :mod:`~pyspark_kafka.broker.controller.partition_admin`), answered once this
broker's metadata image has the change; ``delete.topic.enable=false`` answers TOPIC_DELETION_DISABLED.

The controller checks replication factors and manual assignments against the registered brokers
(INVALID_REPLICATION_FACTOR (38) / INVALID_REPLICA_ASSIGNMENT (39)). ``num_partitions`` -1 means
``num.partitions``. ``validate_only`` checks everything and creates nothing. Errors are per topic, with
Kafka's codes and a message naming the fix.

DescribeConfigs serves topic (2), broker (4; "" is the cluster-default level) and group (32: every group config,
the group's own value or its default) resources; config sources follow Kafka:
DYNAMIC_TOPIC_CONFIG (1) for a topic override, DYNAMIC_BROKER_CONFIG (2) / DYNAMIC_DEFAULT_BROKER_CONFIG (3) for a
dynamic broker config, STATIC_BROKER_CONFIG (4) for a broker setting given at start, DEFAULT_CONFIG (5) otherwise,
GROUP_CONFIG (8) for a group's own config.

AlterConfigs replaces all of a topic's overrides with those given; IncrementalAlterConfigs applies
SET (0), DELETE (1), APPEND (2) and SUBTRACT (3, list configs: ``cleanup.policy``) per config.
Both validate as CreateTopics does (INVALID_CONFIG naming the config), honour ``validate_only``,
and go through the controller (one ``config`` record in the metadata log, Kafka's
``ConfigRecord``) and every broker applies it; DescribeConfigs of a topic answers from the metadata image there.
Broker and group resources: :mod:`~pyspark_kafka.broker.dynamic_config` validates them and applies them as
Kafka's ``DynamicBrokerConfig`` / ``GroupConfig``, through the controller (one ``dynamic_config`` metadata record
every broker concerned applies).
Errors per resource, as Kafka: INVALID_REQUEST for a null value (other than DELETE), a config
named twice, a resource named twice, another broker's id or another resource type;
UNKNOWN_TOPIC_OR_PARTITION; INVALID_TOPIC_EXCEPTION.

Authorization (with an authorizer, as Kafka's ``ControllerApis`` / ``ConfigAdminManager``): CreateTopics
needs CREATE, DeleteTopics DELETE, CreatePartitions ALTER, each on the cluster or on the topic, else
TOPIC_AUTHORIZATION_FAILED "Authorization failed." for that topic (a created topic's configs are
left out unless the principal may DESCRIBE_CONFIGS it); DescribeConfigs needs DESCRIBE_CONFIGS and
AlterConfigs / IncrementalAlterConfigs ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or,
for a broker resource, on the cluster (CLUSTER_AUTHORIZATION_FAILED), for a group on the group
(GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import uuid

from pyspark_kafka.broker.config import BROKER_DEFAULTS, TOPIC_CONFIG_TO_BROKER, config_type, is_sensitive
from pyspark_kafka.broker.topic_config import topic_config_values, validate_topic_config, validate_topic_name
from pyspark_kafka.broker.dynamic_config import GROUP_CONFIG_DEFAULTS, extra_dynamic_configs, is_dynamic
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.errors import (
    ClusterAuthorizationError,
    ErrorCode,
    GroupAuthorizationError,
    InvalidRequestError,
    KafkaError,
    NotControllerError,
    PolicyViolationError,
    TopicAuthorizationError,
    UnknownTopicOrPartitionError,
    for_code,
)
from pyspark_kafka.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from pyspark_kafka.broker.coordinator.internal_topics import INTERNAL_TOPICS
from pyspark_kafka.broker.log.manager import MAX_PARTITIONS_PER_REQUEST, OP_DELETE, OP_SET, merge_topic_configs


TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32  # Kafka's ConfigResource.Type.GROUP (KIP-848)
_DENIED = "Authorization failed."  # Kafka's ControllerApis message for a topic it may not create/delete/alter


def _topic_check(ctx: RequestContext, operation: AclOperation):
    """``allowed(topic) -> bool``: ``operation`` on the cluster (asked once) or on the topic
    (Kafka's ``ControllerApis``: CREATE for CreateTopics, DELETE for DeleteTopics, ALTER for CreatePartitions)."""
    if ctx.authorized(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return lambda name: True
    return lambda name: ctx.authorized(operation, ResourceType.TOPIC, name)


def _config_check(ctx: RequestContext, operation: AclOperation, resource_type: int, name: str) -> None:
    """Raise the authorization error for ``operation`` (DESCRIBE_CONFIGS / ALTER_CONFIGS) on a topic or broker resource."""
    if resource_type == TOPIC_RESOURCE and not ctx.authorized(operation, ResourceType.TOPIC, name):
        raise TopicAuthorizationError()
    if resource_type == BROKER_RESOURCE and not ctx.authorized(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        raise ClusterAuthorizationError()
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
GROUP_CONFIG = 8


async def _forward_create_topics(manager, request, validate_only: bool, may_create) -> dict:
    """CreateTopics in a replicated cluster: forwarded to the controller (replica assignment there); answered
    once this broker's metadata image has the new topics (at most 5 s), like Kafka's forwarding. Topics the
    principal may not create (``may_create(name)`` False) are answered TOPIC_AUTHORIZATION_FAILED, not forwarded."""
    denied = {t.name: {"error_code": int(ErrorCode.topic_authorization_failed), "error_message": _DENIED}
              for t in request.topics if not may_create(t.name)}
    asked = [{"name": t.name, "partitions": t.num_partitions, "replication_factor": t.replication_factor,
              "configs": {c.name: c.value for c in t.configs},
              "assignments": [[int(a.partition_index), [int(b) for b in a.broker_ids]] for a in t.assignments or ()]}
             for t in request.topics if t.name not in denied]
    try:
        answer = await manager.call({"op": "create_topics", "topics": asked, "validate_only": validate_only})
        by_name = {**{r["name"]: r for r in answer["topics"]}, **denied}
    except ConnectionError as exc:
        by_name = {**{t["name"]: {"error_code": int(ErrorCode.not_controller), "error_message": str(exc)}
                      for t in asked}, **denied}
    await manager.wait_for_topics(n for n, r in by_name.items() if r["error_code"] == 0 and not validate_only)
    results = []
    for t in request.topics:
        r = by_name.get(t.name, {"error_code": int(ErrorCode.unknown_server_error)})
        ok = r["error_code"] == 0
        topic_id = r.get("topic_id")
        results.append({"name": t.name, "topic_id": uuid.UUID(topic_id) if ok and topic_id else None,
                        "error_code": ErrorCode(r["error_code"]), "error_message": r.get("error_message"),
                        "num_partitions": r.get("partitions", -1) if ok else -1,
                        "replication_factor": r.get("replication_factor", -1) if ok else -1, "configs": []})
    return {"throttle_time": 0, "topics": results}


@register(api_key=19, min_version=2, max_version=7)
async def create_topics(ctx: RequestContext, request) -> dict:
    """Create each topic (or only validate it), reporting per-topic errors."""
    broker = ctx.broker
    validate_only = getattr(request, "validate_only", False)
    may_create = _topic_check(ctx, AclOperation.CREATE)
    return await _forward_create_topics(broker.forwarding, request, validate_only, may_create)


@register(api_key=20, min_version=1, max_version=6)
async def delete_topics(ctx: RequestContext, request) -> dict:
    """Delete each topic (by name, or by topic id from v6) with its logs."""
    broker = ctx.broker
    if hasattr(request, "topics"):
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    may_delete = _topic_check(ctx, AclOperation.DELETE)
    responses = []
    for name, topic_id in wanted:
        error_code, message = ErrorCode.none, None
        if name is None and topic_id is not None:
            name = broker.metadata_cache.topic_name(topic_id)
            if name is None:
                error_code, message = ErrorCode.unknown_topic_id, f"no topic has id {topic_id}"
            elif not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                name, error_code, message = None, ErrorCode.topic_authorization_failed, _DENIED
        if error_code == ErrorCode.none and not may_delete(name):
            error_code, message = ErrorCode.topic_authorization_failed, _DENIED
        if error_code == ErrorCode.none and name in INTERNAL_TOPICS:
            # Deliberate difference: Apache Kafka 4.3 deletes them (and loses every group's offsets or
            # every transaction's state); the coordinators here keep their state only in these topics.
            error_code = PolicyViolationError.error_code
            message = (f"internal topic {name} cannot be deleted: it holds the "
                       f"{'group' if name == '__consumer_offsets' else 'transaction'} coordinator's state")
        responses.append({"name": name, "topic_id": topic_id, "error_code": error_code, "error_message": message})
    accepted = [r for r in responses if r["error_code"] == ErrorCode.none]

    async def forwarded(manager) -> None:  # the controller writes RemoveTopic records; every broker deletes its logs
        if broker.config.get("delete.topic.enable") != "true":  # Kafka's ControllerApis.deleteTopics
            for r in accepted:
                r.update(error_code=ErrorCode.topic_deletion_disabled, error_message="Topic deletion is disabled.")
            return
        names = [r["name"] for r in accepted]
        by_name = await manager.forward_by_topic({"op": "delete_topics", "names": names}, names) if names else {}
        for r in accepted:
            answer = by_name.get(r["name"])
            if answer is not None:
                r.update(error_code=ErrorCode(answer["error_code"]), error_message=answer.get("error_message"))
                if answer.get("topic_id"):
                    r["topic_id"] = uuid.UUID(answer["topic_id"])

    await forwarded(broker.forwarding)
    return {"throttle_time": 0, "responses": responses}


@register(api_key=37, min_version=0, max_version=3)
async def create_partitions(ctx: RequestContext, request) -> dict:
    """Raise each topic's partition count to ``count`` (never lower: INVALID_PARTITIONS)."""
    broker = ctx.broker
    counts = broker.metadata_cache.partition_counts()
    added = sum(max(0, t.count - counts.get(t.name, 0)) for t in request.topics)
    may_alter = _topic_check(ctx, AclOperation.ALTER)
    results = []
    for topic in request.topics:
        error_code, message = ErrorCode.none, None
        if not may_alter(topic.name):
            error_code, message = TopicAuthorizationError.error_code, _DENIED
        elif added > MAX_PARTITIONS_PER_REQUEST:
            error_code, message = PolicyViolationError.error_code, "Excessively large number of partitions per request."
        results.append({"name": topic.name, "error_code": error_code, "error_message": message})
    accepted = [(t, r) for t, r in zip(request.topics, results) if r["error_code"] == ErrorCode.none]

    async def forwarded(manager) -> None:  # the controller places the new partitions (Kafka forwards them)
        asked = [{"name": t.name, "count": t.count,
                  "assignments": None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]}
                 for t, _ in accepted]
        if not asked:
            return
        by_name = await manager.forward_by_topic({"op": "create_partitions", "topics": asked,
                                                  "validate_only": request.validate_only}, [t["name"] for t in asked])
        for _, r in accepted:
            answer = by_name.get(r["name"])
            if answer is not None:
                r.update(error_code=ErrorCode(answer["error_code"]), error_message=answer.get("error_message"))

    await forwarded(broker.forwarding)
    return {"throttle_time": 0, "results": results}


def _config_entry(name, value, source, read_only, synonyms) -> dict:
    sensitive = is_sensitive(name)  # Kafka's PASSWORD configs: described without their value
    if sensitive:
        value = None
        synonyms = [dict(s, value=None) for s in synonyms]
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_sensitive": sensitive, "synonyms": synonyms,
            "config_type": config_type(name), "documentation": None}


def topic_configs(broker, topic: str, include_synonyms: bool) -> list[dict]:
    """DescribeConfigs entries of ``topic``: every topic config, overrides flagged as such.

    Synonyms and source as Kafka's ``ConfigHelper.createTopicConfigEntry``: the topic override
    (DYNAMIC_TOPIC_CONFIG), then the broker config supplying the default when that very name has
    a value (STATIC_BROKER_CONFIG when given, DEFAULT_CONFIG for Kafka's default; see
    :meth:`BrokerConfig.synonym_source`); the source is the first synonym's, DEFAULT_CONFIG without one.
    """
    entries = []
    overrides = broker.metadata_cache.topic_configs(topic)  # in a cluster: also a topic with no replica here
    if overrides is None:
        raise UnknownTopicOrPartitionError(f"This server does not host this topic: {topic!r}")
    for name, value, is_default in topic_config_values(broker.config, overrides):
        broker_name = TOPIC_CONFIG_TO_BROKER.get(name)
        synonyms = []
        if not is_default:
            synonyms.append({"name": name, "value": value, "source": DYNAMIC_TOPIC_CONFIG})
        if broker_name is not None:  # a dynamic broker config supplying the default (Kafka's precedence)
            synonyms += [{"name": broker_name, "value": v, "source": src}
                         for v, src in broker.dynamic_configs.source(broker_name)]
        where = broker.config.synonym_source(broker_name) if broker_name is not None else None
        if where is not None:
            synonyms.append({"name": broker_name, "value": broker.config.static_value(broker_name),
                             "source": STATIC_BROKER_CONFIG if where == "static" else DEFAULT_CONFIG})
        source = synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
        entries.append(_config_entry(name, value, source, False, synonyms if include_synonyms else []))
    return entries


def _broker_entry(broker, name: str, value, include_synonyms: bool, cluster_default: bool) -> dict:
    """One DescribeConfigs entry of a broker config, as Kafka's ``ConfigHelper.createBrokerConfigEntry``: synonyms in
    precedence order (DYNAMIC_BROKER_CONFIG 2, DYNAMIC_DEFAULT_BROKER_CONFIG 3, STATIC_BROKER_CONFIG 4,
    DEFAULT_CONFIG 5; only 3 for the cluster-default resource), the source the first synonym's, read-only unless
    Kafka can change the config dynamically."""
    dynamic = broker.dynamic_configs
    synonyms = [{"name": name, "value": v, "source": src} for v, src in dynamic.source(name)]
    if not broker.config.is_default(name):
        synonyms.append({"name": name, "value": broker.config.static_value(name), "source": STATIC_BROKER_CONFIG})
    if name in BROKER_DEFAULTS and BROKER_DEFAULTS[name] is not None:
        synonyms.append({"name": name, "value": BROKER_DEFAULTS[name], "source": DEFAULT_CONFIG})
    elif name in extra_dynamic_configs():
        synonyms.append({"name": name, "value": extra_dynamic_configs()[name][2], "source": DEFAULT_CONFIG})
    if cluster_default:
        synonyms = [s for s in synonyms if s["source"] == DYNAMIC_DEFAULT_BROKER_CONFIG]
    source = synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
    return _config_entry(name, value, source, not is_dynamic(name), synonyms if include_synonyms else [])


def broker_configs(broker, include_synonyms: bool) -> list[dict]:
    """DescribeConfigs entries of this broker: every broker config with the value in force (a dynamic one set by
    AlterConfigs over the static one), and the dynamic configs set here that BROKER_DEFAULTS does not hold."""
    entries = [_broker_entry(broker, name, value, include_synonyms, False)
               for name, value, _ in broker.config.items()]
    extra = broker.dynamic_configs.effective()
    entries += [_broker_entry(broker, name, extra[name], include_synonyms, False)
                for name in sorted(extra) if name in extra_dynamic_configs() and name not in BROKER_DEFAULTS]
    for name in sorted(n for n in extra if n not in BROKER_DEFAULTS and n not in extra_dynamic_configs()
                       and broker.config.get_if_set(n) is None):
        # a name Kafka does not know: Kafka 4.3.1 lists it without its value (no type: maybe sensitive), read-only
        source = broker.dynamic_configs.source(name)[0][1]
        synonyms = [{"name": name, "value": None, "source": source}] if include_synonyms else []
        entries.append({"name": name, "value": None, "read_only": True, "config_source": source,
                        "is_sensitive": True, "synonyms": synonyms, "config_type": 0, "documentation": None})
    return entries


def default_broker_configs(broker, include_synonyms: bool) -> list[dict]:
    """DescribeConfigs entries of the cluster-default broker resource (name ""): the configs set at that level
    (DYNAMIC_DEFAULT_BROKER_CONFIG), as Kafka lists them."""
    level = broker.dynamic_configs.cluster_default
    return [_broker_entry(broker, name, level[name], include_synonyms, True)
            for name in sorted(level) if name in BROKER_DEFAULTS or name in extra_dynamic_configs()]


def group_configs(broker, group_id: str, include_synonyms: bool) -> list[dict]:
    """DescribeConfigs entries of a group (any group id, known or not, as Kafka): every group config, the group's own
    value (GROUP_CONFIG 8, set by AlterConfigs) else its default (DEFAULT_CONFIG); none read-only."""
    own = broker.dynamic_configs.groups.get(group_id, {})
    entries = []
    for name in GROUP_CONFIG_DEFAULTS:
        value = broker.dynamic_configs.group_value(group_id, name)
        source = GROUP_CONFIG if name in own else DEFAULT_CONFIG
        synonyms = [{"name": name, "value": value, "source": source}] if include_synonyms else []
        entries.append(_config_entry(name, value, source, False, synonyms))
    return entries


@register(api_key=32, min_version=1, max_version=4)
async def describe_configs(ctx: RequestContext, request) -> dict:
    """Configs of topic and broker resources, optionally limited to ``configuration_keys``."""
    broker = ctx.broker
    synonyms = getattr(request, "include_synonyms", False)
    results = []
    for res in request.resources:
        error_code, message, configs = ErrorCode.none, None, []
        try:
            _config_check(ctx, AclOperation.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
            if res.resource_type == TOPIC_RESOURCE:
                validate_topic_name(res.resource_name)
                configs = topic_configs(broker, res.resource_name, synonyms)
            elif res.resource_type == GROUP_RESOURCE:
                if not ctx.authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.GROUP, res.resource_name):
                    raise GroupAuthorizationError()
                configs = group_configs(broker, res.resource_name, synonyms)
            elif res.resource_type == BROKER_RESOURCE:
                if res.resource_name not in ("", str(broker.node_id)):
                    raise InvalidRequestError(f"broker {res.resource_name!r} is not this broker ({broker.node_id})")
                configs = (broker_configs(broker, synonyms) if res.resource_name
                           else default_broker_configs(broker, synonyms))
            else:
                raise InvalidRequestError(f"resource type {res.resource_type} is not supported: use topic (2) or broker (4)")
        except KafkaError as exc:
            error_code, message = exc.error_code, str(exc)
        if res.configuration_keys is not None:
            keys = set(res.configuration_keys)
            configs = [c for c in configs if c["name"] in keys]
        results.append({"error_code": error_code, "error_message": message, "resource_type": res.resource_type,
                        "resource_name": res.resource_name, "configs": configs})
    return {"throttle_time": 0, "results": results}


async def _forward_topic_configs(manager, broker, res, incremental: bool, validate_only: bool) -> None:
    """A replicated broker's AlterConfigs / IncrementalAlterConfigs of a topic: the new overrides are computed from
    the metadata image's and validated here, then (unless ``validate_only``) the controller writes them as one
    ``config`` record and this broker waits until its image has it. Raises UnknownTopicOrPartitionError,
    InvalidConfigError, or the controller's error (NOT_CONTROLLER when none answers)."""
    current = broker.metadata_cache.topic_configs(res.resource_name)
    if current is None:
        raise UnknownTopicOrPartitionError(f"Topic {res.resource_name!r} does not exist")
    if incremental:
        configs = merge_topic_configs(current, [(c.name, c.config_operation, c.value) for c in res.configs],
                                      broker.config)
    else:
        configs = {k: v for k, v in ((c.name, validate_topic_config(c.name, c.value)) for c in res.configs)
                   if v is not None}
    if validate_only:
        return
    try:
        answer = await manager.forward({"op": "alter_topic_configs", "name": res.resource_name, "configs": configs})
    except ConnectionError as exc:
        raise NotControllerError(f"no controller answered: {exc}") from None
    if answer["error_code"]:
        error = for_code(answer["error_code"])(answer.get("error_message"))
        error.error_code = ErrorCode(answer["error_code"])  # also a code no exception class here carries
        raise error


async def _alter_dynamic(ctx: RequestContext, res, incremental: bool, validate_only: bool) -> None:
    """AlterConfigs / IncrementalAlterConfigs of a broker resource (this broker's dynamic configs, or the cluster
    default for the name "") or of a group (its group configs): :class:`~pyspark_kafka.broker.dynamic_config.
    DynamicConfigs` validates, stores and applies. In a replicated cluster this broker validates and the controller
    writes the new set as one ``dynamic_config`` metadata record that every broker concerned applies (Kafka's
    ``ConfigRecord``); answered once this broker's image has it."""
    broker = ctx.broker
    ops = [(c.name, c.config_operation, c.value) for c in res.configs] if incremental else None
    replace = None if incremental else {c.name: c.value for c in res.configs}
    if res.resource_type == GROUP_RESOURCE and \
            not ctx.authorized(AclOperation.ALTER_CONFIGS, ResourceType.GROUP, res.resource_name):
        raise GroupAuthorizationError()

    def alter(only_validate: bool) -> dict:
        if res.resource_type == GROUP_RESOURCE:
            return broker.dynamic_configs.alter_group(res.resource_name, ops, replace, only_validate)
        return broker.dynamic_configs.alter_broker(res.resource_name != "", ops, replace, only_validate)

    async def forwarded(manager) -> None:  # validated here, then written by the controller as a metadata record
        configs = alter(True)
        if validate_only:
            return
        request = {"op": "alter_dynamic_configs", "resource": "group" if res.resource_type == GROUP_RESOURCE
                   else "broker", "name": res.resource_name, "configs": configs}
        try:
            answer = await manager.forward(request)
        except ConnectionError as exc:
            raise NotControllerError(f"no controller answered: {exc}") from None
        if answer["error_code"]:
            raise for_code(answer["error_code"])(answer.get("error_message"))

    await forwarded(broker.forwarding)


async def _alter_configs(ctx: RequestContext, request, incremental: bool) -> dict:
    """AlterConfigs / IncrementalAlterConfigs: per resource, check and apply (or only validate)."""
    seen = [(res.resource_type, res.resource_name) for res in request.resources]
    responses = []
    for res in request.resources:
        error_code, message = ErrorCode.none, None
        try:
            if seen.count((res.resource_type, res.resource_name)) > 1:
                raise InvalidRequestError(f"resource {res.resource_name!r} (type {res.resource_type}) appears more "
                                          "than once in the request")
            names = [c.name for c in res.configs]
            nulls = [c.name for c in res.configs
                     if c.value is None and getattr(c, "config_operation", OP_SET) != OP_DELETE]
            if nulls:
                raise InvalidRequestError(f"Null value not supported for : {', '.join(nulls)}")
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise InvalidRequestError(f"Error due to duplicate config keys : {', '.join(duplicates)}")
            _config_check(ctx, AclOperation.ALTER_CONFIGS, res.resource_type, res.resource_name)
            node = str(ctx.broker.node_id)
            if res.resource_type == BROKER_RESOURCE and res.resource_name not in ("", node):
                # checked once authorized, as Kafka 4.4 (4.3 checked it first: INVALID_REQUEST to a principal
                # without ALTER_CONFIGS on the cluster, where 4.4 answers CLUSTER_AUTHORIZATION_FAILED)
                raise InvalidRequestError(f"Unexpected broker id, expected {node} or empty string, but received "
                                          f"{res.resource_name}")
            if res.resource_type in (BROKER_RESOURCE, GROUP_RESOURCE):
                await _alter_dynamic(ctx, res, incremental, request.validate_only)
                responses.append({"error_code": error_code, "error_message": message,
                                  "resource_type": res.resource_type, "resource_name": res.resource_name})
                continue
            if res.resource_type != TOPIC_RESOURCE:
                raise InvalidRequestError(f"resource type {res.resource_type} is not supported: only topic (2), "
                                          "broker (4) and group (32) configs can be altered")
            validate_topic_name(res.resource_name)
            # the controller writes it as a config record, every broker applies it
            await _forward_topic_configs(ctx.broker.forwarding, ctx.broker, res, incremental, request.validate_only)
        except KafkaError as exc:
            error_code, message = exc.error_code, str(exc)
        responses.append({"error_code": error_code, "error_message": message, "resource_type": res.resource_type,
                          "resource_name": res.resource_name})
    return {"throttle_time": 0, "responses": responses}


@register(api_key=33, min_version=0, max_version=2)
async def alter_configs(ctx: RequestContext, request) -> dict:
    """Replace each topic's config overrides with the given set."""
    return await _alter_configs(ctx, request, incremental=False)


@register(api_key=44, min_version=0, max_version=1)
async def incremental_alter_configs(ctx: RequestContext, request) -> dict:
    """Apply SET/DELETE/APPEND/SUBTRACT to each topic's config overrides."""
    return await _alter_configs(ctx, request, incremental=True)
