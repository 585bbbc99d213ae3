"""The batch reader of the ``pykafka`` source (Spark's ``KafkaBatch``): ``spark.read.format("pykafka")``."""

from __future__ import annotations

from typing import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader
from pyspark.sql.types import StructType

from pyspark_kafka.kafka.clients import check_consumer_config
from pyspark_kafka.errors import errors_as_messages
from pyspark_kafka.read.options import check_schema, parse_reader_options, unique_group_id
from pyspark_kafka.read.partition_reader import KafkaInputPartition, executor_conf, read_partition
from pyspark_kafka.read.planning import batch_ranges, input_partitions


@errors_as_messages
class KafkaBatchReader(DataSourceReader):
    """``spark.read.format("pykafka")``: reads the offsets between starting and ending offsets once.

    ``options``: the data source options; ``schema``: must be :func:`~pyspark_kafka.read.options.kafka_schema`.
    Raises OptionError for bad options (when Spark creates the reader).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType):
        self._opts = parse_reader_options(options, mode="batch")
        check_schema(schema, self._opts)
        self._conf = executor_conf(self._opts.options, unique_group_id(self._opts, "spark-kafka-relation") + "-executor")

    def partitions(self) -> list:
        """Resolve starting/ending offsets on the driver and split them into input partitions."""
        check_consumer_config(self._conf)
        return input_partitions(batch_ranges(self._opts), self._opts, self._conf)

    def read(self, partition: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the records of one offset range as record batches."""
        return read_partition(partition)
