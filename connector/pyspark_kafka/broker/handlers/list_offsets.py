"""ListOffsets (key 2): offsets by timestamp, earliest and latest (Kafka's ListOffsets semantics).

Each partition is answered by :meth:`ReplicaManager.offset_for_timestamp
<pyspark_kafka.broker.replica_manager.ReplicaManager.offset_for_timestamp>`.

Special timestamps (Kafka's ``ListOffsetsRequest``): -2 EARLIEST → log start offset;
-1 LATEST → high watermark, or the last stable offset (LSO) when ``isolation_level`` is 1
(read_committed, KIP-98); -3 MAX_TIMESTAMP (KIP-734) → offset and timestamp of the
record with the largest timestamp; -4 EARLIEST_LOCAL (KIP-405) → log start offset (all data is
local). A timestamp >= 0 → the first offset whose timestamp is >= it, or offset -1 and
timestamp -1 when there is none.

Authorization (with an authorizer): DESCRIBE on the topic, else TOPIC_AUTHORIZATION_FAILED (29) per partition.
"""

from __future__ import annotations

from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.security.acls import AclOperation, ResourceType


def _partition(index: int, error_code: int, offset: int = -1, timestamp: int = -1, leader_epoch: int = 0) -> dict:
    return {
        "partition_index": index,
        "error_code": error_code,
        "timestamp": timestamp,
        "offset": offset,
        "leader_epoch": leader_epoch if error_code == ErrorCode.none else -1,
    }


@register(api_key=2, min_version=1, max_version=8)
async def list_offsets(ctx: RequestContext, request) -> dict:
    """One ``(offset, timestamp)`` per requested partition, or its error code."""
    replica_manager = ctx.broker.replica_manager
    read_committed = getattr(request, "isolation_level", 0) == 1
    topics = []
    for t in request.topics:
        partitions = []
        allowed = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            if not allowed:
                partitions.append(_partition(p.partition_index, ErrorCode.topic_authorization_failed))
                continue
            try:
                offset, ts = replica_manager.offset_for_timestamp(t.name, p.partition_index, p.timestamp,
                                                                  read_committed,
                                                                  getattr(p, "current_leader_epoch", -1))
            except KafkaError as exc:
                partitions.append(_partition(p.partition_index, exc.error_code))
            else:
                partitions.append(_partition(p.partition_index, ErrorCode.none, offset, ts,
                                             replica_manager.leader_epoch(t.name, p.partition_index)))
        topics.append({"name": t.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
