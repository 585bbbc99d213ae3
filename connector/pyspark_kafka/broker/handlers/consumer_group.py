"""KIP-848 consumer-group APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), v0-v1 as Kafka 4.3.1.

This module maps the versions' fields (topic ids on the wire, names inside) to
:class:`~pyspark_kafka.broker.coordinator.consumer_group.ConsumerGroupCoordinator`; the rules and
their error codes live there. v1 of ConsumerGroupHeartbeat requires a client-generated member id
and adds ``SubscribedTopicRegex``; v1 of ConsumerGroupDescribe adds ``MemberType`` (1: consumer).

Authorization (with an authorizer, as Kafka's ``KafkaApis``): ConsumerGroupHeartbeat needs READ on
the group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every subscribed topic name
(TOPIC_AUTHORIZATION_FAILED); ConsumerGroupDescribe DESCRIBE on each group.
"""

from __future__ import annotations

from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.handlers.group import _coordinator, _with_operations, group_denied, not_owner
from pyspark_kafka.broker.handlers.metadata import NO_AUTHORIZED_OPERATIONS
from pyspark_kafka.broker.metadata_cache import MetadataCache
from pyspark_kafka.broker.protocol import ms
from pyspark_kafka.broker.security.acls import AclOperation, ResourceType

CONSUMER_MEMBER_TYPE = 1  # ConsumerGroupDescribe v1 MemberType: 0 classic, 1 consumer


def _by_topic_id(metadata_cache: MetadataCache, partitions) -> list[dict]:
    """``[{topic_id, topic_name, partitions}]`` of ``(topic, partition)`` pairs, topic ids from the broker's
    metadata cache (topics that no longer exist are left out)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = []
    for topic, parts in by_topic.items():
        topic_id = metadata_cache.topic_id(topic)
        if topic_id is not None:
            out.append({"topic_id": topic_id, "topic_name": topic, "partitions": parts})
    return out


@register(api_key=68, min_version=0, max_version=1)
async def consumer_group_heartbeat(ctx: RequestContext, request) -> dict:
    """ConsumerGroupHeartbeat: join, heartbeat, leave; the member's epoch and (when changed) its assignment."""
    denied = None
    if group_denied(ctx, AclOperation.READ, request.group_id):
        denied = ErrorCode.group_authorization_failed, "Group authorization failed."
    elif any(not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, t)
             for t in request.subscribed_topic_names or ()):
        # Kafka: a member may not subscribe to topics it cannot DESCRIBE (their names are not disclosed)
        denied = ErrorCode.topic_authorization_failed, "Topic authorization failed."
    if denied is not None:
        return {"throttle_time": 0, "error_code": denied[0], "error_message": denied[1], "member_id": None,
                "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available,
                "error_message": "__consumer_offsets cannot be loaded", "member_id": None, "member_epoch": 0,
                "heartbeat_interval": 0, "assignment": None}
    if not_owner(ctx, request.group_id):  # replicated cluster: another broker coordinates the group
        return {"throttle_time": 0, "error_code": ErrorCode.not_coordinator,
                "error_message": "this broker is not the group's coordinator: find it again", "member_id": None,
                "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}
    cgc = coordinator.consumer
    owned = None
    if request.topic_partitions is not None:
        owned = []
        for tp in request.topic_partitions:
            name = ctx.broker.metadata_cache.topic_name(tp.topic_id) if tp.topic_id is not None else None
            if name is not None:  # partitions of deleted topics are no longer owned
                owned += [(name, p) for p in tp.partitions]
    timeout = request.rebalance_timeout
    result = cgc.heartbeat(
        ctx.api_version, request.group_id, request.member_id, request.member_epoch, request.instance_id,
        request.rack_id, -1 if timeout is None else ms(timeout), request.subscribed_topic_names,
        getattr(request, "subscribed_topic_regex", None), request.server_assignor, owned, ctx.client_id or "",
        ctx.client_host,
    )
    assignment = None
    if result.assignment is not None:
        assignment = {"topic_partitions": [{"topic_id": t["topic_id"], "partitions": t["partitions"]}
                                           for t in _by_topic_id(ctx.broker.metadata_cache, result.assignment)]}
    return {"throttle_time": 0, "error_code": result.error_code, "error_message": result.error_message,
            "member_id": result.member_id, "member_epoch": result.member_epoch,
            "heartbeat_interval": result.heartbeat_interval_ms, "assignment": assignment}


def _describe(coordinator, metadata_cache: MetadataCache, group_id: str) -> dict:
    entry = {"error_code": ErrorCode.none, "error_message": None, "group_id": group_id, "group_state": "",
             "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
             "authorized_operations": NO_AUTHORIZED_OPERATIONS}
    if coordinator is None:
        return {**entry, "error_code": ErrorCode.coordinator_not_available}
    if not group_id:
        return {**entry, "error_code": ErrorCode.invalid_group_id, "error_message": "Group id can't be empty."}
    cgc = coordinator.consumer
    group = cgc.groups.get(group_id)
    if group is None:
        message = f"Group {group_id} is not a consumer group." if group_id in coordinator.groups else \
            f"Group {group_id} not found."
        return {**entry, "error_code": ErrorCode.group_id_not_found, "error_message": message}
    return {**entry, "group_state": group.state, "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch, "assignor_name": group.assignor(cgc.assignor_names[0]),
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.topic_names), "subscribed_topic_regex": m.topic_regex or "",
                "assignment": {"topic_partitions": _by_topic_id(metadata_cache, m.assigned)},
                "target_assignment": {"topic_partitions": _by_topic_id(metadata_cache,
                                                                       group.target.get(m.member_id, ()))},
                "member_type": CONSUMER_MEMBER_TYPE,
            } for m in group.members.values()]}


@register(api_key=69, min_version=0, max_version=1)
async def consumer_group_describe(ctx: RequestContext, request) -> dict:
    """ConsumerGroupDescribe: epochs, assignor, members with current and target assignments; unknown or
    classic groups get GROUP_ID_NOT_FOUND. A group this broker does not coordinate (another broker leads its
    ``__consumer_offsets`` partition, or this one has not loaded it yet, as after a restart's election) gets
    NOT_COORDINATOR, which clients retry after FindCoordinator (Kafka's ``CoordinatorRuntime`` read operation on a
    partition it does not own), not GROUP_ID_NOT_FOUND."""
    coordinator = _coordinator(ctx)
    return {"throttle_time": 0, "groups": [
        ({**_describe(coordinator, ctx.broker.metadata_cache, g), "error_code": ErrorCode.not_coordinator,
          "error_message": None}
         if coordinator is not None and g and not_owner(ctx, g) else
         _with_operations(ctx, request, _describe(coordinator, ctx.broker.metadata_cache, g)))
        if not group_denied(ctx, AclOperation.DESCRIBE, g)
        else
        {"error_code": ErrorCode.group_authorization_failed, "error_message": "Group authorization failed.",
         "group_id": g, "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
         "members": [], "authorized_operations": NO_AUTHORIZED_OPERATIONS}
        for g in request.group_ids]}
