"""ListOffsets (key 2): offsets by timestamp, earliest and latest (Kafka's ListOffsets semantics).

Special timestamps (Kafka's ``ListOffsetsRequest``): -2 EARLIEST → log start offset;
-1 LATEST → high watermark, or the last stable offset (LSO) when ``isolation_level`` is 1
(read_committed, KIP-98); -3 MAX_TIMESTAMP (KIP-734) → offset and timestamp of the
record with the largest timestamp; -4 EARLIEST_LOCAL (KIP-405) → log start offset (all data is
local). A timestamp >= 0 → the first offset whose timestamp is >= it, or offset -1 and
timestamp -1 when there is none.
"""

from __future__ import annotations

from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.errors import ErrorCode, KafkaError

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4


def resolve_offset(plog, timestamp: int, read_committed: bool = False) -> tuple[int, int]:
    """``(offset, timestamp)`` answering ListOffsets ``timestamp`` for one partition log."""
    if timestamp == LATEST:
        return (plog.last_stable_offset if read_committed else plog.high_watermark), -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return plog.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        found = plog.max_timestamp_offset()
    elif timestamp >= 0:
        found = plog.offset_for_timestamp(timestamp)
    else:
        raise ValueError(f"timestamp {timestamp} is not a ListOffsets target")
    if found is None:
        return -1, -1
    offset, ts = found
    return offset, ts


def _partition(index: int, error_code: int, offset: int = -1, timestamp: int = -1) -> dict:
    return {
        "partition_index": index,
        "error_code": error_code,
        "timestamp": timestamp,
        "offset": offset,
        "leader_epoch": 0 if error_code == ErrorCode.none else -1,
    }


@register(api_key=2, min_version=1, max_version=8)
async def list_offsets(ctx: RequestContext, request) -> dict:
    """One ``(offset, timestamp)`` per requested partition, or its error code."""
    broker = ctx.broker
    read_committed = getattr(request, "isolation_level", 0) == 1
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            plog = broker.logs.get_log(t.name, p.partition_index)
            if plog is None:
                partitions.append(_partition(p.partition_index, ErrorCode.unknown_topic_or_partition))
                continue
            try:
                offset, ts = resolve_offset(plog, p.timestamp, read_committed)
            except KafkaError as exc:
                partitions.append(_partition(p.partition_index, exc.error_code))
            except ValueError:
                partitions.append(_partition(p.partition_index, ErrorCode.invalid_request))
            else:
                partitions.append(_partition(p.partition_index, ErrorCode.none, offset, ts))
        topics.append({"name": t.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
