"""The at-least-once write of one Spark task (Spark's ``KafkaDataWriter``): :func:`write_batches`.

A pooled producer (:mod:`~pyspark_kafka.write.producer_pool`) writes the task's rows
(:class:`~pyspark_kafka.write.task.KafkaWriteTask`); the task succeeds only when every record
was acknowledged, and then gives the producer back to the pool. On any error the producer's
queue is purged and the producer closed, and the error names the cause and its fix.
The exactly-once write of a task is :func:`pyspark_kafka.write.exactly_once.write_transactional`.
"""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa

from pyspark_kafka.errors import DeliveryError
from pyspark_kafka.write.commit_message import KafkaCommitMessage
from pyspark_kafka.write.delivery import IDEMPOTENT_HINT, LOST_FATAL_ERROR, is_idempotent, producer_failure
from pyspark_kafka.write.options import WriteSpec
from pyspark_kafka.write.producer_pool import release
from pyspark_kafka.write.task import KafkaWriteTask


def write_batches(spec: WriteSpec, batches: Iterable[pa.RecordBatch]) -> KafkaCommitMessage:
    """Produce every row of ``batches`` and wait until all are acknowledged.

    Returns the acknowledged counts per ``(topic, partition)``. Raises RecordError for a
    row that cannot become a record (checked per Arrow batch before any of its rows is
    sent), DeliveryError when the cluster cannot be reached or a record is not
    acknowledged within ``delivery.timeout.ms``. After an error the producer's queue is
    purged: a failed task sends nothing more (rows of earlier batches may be in Kafka).
    """
    from confluent_kafka import KafkaException

    task = KafkaWriteTask(spec)
    try:
        for batch in batches:
            task.send(batch)
        message = task.finish()
    except KafkaException as e:  # fatal producer error surfacing from poll/flush
        task.abandon()
        raise producer_failure(e.args[0]) from None
    except SystemError as e:
        # confluent-kafka (2.16) sets a fatal error's KafkaException in flush() and then runs the
        # delivery callback of each purged record, whose first C call fails with this SystemError
        # ("returned a result with an exception set"), the KafkaException as its cause: name that.
        # Sometimes the exception is lost on the way ("returned NULL without setting an
        # exception", about 1 flush in 20 here) and nothing in confluent-kafka names it again.
        task.abandon()
        if isinstance(e.__cause__, KafkaException):
            raise producer_failure(e.__cause__.args[0]) from None
        raise DeliveryError(LOST_FATAL_ERROR.format(error=e) + (
            IDEMPOTENT_HINT if is_idempotent(spec.producer) else "")) from None
    except BaseException:
        task.abandon()
        raise
    release(task.pooled)
    return message
