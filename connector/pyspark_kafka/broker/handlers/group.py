"""Consumer-group APIs (classic protocol), served by :mod:`pyspark_kafka.broker.coordinator.group`.

FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14),
DescribeGroups (15), ListGroups (16), OffsetCommit (8), OffsetFetch (9), DeleteGroups (42),
OffsetDelete (47). This handler module only maps the versions' request and response fields;
the rules (and their Kafka error codes) are in the coordinator.

FindCoordinator answers the leader of the key's internal partition for groups (key type 0) and
transactional ids (key type 1) (this broker on a one-node cluster), and group
requests reaching a broker that does not lead the group's ``__consumer_offsets`` partition get
NOT_COORDINATOR (``cluster/coordinators.py``).

Authorization (with an authorizer, as Kafka's ``KafkaApis``): FindCoordinator DESCRIBE on the group
(GROUP_AUTHORIZATION_FAILED) or transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); JoinGroup,
SyncGroup, Heartbeat, LeaveGroup READ on the group; OffsetCommit READ on the group and on each topic
(TOPIC_AUTHORIZATION_FAILED); OffsetFetch DESCRIBE on the group and on each topic (topics it may not
describe are left out of an all-partitions answer); OffsetDelete DELETE on the group, READ on each
topic; DescribeGroups DESCRIBE, DeleteGroups DELETE on each group; ListGroups lists every group with
DESCRIBE on the cluster, else only the groups the principal may DESCRIBE. Versions: OffsetCommit v2-v9 and OffsetFetch v1-v9
(v10 of both name topics by id, KIP-848, and are not served).
"""

from __future__ import annotations

from pyspark_kafka.broker.coordinator.group import DEAD, STABLE, GroupCoordinator
from pyspark_kafka.broker.coordinator.offsets import OffsetAndMetadata
from pyspark_kafka.broker.handlers import RequestContext, now_ms, register
from pyspark_kafka.broker.handlers.metadata import NO_AUTHORIZED_OPERATIONS
from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.protocol import ms
from pyspark_kafka.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType

GROUP_KEY = 0
TXN_KEY = 1


def group_denied(ctx: RequestContext, operation: AclOperation, group_id: str) -> bool:
    """True when the principal may not do ``operation`` on ``group_id`` (GROUP_AUTHORIZATION_FAILED)."""
    return not ctx.authorized(operation, ResourceType.GROUP, group_id)


def _topic_denied(ctx: RequestContext, operation: AclOperation, topic: str) -> bool:
    return not ctx.authorized(operation, ResourceType.TOPIC, topic)


def _coordinator(ctx: RequestContext) -> GroupCoordinator | None:
    """The group coordinator, or None when ``__consumer_offsets`` cannot be loaded (COORDINATOR_NOT_AVAILABLE)."""
    try:
        return ctx.broker.group_coordinator.ensure_loaded()
    except KafkaError:
        return None


def not_owner(ctx: RequestContext, group_id: str) -> ErrorCode:
    """NOT_COORDINATOR when this broker does not lead ``group_id``'s ``__consumer_offsets`` partition (the client
    finds the coordinator again); NONE otherwise."""
    return ErrorCode.none if ctx.broker.group_coordinator.owns(group_id) else ErrorCode.not_coordinator


async def replicated(ctx: RequestContext, group_id: str, error: int) -> int:
    """After a successful coordinator write for ``group_id``, wait until it is complete (in a replicated
    cluster: the ISR has it, acks=all; NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE when it did not get there).
    ``error`` when the write failed."""
    if error != ErrorCode.none:
        return error
    return await ctx.broker.coordinators.group_write_done(group_id)


# --- FindCoordinator ------------------------------------------------------------------------


