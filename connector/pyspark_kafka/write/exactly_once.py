"""The exactly-once write of one Spark task (``deliveryGuarantee=exactly-once``): :func:`write_transactional`.

Each task writes its rows in one Kafka transaction (KIP-98) under its own
``transactional.id`` and commits, in the same transaction, a marker that makes a replayed
micro-batch write nothing twice. The protocol's parts (ids, marker, decision, the task's
transaction) are :mod:`pyspark_kafka.write.transactions`; docs/exactly-once-kafka.md describes it.
"""

from __future__ import annotations

import itertools
import logging
from typing import Iterable

import pyarrow as pa

from pyspark_kafka.write import transactions as txn
from pyspark_kafka.errors import DeliveryError, RecordError
from pyspark_kafka.write.commit_message import KafkaCommitMessage
from pyspark_kafka.write.delivery import DeliveryFailures
from pyspark_kafka.write.options import WriteSpec
from pyspark_kafka.write.producer_pool import PooledProducer
from pyspark_kafka.write.task import KafkaWriteTask

log = logging.getLogger(__name__)


def write_transactional(spec: WriteSpec, scope: txn.TaskScope,
                        batches: Iterable[pa.RecordBatch]) -> KafkaCommitMessage:
    """Exactly-once: write ``batches`` in one Kafka transaction of ``scope.transactional_id``.

    Protocol (:mod:`pyspark_kafka.write.transactions`): no rows → no transaction; otherwise
    ``init_transactions`` (fences older attempts), read the marker; if ``scope.batch_id`` or
    a later batch is committed, consume the input, check it is the committed one
    (:class:`~pyspark_kafka.write.transactions.ReplayMismatchError` if not) and write nothing;
    with no marker, check once per query in this process that the brokers store transactional
    offsets (:class:`~pyspark_kafka.write.transactions.MarkerNotStoredError` before any record if
    not); else begin, produce (same checks and routing as
    :func:`~pyspark_kafka.write.data_writer.write_batches`), flush, add the
    marker and commit. Any error aborts the transaction, so a failed attempt leaves nothing
    visible to read_committed consumers. Raises RecordError, DeliveryError, FencedError.
    """
    from confluent_kafka import KafkaException

    liveness = txn.SparkLiveness()  # before reading: the input ends early if the Spark JVM dies
    rows = iter(batches)
    first = next((b for b in rows if b.num_rows), None)
    if first is None:
        return KafkaCommitMessage({}, scope.transactional_id)
    transaction = txn.TaskTransaction(spec.producer, spec.consumer, scope, _marker_topic(spec, first),
                                      spec.timeout_ms)
    task = None
    try:
        marker = transaction.init()
        decision = txn.decide(marker, scope.batch_id)
        if decision is not txn.Decision.WRITE:
            replayed = sum((txn.Fingerprint.of(b) for b in rows), txn.Fingerprint.of(first))
            if decision is txn.Decision.ALREADY_COMMITTED:
                liveness.check(scope.transactional_id)
                txn.check_replay(marker, replayed, scope.transactional_id)
            log.info("%s: batch %d already committed (%s); writing nothing",
                     scope.transactional_id, scope.batch_id, decision.value)
            return KafkaCommitMessage({}, scope.transactional_id, skipped=True)
        if marker is None:  # a first write: are markers stored at all? (once per query here)
            transaction.verify_marker_storage()
        transaction.begin()
        task = KafkaWriteTask(spec, PooledProducer((), transaction.producer, DeliveryFailures()))
        fingerprint = txn.Fingerprint()
        for batch in itertools.chain([first], rows):
            fingerprint += txn.Fingerprint.of(batch)
            task.send(batch)
        message = task.finish()
        liveness.check(scope.transactional_id)
        transaction.commit(txn.Marker(scope.batch_id, fingerprint))
        return KafkaCommitMessage(message.counts, scope.transactional_id)
    except txn.FencedError:
        raise
    except KafkaException as e:  # fatal producer error surfacing from poll/flush
        raise transaction.kafka_error(e, "produce") from None
    except DeliveryError:  # records not acknowledged: name the fatal cause (e.g. fenced) when there is one
        if transaction.fatal_error is not None:
            raise transaction.kafka_error(transaction.fatal_error, "produce") from None
        raise
    finally:
        transaction.close()
        if task is not None:  # an exception's traceback keeps this frame: it must not keep the producer alive
            task.producer = task.pooled = None


def _marker_topic(spec: WriteSpec, first: pa.RecordBatch) -> str:
    """Topic whose partition 0 holds the task's marker: option ``topic``, else the first row's topic.

    The same on every replay of the task (its rows are the same). Raises RecordError for a null topic.
    """
    if spec.topic is not None:
        return spec.topic
    topic = first.column("topic")[0].as_py()
    if topic is None:
        raise RecordError(
            "row 0 of this task's batch has a null 'topic'; fill the column or set option "
            "'topic' (.option('topic', 'name')), which then applies to every row"
        )
    return topic
