"""Static registration shim: Spark registers ``DefaultSource`` of top-level ``pyspark_*`` modules.

``DefaultSource`` is :class:`pyspark_kafka.sinks.files.ParquetSinkDataSource` (name
``pykafka-parquet``), imported lazily so that importing this package does not import Spark.
"""


def __getattr__(name):
    if name == "DefaultSource":
        from pyspark_kafka.sinks.files import ParquetSinkDataSource

        return ParquetSinkDataSource
    raise AttributeError(f"module 'pyspark_kafka_parquet' has no attribute {name!r}")
