"""``df.write.format("pykafka")`` (Spark's ``KafkaBatchWrite``): :class:`KafkaBatchWriter`."""

from __future__ import annotations

import logging
from typing import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter
from pyspark.sql.types import StructType

from pyspark_kafka.write import transactions as txn
from pyspark_kafka.errors import OptionError, errors_as_messages
from pyspark_kafka.write.commit_message import KafkaCommitMessage, summarize
from pyspark_kafka.write.data_writer import write_batches
from pyspark_kafka.write.exactly_once import write_transactional
from pyspark_kafka.write.options import WriteSpec

log = logging.getLogger(__name__)


@errors_as_messages
class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("pykafka")``: append the DataFrame's rows to Kafka.

    ``options``: data source options; ``schema``: the DataFrame's schema; ``overwrite``:
    True for ``mode("overwrite")``, which Kafka cannot do (raises OptionError, as Spark's
    sink allows only append / errorifexists). Raises SchemaError / OptionError on bad
    columns or options before anything is sent.

    With ``deliveryGuarantee=exactly-once`` every task commits its own transaction under
    ``transactional.id = {prefix}-job-<random>-{partition}`` (batch id 0): retried and
    speculative attempts of a task write once; a rerun of the whole job writes again.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool):
        if overwrite:
            raise OptionError(
                "save mode 'overwrite' is not allowed for Kafka (topics are append-only); "
                "use mode('append')"
            )
        self.spec = WriteSpec.from_options(options, schema)
        self.job_id = txn.new_job_id() if self.spec.exactly_once else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        if self.spec.exactly_once:
            return write_transactional(self.spec, txn.batch_task_scope(self.spec.prefix, self.job_id), iterator)
        return write_batches(self.spec, iterator)

    def commit(self, messages) -> None:
        counts = summarize(messages)
        log.info("pykafka write committed %d records to %d partitions", sum(counts.values()), len(counts))

    def abort(self, messages) -> None:
        counts = summarize(messages)
        if self.spec.exactly_once:
            log.warning("pykafka write aborted; %d records of successful tasks are committed in Kafka "
                        "(each task's transaction is its own); failed attempts' records are aborted",
                        sum(counts.values()))
            return
        log.warning(
            "pykafka write aborted; %d records from successful tasks remain in Kafka (at-least-once)",
            sum(counts.values()),
        )
