"""The write side of the ``pykafka`` sink: batch (``df.write``) and streaming (``df.writeStream``) writes to Kafka.

Input columns and options are those of Spark's built-in Kafka sink (see ``docs/writer.md``).
Each Spark task produces its rows with one confluent-kafka ``Producer`` (``kafka.*``
options passed through; defaults ``acks=all``, ``enable.idempotence=true``,
``delivery.timeout.ms=120000`` as in the Java client; idle producers are reused by later
tasks of the same Python worker) to partitions chosen by :mod:`pyspark_kafka.write.routing`, then
flushes and checks the delivery reports: the task succeeds only when every record was
acknowledged (at-least-once), otherwise it fails with
:class:`~pyspark_kafka.errors.DeliveryError`. The commit message of a task counts the
acknowledged records per topic-partition. With ``deliveryGuarantee=exactly-once`` each task
writes its rows in one Kafka transaction with a per-task ``transactional.id`` and commits, in
the same transaction, a marker that makes a replayed micro-batch write nothing twice
(:mod:`pyspark_kafka.write.transactions`, ``docs/exactly-once-kafka.md``).

One concept per module, as in Spark's kafka010 connector:

- :mod:`~pyspark_kafka.write.schema`: the input columns, :func:`validate_schema`
  (Spark's ``KafkaWriter.validateQuery``);
- :mod:`~pyspark_kafka.write.options`: option parsing and the driver-side
  :class:`WriteSpec` every task receives;
- :mod:`~pyspark_kafka.write.task`: :class:`KafkaWriteTask`, one task's checks, routing,
  producing and flush (Spark's ``KafkaWriteTask`` / ``KafkaRowWriter``);
- :mod:`~pyspark_kafka.write.record_columns`: Arrow columns → the producer's per-row arguments;
- :mod:`~pyspark_kafka.write.delivery`: delivery reports and the producer's error messages;
- :mod:`~pyspark_kafka.write.producer_pool`: idle producers reused by later tasks of a Python
  worker (Spark's ``InternalKafkaProducerPool``);
- :mod:`~pyspark_kafka.write.data_writer`: :func:`write_batches`, a task's at-least-once
  write (Spark's ``KafkaDataWriter``);
- :mod:`~pyspark_kafka.write.exactly_once`: :func:`write_transactional`, a task's write in
  one Kafka transaction with its replay marker;
- :mod:`~pyspark_kafka.write.commit_message`: :class:`KafkaCommitMessage` and its sums;
- :mod:`~pyspark_kafka.write.batch`: :class:`KafkaBatchWriter` (Spark's ``KafkaBatchWrite``);
- :mod:`~pyspark_kafka.write.stream`: :class:`KafkaStreamWriter` (Spark's ``KafkaStreamingWrite``).
"""

from pyspark_kafka.write.batch import KafkaBatchWriter
from pyspark_kafka.write.commit_message import KafkaCommitMessage, summarize
from pyspark_kafka.write.data_writer import write_batches
from pyspark_kafka.write.exactly_once import write_transactional
from pyspark_kafka.write.options import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    PRODUCER_DEFAULTS,
    WriteSpec,
    delivery_timeout_ms,
    parse_delivery_guarantee,
    with_producer_defaults,
)
from pyspark_kafka.write.producer_pool import close_idle_producers
from pyspark_kafka.write.schema import validate_schema
from pyspark_kafka.write.stream import KafkaStreamWriter
from pyspark_kafka.write.task import KafkaWriteTask

__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "PRODUCER_DEFAULTS",
    "KafkaBatchWriter",
    "KafkaCommitMessage",
    "KafkaStreamWriter",
    "KafkaWriteTask",
    "WriteSpec",
    "close_idle_producers",
    "delivery_timeout_ms",
    "parse_delivery_guarantee",
    "summarize",
    "validate_schema",
    "with_producer_defaults",
    "write_batches",
    "write_transactional",
]
