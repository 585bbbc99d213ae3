"""The ``pykafka`` data source: wires options to the reader and writer classes.

Reading: ``spark.read.format("pykafka")`` / ``spark.readStream.format("pykafka")``
(see :mod:`pyspark_kafka.read`). Writing: ``df.write.format("pykafka")`` /
``df.writeStream.format("pykafka")`` (see :mod:`pyspark_kafka.write`).
Option names, schema and offset JSON are those of Spark's built-in Kafka connector.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType


class KafkaDataSource(DataSource):
    """PySpark data source ``pykafka`` for any Kafka-protocol cluster.

    Registered statically (this package is a top-level ``pyspark_*`` module
    defining ``DefaultSource``); ``spark.dataSource.register(KafkaDataSource)``
    also works.
    """

    @classmethod
    def name(cls) -> str:
        return "pykafka"

    def schema(self) -> StructType:
        from pyspark_kafka.read import read_schema

        return read_schema(self.options)

    def reader(self, schema: StructType):
        from pyspark_kafka.read import KafkaBatchReader

        return KafkaBatchReader(self.options, schema)

    def streamReader(self, schema: StructType):
        from pyspark_kafka.read import KafkaStreamReader

        return KafkaStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool):
        from pyspark_kafka.write import KafkaBatchWriter

        return _reachable(KafkaBatchWriter(self.options, schema, overwrite), self.options)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from pyspark_kafka.write import KafkaStreamWriter

        return _reachable(KafkaStreamWriter(self.options, schema, overwrite), self.options)


def _reachable(writer, options):
    """The driver's pre-flight of a write, once options and schema are valid: an unreachable cluster
    fails here in about 1.5 s naming each bootstrap address (:mod:`pyspark_kafka.reachability`),
    instead of in every task after ``kafka.delivery.timeout.ms``."""
    from pyspark_kafka.clients import producer_config
    from pyspark_kafka.reachability import require_reachable

    require_reachable(producer_config(options), options)
    return writer
