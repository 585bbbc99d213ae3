"""Errors of the embedded broker, each carrying the Kafka error code it maps to.

The server turns any :class:`KafkaError` into its ``error_code`` in the response
(codes from Kafka's ``org.apache.kafka.common.protocol.Errors``). Every message
names the cause and, where there is one, the fix.
"""

from __future__ import annotations


class KafkaError(Exception):
    """Base class: an error the broker reports to clients as ``error_code``."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(KafkaError):
    """A fetch offset below the log start offset or above the log end offset (OFFSET_OUT_OF_RANGE)."""

    error_code = 1


class CorruptRecordError(KafkaError):
    """A record batch fails its CRC32C or header sanity checks (CORRUPT_MESSAGE)."""

    error_code = 2


class UnknownTopicOrPartitionError(KafkaError):
    """The topic or partition does not exist on this broker (UNKNOWN_TOPIC_OR_PARTITION)."""

    error_code = 3


class RecordTooLargeError(KafkaError):
    """A record batch is larger than ``max.message.bytes`` (MESSAGE_TOO_LARGE)."""

    error_code = 10


class InvalidTopicError(KafkaError):
    """A topic name breaks Kafka's naming rules (INVALID_TOPIC_EXCEPTION)."""

    error_code = 17


class RecordBatchTooLargeError(KafkaError):
    """One produce request's record set is larger than ``segment.bytes`` (RECORD_LIST_TOO_LARGE)."""

    error_code = 18


class TopicExistsError(KafkaError):
    """CreateTopics for a name that already exists (TOPIC_ALREADY_EXISTS)."""

    error_code = 36


class InvalidPartitionsError(KafkaError):
    """A partition count below 1, or CreatePartitions not increasing the count (INVALID_PARTITIONS)."""

    error_code = 37


class InvalidReplicationFactorError(KafkaError):
    """A replication factor this single-broker cluster cannot satisfy (INVALID_REPLICATION_FACTOR)."""

    error_code = 38


class InvalidReplicaAssignmentError(KafkaError):
    """A manual replica assignment naming another broker or skipping partitions (INVALID_REPLICA_ASSIGNMENT)."""

    error_code = 39


class InvalidConfigError(KafkaError, ValueError):
    """An unknown config name or a value of the wrong type or range (INVALID_CONFIG)."""

    error_code = 40


class ConfigError(InvalidConfigError):
    """A broker config given at startup is unknown or malformed; the message names the key and the fix."""


class InvalidRequestError(KafkaError):
    """A request that is well formed but asks for something this broker cannot do (INVALID_REQUEST)."""

    error_code = 42


class PolicyViolationError(KafkaError):
    """A request breaks a broker policy, e.g. too many partitions at once (POLICY_VIOLATION)."""

    error_code = 44


class KafkaStorageError(KafkaError):
    """The data directory cannot be read or written (KAFKA_STORAGE_ERROR)."""

    error_code = 56


class UnsupportedCompressionError(KafkaError):
    """A batch names a compression codec Kafka does not define (UNSUPPORTED_COMPRESSION_TYPE)."""

    error_code = 76


class InvalidRecordError(KafkaError):
    """A record batch is well formed but breaks a rule, e.g. its offset range disagrees with its count (INVALID_RECORD)."""

    error_code = 87


# -- consumer groups ---------------------------------------------------------------------------


class CoordinatorNotAvailableError(KafkaError):
    """``__consumer_offsets`` cannot be read or written (COORDINATOR_NOT_AVAILABLE); clients retry."""

    error_code = 15


class InvalidCommitOffsetSizeError(KafkaError):
    """An offset commit larger than ``__consumer_offsets`` accepts (INVALID_COMMIT_OFFSET_SIZE)."""

    error_code = 28


# -- idempotent producers and transactions (KIP-98) ------------------------------------------


class OutOfOrderSequenceError(KafkaError):
    """A producer batch's sequence does not follow the last one (OUT_OF_ORDER_SEQUENCE_NUMBER)."""

    error_code = 45


class InvalidProducerEpochError(KafkaError):
    """A producer epoch older than the current one (INVALID_PRODUCER_EPOCH)."""

    error_code = 47


class InvalidTxnStateError(KafkaError):
    """The request does not fit the transaction's state (INVALID_TXN_STATE)."""

    error_code = 48


class InvalidProducerIdMappingError(KafkaError):
    """The producer id does not belong to the transactional id (INVALID_PRODUCER_ID_MAPPING)."""

    error_code = 49


class InvalidTransactionTimeoutError(KafkaError):
    """``transaction.timeout.ms`` above ``transaction.max.timeout.ms`` or not positive (INVALID_TRANSACTION_TIMEOUT)."""

    error_code = 50


class ConcurrentTransactionsError(KafkaError):
    """The previous transaction of this transactional id is still completing (CONCURRENT_TRANSACTIONS); retry."""

    error_code = 51


class ProducerFencedError(KafkaError):
    """A newer producer with the same transactional id exists (PRODUCER_FENCED, KIP-588)."""

    error_code = 90


# -- codes the handlers put into responses directly (Kafka's ``Errors``) ------------------------

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = UnknownTopicOrPartitionError.error_code
INVALID_REQUEST = InvalidRequestError.error_code
UNKNOWN_TOPIC_ID = 100
