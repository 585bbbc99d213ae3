"""Static registration shim: Spark registers ``DefaultSource`` of top-level ``pyspark_*`` modules.

``DefaultSource`` is :class:`pyspark_kafka.sinks.iceberg.IcebergSinkDataSource` (name
``pykafka-iceberg``), imported lazily so that importing this package does not import Spark.
"""


def __getattr__(name):
    if name == "DefaultSource":
        from pyspark_kafka.sinks.iceberg import IcebergSinkDataSource

        return IcebergSinkDataSource
    raise AttributeError(f"module 'pyspark_kafka_iceberg' has no attribute {name!r}")
