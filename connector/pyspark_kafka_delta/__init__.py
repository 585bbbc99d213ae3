"""Static registration shim: Spark registers ``DefaultSource`` of top-level ``pyspark_*`` modules.

``DefaultSource`` is :class:`pyspark_kafka.sinks.delta.DeltaSinkDataSource` (name
``pykafka-delta``), imported lazily so that importing this package does not import Spark.
"""


def __getattr__(name):
    if name == "DefaultSource":
        from pyspark_kafka.sinks.delta import DeltaSinkDataSource

        return DeltaSinkDataSource
    raise AttributeError(f"module 'pyspark_kafka_delta' has no attribute {name!r}")