def _coordinator_entry(ctx: RequestContext, key: str, key_type: int) -> dict | None:
    if key_type not in (GROUP_KEY, TXN_KEY):
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.invalid_request,
                "error_message": f"key type {key_type} is not 0 (group) or 1 (transaction)"}
    if key_type == GROUP_KEY and group_denied(ctx, AclOperation.DESCRIBE, key):
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.group_authorization_failed,
                "error_message": "Group authorization failed."}
    if key_type == TXN_KEY and not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return {"key": key, "node_id": -1, "host": "", "port": -1,
                "error_code": ErrorCode.transactional_id_authorization_failed,
                "error_message": "Transactional Id authorization failed."}
    if key_type == GROUP_KEY and _coordinator(ctx) is None:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.coordinator_not_available,
                "error_message": "__consumer_offsets cannot be loaded"}
    return None  # the coordinators' placement answers (_entry)


async def _entry(ctx: RequestContext, key: str, key_type: int) -> dict:
    entry = _coordinator_entry(ctx, key, key_type)
    if entry is None:
        entry = await ctx.broker.coordinators.find(key, key_type, ctx.listener)
    return entry


@register(api_key=10, min_version=0, max_version=6)
async def find_coordinator(ctx: RequestContext, request) -> dict:
    """The coordinator of groups (key type 0) and transactional ids (1): the leader of the key's
    ``__consumer_offsets`` / ``__transaction_state`` partition."""
    key_type = getattr(request, "key_type", GROUP_KEY)
    if ctx.api_version >= 4:
        return {"throttle_time": 0,
                "coordinators": [await _entry(ctx, k, key_type) for k in request.coordinator_keys]}
    entry = await _entry(ctx, request.key, key_type)
    return {"throttle_time": 0, **entry}


# --- membership --------------------------------------------------------------------------------


def join_error(version: int, code: int) -> dict:
    """A JoinGroup error answer that encodes in every version (Kafka's ``JoinGroupRequest.getErrorResponse``):
    generation -1, leader and member id "", no members, protocol name null from v7 (nullable there) and "" below."""
    return {"throttle_time": 0, "error_code": code, "generation_id": -1, "protocol_type": None,
            "protocol_name": None if version >= 7 else "", "leader": "", "skip_assignment": False,
            "member_id": "", "members": []}


@register(api_key=11, min_version=0, max_version=9)
async def join_group(ctx: RequestContext, request) -> dict:
    """JoinGroup: answered when the join phase completes (up to the rebalance timeout)."""
    coordinator = _coordinator(ctx)
    if coordinator is None or group_denied(ctx, AclOperation.READ, request.group_id):
        code = ErrorCode.group_authorization_failed if group_denied(ctx, AclOperation.READ, request.group_id) \
            else ErrorCode.coordinator_not_available
        return join_error(ctx.api_version, code)
    if not_owner(ctx, request.group_id):
        return join_error(ctx.api_version, ErrorCode.not_coordinator)
    session_ms = ms(request.session_timeout)
    rebalance = getattr(request, "rebalance_timeout", None)
    result = await coordinator.join_group(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None), ctx.client_id or "",
        ctx.client_host, session_ms, session_ms if rebalance is None else ms(rebalance), request.protocol_type,
        [(p.name, p.metadata) for p in request.protocols], require_known_member_id=ctx.api_version >= 4,
    )
    return {
        "throttle_time": 0,
        "error_code": result.error_code,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name if ctx.api_version >= 7 else (result.protocol_name or ""),
        "leader": result.leader,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": md} for m, i, md in result.members],
    }


