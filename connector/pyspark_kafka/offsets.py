"""Offset rules of the ``pykafka`` reader: offset JSON, offset limits, range planning.

Everything here is pure (no I/O) so each rule can be tested with a table. The
rules are those of Spark's built-in Kafka source (``KafkaSourceProvider``,
``JsonUtils``, ``KafkaMicroBatchStream``, ``KafkaOffsetRangeCalculator``,
``KafkaOffsetReaderAdmin``); the source of each rule is named in its docstring.

Vocabulary: a *topic-partition* is a ``(topic, partition)`` tuple; a *partition
offset map* is ``dict[(topic, partition), offset]``; an *offset range* is
``[from_offset, until_offset)`` of one topic-partition (until is exclusive).
In offset JSON, ``-2`` means earliest (the log start offset) and ``-1`` latest
(the high watermark, or the last stable offset under ``read_committed``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from pyspark_kafka.errors import OptionError
from pyspark_kafka.kafka.topic_partition import TopicPartition

EARLIEST = -2
"""Offset JSON value meaning "the log start offset" (Spark's ``KafkaOffsetRangeLimit.EARLIEST``)."""
LATEST = -1
"""Offset JSON value meaning "the latest offset" (Spark's ``KafkaOffsetRangeLimit.LATEST``)."""

PartitionOffsets = dict  # {(topic, partition): offset}

_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[2,4]}'
_TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1700000000000,"1":1700000000000}}'


# --------------------------------------------------------------------------- JSON


def _load_json_object(text: str, option: str, example: str) -> dict:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        value = None
    if not isinstance(value, dict):
        raise OptionError(f"option '{option}' must be a JSON object like {example}, got {text!r}")
    return value


def _as_int(value, option: str, example: str, text: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(f"option '{option}' must map partitions to integers like {example}, got {text!r}")
    return value


def parse_partition_offsets(text: str, option: str = "startingOffsets") -> PartitionOffsets:
    """Parse Spark's partition offset JSON into a partition offset map.

    ``'{"t":{"0":23,"1":-2}}'`` → ``{("t", 0): 23, ("t", 1): -2}`` (Spark's
    ``JsonUtils.partitionOffsets``). Also used for ``*OffsetsByTimestamp``
    (values are then timestamps in ms since the epoch).

    Raises OptionError naming ``option`` and showing the expected form when the
    text is not an object of objects of integers, or a partition is not a
    non-negative integer.
    """
    example = _TIMESTAMPS_EXAMPLE if "timestamp" in option.lower() else _OFFSETS_EXAMPLE
    raw = _load_json_object(text, option, example)
    out: PartitionOffsets = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option '{option}' must be a JSON object like {example}, got {text!r}")
        for part, value in parts.items():
            try:
                p = int(part)
            except ValueError:
                p = -1
            if p < 0:
                raise OptionError(
                    f"option '{option}': partition {part!r} of topic {topic!r} is not a partition number; "
                    f"expected a JSON object like {example}"
                )
            out[(topic, p)] = _as_int(value, option, example, text)
    return out


def parse_assign(text: str) -> list:
    """Parse the ``assign`` option: ``'{"a":[0,1],"b":[2]}'`` → ``[("a",0),("a",1),("b",2)]``.

    Sorted by topic then partition. Raises OptionError with an example when the
    text is not a JSON object of integer lists, or names no partition (Spark's
    ``JsonUtils.partitions``).
    """
    raw = _load_json_object(text, "assign", _ASSIGN_EXAMPLE)
    out = set()
    for topic, parts in raw.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            raise OptionError(
                f"option 'assign' must map topics to lists of partition numbers like {_ASSIGN_EXAMPLE}, got {text!r}"
            )
        out.update((topic, p) for p in parts)
    if not out:
        raise OptionError(f"option 'assign' names no topic-partition; use e.g. {_ASSIGN_EXAMPLE}, got {text!r}")
    return sorted(out)


def offsets_to_json_dict(offsets: Mapping[TopicPartition, int]) -> dict:
    """Partition offset map → Spark's offset JSON as a dict: ``{"t": {"0": 5, "1": 7}}``.

    Topics and partitions are sorted so equal maps serialize identically.
    """
    out: dict = {}
    for (topic, part), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(part)] = int(off)
    return out


