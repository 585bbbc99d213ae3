"""The micro-batch stream reader of the ``pykafka`` source (Spark's ``KafkaMicroBatchStream``).

``spark.readStream.format("pykafka")``: offsets, admission control
(``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` + ``maxTriggerDelay``,
``Trigger.AvailableNow``) and the consumer-group hooks
(:class:`pyspark_kafka.read.stream_group.StreamGroup`).
"""

from __future__ import annotations

import time
from typing import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pyspark_kafka import offsets as O
from pyspark_kafka.kafka.clients import check_consumer_config
from pyspark_kafka.errors import OptionError, errors_as_messages
from pyspark_kafka.read.stream_group import StreamGroup
from pyspark_kafka.read.offset_reader import OffsetReader
from pyspark_kafka.read.options import check_schema, parse_reader_options, unique_group_id
from pyspark_kafka.read.partition_reader import KafkaInputPartition, executor_conf, read_partition
from pyspark_kafka.read.planning import input_partitions, pack_small_trigger, report_data_loss


@errors_as_messages
class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("pykafka")``: micro-batches over Kafka offsets.

    Offsets are Spark's JSON form, ``{"topic": {"0": 5, "1": 7}}`` (next offset
    to read per partition). Admission control: ``maxOffsetsPerTrigger`` (spread
    over partitions by backlog), ``minOffsetsPerTrigger`` + ``maxTriggerDelay``;
    ``Trigger.AvailableNow`` stops at the offsets that were latest when the
    query started. New partitions (and, with ``subscribePattern``, new topics)
    join from their earliest offset. Raises OptionError for bad options (at
    query start) and DataLossError for missing offsets when ``failOnDataLoss``.

    Consumer groups (:class:`pyspark_kafka.read.stream_group.StreamGroup`): with
    ``commitOffsets`` the offsets Spark has finished (``start`` of
    :meth:`latestOffset`, ``end`` of :meth:`commit`) are committed to
    ``kafka.group.id``; with ``groupMembership`` the offsets name only the
    partitions assigned to this query, and a partition enters them at the
    group's committed offset.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType):
        self._opts = parse_reader_options(options, mode="stream")
        check_schema(schema, self._opts)
        self._conf = executor_conf(self._opts.options, unique_group_id(self._opts, "spark-kafka-source") + "-executor")
        self._meta = OffsetReader(self._opts)
        self._latest: dict | None = None
        self._initial: dict | None = None
        self._available_now = False
        self._available_now_target: dict | None = None
        self._last_trigger_ms = 0
        o = self._opts
        self._group = StreamGroup(o.group, o.options, o.subscription, o.api_timeout_ms) if o.group.active else None

    def initialOffset(self) -> dict:
        """Offsets of ``startingOffsets`` / ``startingTimestamp`` / ``startingOffsetsByTimestamp`` (default latest).

        ``startingOffsets=group``: the group's committed offsets; with
        ``groupMembership`` no partition (they come with the assignment).
        Resolved once per reader and kept, as Spark's ``KafkaMicroBatchStream`` keeps its
        ``initialPartitionOffsets``: Spark asks again when it plans the first micro-batch, and
        ``latest`` or a timestamp asked twice could name other offsets (and cost another
        ListOffsets round trip to the cluster).
        """
        if self._initial is None:
            self._initial = self._resolve_initial()
        return O.offsets_to_json_dict(self._initial)

    def _resolve_initial(self) -> dict:
        check_consumer_config(self._conf)
        o = self._opts
        if o.group.membership:
            initial = {}
        elif isinstance(o.starting, O.GroupLimit):
            initial = self._group.start_offsets(self._meta, self._meta.topic_partitions(),
                                                report_data_loss(o.fail_on_data_loss))
        else:
            initial = self._meta.resolve(o.starting, "starting")
        if self._group is not None:
            self._group.set_initial(initial)
        return initial

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)``, else ``ReadMinRows(minOffsetsPerTrigger)``, else all available.

        When both are set Spark 4.3's Python API has no composite limit: the
        limit carries the maximum and :meth:`latestOffset` applies the minimum
        (with ``maxTriggerDelay``) from the options.
        """
        if self._opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._opts.max_offsets_per_trigger)
        if self._opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self._opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: the first :meth:`latestOffset` fixes the target offsets of the run.

        Raises OptionError with ``groupMembership`` (a member's partitions change while it runs).
        """
        if self._opts.group.membership:
            raise OptionError(
                "option groupMembership=true needs a continuously running query, not Trigger.AvailableNow: use "
                "startingOffsets=group with commitOffsets=true instead (or another trigger)"
            )
        self._available_now = True

    def _fetch_latest(self) -> dict:
        return self._meta.resolve(O.LatestLimit(), "latest")

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """End offsets of the next micro-batch (Spark's ``KafkaMicroBatchStream.latestOffset``).

        ``start``: the previous end (JSON dict); ``limit``: the engine's read
        limit (``ReadAllAvailable`` ignores the options' limits). Returns
        ``start`` to skip the trigger when ``minOffsetsPerTrigger`` is not met.
        """
        begin = O.offsets_from_json_dict(start)
        if self._group is not None:
            self._group.processed(begin)  # Spark asks for the next batch once the one ending at start is done
            if self._opts.group.membership:
                return self._member_latest_offset(begin, limit)
        if self._available_now:
            if self._available_now_target is None:
                self._available_now_target = self._fetch_latest()
            latest = self._available_now_target
        else:
            latest = self._fetch_latest()
        self._latest = latest
        if isinstance(limit, ReadAllAvailable):
            return O.offsets_to_json_dict(latest)
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self._opts.min_offsets_per_trigger
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self._opts.max_offsets_per_trigger
        if min_rows is not None and not self._available_now:
            now = int(time.time() * 1000)
            available = O.available_records(begin, latest)
            if O.should_delay_batch(available, min_rows, now, self._last_trigger_ms, self._opts.max_trigger_delay_ms):
                return start
            self._last_trigger_ms = now
        if max_rows is None:
            return O.offsets_to_json_dict(latest)
        new = [tp for tp in latest if tp not in begin]
        known = {**self._meta.earliest(new), **begin} if new else begin
        return O.offsets_to_json_dict(O.rate_limit(max_rows, known, latest))

    def _member_latest_offset(self, begin: dict, limit: ReadLimit) -> dict:
        """``latestOffset`` of a group member: its assigned partitions only (``maxOffsetsPerTrigger`` applies)."""
        adopted, reading = self._group.member_end_offsets(begin, self._meta, report_data_loss(self._opts.fail_on_data_loss))
        latest = self._meta.latest(reading) if reading else {}
        self._latest = {**adopted, **latest}
        if isinstance(limit, ReadMaxRows):
            latest = O.rate_limit(limit.max_rows, {tp: begin[tp] for tp in reading}, latest)
        return O.offsets_to_json_dict({**adopted, **latest})

    def reportLatestOffset(self) -> dict | None:
        """The latest offsets seen by the last :meth:`latestOffset` (shown in query progress), or None."""
        return O.offsets_to_json_dict(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> list:
        """Input partitions of the micro-batch ``(start, end]`` (new partitions read from their earliest offset)."""
        begin, until = O.offsets_from_json_dict(start), O.offsets_from_json_dict(end)
        if self._opts.group.membership:  # adopted partitions (only in end) and released ones (only in start): no range
            begin, until = {tp: o for tp, o in begin.items() if tp in until}, {tp: o for tp, o in until.items() if tp in begin}
        new = [tp for tp in until if tp not in begin]
        went_back = [tp for tp in until if tp in begin and until[tp] < begin[tp]]
        earliest = self._meta.earliest(new + went_back) if new or went_back else {}
        ranges = O.plan_ranges(
            begin,
            until,
            {tp: earliest[tp] for tp in new if tp in earliest},
            report_data_loss(self._opts.fail_on_data_loss),
            earliest=earliest,
        )
        return pack_small_trigger(input_partitions(ranges, self._opts, self._conf), self._opts)

    def read(self, partition: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the records of one offset range as record batches."""
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        """Spark finished every offset before ``end``: commit it to the group with ``commitOffsets``."""
        if self._group is not None:
            self._group.processed(O.offsets_from_json_dict(end))

    def stop(self) -> None:
        """Leave the consumer group (a member commits its processed offsets first); close the admin client."""
        if self._group is not None:
            self._group.close()
        self._meta.close()
