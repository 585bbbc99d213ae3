"""Static registration shim: Spark registers ``DefaultSource`` of top-level ``pyspark_*`` modules.

``DefaultSource`` is :class:`pyspark_kafka.sinks.sql.SqlSinkDataSource` (name ``pykafka-sql``),
imported lazily so that importing this package does not import Spark.
"""


def __getattr__(name):
    if name == "DefaultSource":
        from pyspark_kafka.sinks.sql import SqlSinkDataSource

        return SqlSinkDataSource
    raise AttributeError(f"module 'pyspark_kafka_sql' has no attribute {name!r}")