@register(api_key=14, min_version=0, max_version=5)
async def sync_group(ctx: RequestContext, request) -> dict:
    """SyncGroup: the leader's assignments in, each member's assignment out."""
    if group_denied(ctx, AclOperation.READ, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "assignment": b""}
    coordinator = _coordinator(ctx)
    if coordinator is None or not_owner(ctx, request.group_id):
        code = ErrorCode.coordinator_not_available if coordinator is None else ErrorCode.not_coordinator
        return {"throttle_time": 0, "error_code": code, "assignment": b""}
    result = await coordinator.sync_group(
        request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None),
        getattr(request, "protocol_type", None), getattr(request, "protocol_name", None),
        {a.member_id: a.assignment for a in request.assignments},
    )
    error = await replicated(ctx, request.group_id, result.error_code)  # the group's metadata record
    return {"throttle_time": 0, "error_code": error, "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name, "assignment": result.assignment if not error else b""}


@register(api_key=12, min_version=0, max_version=4)
async def heartbeat(ctx: RequestContext, request) -> dict:
    """Heartbeat: keeps the member's session; REBALANCE_IN_PROGRESS asks it to rejoin."""
    if group_denied(ctx, AclOperation.READ, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available}
    if not_owner(ctx, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.not_coordinator}
    error = coordinator.heartbeat(request.group_id, request.generation_id, request.member_id,
                                  getattr(request, "group_instance_id", None))
    return {"throttle_time": 0, "error_code": error}


@register(api_key=13, min_version=0, max_version=5)
async def leave_group(ctx: RequestContext, request) -> dict:
    """LeaveGroup: one member (v0-2) or a batch of members by id or instance id (v3+, KIP-345)."""
    if group_denied(ctx, AclOperation.READ, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "members": []}
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available, "members": []}
    if not_owner(ctx, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.not_coordinator, "members": []}
    if ctx.api_version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    error, errors = coordinator.leave_group(request.group_id, members)
    if ctx.api_version < 3 and error == ErrorCode.none and errors:
        error = errors[0]
    return {"throttle_time": 0, "error_code": error, "members": [
        {"member_id": m, "group_instance_id": i, "error_code": e} for (m, i), e in zip(members, errors)]}


# --- offsets -----------------------------------------------------------------------------------


@register(api_key=8, min_version=2, max_version=9)
async def offset_commit(ctx: RequestContext, request) -> dict:
    """OffsetCommit: per-partition error codes; accepted offsets are durable in ``__consumer_offsets``."""
    now = now_ms()
    retention = getattr(request, "retention_time", -1)
    retention_ms = ms(retention) if retention is not None else -1
    offsets = {}
    for t in request.topics:
        for p in t.partitions:
            offsets[(t.name, p.partition_index)] = OffsetAndMetadata(
                p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata or "", now,
                now + retention_ms if retention_ms >= 0 else -1,
            )
    coordinator = _coordinator(ctx)
    if group_denied(ctx, AclOperation.READ, request.group_id):
        errors = {tp: ErrorCode.group_authorization_failed for tp in offsets}
    elif coordinator is None:
        errors = {tp: ErrorCode.coordinator_not_available for tp in offsets}
    elif not_owner(ctx, request.group_id):
        errors = {tp: ErrorCode.not_coordinator for tp in offsets}
    else:
        denied = {t.name for t in request.topics if _topic_denied(ctx, AclOperation.READ, t.name)}
        allowed = {tp: v for tp, v in offsets.items() if tp[0] not in denied}
        errors = coordinator.commit_offsets(request.group_id, request.generation_id_or_member_epoch,
                                            request.member_id, getattr(request, "group_instance_id", None), allowed,
                                            ctx.api_version) if allowed else {}
        if any(e == ErrorCode.none for e in errors.values()):  # acks=all: the ISR has the commit
            failed = await replicated(ctx, request.group_id, ErrorCode.none)
            if failed:
                errors = {tp: failed if e == ErrorCode.none else e for tp, e in errors.items()}
        errors.update({tp: ErrorCode.topic_authorization_failed for tp in offsets if tp[0] in denied})
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": errors[(t.name, p.partition_index)]}
            for p in t.partitions]}
        for t in request.topics]}


