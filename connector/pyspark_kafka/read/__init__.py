"""The read side of the ``pykafka`` source: batch (``spark.read``) and micro-batch streaming (``spark.readStream``).

Options, schema and offset JSON are those of Spark's built-in Kafka source (see
``docs/reader.md``). One concept per module, as in Spark's kafka010 connector:

- :mod:`~pyspark_kafka.read.options`: option parsing and validation,
  :func:`kafka_schema` / :func:`read_schema`;
- :mod:`~pyspark_kafka.read.consumer_group`: consumer-group options, rules and
  group offsets (``commitOffsets``, ``startingOffsets=group``, ``groupMembership``);
- :mod:`~pyspark_kafka.read.stream_group`: a streaming query's reader as a group
  member (:class:`StreamGroup`) and its SIGTERM handler;
- :mod:`~pyspark_kafka.read.offset_reader`: driver side, :class:`OffsetReader`
  (one confluent-kafka AdminClient) lists the subscribed topic-partitions and
  resolves earliest / latest / by-timestamp offsets;
- :mod:`~pyspark_kafka.read.planning`: offsets → offset ranges → Spark input
  partitions, shared by the batch and stream readers and
  :func:`pyspark_kafka.groups.read_batch`; data-loss reporting;
- :mod:`~pyspark_kafka.read.partition_reader`: executor side, one offset range
  read by a pooled, assigned consumer into ``pyarrow.RecordBatch`` es;
- :mod:`~pyspark_kafka.read.batch`: :class:`KafkaBatchReader`;
- :mod:`~pyspark_kafka.read.stream`: :class:`KafkaStreamReader`.

Executors never commit to Kafka (``enable.auto.commit=false``). The
user-facing group helpers (:mod:`pyspark_kafka.groups`) sit on top of this
package; nothing here imports them.
"""

from pyspark_kafka.read.batch import KafkaBatchReader
from pyspark_kafka.read.offset_reader import OffsetReader
from pyspark_kafka.read.options import (
    ReaderOptions,
    Subscription,
    kafka_schema,
    parse_duration_ms,
    parse_reader_options,
    read_schema,
)
from pyspark_kafka.read.partition_reader import (
    BATCH_BYTES,
    BATCH_ROWS,
    KafkaInputPartition,
    ReadTimeoutError,
    executor_conf,
    read_partition,
)
from pyspark_kafka.read.planning import batch_offsets, input_partitions, report_data_loss
from pyspark_kafka.read.stream import KafkaStreamReader

__all__ = [
    "BATCH_BYTES",
    "BATCH_ROWS",
    "KafkaBatchReader",
    "KafkaInputPartition",
    "KafkaStreamReader",
    "OffsetReader",
    "ReadTimeoutError",
    "ReaderOptions",
    "Subscription",
    "batch_offsets",
    "executor_conf",
    "input_partitions",
    "kafka_schema",
    "parse_duration_ms",
    "parse_reader_options",
    "read_partition",
    "read_schema",
    "report_data_loss",
]
