"""Idempotent producers and transactions (KIP-98): InitProducerId (22), AddPartitionsToTxn (24),
AddOffsetsToTxn (25), EndTxn (26), TxnOffsetCommit (28), DescribeTransactions (65),
ListTransactions (66).

Each handler maps the request onto :class:`~pyspark_kafka.broker.coordinator.txn.TransactionCoordinator`
and turns its :class:`~pyspark_kafka.broker.errors.KafkaError` into the response's error code.
FindCoordinator for transactional ids (key_type 1) is served by the group handlers. On the single
node markers are written in-process; in a replicated cluster the coordinator sends WriteTxnMarkers (27,
v1-v2, served here: CLUSTER_ACTION on the cluster) to each partition's leader (``cluster/coordinators.py``).

Version ranges: the client-facing versions (AddPartitionsToTxn v4+ is broker-to-broker, KIP-890);
InitProducerId v6 (two-phase commit, KIP-939) is not served.

Authorization (with an authorizer, as Kafka's ``KafkaApis``): WRITE on the TRANSACTIONAL_ID for
InitProducerId (transactional), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent InitProducerId needs IDEMPOTENT_WRITE on the
cluster or WRITE on some topic (KIP-679; CLUSTER_AUTHORIZATION_FAILED); AddPartitionsToTxn WRITE on
each topic (TOPIC_AUTHORIZATION_FAILED, the other partitions OPERATION_NOT_ATTEMPTED); AddOffsetsToTxn
and TxnOffsetCommit READ on the group (GROUP_AUTHORIZATION_FAILED), TxnOffsetCommit READ on each
topic; DescribeTransactions DESCRIBE on each transactional id (its partitions of topics the principal
may not DESCRIBE left out); ListTransactions lists only the ids the principal may DESCRIBE.
"""

from __future__ import annotations

from pyspark_kafka.broker.coordinator.offsets import OffsetAndMetadata
from pyspark_kafka.broker.coordinator.txn import STATE_BY_NAME, TransactionCoordinator
from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.handlers import RequestContext, now_ms, register
from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.protocol import ms
from pyspark_kafka.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType

def _txn_denied(ctx: RequestContext, transactional_id: str, operation: AclOperation = AclOperation.WRITE) -> bool:
    """True when the principal may not do ``operation`` on ``transactional_id`` (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
    return not ctx.authorized(operation, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _may_produce_idempotently(ctx: RequestContext) -> bool:
    """KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on at least one topic (Kafka's ``authorizeByResourceType``)."""
    return ctx.authorized(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME) or \
        ctx.authorized_by_type(AclOperation.WRITE, ResourceType.TOPIC)


def _txn(ctx: RequestContext) -> TransactionCoordinator:
    """The broker's transaction coordinator, loaded (on first use when the server did not load it)."""
    return ctx.broker.txn_coordinator.ensure_loaded(now_ms())


def _not_owner(ctx: RequestContext, transactional_id: str) -> ErrorCode:
    """NOT_COORDINATOR when this broker does not lead the id's ``__transaction_state`` partition; NONE
    otherwise."""
    return ErrorCode.none if ctx.broker.txn_coordinator.owns(transactional_id) else ErrorCode.not_coordinator


async def _replicated(ctx: RequestContext, transactional_id: str, error: int) -> int:
    """After a successful state change of ``transactional_id``, wait until the coordinator's write is complete
    (in a replicated cluster: the ISR of its ``__transaction_state`` partition has it; NOT_COORDINATOR /
    COORDINATOR_NOT_AVAILABLE when not). ``error`` when the change failed."""
    if error != ErrorCode.none:
        return error
    return await ctx.broker.coordinators.txn_write_done(transactional_id)

log = get_logger("pyspark_kafka.broker")


@register(api_key=22, min_version=0, max_version=5)
async def init_producer_id(ctx: RequestContext, request) -> dict:
    """A producer id and epoch: new for idempotent producers, epoch-bumped for a transactional id.

    Replicated cluster: a transactional id is served by its coordinator only (NOT_COORDINATOR elsewhere), and
    answered once the ISR of its ``__transaction_state`` partition has the new state.
    """
    if request.transactional_id is not None and _txn_denied(ctx, request.transactional_id):
        denied = ErrorCode.transactional_id_authorization_failed
    elif request.transactional_id is None and not _may_produce_idempotently(ctx):
        denied = ErrorCode.cluster_authorization_failed
    else:
        denied = None
    if denied is not None:
        return {"throttle_time": 0, "error_code": denied, "producer_id": -1, "producer_epoch": -1}
    if request.transactional_id is not None and _not_owner(ctx, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.not_coordinator, "producer_id": -1, "producer_epoch": -1}
    try:
        producer_id, epoch = _txn(ctx).init_producer_id(
            request.transactional_id,
            ms(request.transaction_timeout),
            getattr(request, "producer_id", -1),
            getattr(request, "producer_epoch", -1),
            now_ms(),
        )
    except KafkaError as exc:
        return {"throttle_time": 0, "error_code": exc.error_code, "producer_id": -1, "producer_epoch": -1}
    if request.transactional_id is not None:
        error = await _replicated(ctx, request.transactional_id, ErrorCode.none)
        if error:
            return {"throttle_time": 0, "error_code": error, "producer_id": -1, "producer_epoch": -1}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": producer_id, "producer_epoch": epoch}


def _partition_results(topics, code_of) -> list[dict]:
    return [
        {"name": t.name, "results_by_partition": [
            {"partition_index": p, "partition_error_code": code_of(t.name, p)} for p in t.partitions
        ]}
        for t in topics
    ]


@register(api_key=24, min_version=0, max_version=3)
async def add_partitions_to_txn(ctx: RequestContext, request) -> dict:
    """Add partitions to the transaction; unknown partitions fail the whole request (others OPERATION_NOT_ATTEMPTED)."""
    broker = ctx.broker
    topics = request.v3_and_below_topics
    if _txn_denied(ctx, request.v3_and_below_transactional_id):
        return {"throttle_time": 0, "results_by_topic_v3_and_below": _partition_results(
            topics, lambda topic, p: ErrorCode.transactional_id_authorization_failed)}
    txn_id = request.v3_and_below_transactional_id
    if _not_owner(ctx, txn_id):
        return {"throttle_time": 0, "results_by_topic_v3_and_below": _partition_results(
            topics, lambda topic, p: ErrorCode.not_coordinator)}
    denied = {t.name for t in topics if not ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, t.name)}
    exists = broker.metadata_cache.contains_partition  # in a cluster: maybe on other brokers only
    missing = {(t.name, p) for t in topics for p in t.partitions if t.name not in denied and not exists(t.name, p)}
    if missing or denied:
        def code(topic, p):
            if topic in denied:
                return ErrorCode.topic_authorization_failed
            return ErrorCode.unknown_topic_or_partition if (topic, p) in missing else ErrorCode.operation_not_attempted
    else:
        try:
            _txn(ctx).add_partitions(
                request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch, [(t.name, p) for t in topics for p in t.partitions], now_ms(),
            )
            error = ErrorCode.none
        except KafkaError as exc:
            error = exc.error_code
        error = await _replicated(ctx, txn_id, error)

        def code(topic, p):
            return error
    return {"throttle_time": 0, "results_by_topic_v3_and_below": _partition_results(topics, code)}


