"""Fetch (key 1): raw record batches from the logs, with long poll; records are never decoded.

For each requested partition :meth:`ReplicaManager.read_records
<pyspark_kafka.broker.replica_manager.ReplicaManager.read_records>` returns a file slice of whole
batches starting at the batch containing ``fetch_offset`` and ending below the high watermark;
the server sends it with ``sendfile`` (zero copy).

Limits (Kafka semantics): at most ``partition_max_bytes`` per partition and ``max_bytes`` for
the whole response, except that the first non-empty partition always returns at least its
first batch whole (KIP-74), so a consumer never gets stuck behind a large batch.

Long poll: the response is sent as soon as at least ``min_bytes`` are available or a partition
has an error; otherwise the fetch waits — woken by appends to its partitions, not by a polling
loop — until ``max_wait_ms`` has passed, then answers with what there is.

Replicated cluster (docs/replication.md): only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere), a
``current_leader_epoch`` older or newer than the leader's is FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH; a
follower's fetch (``replica_id`` >= 0, or ``replica_state`` from v15) reads up to the leader's log end offset and
reports the follower's LEO (its fetch offset), which moves the high watermark and the ISR.

Fetch sessions (KIP-227) are not kept: the response's ``session_id`` is 0, which tells the
client to send full fetch requests.

Transactions (KIP-98): every response carries the partition's last stable offset (LSO: the
first offset of its oldest open transaction, else the high watermark). With
``isolation_level=1`` (read_committed) the batches stop below the LSO and
``aborted_transactions`` lists ``(producer_id, first_offset)`` of each aborted transaction
overlapping the returned range, so the client drops those records (Kafka's
``collectAbortedTransactions``). Control batches (markers) are returned like data batches;
clients skip them, so offsets keep their gaps.

Authorization (with an authorizer): READ on each topic, else its partitions answer
TOPIC_AUTHORIZATION_FAILED (29) with offsets -1 and no records; a follower's fetch needs
CLUSTER_ACTION on the cluster.
"""

from __future__ import annotations

import asyncio

from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.metadata_cache import MetadataCache
from pyspark_kafka.broker.protocol import ms
from pyspark_kafka.broker.replica_manager import LogReadResult, ReplicaManager
from pyspark_kafka.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType

READ_COMMITTED = 1
_DENIED = LogReadResult(ErrorCode.topic_authorization_failed, -1, -1, -1)


def _denied_topics(ctx: RequestContext, request, resolved: list[str | None]) -> frozenset[str]:
    """The requested topics this fetch may not read (Kafka's ``handleFetchRequest``): a follower's fetch
    (replica id >= 0) needs CLUSTER_ACTION on the cluster, else every topic is denied; a consumer's
    needs READ on each topic. ``resolved``: the request's topic names (:func:`_resolve`)."""
    if getattr(ctx.broker, "authorizer", None) is None:
        return frozenset()
    state = getattr(request, "replica_state", None)
    replica_id = state.replica_id if state is not None else getattr(request, "replica_id", -1)
    names = set(resolved) - {None}
    if replica_id >= 0:
        return frozenset() if ctx.authorized(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME) \
            else frozenset(names)
    return frozenset(n for n in names if not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, n))


def _partition_data(index: int, result: LogReadResult, read_committed: bool) -> dict:
    return {
        "partition_index": index,
        "error_code": result.error_code,
        "high_watermark": result.high_watermark,
        "last_stable_offset": result.last_stable_offset,
        "log_start_offset": result.log_start_offset,
        "aborted_transactions": [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                                 for a in result.aborted_transactions] if read_committed else None,
        "preferred_read_replica": -1,
        "records": result.records,
    }


def _resolve(metadata_cache: MetadataCache, request) -> list[str | None]:
    """The topic name of each of the request's FetchTopics, in order: by name, or by topic id from v13
    through the broker's metadata cache (None: no topic has that id, UNKNOWN_TOPIC_ID)."""
    names = []
    for topic in request.topics:
        name = getattr(topic, "topic", None)
        names.append(metadata_cache.topic_name(topic.topic_id) if name is None else name)
    return names


def collect(replica_manager: ReplicaManager, request, resolved: list[str | None],
            denied: frozenset[str] = frozenset()) -> tuple[list[dict], int, bool]:
    """Read every requested partition once: (topic responses, total bytes, any error). ``resolved``: the
    request's topic names (:func:`_resolve`); partitions of the topics in ``denied`` answer
    TOPIC_AUTHORIZATION_FAILED and are not read."""
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    replica_state = getattr(request, "replica_state", None)  # v15+ (KIP-903); before: replica_id
    replica_id = replica_state.replica_id if replica_state is not None else getattr(request, "replica_id", -1)
    remaining = getattr(request, "max_bytes", 2**31 - 1)
    total = 0
    has_error = False
    responses = []
    for topic, name in zip(request.topics, resolved):
        partitions = []
        for p in topic.partitions:
            if name in denied:
                has_error = True
                partitions.append(_partition_data(p.partition, _DENIED, False))
                continue
            result = replica_manager.read_records(
                name, p.partition, p.fetch_offset, max(0, min(p.partition_max_bytes, remaining)),
                read_committed=read_committed, min_one_message=total == 0, replica_id=replica_id,
                current_leader_epoch=getattr(p, "current_leader_epoch", -1),
            )
            if result.error_code != ErrorCode.none:
                has_error = True
            else:
                total += result.records.length
                remaining -= result.records.length
            # an unknown partition (offsets -1) answers aborted_transactions null even for read_committed
            partitions.append(_partition_data(p.partition, result, read_committed and result.high_watermark >= 0))
        responses.append({"topic": name or "", "topic_id": getattr(topic, "topic_id", None), "partitions": partitions})
    return responses, total, has_error


def _wanted(request, resolved: list[str | None]) -> list[tuple[str, int]]:
    keys = []
    for topic, name in zip(request.topics, resolved):
        if name is not None:
            keys.extend((name, p.partition) for p in topic.partitions)
    return keys


@register(api_key=1, min_version=4, max_version=16)
async def fetch(ctx: RequestContext, request) -> dict:
    """Answer with up to ``max_bytes`` of batches once ``min_bytes`` are there or ``max_wait_ms`` passed."""
    replica_manager = ctx.broker.replica_manager
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, ms(request.max_wait)) / 1000
    resolved = _resolve(ctx.broker.metadata_cache, request)  # once: a topic id names one topic while it lives
    denied = _denied_topics(ctx, request, resolved)
    if replica_manager.electing:  # an election in progress: wait for it (Kafka's partition lock), within max_wait
        await replica_manager.wait_for_elections(_wanted(request, resolved), deadline - loop.time())
    while True:
        responses, total, has_error = collect(replica_manager, request, resolved, denied)
        left = deadline - loop.time()
        if total >= request.min_bytes or has_error or left <= 0 or not request.topics:
            break
        await replica_manager.wait_for_append(_wanted(request, resolved), left)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": responses, "node_endpoints": []}