def _fetch_group(ctx: RequestContext, coordinator, group_id: str, topics, require_stable: bool,
                 member_id: str | None = None, member_epoch: int = -1) -> tuple[int, list[dict]]:
    """``(group error, topics)`` of one OffsetFetch group; ``topics`` None means all committed partitions.
    ``member_id``/``member_epoch`` (v9+) are checked against a KIP-848 group's members. Needs DESCRIBE
    on the group (GROUP_AUTHORIZATION_FAILED); partitions of topics the principal may not DESCRIBE
    answer TOPIC_AUTHORIZATION_FAILED when named and are left out of an all-partitions answer."""
    if group_denied(ctx, AclOperation.DESCRIBE, group_id):
        return ErrorCode.group_authorization_failed, []
    if coordinator is None:
        return ErrorCode.coordinator_not_available, []
    if not group_id:
        return ErrorCode.invalid_group_id, []
    if not_owner(ctx, group_id):
        return ErrorCode.not_coordinator, []
    error = coordinator.fetch_error(group_id, member_id, member_epoch)
    if error:
        return error, []
    wanted = None
    if topics is not None:
        wanted = [(t.name, p) for t in topics for p in (getattr(t, "partition_indexes", None) or ())]
    by_topic: dict[str, list[dict]] = {}
    denied: dict[str, bool] = {}
    for (topic, partition), value, error in coordinator.fetch_offsets(group_id, wanted, require_stable):
        if topic not in denied:
            denied[topic] = _topic_denied(ctx, AclOperation.DESCRIBE, topic)
        if denied[topic]:
            if wanted is not None:
                by_topic.setdefault(topic, []).append({
                    "partition_index": partition, "committed_offset": -1, "committed_leader_epoch": -1,
                    "metadata": "", "error_code": ErrorCode.topic_authorization_failed})
            continue
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": value.offset if value else -1,
            "committed_leader_epoch": value.leader_epoch if value else -1,
            "metadata": value.metadata if value else "",
            "error_code": error,
        })
    return ErrorCode.none, [{"name": t, "partitions": parts} for t, parts in by_topic.items()]


@register(api_key=9, min_version=1, max_version=9)
async def offset_fetch(ctx: RequestContext, request) -> dict:
    """OffsetFetch: committed offset, leader epoch and metadata per partition (-1 when none)."""
    coordinator = _coordinator(ctx)
    require_stable = getattr(request, "require_stable", False)
    if ctx.api_version >= 8:
        groups = []
        for g in request.groups:
            error, topics = _fetch_group(ctx, coordinator, g.group_id, g.topics, require_stable,
                                         getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return {"throttle_time": 0, "groups": groups}
    error, topics = _fetch_group(ctx, coordinator, request.group_id, request.topics, require_stable)
    if ctx.api_version < 2 and error:  # v1 has only per-partition errors
        topics = [{"name": t.name, "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": error}
            for p in t.partition_indexes]} for t in request.topics or ()]
    return {"throttle_time": 0, "topics": topics, "error_code": error}


@register(api_key=47, min_version=0, max_version=0)
async def offset_delete(ctx: RequestContext, request) -> dict:
    """OffsetDelete (KIP-496): remove committed offsets of partitions the group no longer consumes."""
    coordinator = _coordinator(ctx)
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    denied = {t.name for t in request.topics if _topic_denied(ctx, AclOperation.READ, t.name)}
    if group_denied(ctx, AclOperation.DELETE, request.group_id):
        error, errors = ErrorCode.group_authorization_failed, {}
    elif coordinator is None:
        error, errors = ErrorCode.coordinator_not_available, {}
    elif not_owner(ctx, request.group_id):
        error, errors = ErrorCode.not_coordinator, {}
    else:
        error, errors = coordinator.delete_offsets(request.group_id, [tp for tp in wanted if tp[0] not in denied])
        errors = {**errors, **{tp: ErrorCode.topic_authorization_failed for tp in wanted if tp[0] in denied}}
    return {"error_code": error, "throttle_time": 0, "topics": [] if error else [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": errors[(t.name, p.partition_index)]}
            for p in t.partitions]}
        for t in request.topics]}


# --- admin --------------------------------------------------------------------------------------


