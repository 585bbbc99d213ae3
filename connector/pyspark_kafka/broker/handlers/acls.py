"""ACL administration: DescribeAcls (29), CreateAcls (30), DeleteAcls (31), v1-v3 as Kafka 4.3.1 (KIP-896
removed v0).

The ACLs live in the broker's :class:`~pyspark_kafka.broker.security.authorizer.StandardAuthorizer`:
they are the broker's metadata image's (a one-node cluster's too), and CreateAcls / DeleteAcls are forwarded to the active controller (``broker.forwarding``, Kafka
4's ``KafkaApis`` forwards both), which validates them with the same rules, writes ``acl`` / ``remove_acl``
records (:mod:`~pyspark_kafka.broker.controller.acl_control`, Kafka's ``AclControlManager``) and answers;
the receiving broker answers once its own image has the records (at most 5 s), every other broker applies
them as its metadata arrives. DescribeAcls answers from this broker's ACLs. As Kafka's ``AclApis``:

- no authorizer (``authorizer.class.name`` empty): SECURITY_DISABLED (54) "No Authorizer is configured.";
- DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER on the cluster, else
  CLUSTER_AUTHORIZATION_FAILED (31) for the request (each creation / filter);
- a creation Kafka refuses (unknown or ANY codes, a CLUSTER resource not named ``kafka-cluster``, an
  empty name, a principal without ``Type:``) gets INVALID_REQUEST (42) with Kafka's message, the
  others of the request are still created; creating an existing ACL succeeds and keeps it once;
- a filter with an UNKNOWN code gets INVALID_REQUEST; DeleteAcls answers each filter with the ACLs it
  removed (an ACL matched by two filters is listed under both, removed once).
"""

from __future__ import annotations

from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.security.acls import (CLUSTER_NAME, AclBinding, AclFilter, AclOperation, ResourceType,
                                                validate_filter)

NO_AUTHORIZER = "No Authorizer is configured."
CLUSTER_DENIED = "Cluster authorization failed."


def _refusal(ctx: RequestContext, operation: AclOperation) -> tuple[int, str] | None:
    """``(error code, message)`` when the request may not be served, else None."""
    if getattr(ctx.broker, "authorizer", None) is None:
        return ErrorCode.security_disabled, NO_AUTHORIZER
    if not ctx.authorized(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed, CLUSTER_DENIED
    return None


@register(api_key=30, min_version=1, max_version=3)
async def create_acls(ctx: RequestContext, request) -> dict:
    """Create each valid ACL binding (one durable write); per creation: none or its error."""
    refused = _refusal(ctx, AclOperation.ALTER)
    if refused is not None:
        return {"throttle_time": 0, "results": [{"error_code": refused[0], "error_message": refused[1]}
                                                for _ in request.creations]}
    bindings = [AclBinding.from_wire(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                                     c.operation, c.permission_type) for c in request.creations]

    async def forwarded(manager) -> list[dict]:
        try:
            answer = await manager.forward({"op": "create_acls", "creations": [b.to_json() for b in bindings]})
        except ConnectionError as exc:
            return [{"error_code": ErrorCode.not_controller, "error_message": str(exc)} for _ in bindings]
        return _answered(answer, [{"error_code": answer["error_code"], "error_message": answer.get("error_message")}
                                  for _ in bindings])

    results = await forwarded(ctx.broker.forwarding)
    return {"throttle_time": 0, "results": results}


def _answered(answer: dict, failed: list[dict]) -> list[dict]:
    """The controller's per-item ``results``, or ``failed`` when it refused the whole request."""
    return answer["results"] if answer.get("error_code") == 0 else failed


def _described(bindings) -> list[dict]:
    """DescribeAcls resources: bindings grouped by resource pattern, in a stable order."""
    by_pattern: dict[tuple, list[dict]] = {}
    for b in sorted(bindings):
        by_pattern.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            {"principal": b.principal, "host": b.host, "operation": b.operation, "permission_type": b.permission})
    return [{"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in by_pattern.items()]


@register(api_key=29, min_version=1, max_version=3)
async def describe_acls(ctx: RequestContext, request) -> dict:
    """The ACL bindings matching the request's filter, grouped by resource pattern."""
    refused = _refusal(ctx, AclOperation.DESCRIBE)
    if refused is not None:
        return {"throttle_time": 0, "error_code": refused[0], "error_message": refused[1], "resources": []}
    acl_filter = AclFilter.from_wire(request)
    try:
        validate_filter(acl_filter)
    except KafkaError as exc:
        return {"throttle_time": 0, "error_code": exc.error_code, "error_message": str(exc), "resources": []}
    matching = [b for b in ctx.broker.authorizer.bindings if acl_filter.matches(b)]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "resources": _described(matching)}


def _matching_acl(b: AclBinding) -> dict:
    return {"error_code": ErrorCode.none, "error_message": None, "resource_type": b.resource_type,
            "resource_name": b.resource_name, "pattern_type": b.pattern_type, "principal": b.principal,
            "host": b.host, "operation": b.operation, "permission_type": b.permission}


@register(api_key=31, min_version=1, max_version=3)
async def delete_acls(ctx: RequestContext, request) -> dict:
    """Remove every ACL binding matching each filter (one durable write); per filter, the removed bindings."""
    refused = _refusal(ctx, AclOperation.ALTER)
    if refused is not None:
        return {"throttle_time": 0, "filter_results": [
            {"error_code": refused[0], "error_message": refused[1], "matching_acls": []} for _ in request.filters]}
    filters = [AclFilter.from_wire(f) for f in request.filters]

    async def forwarded(manager) -> list[dict]:
        try:
            answer = await manager.forward({"op": "delete_acls", "filters": [f.to_json() for f in filters]})
        except ConnectionError as exc:
            return [{"error_code": ErrorCode.not_controller, "error_message": str(exc), "matching_acls": []}
                    for _ in filters]
        failed = [{"error_code": answer["error_code"], "error_message": answer.get("error_message"),
                   "matching_acls": []} for _ in filters]
        return [{**r, "matching_acls": [_matching_acl(AclBinding.from_wire(*m)) for m in r["matching_acls"]]}
                for r in _answered(answer, failed)]

    results = await forwarded(ctx.broker.forwarding)
    return {"throttle_time": 0, "filter_results": results}
