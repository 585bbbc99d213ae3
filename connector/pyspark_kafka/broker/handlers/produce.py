"""Produce (key 0), v3+ (RecordBatch v2 only): append each partition's record set to its log.

Each partition goes to :meth:`ReplicaManager.append_records
<pyspark_kafka.broker.replica_manager.ReplicaManager.append_records>`, which holds the rules below.
Per partition, the storage validates every batch first (CRC32C, magic 2, sizes,
``max.message.bytes``) and appends nothing when one is bad; its exception's
``error_code`` goes into that partition's response (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE,
INVALID_RECORD, ...), other partitions of the request are unaffected. When the batch is refused
because of some of its records (a null key on a compacted topic: INVALID_RECORD; a CreateTime
outside ``message.timestamp.before/after.max.ms``: INVALID_TIMESTAMP), v8+ answers with
``record_errors`` (each bad record's index in its batch and Kafka's message, KIP-467) and
Kafka's ``error_message``; older versions carry only the error code.

acks (Kafka semantics on a single replica): 0 → no response (and, like Kafka, the
connection is closed when a partition failed, so the client refreshes its metadata);
1 and -1 (all) → respond after the append, which already applied the flush policy
(``flush.messages``/``log.flush.interval.messages``). An unknown topic is
UNKNOWN_TOPIC_OR_PARTITION, never created (as Kafka: only a Metadata request that allows it
auto-creates, with ``auto.create.topics.enable``; clients ask Metadata before producing).

Idempotent and transactional producers: the partition's producer state drops duplicate
batches (answered with the original offsets) and rejects out-of-order sequences
(OUT_OF_ORDER_SEQUENCE_NUMBER) and old epochs (INVALID_PRODUCER_EPOCH); a transactional batch
must go to a partition added to its producer's open transaction (INVALID_TXN_STATE otherwise).
Control batches are refused (INVALID_RECORD): only the broker writes transaction markers.
Internal topics (``__consumer_offsets``, ``__transaction_state``) are refused with
INVALID_TOPIC_EXCEPTION, as Kafka does ("Cannot append to internal topic").

Authorization (with an authorizer, as Kafka's ``KafkaApis.handleProduceRequest``): a request with
transactional batches needs a ``transactional_id`` with WRITE on that TRANSACTIONAL_ID, else every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53); each topic needs WRITE, else its partitions answer
TOPIC_AUTHORIZATION_FAILED (29), checked before the topic's existence. Idempotent producers need
nothing more here (KIP-679: InitProducerId checks them).
"""

from __future__ import annotations

from pyspark_kafka.broker.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from pyspark_kafka.broker.handlers import CloseConnection, RequestContext, now_ms, register
from pyspark_kafka.broker.log.record_batch import ATTRIBUTES_OFFSET, TRANSACTIONAL_BIT
from pyspark_kafka.broker.protocol import ms
from pyspark_kafka.broker.replica_manager import AppendResult, ReplicaManager
from pyspark_kafka.broker.security.acls import AclOperation, ResourceType


# Errors Kafka's ReplicaManager answers with log_start_offset -1; after any other failed append
# it reports the partition's log start offset (``processFailedRecord``).
_NO_LOG_START_OFFSET = (UnknownTopicOrPartitionError, UnknownTopicIdError, RecordTooLargeError,
                        RecordBatchTooLargeError, CorruptRecordError, KafkaStorageError, InvalidTopicError,
                        InvalidRequiredAcksError)


def _partition_result(index: int, error_code: int, message: str | None = None,
                      append: AppendResult | None = None, record_errors=None, log_start_offset: int = -1) -> dict:
    return {
        "index": index,
        "error_code": error_code,
        "base_offset": append.base_offset if append else -1,
        "log_append_time": append.log_append_time_ms if append else -1,
        "log_start_offset": append.log_start_offset if append else log_start_offset,
        "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in record_errors or ()],
        "error_message": message,
    }


