"""Partition log administration: DeleteRecords (21), OffsetForLeaderEpoch (23), DescribeLogDirs (35),
DescribeProducers (61).

DeleteRecords moves each partition's log start offset (its *low watermark*) up to the requested
offset, -1 meaning the high watermark, through :meth:`ReplicaManager.delete_records
<pyspark_kafka.broker.replica_manager.ReplicaManager.delete_records>`. Per-partition errors as in
Kafka: UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION (internal topics),
POLICY_VIOLATION (``cleanup.policy`` without ``delete``), OFFSET_OUT_OF_RANGE (past the high
watermark, or negative other than -1); ``low_watermark`` is -1 with an error. The answer does not
wait for followers (``timeout`` is not used).

OffsetForLeaderEpoch: answered by the leader's leader-epoch cache (KIP-101/279, see
:meth:`ReplicaManager.end_offset_for_epoch
<pyspark_kafka.broker.replica_manager.ReplicaManager.end_offset_for_epoch>`).

DescribeLogDirs: one log dir, the data directory, with the size of each partition's ``.log``
files, offset lag 0 and no future replicas; ``topics`` null means every partition, a named
partition this broker lacks is left out (as Kafka does).

DescribeProducers: per partition the producers whose state it keeps (idempotent or
transactional): id, epoch, last sequence, last timestamp, the first offset of the open
transaction (-1: none), and ``coordinator_epoch``: the epoch carried by the last transaction
marker written for the producer (-1 before any, e.g. an idempotent producer), as Kafka's
``ProducerStateEntry``. UNKNOWN_TOPIC_OR_PARTITION for a partition this broker lacks.

Authorization (with an authorizer, as Kafka's ``KafkaApis``): DeleteRecords DELETE on the topic,
OffsetForLeaderEpoch CLUSTER_ACTION on the cluster or DESCRIBE on the topic, DescribeProducers READ
on the topic (else TOPIC_AUTHORIZATION_FAILED per partition); DescribeLogDirs DESCRIBE on the cluster
(else CLUSTER_AUTHORIZATION_FAILED and no log dirs).
"""

from __future__ import annotations

import shutil
from typing import Any, Callable

from pyspark_kafka.broker.errors import ErrorCode, KafkaError, TopicAuthorizationError
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType


def _may(ctx: RequestContext, operation: AclOperation) -> Callable[[str], bool]:
    """``allowed(topic)`` for :func:`_each_partition`: ``operation`` on the topic is authorized."""
    return lambda name: ctx.authorized(operation, ResourceType.TOPIC, name)


def _each_partition(topics, name_key: str, partitions_key: str, answer: Callable[[str, Any], dict],
                    failed: Callable[[Any, KafkaError], dict], allowed: Callable[[str], bool] = lambda name: True,
                    ) -> list[dict]:
    """The per-topic, per-partition response list: ``answer(topic, partition)`` for each requested
    partition, or ``failed(partition, exc)`` when it raises a KafkaError or ``allowed(topic)`` is
    false (TOPIC_AUTHORIZATION_FAILED). A response topic is keyed by ``name_key``, the request's
    own name field."""
    out = []
    for t in topics:
        name = getattr(t, name_key)
        permitted = allowed(name)
        partitions = []
        for p in getattr(t, partitions_key):
            try:
                if not permitted:
                    raise TopicAuthorizationError()
                partitions.append(answer(name, p))
            except KafkaError as exc:
                partitions.append(failed(p, exc))
        out.append({name_key: name, "partitions": partitions})
    return out


@register(api_key=21, min_version=0, max_version=2)
async def delete_records(ctx: RequestContext, request) -> dict:
    """Per partition: the new low watermark (log start offset), or the error."""
    replica_manager = ctx.broker.replica_manager

    def answer(topic: str, p) -> dict:
        low_watermark = replica_manager.delete_records(topic, p.partition_index, p.offset)
        return {"partition_index": p.partition_index, "low_watermark": low_watermark, "error_code": ErrorCode.none}

    def failed(p, exc: KafkaError) -> dict:
        return {"partition_index": p.partition_index, "low_watermark": -1, "error_code": exc.error_code}

    return {"throttle_time": 0, "topics": _each_partition(request.topics, "name", "partitions", answer, failed,
                                                          _may(ctx, AclOperation.DELETE))}


@register(api_key=23, min_version=2, max_version=4)
async def offset_for_leader_epoch(ctx: RequestContext, request) -> dict:
    """Per partition: the end offset of the requested leader epoch (the leader's leader-epoch cache)."""
    replica_manager = ctx.broker.replica_manager

    def answer(topic: str, p) -> dict:
        epoch, end_offset = replica_manager.end_offset_for_epoch(topic, p.partition, p.current_leader_epoch,
                                                                 p.leader_epoch)
        return {"error_code": ErrorCode.none, "partition": p.partition, "leader_epoch": epoch, "end_offset": end_offset}

    def failed(p, exc: KafkaError) -> dict:
        return {"error_code": exc.error_code, "partition": p.partition, "leader_epoch": -1, "end_offset": -1}

    # KIP-320: followers have CLUSTER_ACTION, consumers need DESCRIBE on the topic
    if ctx.authorized(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        allowed = lambda name: True  # noqa: E731
    else:
        allowed = _may(ctx, AclOperation.DESCRIBE)
    return {"throttle_time": 0, "topics": _each_partition(request.topics, "topic", "partitions", answer, failed,
                                                          allowed)}


@register(api_key=35, min_version=1, max_version=5)
async def describe_log_dirs(ctx: RequestContext, request) -> dict:
    """The data directory with every (or every requested) partition's size in bytes."""
    replica_manager = ctx.broker.replica_manager
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "results": []}
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    topics: dict[str, list[dict]] = {}
    for topic, partition, size in replica_manager.partition_sizes():
        if wanted is None or (topic, partition) in wanted:
            topics.setdefault(topic, []).append({"partition_index": partition, "partition_size": size,
                                                 "offset_lag": 0, "is_future_key": False})
    data_dir = replica_manager.log_dir
    usage = shutil.disk_usage(data_dir)
    result = {"error_code": ErrorCode.none, "log_dir": str(data_dir.absolute()), "total_bytes": usage.total,
              "usable_bytes": usage.free, "is_cordoned": False,
              "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": [result]}


@register(api_key=61, min_version=0, max_version=0)
async def describe_producers(ctx: RequestContext, request) -> dict:
    """Per partition: the active producers (id, epoch, last sequence and timestamp, open transaction)."""
    replica_manager = ctx.broker.replica_manager

    def answer(topic: str, index: int) -> dict:
        producers = [{"producer_id": e.producer_id, "producer_epoch": e.epoch, "last_sequence": e.last_seq,
                      "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                      "current_txn_start_offset": -1 if e.txn_first_offset is None else e.txn_first_offset}
                     for e in replica_manager.active_producers(topic, index)]
        return {"partition_index": index, "error_code": ErrorCode.none, "error_message": None,
                "active_producers": producers}

    def failed(index: int, exc: KafkaError) -> dict:
        return {"partition_index": index, "error_code": exc.error_code, "error_message": str(exc),
                "active_producers": []}

    return {"throttle_time": 0,
            "topics": _each_partition(request.topics, "name", "partition_indexes", answer, failed,
                                      _may(ctx, AclOperation.READ))}
