"""``df.writeStream.format("pykafka")`` (Spark's ``KafkaStreamingWrite``): :class:`KafkaStreamWriter`."""

from __future__ import annotations

import logging
from typing import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from pyspark_kafka.write import transactions as txn
from pyspark_kafka.errors import errors_as_messages
from pyspark_kafka.write.commit_message import KafkaCommitMessage, skipped_tasks, summarize
from pyspark_kafka.write.data_writer import write_batches
from pyspark_kafka.write.exactly_once import write_transactional
from pyspark_kafka.write.options import WriteSpec

log = logging.getLogger(__name__)


@errors_as_messages
class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("pykafka")``: append each micro-batch's rows to Kafka.

    ``overwrite`` (output mode ``complete``) is allowed as in Spark's sink: every
    micro-batch writes all rows again. Option ``deliveryGuarantee`` is checked here.

    With ``deliveryGuarantee=exactly-once`` each task commits one transaction under
    ``transactional.id = {prefix}-{queryId}-{partition}`` together with its marker, so a
    micro-batch replayed after a failure is written once (:mod:`pyspark_kafka.write.transactions`).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool):
        self.spec = WriteSpec.from_options(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        if self.spec.exactly_once:
            return write_transactional(self.spec, txn.stream_task_scope(self.spec.prefix), iterator)
        return write_batches(self.spec, iterator)

    def commit(self, messages, batchId: int) -> None:
        counts = summarize(messages)
        log.info("pykafka micro-batch %d committed %d records to %d partitions (%d tasks found theirs "
                 "already committed)", batchId, sum(counts.values()), len(counts), skipped_tasks(messages))

    def abort(self, messages, batchId: int) -> None:
        counts = summarize(messages)
        if self.spec.exactly_once:
            log.warning("pykafka micro-batch %d aborted; %d records of successful tasks are committed in "
                        "Kafka with their markers: when the batch is replayed those tasks write nothing",
                        batchId, sum(counts.values()))
            return
        log.warning("pykafka micro-batch %d aborted; %d records from successful tasks remain in Kafka",
                    batchId, sum(counts.values()))
