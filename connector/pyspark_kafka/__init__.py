"""pyspark-kafka: move data between Apache Kafka and Apache Spark from Python.

Importing this package is cheap and does not import Spark: ``DefaultSource``
(the ``pykafka`` data source picked up by Spark's static registration of
``pyspark_*`` modules) is resolved lazily, so the embedded broker
(:mod:`pyspark_kafka.broker`) never pulls in PySpark.
"""

__version__ = "0.1.0"

__all__ = ["DefaultSource", "KafkaDataSource", "__version__"]


def __getattr__(name):
    if name in ("DefaultSource", "KafkaDataSource"):
        from pyspark_kafka.source import KafkaDataSource

        return KafkaDataSource
    raise AttributeError(f"module 'pyspark_kafka' has no attribute {name!r}")