@register(api_key=25, min_version=0, max_version=4)
async def add_offsets_to_txn(ctx: RequestContext, request) -> dict:
    """Add the group's ``__consumer_offsets`` partition to the transaction (for TxnOffsetCommit)."""
    if _txn_denied(ctx, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    if _not_owner(ctx, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.not_coordinator}
    txn = _txn(ctx)
    try:
        txn.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch,
                           [txn.offsets_partition(request.group_id)], now_ms())
    except KafkaError as exc:
        return {"throttle_time": 0, "error_code": exc.error_code}
    return {"throttle_time": 0, "error_code": await _replicated(ctx, request.transactional_id, ErrorCode.none)}


@register(api_key=28, min_version=0, max_version=4)
async def txn_offset_commit(ctx: RequestContext, request) -> dict:
    """Stage the group's offsets in the producer's transaction; OffsetFetch sees them only after commit."""
    broker = ctx.broker
    if _txn_denied(ctx, request.transactional_id):
        return _txn_offset_commit_response(request, lambda topic: ErrorCode.transactional_id_authorization_failed)
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _txn_offset_commit_response(request, lambda topic: ErrorCode.group_authorization_failed)
    denied = {t.name for t in request.topics if not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, t.name)}
    from pyspark_kafka.broker.handlers.group import not_owner, replicated
    if not_owner(ctx, request.group_id):  # sent to the group's coordinator (KIP-98)
        return _txn_offset_commit_response(request, lambda topic: ErrorCode.not_coordinator)
    txn = _txn(ctx)
    now = now_ms()
    error = ErrorCode.none
    try:
        topic, partition = txn.offsets_partition(request.group_id)
        txn.check_transactional_produce(request.producer_id, request.producer_epoch, topic, partition)
        offsets = {
            (t.name, p.partition_index): OffsetAndMetadata(
                p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata or "", now)
            for t in request.topics for p in t.partitions if t.name not in denied
        }
        broker.group_coordinator.ensure_loaded().offsets.stage_txn_offsets(
            request.producer_id, request.producer_epoch, request.group_id, offsets, now)
    except KafkaError as exc:
        error = exc.error_code
    error = await replicated(ctx, request.group_id, error)
    return _txn_offset_commit_response(
        request, lambda topic: ErrorCode.topic_authorization_failed if topic in denied else error)


