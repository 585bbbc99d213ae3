"""The broker's one error table: Kafka error codes (kio's ``ErrorCode``) and the exceptions carrying them.

Like Kafka's ``org.apache.kafka.common.protocol.Errors`` (and kafka-python's ``errors.py``):
every code the broker answers with is an :class:`ErrorCode` member (an ``IntEnum``, so it
encodes and compares as the wire ``int16``), and every error the broker raises is a
:class:`KafkaError` subclass whose class attribute ``error_code`` is that member. Handlers
put ``exc.error_code`` (or :func:`error_code_of`) into their responses; :func:`for_code` maps
a code back to its exception class. Every message names the cause and, where there is one,
the fix. This module imports nothing of the broker, so every layer (config, log, coordinators,
handlers, server) may import it.
"""

from __future__ import annotations

from typing import NamedTuple

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "error_code_of", "for_code"]


class KafkaError(Exception):
    """Base class: an error the broker reports to clients as ``error_code`` (UNKNOWN_SERVER_ERROR here)."""

    error_code: ErrorCode = ErrorCode.unknown_server_error
    record_errors: "RecordErrors | None" = None
    """Per-record errors of a refused batch (KIP-467), set by :func:`record_validation_error`."""


class OffsetOutOfRangeError(KafkaError):
    """A fetch offset below the log start offset or above the log end offset (OFFSET_OUT_OF_RANGE)."""

    error_code = ErrorCode.offset_out_of_range


class CorruptRecordError(KafkaError):
    """A record batch fails its CRC32C or header sanity checks (CORRUPT_MESSAGE)."""

    error_code = ErrorCode.corrupt_message


class UnknownTopicOrPartitionError(KafkaError):
    """The topic or partition does not exist on this broker (UNKNOWN_TOPIC_OR_PARTITION)."""

    error_code = ErrorCode.unknown_topic_or_partition


class RecordTooLargeError(KafkaError):
    """A record batch is larger than ``max.message.bytes`` (MESSAGE_TOO_LARGE)."""

    error_code = ErrorCode.message_too_large


class InvalidTopicError(KafkaError):
    """A topic name breaks Kafka's naming rules (INVALID_TOPIC_EXCEPTION)."""

    error_code = ErrorCode.invalid_topic_exception


class RecordBatchTooLargeError(KafkaError):
    """One produce request's record set is larger than ``segment.bytes`` (RECORD_LIST_TOO_LARGE)."""

    error_code = ErrorCode.record_list_too_large


class TopicExistsError(KafkaError):
    """CreateTopics for a name that already exists (TOPIC_ALREADY_EXISTS)."""

    error_code = ErrorCode.topic_already_exists


class InvalidPartitionsError(KafkaError):
    """A partition count below 1, or CreatePartitions not increasing the count (INVALID_PARTITIONS)."""

    error_code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(KafkaError):
    """A replication factor this single-broker cluster cannot satisfy (INVALID_REPLICATION_FACTOR)."""

    error_code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignmentError(KafkaError):
    """A manual replica assignment naming another broker or skipping partitions (INVALID_REPLICA_ASSIGNMENT)."""

    error_code = ErrorCode.invalid_replica_assignment


class InvalidConfigError(KafkaError, ValueError):
    """An unknown config name or a value of the wrong type or range (INVALID_CONFIG)."""

    error_code = ErrorCode.invalid_config


class ConfigError(InvalidConfigError):
    """A broker config given at startup is unknown or malformed; the message names the key and the fix."""


class InvalidRequestError(KafkaError):
    """A request that is well formed but asks for something this broker cannot do (INVALID_REQUEST)."""

    error_code = ErrorCode.invalid_request


class PolicyViolationError(KafkaError):
    """A request breaks a broker policy, e.g. too many partitions at once (POLICY_VIOLATION)."""

    error_code = ErrorCode.policy_violation


class KafkaStorageError(KafkaError):
    """The data directory cannot be read or written (KAFKA_STORAGE_ERROR)."""

    error_code = ErrorCode.kafka_storage_error


class UnsupportedCompressionError(KafkaError):
    """A batch names a compression codec Kafka does not define (UNSUPPORTED_COMPRESSION_TYPE)."""

    error_code = ErrorCode.unsupported_compression_type


class InvalidRecordError(KafkaError):
    """A record batch is well formed but breaks a rule, e.g. its offset range disagrees with its count (INVALID_RECORD)."""

    error_code = ErrorCode.invalid_record


