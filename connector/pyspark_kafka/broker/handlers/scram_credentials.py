"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51): KIP-554.

Credentials (salt + StoredKey + ServerKey only) are the metadata image's: AlterUserScramCredentials is forwarded to the active controller, which validates it
once (:mod:`~pyspark_kafka.broker.controller.scram_control`, Kafka's ``ScramControlManager``) and
writes ``scram_credential`` / ``remove_scram_credential`` records; the receiving broker answers once
its own image has them (at most 5 s), every other broker as its metadata arrives. Mechanism ids on the wire:
1 SCRAM-SHA-256, 2 SCRAM-SHA-512. Describe answers as Kafka's ``ScramImage.describe``:
RESOURCE_NOT_FOUND for an unknown user, DUPLICATE_RESOURCE for a user named twice. Authorization
(with an authorizer): Describe needs DESCRIBE, Alter needs ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED (31) (for the request, or for every user of an Alter).
"""

from __future__ import annotations

from collections import Counter

from pyspark_kafka.broker.controller import scram_control
from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from pyspark_kafka.broker.security.scram import MECHANISMS


@register(api_key=50, min_version=0, max_version=0)
async def describe_user_scram_credentials(ctx: RequestContext, request) -> dict:
    """Mechanisms and iterations of each named user (all users when ``users`` is null); never salts or keys."""
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # Kafka's getErrorResponse: the error on the response and on one nameless result per named user
        # (Kafka 4.3.1 fails with a NullPointerException and answers nothing when users is null)
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
                "results": [{"user": "", "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
                             "credential_infos": []} for _ in request.users or ()]}
    users = ctx.broker.security.credentials.users()
    results = []
    if request.users is None:
        names = list(users)
    else:
        names = [u.name for u in request.users]
    counts = Counter(names)
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            results.append({"user": name, "error_code": ErrorCode.duplicate_resource,
                            "error_message": f"Cannot describe SCRAM credentials for the same user twice in a single "
                                             f"request: {name}", "credential_infos": []})
        elif name not in users:
            results.append({"user": name, "error_code": ErrorCode.resource_not_found,
                            "error_message": f"Attempt to describe a user credential that does not exist: {name}",
                            "credential_infos": []})
        else:
            results.append({"user": name, "error_code": ErrorCode.none, "error_message": "", "credential_infos": [
                {"mechanism": MECHANISMS[m][1], "iterations": c.iterations} for m, c in sorted(users[name].items())]})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": "", "results": results}


@register(api_key=51, min_version=0, max_version=0)
async def alter_user_scram_credentials(ctx: RequestContext, request) -> dict:
    """Upsert (from salt + salted password, as the client sends) and delete credentials, validated once by
    :func:`~pyspark_kafka.broker.controller.scram_control.alter_credentials` in the controller (forwarded, its
    records replicated to every broker)."""
    users_in_order = list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))
    if not ctx.authorized(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"throttle_time": 0, "results": [
            {"user": name, "error_code": ErrorCode.cluster_authorization_failed,
             "error_message": "Cluster authorization failed."} for name in users_in_order]}
    deletions, upsertions = scram_control.request_entries(request)

    async def forwarded(manager) -> list[dict]:
        try:
            answer = await manager.forward({"op": "alter_user_scram_credentials", "deletions": deletions,
                                            "upsertions": upsertions})
        except ConnectionError as exc:
            answer = {"error_code": int(ErrorCode.not_controller), "error_message": str(exc)}
        if answer.get("error_code"):
            return [{"user": name, "error_code": answer["error_code"], "error_message": answer.get("error_message")}
                    for name in users_in_order]
        return answer["results"]

    results = await forwarded(ctx.broker.forwarding)
    return {"throttle_time": 0, "results": results}

