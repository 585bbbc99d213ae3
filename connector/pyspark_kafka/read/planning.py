"""Planning shared by every read: offsets → offset ranges → Spark input partitions.

The driver-side step between the offset reader and the executors (Spark's
``KafkaBatch.planInputPartitions`` / ``KafkaMicroBatchStream.planInputPartitions``
with ``KafkaOffsetRangeCalculator``): :func:`batch_offsets` resolves the
starting and ending offsets of a batch read (also used by
:func:`pyspark_kafka.groups.read_batch`), :func:`input_partitions` splits
ranges by ``minPartitions`` / ``maxRecordsPerPartition`` into
:class:`~pyspark_kafka.read.partition_reader.KafkaInputPartition` s, and
:func:`report_data_loss` is how planning reports missing offsets
(``failOnDataLoss``).
"""

from __future__ import annotations

import logging
from typing import Callable

from pyspark_kafka import offsets as O
from pyspark_kafka.errors import DATA_LOSS_FIX, DataLossError, OptionError
from pyspark_kafka.read.consumer_group import group_offsets, resolve_start
from pyspark_kafka.read.offset_reader import OffsetReader
from pyspark_kafka.read.options import ReaderOptions
from pyspark_kafka.read.partition_reader import KafkaInputPartition, KafkaInputPartitionGroup

log = logging.getLogger(__name__)


def report_data_loss(fail_on_data_loss: bool) -> Callable[[str], None]:
    """The data-loss reporter of a read: a function of one message (names the partition and offsets).

    With ``fail_on_data_loss`` (``failOnDataLoss=true``) it raises
    DataLossError with the message and the fix; otherwise it logs the message
    as a warning and returns, and the caller skips the missing offsets.
    """

    def report(message: str) -> None:
        if fail_on_data_loss:
            raise DataLossError(f"{message}. {DATA_LOSS_FIX}")
        log.warning("%s (failOnDataLoss=false)", message)

    return report


def batch_offsets(opts: ReaderOptions) -> tuple[list, dict, dict]:
    """Resolve the starting and ending offsets of a batch read, on the driver.

    Returns ``(tps, start, end)``: the subscribed topic-partitions (sorted) and
    ``{(topic, partition): offset}`` for each. ``startingOffsets=group`` starts
    at the group's committed offsets (:func:`pyspark_kafka.read.consumer_group.resolve_start`).
    Raises OptionError when a starting offset is after its ending offset,
    PySparkKafkaError when the cluster does not answer.
    """
    meta = OffsetReader(opts, missing_topics="error")  # a batch read of a missing topic fails, as Spark's
    try:
        tps = meta.topic_partitions()
        if isinstance(opts.starting, O.GroupLimit):
            with group_offsets(opts.options, opts.group.group_id, opts.api_timeout_ms / 1000) as offsets:
                start = resolve_start(offsets, meta, tps, opts.group.offset_reset,
                                      report_data_loss(opts.fail_on_data_loss))
        else:
            start = meta.resolve(opts.starting, "starting", tps)
        end = meta.resolve(opts.ending, "ending", tps)
    finally:
        meta.close()
    for tp in tps:
        if start[tp] > end[tp]:
            raise OptionError(
                f"the starting offset of {tp[0]}-{tp[1]} ({start[tp]}) is after its ending offset ({end[tp]}); "
                f"fix startingOffsets/endingOffsets (or the timestamps)"
            )
    return tps, start, end


def batch_ranges(opts: ReaderOptions) -> list:
    """The offset ranges ``[start, end)`` of a batch read, one per subscribed partition (:func:`batch_offsets`)."""
    tps, start, end = batch_offsets(opts)
    return [O.OffsetRange(t, p, start[(t, p)], end[(t, p)]) for t, p in tps]


def input_partitions(ranges: list, opts: ReaderOptions, conf: dict) -> list:
    """Split ``ranges`` (``minPartitions``, ``maxRecordsPerPartition``) into input partitions read with ``conf``.

    ``conf``: the executors' consumer configuration (:func:`pyspark_kafka.read.partition_reader.executor_conf`).
    """
    split = O.split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)
    return [
        KafkaInputPartition(r, conf, opts.poll_timeout_ms, opts.fail_on_data_loss, opts.include_headers,
                            opts.read_path)
        for r in split
    ]


SMALL_TRIGGER_RECORDS = 20_000
"""A micro-batch of at most this many offsets, spread over several partitions, is read by one Spark task."""


def pack_small_trigger(parts: list, opts: ReaderOptions) -> list:
    """``parts`` (input partitions of one micro-batch) as one :class:`KafkaInputPartitionGroup` when they
    hold at most :data:`SMALL_TRIGGER_RECORDS` offsets in all and the user set neither
    ``minPartitions`` nor ``maxRecordsPerPartition`` (which ask for parallelism); else unchanged.

    Spark's connector plans one task per partition, but its tasks run in the JVM; each Python task
    of ours costs a worker hand-over and an Arrow stream (issue 35: 20 triggers of 1,000 records over
    4 partitions spent most of ``addBatch`` launching four tasks).
    """
    if len(parts) < 2 or opts.min_partitions or opts.max_records_per_partition:
        return parts
    if sum(p.range.size for p in parts) > SMALL_TRIGGER_RECORDS:
        return parts
    return [KafkaInputPartitionGroup(parts)]