def _append(replica_manager: ReplicaManager, topic: str | None, partition: int, records, acks: int, now: int) -> dict:
    try:
        # Kafka's Produce never creates a topic (Metadata does): an unknown one is UNKNOWN_TOPIC_OR_PARTITION
        result = replica_manager.append_records(topic, partition, records, acks, now)
    except KafkaError as exc:
        errors = exc.record_errors.errors if exc.record_errors else None
        log_start = -1 if isinstance(exc, _NO_LOG_START_OFFSET) else replica_manager.log_start_offset(topic, partition)
        return _partition_result(partition, exc.error_code, str(exc), record_errors=errors, log_start_offset=log_start)
    return _partition_result(partition, ErrorCode.none, None, result)


def _has_transactional_records(request) -> bool:
    """Whether a partition's batch has the transactional attribute bit (Kafka's
    ``RequestUtils.hasTransactionalRecords``). Only the first batch of each partition is looked at:
    a request with more is refused per partition anyway (INVALID_RECORD); too-short data is not
    transactional here (the append answers CORRUPT_MESSAGE)."""
    for topic_data in request.topic_data:
        for pdata in topic_data.partition_data:
            records = pdata.records
            if records is not None and len(records) >= ATTRIBUTES_OFFSET + 2 and \
                    int.from_bytes(records[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2], "big") & TRANSACTIONAL_BIT:
                return True
    return False


async def _wait_for_acks(replica_manager: ReplicaManager, responses: list[dict], acks: int, timeout_ms: int) -> None:
    """acks=all: wait (Kafka's ``DelayedProduce``, :meth:`ReplicaManager.wait_for_acks`) until every appended
    partition's high watermark passes its records; a partition that times out answers REQUEST_TIMED_OUT, one
    whose ISR fell below ``min.insync.replicas`` NOT_ENOUGH_REPLICAS_AFTER_APPEND, one whose leader changed
    NOT_LEADER_OR_FOLLOWER."""
    appended: dict[tuple[str, int], list[dict]] = {}
    for t in responses:
        for r in t["partition_responses"]:
            if r["error_code"] == ErrorCode.none:
                appended.setdefault((t["name"], r["index"]), []).append(r)
    for key, exc in (await replica_manager.wait_for_acks(appended, acks, timeout_ms)).items():
        for r in appended[key]:
            r.update(error_code=exc.error_code, error_message=str(exc), base_offset=-1)


@register(api_key=0, min_version=3, max_version=11)
async def produce(ctx: RequestContext, request) -> dict | None:
    """Append every partition's records; the response carries base offset, log append time, log start offset."""
    replica_manager = ctx.broker.replica_manager
    now = now_ms()
    acks = request.acks
    responses = []
    failed = False
    txn_id = getattr(request, "transactional_id", None)
    txn_denied = _has_transactional_records(request) and (
        txn_id is None or not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id))
    for topic_data in request.topic_data:
        name = getattr(topic_data, "name", None)
        topic_id = getattr(topic_data, "topic_id", None)
        if name is None and topic_id is not None:
            name = ctx.broker.metadata_cache.topic_name(topic_id)
        if replica_manager.electing and name is not None:  # an election in progress: wait for it (Kafka's lock)
            await replica_manager.wait_for_elections([(name, p.index) for p in topic_data.partition_data],
                                                     ms(request.timeout) / 1000)
        partitions = []
        denied = ErrorCode.transactional_id_authorization_failed if txn_denied else (
            ErrorCode.topic_authorization_failed if name is not None
            and not ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, name) else None)
        for pdata in topic_data.partition_data:
            if denied is not None:
                failed = True
                partitions.append(_partition_result(pdata.index, denied))
                continue
            res = _append(replica_manager, name, pdata.index, pdata.records, acks, now)
            failed = failed or res["error_code"] != ErrorCode.none
            partitions.append(res)
        responses.append({"name": name or "", "topic_id": topic_id, "partition_responses": partitions})
    if acks == -1:
        await _wait_for_acks(replica_manager, responses, acks, ms(request.timeout))
    if acks == 0:
        if failed:
            raise CloseConnection()
        return None
    return {"responses": responses, "throttle_time": 0, "node_endpoints": []}
