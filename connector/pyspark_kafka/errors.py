"""Errors raised by pyspark-kafka. Every message names the cause and the fix."""

import functools
import inspect
import os


class PySparkKafkaError(Exception):
    """Base class of the errors this package raises."""


class OptionError(PySparkKafkaError, ValueError):
    """A data source option is missing, malformed or contradicts another option.

    The message names the option, the value received (secrets redacted) and the fix.
    """


class ReadTimeoutError(PySparkKafkaError):
    """An executor made no progress on its offset range within ``kafkaConsumer.pollTimeoutMs``."""


class DataLossError(PySparkKafkaError):
    """Offsets the query needs are gone from the topic (retention, deletion).

    Raised when ``failOnDataLoss=true``; the message names topic, partition and
    the missing offset range.
    """


DATA_LOSS_FIX = (
    "If this is expected (retention deleted the records, or the topic was deleted/recreated), "
    "set the source option failOnDataLoss=false to skip the missing offsets"
)
"""The fix appended to every :class:`DataLossError` message."""


class CorruptRecordError(PySparkKafkaError):
    """A fetched record batch is damaged: its CRC-32C does not match (Kafka's ``check.crcs``), or a
    length, count or varint in it contradicts the bytes it spans (Kafka's ``CorruptRecordException``).

    The first line names the topic-partition and the batch's offsets and says the data is corrupt;
    the rest says what to do (:data:`CORRUPT_FIX`). Raised whatever ``failOnDataLoss`` says: Spark's
    connector fails such a read too (its ``KafkaDataConsumer`` treats only out-of-range offsets as
    data loss), since skipping would silently drop records that are still in the log.
    """


CORRUPT_FIX = (
    "The bytes the broker served do not match what the producer wrote (damaged on the broker's disk or in "
    "transit). Read again to rule out a network fault; if it persists, restore the partition from a healthy "
    "replica (or move leadership to one), or start the query past these offsets (startingOffsets). "
    "kafka.check.crcs=false turns off the CRC check only: damaged structure is still refused"
)
"""The fix appended to every :class:`CorruptRecordError` message."""


def corrupt_record_error(topic: str, partition: int, first: int | None, last: int | None,
                         reason: str) -> CorruptRecordError:
    """The :class:`CorruptRecordError` for a damaged batch of ``topic``-``partition`` spanning offsets
    ``first``..``last`` (None: unknown), ``reason`` saying what is wrong; its first line names them all."""
    span = f"offsets {first}..{last}" if first is not None and last is not None else (
        f"offset {first}" if first is not None else "an unknown offset")
    return CorruptRecordError(f"corrupt record batch in {topic}-{partition} at {span}: {reason}.\n{CORRUPT_FIX}")


class DeliveryError(PySparkKafkaError):
    """A record was not acknowledged by the broker; the task fails so nothing is lost."""


class SchemaError(PySparkKafkaError, ValueError):
    """The DataFrame given to the Kafka sink has a missing, unknown or mistyped column.

    Raised on the driver before anything is sent; the message names the column, the
    type found and the type expected.
    """


class RecordError(PySparkKafkaError, ValueError):
    """One input row cannot become a Kafka record (null topic, partition out of range, ...).

    The message names the topic, the row's problem and the fix.
    """


def authorization_hint(error_name: str, operation: str, topic: str) -> str:
    """The fix for a denied access, or "" for any other error.

    ``error_name`` is Kafka's error name (librdkafka's ``KafkaError.name()``, e.g.
    ``TOPIC_AUTHORIZATION_FAILED``), ``operation`` the ACL operation the request needed (Kafka's
    ``AclOperation``: ``READ`` for Fetch, ``WRITE`` for Produce; ``KafkaApis`` checks them).
    """
    if error_name == "TOPIC_AUTHORIZATION_FAILED":
        return (f"; the principal of the 'kafka.sasl.jaas.config' (or TLS certificate) lacks {operation} on topic "
                f"'{topic}': ask for an ACL, e.g. kafka-acls --add --allow-principal User:<name> "
                f"--operation {operation.capitalize()} --topic {topic}")
    if error_name == "GROUP_AUTHORIZATION_FAILED":
        return "; the principal lacks READ on the consumer group: ask for a group ACL (kafka-acls --group ...)"
    return ""


SPARK_WORKER_ENV = ("SPARK_PYTHON_RUNTIME", "PYTHON_WORKER_FACTORY_SECRET")
"""Environment variables Spark sets in its Python worker processes (executor workers and the
driver-side planner and streaming source runners alike), and not in the driver's Python process."""


def _message_only_in_spark(exc: BaseException) -> None:
    """In a Spark Python worker, make ``exc`` reach Spark as its message only (``SPARK_HIDE_TRACEBACK``).

    pyspark's ``handle_worker_exception`` reads ``SPARK_HIDE_TRACEBACK`` when it formats the error,
    and every worker process exits right after it (``sys.exit(-1)``: executor workers, the data
    source planner workers, the streaming source runner, pyspark 4.x), so the setting ends with the
    failing process and no later task's traceback (a user's UDF) is hidden. Outside a worker (a
    test calling the class directly) nothing changes.
    """
    if isinstance(exc, PySparkKafkaError) and any(k in os.environ for k in SPARK_WORKER_ENV):
        os.environ["SPARK_HIDE_TRACEBACK"] = "1"


def _entry(func):
    """``func`` (a method Spark calls) with :func:`_message_only_in_spark` applied to what it raises,
    also while iterating a generator it returns."""
    if getattr(func, "_pyspark_kafka_entry", False):
        return func

    def iterate(gen):
        try:
            yield from gen
        except BaseException as exc:
            _message_only_in_spark(exc)
            raise

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            out = func(*args, **kwargs)
        except BaseException as exc:
            _message_only_in_spark(exc)
            raise
        return iterate(out) if inspect.isgenerator(out) else out

    wrapper._pyspark_kafka_entry = True
    return wrapper


def errors_as_messages(cls: type) -> type:
    """Class decorator for the data sources, readers and writers Spark calls: an error of this package
    (:class:`PySparkKafkaError`) raised by any public method reaches the user as its message, without
    Python's traceback, whatever ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` says.

    Without it a plain ``SparkSession`` showed our traceback twice (the worker's, then pyspark 4's
    ``recover_python_exception`` frames) before the message: for a missing ``subscribe`` the cause
    was line 37 of 38 of what ``python job.py`` printed, against line 13 of 13 for Spark's connector
    (measured with ``tools/error_output_compare.py``). Other exceptions (bugs) keep their traceback.

    Wraps every public method (inherited ones too) that is not pyspark's own (its base classes'
    defaults stay as they are), keeping its signature (pyspark inspects ``latestOffset``'s).
    Returns ``cls``.
    """
    for name in dir(cls):
        if name.startswith("_"):
            continue
        member = inspect.getattr_static(cls, name)
        if inspect.isfunction(member) and not str(member.__module__).startswith(("pyspark.", "builtins")):
            setattr(cls, name, _entry(member))
    return cls
