"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51): KIP-554.

Credentials live in :class:`~pyspark_kafka.broker.security.credentials.CredentialStore`
(durable, salt + StoredKey + ServerKey only). Mechanism ids on the wire: 1 SCRAM-SHA-256,
2 SCRAM-SHA-512. Errors as Kafka's ``ControllerApis``/``ScramControlManager``: RESOURCE_NOT_FOUND
for an unknown user, DUPLICATE_RESOURCE for a user named twice, UNSUPPORTED_SASL_MECHANISM for
an unknown mechanism, UNACCEPTABLE_CREDENTIAL for an empty user name or iterations outside
4096..16384. Authorization (with an authorizer): Describe needs DESCRIBE, Alter needs ALTER on the
cluster, else CLUSTER_AUTHORIZATION_FAILED (31) (for the request, or for every user of an Alter).
"""

from __future__ import annotations

from collections import Counter

from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from pyspark_kafka.broker.security.scram import (MAX_ITERATIONS, MECHANISM_BY_ID, MECHANISMS, MIN_ITERATIONS,
                                                 credential_from_salted_password)


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


def _target(entry, errors: dict) -> str | None:
    """The mechanism name of a deletion/upsertion, or None after recording why it is refused."""
    mech = MECHANISM_BY_ID.get(entry.mechanism)
    if not entry.name:
        errors.setdefault(entry.name, (ErrorCode.unacceptable_credential, "Username must not be empty"))
    elif mech is None:
        errors.setdefault(entry.name, (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"))
    else:
        return mech
    return None


@register(api_key=51, min_version=0, max_version=0)
async def alter_user_scram_credentials(ctx: RequestContext, request) -> dict:
    """Upsert (from salt + salted password, as the client sends) and delete credentials; one durable write."""
    store = ctx.broker.security.credentials
    errors: dict[str, tuple[ErrorCode, str]] = {}
    users_in_order = list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))
    if not ctx.authorized(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"throttle_time": 0, "results": [
            {"user": name, "error_code": ErrorCode.cluster_authorization_failed,
             "error_message": "Cluster authorization failed."} for name in users_in_order]}
    counts = Counter((d.name, d.mechanism) for d in request.deletions)
    counts.update((u.name, u.mechanism) for u in request.upsertions)
    for (name, _), n in counts.items():
        if n > 1:
            errors.setdefault(name, (ErrorCode.duplicate_resource,
                                     "A user credential cannot be altered twice in the same request"))
    upserts, deletes = {}, set()
    for d in request.deletions:
        mech = _target(d, errors)
        if mech is None:
            continue
        if store.get(d.name, mech) is None:
            errors.setdefault(d.name, (ErrorCode.resource_not_found,
                                       "Attempt to delete a user credential that does not exist"))
        else:
            deletes.add((d.name, mech))
    for u in request.upsertions:
        mech = _target(u, errors)
        if mech is None:
            continue
        if u.iterations < MIN_ITERATIONS:
            errors.setdefault(u.name, (ErrorCode.unacceptable_credential, "Too few iterations"))
        elif u.iterations > MAX_ITERATIONS:
            errors.setdefault(u.name, (ErrorCode.unacceptable_credential, "Too many iterations"))
        elif not u.salt or not u.salted_password:
            errors.setdefault(u.name, (ErrorCode.unacceptable_credential, "Salt and salted password must not be empty"))
        else:
            upserts[(u.name, mech)] = credential_from_salted_password(mech, bytes(u.salt), bytes(u.salted_password),
                                                                      u.iterations)
    upserts = {k: v for k, v in upserts.items() if k[0] not in errors}
    deletes = {k for k in deletes if k[0] not in errors}
    if upserts or deletes:
        store.apply(upserts, deletes)
    results = []
    for name in users_in_order:
        code, message = errors.get(name, (ErrorCode.none, None))  # Kafka answers null on success
        results.append({"user": name, "error_code": code, "error_message": message})
    return {"throttle_time": 0, "results": results}
