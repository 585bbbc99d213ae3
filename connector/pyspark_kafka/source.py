"""The ``pykafka`` data source: wires options to the reader and writer classes.

Reading: ``spark.read.format("pykafka")`` / ``spark.readStream.format("pykafka")``
(see :mod:`pyspark_kafka.read`). Writing: ``df.write.format("pykafka")`` /
``df.writeStream.format("pykafka")`` (see :mod:`pyspark_kafka.write`).
Option names, schema and offset JSON are those of Spark's built-in Kafka connector.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from pyspark_kafka.errors import errors_as_messages


@errors_as_messages
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
        from pyspark_kafka.errors import PySparkKafkaError
        from pyspark_kafka.read import KafkaStreamReader

        try:
            return KafkaStreamReader(self.options, schema)
        except PySparkKafkaError as exc:
            return _refused_stream_reader(KafkaStreamReader, exc)

    def writer(self, schema: StructType, overwrite: bool):
        from pyspark_kafka.write import KafkaBatchWriter

        return _reachable(KafkaBatchWriter(self.options, schema, overwrite), self.options)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from pyspark_kafka.write import KafkaStreamWriter

        return _reachable(KafkaStreamWriter(self.options, schema, overwrite), self.options)


def _reachable(writer, options):
    """The driver's pre-flight of a write, once options and schema are valid: an unreachable cluster
    fails here in about 1.5 s naming each bootstrap address (:mod:`pyspark_kafka.kafka.reachability`),
    instead of in every task after ``kafka.delivery.timeout.ms``."""
    from pyspark_kafka.kafka.clients import producer_config
    from pyspark_kafka.kafka.reachability import require_reachable

    require_reachable(producer_config(options), options)
    return writer


def _refused_stream_reader(base: type, error: Exception):
    """A stream reader whose every call raises ``error`` (the option error its construction raised) and
    whose ``stop()`` does nothing.

    pyspark 4.3's streaming source runner (``python_streaming_source_runner.py``) calls
    ``reader.stop()`` in a ``finally`` around the reader's construction, so an error raised by the
    constructor reached the user as ``UnboundLocalError: cannot access local variable 'reader'``
    instead of its own message. Raised from the first call instead, it reaches the user whole
    (``tests/connector/read/test_reader_options.py::test_option_errors_reach_the_user_through_spark``).
    """

    def refuse(self, *args, **kwargs):
        raise error

    def latest_offset(self, start, limit):  # the signature pyspark inspects for admission control
        raise error

    members = {name: refuse for name in ("initialOffset", "getDefaultReadLimit", "prepareForTriggerAvailableNow",
                                         "reportLatestOffset", "partitions", "read", "commit")}
    cls = type("RefusedKafkaStreamReader", (base,), {**members, "latestOffset": latest_offset,
                                                      "__init__": lambda self: None, "stop": lambda self: None})
    return errors_as_messages(cls)()
