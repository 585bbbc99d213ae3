"""Replication admin APIs: ElectLeaders (43, KIP-460), AlterPartitionReassignments (45) and
ListPartitionReassignments (46) (KIP-455).

The broker forwards ElectLeaders and AlterPartitionReassignments to the active controller
(:mod:`~pyspark_kafka.broker.controller.partition_admin` has the rules and error codes, Kafka's
``ReplicationControlManager``) and answers once its own metadata image has the change; ListPartitionReassignments
answers from the broker's metadata image (Kafka asks the controller). On a one-node cluster every partition
already has its only replica as leader: ElectLeaders answers ELECTION_NOT_NEEDED (84) and a reassignment naming
another broker INVALID_REPLICA_ASSIGNMENT (39), as Kafka with one broker answers.

Authorization as Kafka's ``ControllerApis``: ElectLeaders and AlterPartitionReassignments need ALTER on the
cluster, ListPartitionReassignments DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED (31) for the whole
request.
"""

from __future__ import annotations

from pyspark_kafka.broker.controller import partition_admin
from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType

_DENIED = "Cluster authorization failed."


def _cluster_denied(ctx: RequestContext, operation: AclOperation) -> bool:
    return not ctx.authorized(operation, ResourceType.CLUSTER, CLUSTER_NAME)


@register(api_key=43, min_version=0, max_version=2)
async def elect_leaders(ctx: RequestContext, request) -> dict:
    """ElectLeaders: ``election_type`` PREFERRED (0, the only one before v1) or UNCLEAN (1) for the named
    partitions (``topic_partitions`` None: all, answering only those whose election was needed)."""
    broker = ctx.broker
    election = int(getattr(request, "election_type", 0))
    asked = None if request.topic_partitions is None else {}
    for t in request.topic_partitions or ():
        asked.setdefault(t.topic, []).extend(int(p) for p in t.partitions)
    if _cluster_denied(ctx, AclOperation.ALTER):
        results = [{"topic": n, "partition_result": [{"partition_id": p, "error_code": ErrorCode.cluster_authorization_failed,
                                                      "error_message": _DENIED} for p in ps]}
                   for n, ps in (asked or {}).items()]
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "replica_election_results": results}
    if election not in (partition_admin.PREFERRED, partition_admin.UNCLEAN):
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_request, "replica_election_results": []}

    async def forwarded(manager) -> dict:
        try:
            answer = await manager.forward({"op": "elect_leaders", "election_type": election, "partitions": asked})
            return answer["results"]
        except ConnectionError as exc:
            return {n: [{"partition": p, "error_code": int(ErrorCode.not_controller), "error_message": str(exc)}
                        for p in ps] for n, ps in (asked or {}).items()}

    by_topic = await forwarded(broker.forwarding)
    results = [{"topic": n, "partition_result": [{"partition_id": r["partition"], "error_code": ErrorCode(r["error_code"]),
                                                  "error_message": r.get("error_message")} for r in rs]}
               for n, rs in by_topic.items()]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "replica_election_results": results}


@register(api_key=45, min_version=0, max_version=1)
async def alter_partition_reassignments(ctx: RequestContext, request) -> dict:
    """AlterPartitionReassignments: per partition a target replica list (None cancels the ongoing one)."""
    broker = ctx.broker
    if _cluster_denied(ctx, AclOperation.ALTER):  # Kafka's getErrorResponse: the error on every partition too
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": _DENIED,
                "responses": [{"name": t.name, "partitions": [
                    {"partition_index": p.partition_index, "error_code": ErrorCode.cluster_authorization_failed,
                     "error_message": _DENIED} for p in t.partitions]} for t in request.topics]}
    allow = getattr(request, "allow_replication_factor_change", True)
    topics = [{"name": t.name, "partitions": [{"partition": int(p.partition_index),
                                               "replicas": None if p.replicas is None else [int(r) for r in p.replicas]}
                                              for p in t.partitions]} for t in request.topics]

    async def forwarded(manager) -> list[dict]:
        try:
            answer = await manager.forward({"op": "alter_reassignments", "topics": topics, "allow_rf_change": allow})
            return answer["topics"]
        except ConnectionError as exc:
            return [{"name": t["name"], "partitions": [{"partition": p["partition"], "error_code":
                     int(ErrorCode.not_controller), "error_message": str(exc)} for p in t["partitions"]]}
                    for t in topics]

    results = await forwarded(broker.forwarding)
    responses = [{"name": t["name"], "partitions": [{"partition_index": p["partition"],
                                                     "error_code": ErrorCode(p["error_code"]),
                                                     "error_message": p.get("error_message")} for p in t["partitions"]]}
                 for t in results]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "responses": responses}


@register(api_key=46, min_version=0, max_version=0)
async def list_partition_reassignments(ctx: RequestContext, request) -> dict:
    """ListPartitionReassignments: the ongoing reassignments (replicas, adding, removing) of the named partitions
    (``topics`` None: all)."""
    broker = ctx.broker
    if _cluster_denied(ctx, AclOperation.DESCRIBE):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": _DENIED,
                "topics": []}
    wanted = None if request.topics is None else {
        t.name: [int(p) for p in t.partition_indexes] for t in request.topics}
    ongoing = broker.metadata_cache.ongoing_reassignments(wanted)
    topics = [{"name": n, "partitions": [{"partition_index": r.index, "replicas": list(r.replicas),
                                          "adding_replicas": list(r.adding), "removing_replicas": list(r.removing)}
                                         for r in found]} for n, found in ongoing.items()]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "topics": topics}
