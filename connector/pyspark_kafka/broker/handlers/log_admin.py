"""Partition log administration: DeleteRecords (21).

DeleteRecords moves each partition's log start offset (its *low watermark*) up to the requested
offset, -1 meaning the high watermark, through :meth:`ReplicaManager.delete_records
<pyspark_kafka.broker.replica_manager.ReplicaManager.delete_records>`. Per-partition errors as in
Kafka: UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION (internal topics),
POLICY_VIOLATION (``cleanup.policy`` without ``delete``), OFFSET_OUT_OF_RANGE (past the high
watermark, or negative other than -1); ``low_watermark`` is -1 with an error. Single node: the
answer does not wait for followers (``timeout`` is not used).
"""

from __future__ import annotations

from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.handlers import RequestContext, register


@register(api_key=21, min_version=0, max_version=2)
async def delete_records(ctx: RequestContext, request) -> dict:
    """Per partition: the new low watermark (log start offset), or the error."""
    replica_manager = ctx.broker.replica_manager
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            error_code, low_watermark = ErrorCode.none, -1
            try:
                low_watermark = replica_manager.delete_records(t.name, p.partition_index, p.offset)
            except KafkaError as exc:
                error_code = exc.error_code
            partitions.append({"partition_index": p.partition_index, "low_watermark": low_watermark,
                               "error_code": error_code})
        topics.append({"name": t.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