def offsets_from_json_dict(value: Mapping) -> PartitionOffsets:
    """Inverse of :func:`offsets_to_json_dict` (a dict read back from Spark's offset log)."""
    return {(topic, int(p)): int(o) for topic, parts in value.items() for p, o in parts.items()}


# --------------------------------------------------------------------------- offset limits


@dataclass(frozen=True)
class EarliestLimit:
    """Start (or end) at each partition's log start offset."""


@dataclass(frozen=True)
class LatestLimit:
    """Start (or end) at each partition's latest offset (high watermark / last stable offset)."""


@dataclass(frozen=True)
class SpecificOffsets:
    """Explicit offsets per topic-partition; values may be ``EARLIEST``/``LATEST``."""

    offsets: dict


@dataclass(frozen=True)
class SpecificTimestamps:
    """Per topic-partition timestamps (ms); the offset is the first with timestamp >= it (ListOffsets)."""

    timestamps: dict
    strategy: str = "error"


@dataclass(frozen=True)
class GlobalTimestamp:
    """One timestamp (ms) for every topic-partition of the subscription."""

    timestamp: int
    strategy: str = "error"


@dataclass(frozen=True)
class GroupLimit:
    """Start at the consumer group's committed offsets (``startingOffsets=group``, see :mod:`pyspark_kafka.read.consumer_group`)."""


OffsetLimit = EarliestLimit | LatestLimit | SpecificOffsets | SpecificTimestamps | GlobalTimestamp | GroupLimit


def _get(options: Mapping[str, str], name: str):
    ln = name.lower()
    for k, v in options.items():
        if k.lower() == ln:
            return v
    return None