def _txn_offset_commit_response(request, code_of) -> dict:
    """TxnOffsetCommit's answer: ``code_of(topic)`` for every requested partition."""
    return {
        "throttle_time": 0,
        "topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code_of(t.name)}
                                            for p in t.partitions]}
            for t in request.topics
        ],
    }


@register(api_key=26, min_version=0, max_version=4)
async def end_txn(ctx: RequestContext, request) -> dict:
    """Commit or abort: markers are written to every partition of the transaction before the answer."""
    if _txn_denied(ctx, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    if _not_owner(ctx, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.not_coordinator}
    try:
        _txn(ctx).end_txn(request.transactional_id, request.producer_id, request.producer_epoch,
                                        request.committed, now_ms())
    except KafkaError as exc:
        return {"throttle_time": 0, "error_code": exc.error_code}
    # replicated cluster: answered once PrepareCommit/PrepareAbort is in the ISR; markers follow (Kafka's order)
    return {"throttle_time": 0, "error_code": await _replicated(ctx, request.transactional_id, ErrorCode.none)}


@register(api_key=65, min_version=0, max_version=0)
async def describe_transactions(ctx: RequestContext, request) -> dict:
    """State, producer id/epoch, timeout, start time and partitions of each transactional id."""
    txn = _txn(ctx)
    states = []
    for txn_id in request.transactional_ids:
        meta = None if _txn_denied(ctx, txn_id, AclOperation.DESCRIBE) else txn.describe(txn_id)
        if meta is None and not _txn_denied(ctx, txn_id, AclOperation.DESCRIBE) and _not_owner(ctx, txn_id):
            states.append({"error_code": ErrorCode.not_coordinator, "transactional_id": txn_id,
                           "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": 0,
                           "producer_id": -1, "producer_epoch": -1, "topics": []})
            continue
        if meta is None:
            code = ErrorCode.transactional_id_not_found if not _txn_denied(ctx, txn_id, AclOperation.DESCRIBE) \
                else ErrorCode.transactional_id_authorization_failed
            states.append({"error_code": code, "transactional_id": txn_id,
                           "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": 0,
                           "producer_id": -1, "producer_epoch": -1, "topics": []})
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, topic):  # Kafka leaves the others out
                by_topic.setdefault(topic, []).append(partition)
        states.append({
            "error_code": ErrorCode.none, "transactional_id": txn_id, "transaction_state": meta.state.kafka_name,
            "transaction_timeout": meta.timeout_ms, "transaction_start_time": max(meta.start_ms, 0),
            "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        })
    return {"throttle_time": 0, "transaction_states": states}


@register(api_key=66, min_version=0, max_version=1)
async def list_transactions(ctx: RequestContext, request) -> dict:
    """Transactional ids filtered by state names, producer ids and (v1) minimum running time in ms."""
    txn = _txn(ctx)
    states = set(request.state_filters)
    unknown = sorted(s for s in states if s not in STATE_BY_NAME)
    found = [m for m in txn.list(states, set(request.producer_id_filters), getattr(request, "duration_filter", -1),
                                 now_ms())
             if not _txn_denied(ctx, m.transactional_id, AclOperation.DESCRIBE)]
    return {
        "throttle_time": 0, "error_code": ErrorCode.none, "unknown_state_filters": unknown,
        "transaction_states": [
            {"transactional_id": m.transactional_id, "producer_id": m.producer_id,
             "transaction_state": m.state.kafka_name}
            for m in sorted(found, key=lambda m: m.transactional_id)
        ],
    }



@register(api_key=27, min_version=1, max_version=2)
async def write_txn_markers(ctx: RequestContext, request) -> dict:
    """WriteTxnMarkers (broker to broker): a COMMIT/ABORT marker into each named partition this broker leads,
    answered once its ISR has it. Per partition: NOT_LEADER_OR_FOLLOWER (the coordinator retries on the new
    leader), UNKNOWN_TOPIC_OR_PARTITION, the log's producer-epoch errors; CLUSTER_AUTHORIZATION_FAILED without
    CLUSTER_ACTION on the cluster (Kafka's ``KafkaApis.handleWriteTxnMarkersRequest``)."""
    coordinators = ctx.broker.coordinators
    allowed = ctx.authorized(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    markers = []
    for m in request.markers:
        topics = []
        for t in m.topics:
            parts = []
            for p in t.partition_indexes:
                if not allowed:
                    code = ErrorCode.cluster_authorization_failed
                else:
                    code = await coordinators.apply_marker(t.name, p, m.producer_id, m.producer_epoch,
                                                           m.transaction_result, m.coordinator_epoch)
                parts.append({"partition_index": p, "error_code": code})
            topics.append({"name": t.name, "partitions": parts})
        markers.append({"producer_id": m.producer_id, "topics": topics})
    return {"markers": markers}
