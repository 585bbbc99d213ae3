"""Spark's Real-time Mode refuses ``format("pykafka")`` as a source (docs/comparison.md, "Real-time Mode").

Spark runs a ``trigger(realTime=...)`` query only when the source's JVM stream implements
``SupportsRealTimeMode``; the stream Spark builds for a Python data source
(``PythonMicroBatchStream*``) does not, and pyspark's ``DataSourceStreamReader`` has no real-time
hook. The page says so and tells users to pick Spark's connector for Real-time Mode: this test
fails when a pyspark starts accepting it, so the page can be corrected. The sink is ``foreach``,
which is in Spark's Real-time Mode sink allowlist, so only the source can be refused.
"""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException


def test_realtime_trigger_refuses_python_source(spark, bootstrap, make_topic, checkpoint_dir):
    topic = make_topic(1)
    df = (spark.readStream.format("pykafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").load())
    query = (df.writeStream.foreach(lambda row: None).outputMode("update")
             .option("checkpointLocation", checkpoint_dir).trigger(realTime="5 seconds").start())
    try:
        with pytest.raises(StreamingQueryException) as failure:
            query.awaitTermination(60)  # bounded: a query that runs instead fails the test below
    finally:
        query.stop()
    message = str(failure.value)
    assert "STREAMING_REAL_TIME_MODE.INPUT_STREAM_NOT_SUPPORTED" in message
    assert "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream" in message
