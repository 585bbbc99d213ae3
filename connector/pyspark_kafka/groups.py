"""Consumer-group helpers for batch jobs, on top of the read package: :func:`read_batch` + :meth:`GroupBatch.commit`.

A batch job reads what consumer group ``kafka.group.id`` has not consumed
yet, writes it, then commits the end offsets to the group (Spark's
``spark.read`` cannot: a batch reader never knows when the write succeeded).
The streaming side of consumer groups (``commitOffsets``,
``startingOffsets=group``, ``groupMembership``) is part of the reader:
:mod:`pyspark_kafka.read.consumer_group`. See ``docs/consumer-groups.md``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from pyspark_kafka import offsets as O
from pyspark_kafka.errors import OptionError, PySparkKafkaError
from pyspark_kafka.options import get_option
from pyspark_kafka.read.consumer_group import STARTING_OPTIONS, commit_fix, group_offsets, partitions_text
from pyspark_kafka.read.options import kafka_schema, parse_reader_options
from pyspark_kafka.read.planning import batch_offsets


class GroupCommitError(PySparkKafkaError):
    """Committing offsets to a consumer group failed after retries (:meth:`GroupBatch.commit`)."""


@dataclass
class GroupBatch:
    """A batch read of what a consumer group has not consumed yet (see :func:`read_batch`).

    ``df``: the records of exactly the offset ranges ``[start, end)`` (Spark's
    Kafka schema); ``start``/``end``: ``{(topic, partition): offset}``;
    ``group_id``: the group :meth:`commit` commits ``end`` to.
    """

    df: object
    start: dict
    end: dict
    group_id: str
    options: dict
    timeout_ms: int

    def commit(self) -> dict:
        """Commit ``end`` to the group (call it after the write succeeded); returns the offsets written.

        Never moves an offset backwards (partitions the group has already
        passed are left alone). Raises GroupCommitError after
        :data:`pyspark_kafka.read.consumer_group.COMMIT_ATTEMPTS` attempts; the group then keeps its old offsets
        and the next run reads these records again.
        """
        with group_offsets(self.options, self.group_id, self.timeout_ms / 1000) as offsets:
            written = offsets.commit(self.end)
        if written is None:
            raise GroupCommitError(
                f"could not commit offsets of {partitions_text(self.end)} to group {self.group_id!r}: "
                f"{offsets.last_error}; {commit_fix(offsets.last_error)}. If the write succeeded, call commit() again; "
                f"otherwise the next run reads these records again"
            )
        return written


_PLANNED = ("subscribe", "subscribePattern", "assign", "startingOffsets", "startingTimestamp",
            "startingOffsetsByTimestamp", "endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp",
            "commitOffsets", "kafka.auto.offset.reset")


def read_batch(spark, options: Mapping[str, str]) -> GroupBatch:
    """Batch-read what group ``kafka.group.id`` has not consumed yet; commit with :meth:`GroupBatch.commit`.

    ``options``: ``pykafka`` reader options; ``startingOffsets`` defaults to
    ``group`` (partitions without a committed offset start at
    ``kafka.auto.offset.reset``, default latest), ``endingOffsets`` to latest.
    The offsets are resolved once, here, on the driver: the returned ``df``
    reads exactly ``[start, end)`` with explicit ``assign``/offset JSON, so every
    action on it reads the same records, and :meth:`GroupBatch.commit` commits
    exactly ``end``. Raises OptionError for bad options (``kafka.group.id``
    missing, ...), PySparkKafkaError when the cluster does not answer.

    Example::

        batch = read_batch(spark, {"kafka.bootstrap.servers": "h:9092", "subscribe": "events",
                                   "kafka.group.id": "nightly"})
        batch.df.write.mode("append").parquet("/data/events")
        batch.commit()
    """
    opts = {k: v for k, v in options.items() if k.lower() != "commitoffsets"}
    if not any(get_option(opts, n) is not None for n in STARTING_OPTIONS):
        opts["startingOffsets"] = "group"
    ropts = parse_reader_options(opts, mode="batch")
    if ropts.group.group_id is None:
        raise OptionError("read_batch needs option 'kafka.group.id', the consumer group to read for and commit to")
    tps, start, end = batch_offsets(ropts)
    passed = {k: v for k, v in opts.items() if k.lower() not in {n.lower() for n in _PLANNED}}
    if tps:
        reader = spark.read.format("pykafka").options(**passed)
        df = (reader.option("assign", _assign_json(tps))
              .option("startingOffsets", _json(start)).option("endingOffsets", _json(end)).load())
    else:
        df = spark.createDataFrame([], kafka_schema(ropts.include_headers))
    return GroupBatch(df, start, end, ropts.group.group_id, opts, ropts.api_timeout_ms)


def _json(offsets: Mapping[tuple, int]) -> str:
    return json.dumps(O.offsets_to_json_dict(offsets))


def _assign_json(tps) -> str:
    out: dict = {}
    for t, p in sorted(tps):
        out.setdefault(t, []).append(p)
    return json.dumps(out)