@register(api_key=16, min_version=0, max_version=5)
async def list_groups(ctx: RequestContext, request) -> dict:
    """ListGroups: every group this coordinator knows (not Dead), with state and type filters (v4, v5)."""
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available, "groups": []}
    groups = coordinator.list_groups(getattr(request, "states_filter", ()) or (),
                                     getattr(request, "types_filter", ()) or ())
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # Kafka: DESCRIBE on the cluster lists every group, else the groups the principal may DESCRIBE
        groups = [g for g in groups if not group_denied(ctx, AclOperation.DESCRIBE, g[0])]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": [
        {"group_id": group_id, "protocol_type": protocol_type, "group_state": state, "group_type": group_type}
        for group_id, protocol_type, state, group_type in groups]}


def _with_operations(ctx: RequestContext, request, entry: dict) -> dict:
    """``entry`` with ``authorized_operations`` (the group's ACL operations bitfield) when the request asks."""
    if getattr(request, "include_authorized_operations", False) and entry["error_code"] == ErrorCode.none:
        entry["authorized_operations"] = ctx.authorized_operations(ResourceType.GROUP, entry["group_id"])
    return entry


def _describe(coordinator, group_id: str, version: int) -> dict:
    entry = {"error_code": ErrorCode.none, "error_message": None, "group_id": group_id, "group_state": DEAD,
             "protocol_type": "", "protocol_data": "", "members": [],
             "authorized_operations": NO_AUTHORIZED_OPERATIONS}
    if coordinator is None:
        return {**entry, "error_code": ErrorCode.coordinator_not_available}
    group = coordinator.groups.get(group_id)
    if group is None and group_id in coordinator.consumer.groups:  # a KIP-848 group is not a classic group
        if version >= 6:
            return {**entry, "error_code": ErrorCode.group_id_not_found,
                    "error_message": f"Group {group_id} is not a classic group."}
        return entry
    if group is None:
        if version >= 6:  # KIP-1043: unknown groups are an error from v6 on
            return {**entry, "error_code": ErrorCode.group_id_not_found, "error_message": f"Group {group_id} not found."}
        return entry
    stable = group.state == STABLE
    return {**entry, "group_state": group.state, "protocol_type": group.protocol_type or "",
            "protocol_data": group.protocol_name if stable else "",
            "members": [{
                "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                "member_assignment": m.assignment if stable else b"",
            } for m in group.members.values()]}


@register(api_key=15, min_version=0, max_version=6)
async def describe_groups(ctx: RequestContext, request) -> dict:
    """DescribeGroups: state, protocol, and members with metadata and assignment (when Stable)."""
    coordinator = _coordinator(ctx)
    return {"throttle_time": 0, "groups": [
        _with_operations(ctx, request, _describe(coordinator, g, ctx.api_version) if not not_owner(ctx, g) else
                         {**_describe(coordinator, g, 0), "error_code": ErrorCode.not_coordinator})
        if not group_denied(ctx, AclOperation.DESCRIBE, g) else
        {"error_code": ErrorCode.group_authorization_failed, "error_message": "Group authorization failed.",
         "group_id": g, "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
         "authorized_operations": NO_AUTHORIZED_OPERATIONS}
        for g in request.groups]}


@register(api_key=42, min_version=0, max_version=2)
async def delete_groups(ctx: RequestContext, request) -> dict:
    """DeleteGroups: only Empty groups (NON_EMPTY_GROUP otherwise); offsets and metadata are tombstoned."""
    coordinator = _coordinator(ctx)
    names = list(request.groups_names)
    denied = {g for g in names if group_denied(ctx, AclOperation.DELETE, g)}
    allowed = [g for g in names if g not in denied]
    results = {g: ErrorCode.coordinator_not_available for g in allowed} if coordinator is None else \
        coordinator.delete_groups(allowed) if allowed else {}
    results.update({g: ErrorCode.group_authorization_failed for g in denied})
    results.update({g: ErrorCode.not_coordinator for g in allowed if not_owner(ctx, g)})
    return {"throttle_time": 0, "results": [{"group_id": g, "error_code": results[g]} for g in names]}