class InvalidTimestampError(KafkaError):
    """A record's CreateTime is outside ``message.timestamp.before.max.ms``/``after.max.ms`` of now (INVALID_TIMESTAMP)."""

    error_code = ErrorCode.invalid_timestamp


class RecordErrors(NamedTuple):
    """Kafka's ``RecordValidationException``: the batch's error plus one message per bad record.

    ``errors``: ``(batch_index, message)`` per refused record (its index inside the batch), as
    Kafka's ``RecordError``; the produce handler puts them into ``record_errors`` (KIP-467).
    """

    errors: tuple[tuple[int, str], ...]


def record_validation_error(record_errors: list[tuple[int, str]]) -> KafkaError:
    """The exception Kafka's ``LogValidator.processRecordErrors`` throws for a batch's record errors.

    INVALID_TIMESTAMP when a timestamp is among them, else INVALID_RECORD; the message is Kafka's
    (the first three record errors). ``exc.record_errors`` holds them all.
    """
    errors = tuple(record_errors)
    if any(message.startswith("Timestamp ") for _, message in errors):
        exc: KafkaError = InvalidTimestampError("One or more records have been rejected due to invalid timestamp")
    else:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        exc = InvalidRecordError(
            f"One or more records have been rejected due to {len(errors)} record errors in total, "
            f"and only showing the first three errors at most: [{shown}]")
    exc.record_errors = RecordErrors(errors)
    return exc


# -- consumer groups ---------------------------------------------------------------------------


class CoordinatorNotAvailableError(KafkaError):
    """``__consumer_offsets`` cannot be read or written (COORDINATOR_NOT_AVAILABLE); clients retry."""

    error_code = ErrorCode.coordinator_not_available


class InvalidCommitOffsetSizeError(KafkaError):
    """An offset commit larger than ``__consumer_offsets`` accepts (INVALID_COMMIT_OFFSET_SIZE)."""

    error_code = ErrorCode.invalid_commit_offset_size


# -- idempotent producers and transactions (KIP-98) ------------------------------------------


class OutOfOrderSequenceError(KafkaError):
    """A producer batch's sequence does not follow the last one (OUT_OF_ORDER_SEQUENCE_NUMBER)."""

    error_code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(KafkaError):
    """A producer epoch older than the current one (INVALID_PRODUCER_EPOCH)."""

    error_code = ErrorCode.invalid_producer_epoch


class InvalidTxnStateError(KafkaError):
    """The request does not fit the transaction's state (INVALID_TXN_STATE)."""

    error_code = ErrorCode.invalid_txn_state


class InvalidProducerIdMappingError(KafkaError):
    """The producer id does not belong to the transactional id (INVALID_PRODUCER_ID_MAPPING)."""

    error_code = ErrorCode.invalid_producer_id_mapping


class InvalidTransactionTimeoutError(KafkaError):
    """``transaction.timeout.ms`` above ``transaction.max.timeout.ms`` or not positive (INVALID_TRANSACTION_TIMEOUT)."""

    error_code = ErrorCode.invalid_transaction_timeout


class ConcurrentTransactionsError(KafkaError):
    """The previous transaction of this transactional id is still completing (CONCURRENT_TRANSACTIONS); retry."""

    error_code = ErrorCode.concurrent_transactions


class ProducerFencedError(KafkaError):
    """A newer producer with the same transactional id exists (PRODUCER_FENCED, KIP-588)."""

    error_code = ErrorCode.producer_fenced


# -- request-level errors ------------------------------------------------------------------------


class UnknownTopicIdError(KafkaError):
    """A request names a topic id this broker does not know (UNKNOWN_TOPIC_ID, KIP-516)."""

    error_code = ErrorCode.unknown_topic_id


class FencedLeaderEpochError(KafkaError):
    """A request's current leader epoch is older than the leader's (FENCED_LEADER_EPOCH)."""

    error_code = ErrorCode.fenced_leader_epoch


class NotControllerError(KafkaError):
    """This node is not the active controller (the controller quorum's leader), or it lost the
    leadership before a metadata record was committed (NOT_CONTROLLER, 41): retry on the current leader."""

    error_code = ErrorCode.not_controller