def timestamp_strategy(options: Mapping[str, str]) -> str:
    """``startingOffsetsByTimestampStrategy``: ``"error"`` (default) or ``"latest"``.

    What to do when no offset matches a starting timestamp (Spark 3.3+). Raises
    OptionError for any other value.
    """
    raw = _get(options, "startingOffsetsByTimestampStrategy")
    if raw is None:
        return "error"
    v = str(raw).strip().lower()
    if v not in ("error", "latest"):
        raise OptionError(f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got {raw!r}")
    return v


def offset_limit(options: Mapping[str, str], which: str, default: OffsetLimit) -> OffsetLimit:
    """Resolve the starting (``which="starting"``) or ending (``"ending"``) offset option.

    Precedence as Spark's ``KafkaSourceProvider.getKafkaOffsetRangeLimit``:
    ``<which>Timestamp`` > ``<which>OffsetsByTimestamp`` > ``<which>Offsets`` >
    ``default``. ``<which>Offsets`` is ``earliest``, ``latest`` or offset JSON;
    ``startingOffsets`` may also be ``group`` (not in Spark: the committed offsets
    of ``kafka.group.id``). Raises OptionError for a malformed timestamp or JSON,
    or ``endingOffsets=group``.
    """
    strategy = timestamp_strategy(options)
    ts_name, by_ts_name, off_name = f"{which}Timestamp", f"{which}OffsetsByTimestamp", f"{which}Offsets"
    ts = _get(options, ts_name)
    if ts is not None:
        try:
            return GlobalTimestamp(int(str(ts).strip()), strategy)
        except ValueError:
            raise OptionError(f"option '{ts_name}' must be one timestamp in ms since the epoch, got {ts!r}") from None
    by_ts = _get(options, by_ts_name)
    if by_ts is not None:
        return SpecificTimestamps(parse_partition_offsets(str(by_ts).strip(), by_ts_name), strategy)
    off = _get(options, off_name)
    if off is None:
        return default
    v = str(off).strip()
    if v.lower() == "earliest":
        return EarliestLimit()
    if v.lower() == "latest":
        return LatestLimit()
    if v.lower() == "group":
        if which != "starting":
            raise OptionError(
                f"option '{off_name}' can't be 'group' (only startingOffsets can): use 'latest' or offset JSON"
            )
        return GroupLimit()
    return SpecificOffsets(parse_partition_offsets(v, off_name))


def check_batch_limits(start: OffsetLimit, end: OffsetLimit) -> None:
    """Spark's batch rules (``validateBatchOptions`` + ``checkOffsetLimitValidity``).

    Starting offsets can't be latest (nor -1 in JSON); ending offsets can't be
    earliest (nor -2 in JSON); explicit start and end JSON must name the same
    topic-partitions and start <= end for each. Raises OptionError.
    """
    _refuse_in_batch(start, "startingOffsets", LatestLimit, LATEST, "latest",
                     "use 'earliest', offsets or timestamps for startingOffsets in a batch query")
    _refuse_in_batch(end, "endingOffsets", EarliestLimit, EARLIEST, "earliest",
                     "use 'latest', offsets or timestamps for endingOffsets")
    pairs = (
        (SpecificOffsets, "offsets", "startingOffsets", "endingOffsets"),
        (SpecificTimestamps, "timestamps", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp"),
    )
    for cls, attr, s_name, e_name in pairs:
        if isinstance(start, cls) and isinstance(end, cls):
            s_map, e_map = getattr(start, attr), getattr(end, attr)
            if set(s_map) != set(e_map):
                raise OptionError(
                    f"options '{s_name}' and '{e_name}' must name the same topic-partitions: "
                    f"{_tps(s_map)} vs {_tps(e_map)}"
                )
            for tp in sorted(s_map):
                if s_map[tp] >= 0 and e_map[tp] >= 0 and s_map[tp] > e_map[tp]:
                    raise OptionError(
                        f"option '{s_name}' for {tp[0]}-{tp[1]} ({s_map[tp]}) is greater than "
                        f"'{e_name}' ({e_map[tp]}); the start must not be after the end"
                    )


def _refuse_in_batch(limit: OffsetLimit, option: str, refused: type, sentinel: int, word: str, fix: str) -> None:
    """Raise OptionError when ``limit`` (option ``option``) is ``refused`` (``LatestLimit`` / ``EarliestLimit``)
    or names ``sentinel`` (``LATEST`` / ``EARLIEST``, spelled ``word``) for a partition in its JSON."""
    if isinstance(limit, refused):
        raise OptionError(f"option '{option}' can't be '{word}' for batch queries: {fix}")
    if isinstance(limit, SpecificOffsets):
        for (t, p), off in sorted(limit.offsets.items()):
            if off == sentinel:
                raise OptionError(f"option '{option}' for {t}-{p} can't be {word} ({sentinel}) for batch queries: {fix}")


def _tps(tps: Iterable[TopicPartition]) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"


def check_covers_partitions(specified: Iterable[TopicPartition], assigned: Iterable[TopicPartition], option: str) -> None:
    """Explicit offsets (or timestamps) must name exactly the subscribed partitions.

    Spark's ``fetchSpecificOffsets`` rule ("you must specify all TopicPartitions;
    use -1 for latest, -2 for earliest"). Raises OptionError listing both sets.
    """
    s, a = set(specified), set(assigned)
    if s != a:
        raise OptionError(
            f"option '{option}' must name every subscribed topic-partition (use -2 for earliest, -1 for latest): "
            f"specified {_tps(s)}, subscribed {_tps(a)}"
        )


def resolve_timestamp_offset(
    tp: TopicPartition, found: int, timestamp: int, starting: bool, strategy: str
) -> int:
    """Offset for a timestamp lookup result (``found`` < 0: no record at or after ``timestamp``).

    Spark's ``readTimestampOffsets``: for a starting offset with strategy
    ``error`` a missing match raises OptionError; with ``latest`` (and always for
    ending offsets) it becomes ``LATEST``.
    """
    if found >= 0:
        return found
    if starting and strategy == "error":
        raise OptionError(
            f"no offset of {tp[0]}-{tp[1]} has a timestamp at or after {timestamp}; choose an earlier "
            f"starting timestamp or set startingOffsetsByTimestampStrategy=latest"
        )
    return LATEST


# --------------------------------------------------------------------------- ranges


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one topic-partition; ``size`` = number of offsets."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.from_offset}, {self.until_offset})"


def plan_ranges(
    from_offsets: Mapping[TopicPartition, int],
    until_offsets: Mapping[TopicPartition, int],
    new_partition_earliest: Mapping[TopicPartition, int],
    report_data_loss: Callable[[str], None],
    earliest: Mapping[TopicPartition, int] | None = None,
) -> list:
    """Offset ranges of a micro-batch from resolved start and end offsets.

    Spark's ``getOffsetRangesFromResolvedOffsets``: partitions only in
    ``until_offsets`` are new and start at their earliest offset
    (``new_partition_earliest``); data loss is reported (``report_data_loss(msg)``,
    which raises or warns) when a new partition has no earliest offset or does
    not start at 0, a known partition is gone, or its end is before its start.
    Returns ranges sorted by topic-partition. A partition whose end went
    before its start (topic recreated) is read again from its earliest offset
    (``earliest``; without it the range is empty) — Spark skips these offsets.
    """
    earliest = earliest or {}
    new = set(until_offsets) - set(from_offsets)
    missing = new - set(new_partition_earliest)
    if missing:
        report_data_loss(f"cannot find earliest offsets of new partitions {_tps(missing)}; some data may have been missed")
    for tp in sorted(new & set(new_partition_earliest)):
        if new_partition_earliest[tp] != 0:
            report_data_loss(
                f"added partition {tp[0]}-{tp[1]} starts from offset {new_partition_earliest[tp]} instead of 0; "
                f"offsets [0, {new_partition_earliest[tp]}) may have been missed"
            )
    gone = set(from_offsets) - set(until_offsets)
    if gone:
        report_data_loss(f"partitions {_tps(gone)} are gone (topic deleted?); some data may have been missed")
    ranges = []
    for tp in sorted(until_offsets):
        if tp in from_offsets:
            start = from_offsets[tp]
        elif tp in new_partition_earliest:
            start = new_partition_earliest[tp]
        else:
            continue
        until = until_offsets[tp]
        if until < start:
            restart = min(earliest.get(tp, until), until)
            report_data_loss(
                f"partition {tp[0]}-{tp[1]}'s offset went back from {start} to {until} (topic recreated?); "
                f"some data may have been missed; reading it again from offset {restart}"
            )
            start = restart
        ranges.append(OffsetRange(tp[0], tp[1], start, until))
    return ranges


def _divide(rng: OffsetRange, parts: int) -> list:
    """Split ``rng`` into ``parts`` contiguous pieces; the last takes the remainder (Spark's getDividedPartition)."""
    out, remaining, start = [], rng.size, rng.from_offset
    for i in range(parts):
        this = remaining // (parts - i)
        remaining -= this
        end = min(start + this, rng.until_offset)
        out.append(OffsetRange(rng.topic, rng.partition, start, end))
        start = end
    return out


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None, max_records_per_partition: int | None) -> list:
    """Split offset ranges into Spark input partitions (Spark's ``KafkaOffsetRangeCalculator``).

    Empty ranges are dropped. With ``max_records_per_partition`` each range is
    cut into ``ceil(size / max)`` pieces. If ``min_partitions`` exceeds the
    number of pieces, the pieces are split as Spark ≥ 3.3 does (SPARK-36576): a
    piece whose proportional share ``round(size / total * min_partitions)`` is 1
    stays whole, and so does every other piece of its topic-partition; the rest
    are cut into ``max(round(size / rest_total * (min_partitions - whole)), 1)``
    pieces, where ``whole`` counts the pieces left whole. Pieces are equal up to
    rounding; the last piece of a range takes the remainder. Checked against
    Spark 4.2.0 by ``integration_tests/reference`` (``partitions_*`` cases).
    """
    out = [r for r in ranges if r.size > 0]
    if (min_partitions is None or len(out) >= min_partitions) and max_records_per_partition is None:
        return out
    if max_records_per_partition is not None:
        out = [p for r in out for p in _divide(r, math.ceil(r.size / max_records_per_partition)) if p.size > 0]
    if min_partitions is not None and min_partitions > len(out):
        total = sum(r.size for r in out)
        whole = [r for r in out if _part_count(r.size, total, min_partitions) == 1]
        whole_partitions = {(r.topic, r.partition) for r in whole}
        rest_total = total - sum(r.size for r in whole)
        rest_min = max(min_partitions - len(whole), 1)
        out = [
            p
            for r in out
            for p in _divide(r, 1 if (r.topic, r.partition) in whole_partitions
                             else _part_count(r.size, rest_total, rest_min))
            if p.size > 0
        ]
    return out


def _part_count(size: int, total: int, parts: int) -> int:
    """Spark's ``getPartCount``: ``max(Math.round(size / total * parts), 1)``."""
    return max(_round_half_up(size / total * parts), 1)


def _round_half_up(x: float) -> int:
    """Java's ``Math.round`` for non-negative values (Python's ``round`` rounds half to even)."""
    return int(math.floor(x + 0.5))


# --------------------------------------------------------------------------- admission control


def rate_limit(limit: int, from_offsets: Mapping[TopicPartition, int], until_offsets: Mapping[TopicPartition, int]) -> dict:
    """End offsets admitting at most about ``limit`` records, spread by backlog.

    Spark's ``KafkaMicroBatchStream.rateLimit``: each partition with a backlog
    (``until - from > 0``) gets ``limit * backlog / total_backlog`` records,
    rounded down, but at least 1 when the share is below 1 (small partitions are
    not starved), never past its ``until``. ``from_offsets`` must include the
    earliest offset of new partitions. Partitions without a known start keep
    ``until``. Returns a new partition offset map with the keys of ``until_offsets``.
    """
    sizes = {
        tp: end - from_offsets[tp]
        for tp, end in until_offsets.items()
        if tp in from_offsets and end - from_offsets[tp] > 0
    }
    total = sum(sizes.values())
    if total < 1:
        return dict(until_offsets)
    out = {}
    for tp, end in until_offsets.items():
        if tp not in sizes:
            out[tp] = end
            continue
        share = limit * (sizes[tp] / total)
        n = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, from_offsets[tp] + n)
    return out


def available_records(from_offsets: Mapping[TopicPartition, int], until_offsets: Mapping[TopicPartition, int]) -> int:
    """Number of offsets between ``from`` and ``until`` (partitions missing from ``from`` count from 0).

    Spark's ``delayBatch`` count for ``minOffsetsPerTrigger``.
    """
    return sum(end - from_offsets.get(tp, 0) for tp, end in until_offsets.items())


def should_delay_batch(available: int, min_rows: int, now_ms: int, last_trigger_ms: int, max_trigger_delay_ms: int) -> bool:
    """True when a micro-batch should wait for ``minOffsetsPerTrigger`` records.

    Spark's ``delayBatch``: never delay once ``maxTriggerDelay`` has passed since
    the last batch; otherwise delay while fewer than ``min_rows`` are available.
    """
    if now_ms - last_trigger_ms >= max_trigger_delay_ms:
        return False
    return available < min_rows
