"""Log storage of the embedded broker, after Kafka's design: partitions as directories of segments
(``.log`` + sparse ``.index``/``.timeindex``), record batches stored as produced, retention by time
and size, crash recovery from a recovery-point checkpoint. See ``docs/broker-storage.md``."""

from pyspark_kafka.broker.log.manager import LogManager, TopicInfo
from pyspark_kafka.broker.log.partition_log import AppendResult, FetchSlice, PartitionLog

__all__ = ["AppendResult", "FetchSlice", "LogManager", "PartitionLog", "TopicInfo"]