class InconsistentClusterIdError(KafkaError):
    """A broker's registration names another cluster id than the controller's (INCONSISTENT_CLUSTER_ID, 104): its
    data directory's ``meta.properties`` was written by another cluster (Kafka's ``ClusterControlManager.registerBroker``:
    "Expected cluster ID ..., but got cluster ID ...")."""

    error_code = ErrorCode.inconsistent_cluster_id


class UnknownLeaderEpochError(KafkaError):
    """A request's current leader epoch is newer than the leader's (UNKNOWN_LEADER_EPOCH)."""

    error_code = ErrorCode.unknown_leader_epoch


class InvalidRequiredAcksError(KafkaError):
    """Produce with ``acks`` other than 0, 1 or -1 (INVALID_REQUIRED_ACKS)."""

    error_code = ErrorCode.invalid_required_acks


class NotLeaderOrFollowerError(KafkaError):
    """A produce or fetch sent to a broker that does not lead (or follow) the partition (NOT_LEADER_OR_FOLLOWER):
    the client refreshes its metadata and retries on the leader."""

    error_code = ErrorCode.not_leader_or_follower


class NotEnoughReplicasError(KafkaError):
    """acks=all with fewer in-sync replicas than ``min.insync.replicas`` before the append (NOT_ENOUGH_REPLICAS):
    nothing was written."""

    error_code = ErrorCode.not_enough_replicas


class NotEnoughReplicasAfterAppendError(KafkaError):
    """acks=all whose ISR shrank below ``min.insync.replicas`` after the append (NOT_ENOUGH_REPLICAS_AFTER_APPEND):
    the records are in the leader's log but may not be replicated."""

    error_code = ErrorCode.not_enough_replicas_after_append


class RequestTimedOutError(KafkaError):
    """An acks=all produce whose records did not reach the ISR within the request's timeout (REQUEST_TIMED_OUT)."""

    error_code = ErrorCode.request_timed_out


class OffsetNotAvailableError(KafkaError):
    """ListOffsets to a new leader whose high watermark is still below the start of its leader epoch
    (OFFSET_NOT_AVAILABLE): the client retries."""

    error_code = ErrorCode.offset_not_available


class BrokerNotAvailableError(KafkaError):
    """No live broker can take the request (BROKER_NOT_AVAILABLE)."""

    error_code = ErrorCode.broker_not_available


# -- authorization (Kafka's StandardAuthorizer; broker/security/authorizer.py) ---------------------


class TopicAuthorizationError(KafkaError):
    """The principal lacks the ACL the request needs on a topic (TOPIC_AUTHORIZATION_FAILED)."""

    error_code = ErrorCode.topic_authorization_failed

    def __init__(self, message: str = "Topic authorization failed.") -> None:
        super().__init__(message)


class GroupAuthorizationError(KafkaError):
    """The principal lacks the ACL the request needs on a group (GROUP_AUTHORIZATION_FAILED)."""

    error_code = ErrorCode.group_authorization_failed

    def __init__(self, message: str = "Group authorization failed.") -> None:
        super().__init__(message)


class ClusterAuthorizationError(KafkaError):
    """The principal lacks the ACL the request needs on the cluster (CLUSTER_AUTHORIZATION_FAILED)."""

    error_code = ErrorCode.cluster_authorization_failed

    def __init__(self, message: str = "Cluster authorization failed.") -> None:
        super().__init__(message)


class TransactionalIdAuthorizationError(KafkaError):
    """The principal lacks the ACL the request needs on a transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""

    error_code = ErrorCode.transactional_id_authorization_failed

    def __init__(self, message: str = "Transactional Id authorization failed.") -> None:
        super().__init__(message)


# -- mapping helpers ---------------------------------------------------------------------------


def error_code_of(exc: BaseException) -> ErrorCode:
    """The code a response carries for ``exc``: its ``error_code`` for a KafkaError, else UNKNOWN_SERVER_ERROR."""
    return exc.error_code if isinstance(exc, KafkaError) else ErrorCode.unknown_server_error


def _subclasses(cls: type[KafkaError]):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def for_code(code: int) -> type[KafkaError]:
    """The exception class raised for Kafka error ``code`` (kafka-python's ``errors.for_code``).

    The most general class where several share a code (InvalidConfigError, not ConfigError);
    KafkaError for a code no class here carries. Raises ValueError for a code kio does not define.
    """
    code = ErrorCode(code)
    for sub in _subclasses(KafkaError):
        if sub.error_code == code:
            return sub
    return KafkaError
