"""Rules shared by the exactly-once sinks (SQL, Parquet, Delta, Iceberg): pure functions, no I/O.

Vocabulary (Kafka's terms): a *topic-partition* ``(topic, partition)``; its
*next offset* is the offset of the first record not yet stored (last stored
offset + 1), exactly what Spark's ``startingOffsets`` JSON expects.

The protocol both sinks follow (see ``docs/exactly-once.md``):

1. Each task attempt stages its rows under a unique *attempt id* and returns a
   :class:`StagedWrite` commit message (attempt id, per topic-partition min/max
   offset, rows, staged files).
2. The driver's ``commit`` publishes, in one atomic step, the staged rows of the
   committed attempts whose offset is ``>=`` the stored next offset of their
   topic-partition, together with the new next offsets (never moving backwards)
   and the streaming batch id; then it drops every other staged row of the sink.
3. ``offsetsFrom=batch`` (stateful queries without offset columns): the streaming
   batch id is the idempotence key, a batch id ``<=`` the stored one is skipped.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

from pyspark.sql.datasource import WriterCommitMessage

from pyspark_kafka.errors import OptionError, PySparkKafkaError
from pyspark_kafka.options import get_option
from pyspark_kafka.kafka.topic_partition import TopicPartition

#: ``{(topic, partition): (min offset, max offset)}`` of the rows a task staged.
OffsetSpan = dict[TopicPartition, tuple[int, int]]

OFFSETS_FROM_ROWS = "rows"
OFFSETS_FROM_BATCH = "batch"


class SinkError(PySparkKafkaError):
    """An exactly-once sink refused to commit; nothing of the batch became visible.

    The message names the cause and the fix.
    """


class SinkMismatchError(SinkError):
    """The stored offsets belong to another query (other table, topics or mode)."""


class SinkUnavailableError(SinkError):
    """The sink's store (database, directory) cannot be reached or opened."""


@dataclass(frozen=True)
class SinkColumns:
    """Where each row's source record comes from (Spark Kafka reader column names by default).

    - ``topic``, ``partition``, ``offset``: column names (options ``topicColumn``,
      ``partitionColumn``, ``offsetColumn``).
    - ``fixed_topic``: option ``topic``, the source topic of every row as a constant;
      the DataFrame then has no topic column and ``topic`` is unused.
    """

    topic: str = "topic"
    partition: str = "partition"
    offset: str = "offset"
    fixed_topic: Optional[str] = None

    def names(self) -> list[str]:
        """The columns every row must carry: partition and offset, plus topic unless it is fixed."""
        if self.fixed_topic is not None:
            return [self.partition, self.offset]
        return [self.topic, self.partition, self.offset]


@dataclass(frozen=True)
class SinkConfig:
    """Options common to both sinks, parsed once on the driver.

    - ``offsets_from``: ``"rows"`` (default; offsets derived from the offset
      columns) or ``"batch"`` (streaming batch id is the idempotence key).
    - ``topics``: the declared source topics (option ``topics``), or None to
      accept any topic (the stored topic set then grows with what is seen).
    """

    columns: SinkColumns = SinkColumns()
    offsets_from: str = OFFSETS_FROM_ROWS
    topics: Optional[frozenset[str]] = None


def parse_sink_config(options: Mapping[str, str]) -> SinkConfig:
    """Parse ``topicColumn``, ``partitionColumn``, ``offsetColumn``, ``topic``, ``offsetsFrom``, ``topics``.

    Option ``topic`` (the source topic as a constant, for a DataFrame without a topic
    column) excludes ``topicColumn`` and ``offsetsFrom=batch``, and must be one of the
    declared ``topics``. Raises OptionError naming the option and the fix.
    """
    fixed_topic = get_option(options, "topic")
    if fixed_topic is not None:
        fixed_topic = fixed_topic.strip()
        if not fixed_topic:
            raise OptionError("option 'topic' must name the source topic of every row, e.g. 'orders'")
        if get_option(options, "topicColumn") is not None:
            raise OptionError(
                "options 'topic' and 'topicColumn' both name the rows' source topic. Fix: keep 'topicColumn' "
                "when the DataFrame has a topic column, or 'topic' (a constant) when it has none."
            )
    cols = SinkColumns(
        topic=get_option(options, "topicColumn", "topic"),
        partition=get_option(options, "partitionColumn", "partition"),
        offset=get_option(options, "offsetColumn", "offset"),
        fixed_topic=fixed_topic,
    )
    mode = (get_option(options, "offsetsFrom", OFFSETS_FROM_ROWS) or "").strip().lower()
    if mode not in (OFFSETS_FROM_ROWS, OFFSETS_FROM_BATCH):
        raise OptionError(
            f"option 'offsetsFrom' must be 'rows' (offsets taken from the topic/partition/offset columns) "
            f"or 'batch' (streaming batch id as idempotence key), got {mode!r}"
        )
    if fixed_topic is not None and mode == OFFSETS_FROM_BATCH:
        raise OptionError(
            "option 'topic' names the source topic of the partition/offset columns, but offsetsFrom=batch "
            "uses no offset columns. Fix: remove option 'topic', or use offsetsFrom=rows."
        )
    raw_topics = get_option(options, "topics")
    topics = None
    if raw_topics is not None:
        topics = frozenset(t.strip() for t in raw_topics.split(",") if t.strip())
        if not topics:
            raise OptionError("option 'topics' must list the source topics, e.g. 'orders,payments'")
        if fixed_topic is not None and fixed_topic not in topics:
            raise OptionError(
                f"option topic='{fixed_topic}' is not among the declared topics {sorted(topics)}. "
                "Fix: correct option 'topic', or add it to option 'topics'."
            )
    return SinkConfig(cols, mode, topics)


def check_offset_columns(schema_names: Iterable[str], config: SinkConfig) -> None:
    """Refuse a DataFrame lacking the offset columns the sink needs (``offsetsFrom=rows``),
    or having a topic column while option ``topic`` also names the topic.

    Raises SinkError naming the columns and the possible fixes.
    """
    if config.offsets_from != OFFSETS_FROM_ROWS:
        return
    present = set(schema_names)
    cols = config.columns
    if cols.fixed_topic is not None and cols.topic in present:
        raise SinkError(
            f"option topic='{cols.fixed_topic}' names the rows' source topic, but the DataFrame also has a "
            f"'{cols.topic}' column: the sink cannot tell which one is right. Fix: drop the option 'topic' "
            f"(the column is used), or drop or rename the column '{cols.topic}'."
        )
    missing = [c for c in cols.names() if c not in present]
    if missing:
        raise SinkError(
            f"the DataFrame has no column(s) {missing} but the sink needs each row's source "
            f"topic, partition and offset to store offsets with the results (columns present: {sorted(present)}). "
            "Fix: keep the pykafka reader's 'topic', 'partition', 'offset' columns in the select, or name "
            "your columns with options topicColumn/partitionColumn/offsetColumn, or give a single source "
            "topic as option 'topic' instead of a topic column, or for aggregations in a streaming query "
            "use option offsetsFrom=batch."
        )


def require_streaming_for_batch_mode(config: SinkConfig, streaming: bool) -> None:
    """``offsetsFrom=batch`` needs a streaming batch id; batch jobs must use offset columns."""
    if config.offsets_from == OFFSETS_FROM_BATCH and not streaming:
        raise OptionError(
            "option offsetsFrom=batch needs a streaming query (the micro-batch id is the idempotence key); "
            "a batch job must carry the topic/partition/offset columns (offsetsFrom=rows)"
        )


@dataclass
class StagedWrite(WriterCommitMessage):
    """Commit message of one task attempt (picklable; a Spark ``WriterCommitMessage``).

    - ``attempt_id``: unique id of the task attempt, the staging tag.
    - ``offsets``: ``{(topic, partition): (min offset, max offset)}`` of its rows.
    - ``rows``: number of rows staged.
    - ``files``: staged file paths relative to the sink directory (Parquet sink only).
    """

    attempt_id: str
    offsets: OffsetSpan = field(default_factory=dict)
    rows: int = 0
    files: list[str] = field(default_factory=list)


def new_attempt_id() -> str:
    """Staging tag of this task attempt: ``b<batch>-p<partition>-a<attempt>-<random>``.

    The batch id comes from Spark's local property ``streaming.sql.batchId``
    (absent for batch jobs); the random part keeps two attempts apart even
    across restarts.
    """
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:  # called outside a Spark task (tests, tools)
        return f"local-{uuid.uuid4().hex}"
    batch = tc.getLocalProperty("streaming.sql.batchId") or "job"
    return f"b{batch}-p{tc.partitionId()}-a{tc.attemptNumber()}-{uuid.uuid4().hex[:12]}"


def merge_spans(spans: Iterable[OffsetSpan]) -> OffsetSpan:
    """Union of offset spans: per topic-partition the min of mins and max of maxes."""
    out: OffsetSpan = {}
    for span in spans:
        for tp, (lo, hi) in span.items():
            if tp in out:
                olo, ohi = out[tp]
                out[tp] = (min(lo, olo), max(hi, ohi))
            else:
                out[tp] = (lo, hi)
    return out


def span_of_arrow(batch, columns: SinkColumns) -> OffsetSpan:
    """Per topic-partition (min, max) offset of a ``pyarrow.RecordBatch``/``Table``.

    With ``columns.fixed_topic`` every row belongs to that topic (no topic column).
    Raises SinkError when a topic, partition or offset is null (the row cannot be
    placed in any offset range, so it could be neither de-duplicated nor resumed).
    """
    import pyarrow as pa

    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    if table.num_rows == 0:
        return {}
    for name in columns.names():
        if table.column(name).null_count:
            raise SinkError(
                f"column '{name}' has null values: every row must carry the topic, partition and offset "
                "of the Kafka record it came from. Fix: filter those rows out, or use offsetsFrom=batch."
            )
    keys = [columns.partition] if columns.fixed_topic is not None else [columns.topic, columns.partition]
    d = table.group_by(keys).aggregate([(columns.offset, "min"), (columns.offset, "max")]).to_pydict()
    n = len(d[columns.partition])
    topics = [columns.fixed_topic] * n if columns.fixed_topic is not None else d[columns.topic]
    return {
        (t, int(p)): (int(lo), int(hi))
        for t, p, lo, hi in zip(topics, d[columns.partition], d[f"{columns.offset}_min"], d[f"{columns.offset}_max"])
    }


def advance(stored: Mapping[TopicPartition, int], span: OffsetSpan) -> dict[TopicPartition, int]:
    """New next offsets: per topic-partition ``max(stored next, max offset + 1)``; never backwards."""
    out = dict(stored)
    for tp, (_, hi) in span.items():
        out[tp] = max(out.get(tp, 0), hi + 1)
    return out


def classify_span(lo: int, hi: int, next_offset: Optional[int]) -> str:
    """Where a staged range ``[lo, hi]`` stands against the stored next offset.

    ``"new"`` (all rows are after what is stored: keep all), ``"old"`` (all rows
    were stored already: drop all), ``"mixed"`` (filter row by row).
    """
    if next_offset is None or lo >= next_offset:
        return "new"
    if hi < next_offset:
        return "old"
    return "mixed"


def span_verdict(span: OffsetSpan, stored: Mapping[TopicPartition, int]) -> str:
    """``"new"``, ``"old"`` or ``"mixed"`` for staged rows with offset ``span`` against the stored next offsets.

    Combines :func:`classify_span` over the span's topic-partitions: all new → ``"new"`` (keep
    every row), all old → ``"old"`` (drop the rows), anything else → ``"mixed"`` (filter with
    :func:`rows_after`).
    """
    verdicts = {classify_span(lo, hi, stored.get(tp)) for tp, (lo, hi) in span.items()}
    if verdicts <= {"new"}:
        return "new"
    if verdicts == {"old"}:
        return "old"
    return "mixed"


def rows_after(table, columns: SinkColumns, stored: Mapping[TopicPartition, int]):
    """The rows of ``table`` (a ``pyarrow.Table``) not stored yet: ``offset >= stored next offset``
    of their topic-partition (rows of topic-partitions with nothing stored are all kept).

    With ``columns.fixed_topic`` the table has no topic column and every row belongs to that topic.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    keep = pa.repeat(True, table.num_rows)
    for (t, p), nxt in stored.items():
        if columns.fixed_topic is not None and t != columns.fixed_topic:
            continue  # another topic's offsets: none of these rows
        mine = pc.equal(table[columns.partition], p)
        if columns.fixed_topic is None:
            mine = pc.and_(pc.equal(table[columns.topic], t), mine)
        keep = pc.and_(keep, pc.invert(pc.and_(mine, pc.less(table[columns.offset], nxt))))
    return table.filter(keep)


def missing_dependency(package: str, extra: str, sink: str) -> "SinkError":
    """The error for a sink whose optional library is not installed: names the pip command.

    ``package``: the import name (e.g. ``deltalake``); ``extra``: this project's extra
    (``delta``, ``iceberg``); ``sink``: the data source name.
    """
    return SinkError(
        f"the {sink} sink needs the '{package}' package, which is not installed in this Python "
        f"(driver and executors). Fix: pip install \"pyspark-kafka[{extra}]\""
    )


@dataclass(frozen=True)
class SinkIdentity:
    """How messages name a sink and the fixes for a mismatch.

    - ``who``: e.g. ``"sinkId 'etl' in offsets table 'pykafka_offsets' of sqlite:///x.db"``
      or ``"sink directory /data/out"``.
    - ``new_id_fix``: how to give a query its own sink (option sinkId, another path).
    - ``reset_fix``: how to forget the stored offsets on purpose.
    """

    who: str
    new_id_fix: str
    reset_fix: str


def check_topics(
    sink: SinkIdentity,
    stored: frozenset[str],
    declared: Optional[frozenset[str]],
    seen: Iterable[str],
) -> frozenset[str]:
    """Validate the topics of a commit and return the topic set to store.

    - ``declared`` (option ``topics``) must equal the stored set when both exist,
      and every topic seen in the batch must be declared.
    - Without a declaration the stored set grows with the topics seen.

    Raises SinkMismatchError naming both sets and the fix.
    """
    seen = frozenset(seen)
    if declared is not None:
        if stored and stored != declared:
            raise SinkMismatchError(
                f"{sink.who} holds offsets for topics {sorted(stored)}, but this query declares topics "
                f"{sorted(declared)}: they were written by a different query. Fix: {sink.new_id_fix}, or, "
                f"to start over on purpose, {sink.reset_fix}."
            )
        extra = seen - declared
        if extra:
            raise SinkMismatchError(
                f"rows from topics {sorted(extra)} reached {sink.who}, which declares topics {sorted(declared)}. "
                "Fix: add them to option 'topics' if this query really reads them, or filter them out before "
                "the sink."
            )
        return declared
    return frozenset(stored | seen)


def check_same(sink: SinkIdentity, what: str, stored: Optional[str], wanted: str) -> None:
    """Refuse when a stored sink attribute (target table, offsetsFrom) differs from this query's.

    Raises SinkMismatchError naming both values and the fix.
    """
    if stored is not None and stored != wanted:
        raise SinkMismatchError(
            f"{sink.who} holds {what} '{stored}', but this query has {what} '{wanted}': the stored offsets "
            f"belong to a different query. Fix: {sink.new_id_fix}, or, to start over on purpose, {sink.reset_fix}."
        )


def offsets_json(
    next_offsets: Mapping[TopicPartition, int],
    partitions: Optional[Mapping[str, Iterable[int]]] = None,
) -> str:
    """Spark's partition offsets JSON, e.g. ``{"t":{"0":42,"1":-2}}``.

    ``partitions`` (topic → partition ids, from the cluster) adds the partitions
    without a stored offset as ``-2`` (earliest, Spark's convention) so Spark's
    rule "specific offsets must name every partition" holds. With nothing stored
    and no partitions given the result is ``"earliest"``.
    """
    out: dict[str, dict[str, int]] = {}
    for topic, parts in (partitions or {}).items():
        for p in parts:
            out.setdefault(topic, {})[str(int(p))] = -2
    for (topic, p), off in next_offsets.items():
        if partitions is not None and topic not in partitions:
            continue
        out.setdefault(topic, {})[str(int(p))] = int(off)
    if not out:
        return "earliest"
    return json.dumps(
        {t: dict(sorted(ps.items(), key=lambda kv: int(kv[0]))) for t, ps in sorted(out.items())},
        separators=(",", ":"),
    )


class StagedSinkWriter:
    """The driver-side writer shared by the staging sinks (``pykafka-parquet``, ``-delta``, ``-iceberg``).

    Executors stage a task's rows as data files (``stage``), the driver makes them visible with the
    batch's offsets in one commit (``commit``) or deletes what an aborted job staged (``abort``); each
    sink sets the three as ``staticmethod`` s of its own module. One subclass pairs it with pyspark's
    ``DataSourceArrowWriter`` (batch: ``commit(messages)``), another with
    ``DataSourceStreamArrowWriter`` (streaming: ``commit(messages, batchId)``).
    """

    stage = commit_staged = abort_staged = None  # set by each sink: (spec, iterator, attempt id), (spec, messages, batch id), (spec, messages)

    def __init__(self, spec):
        self.spec = spec

    def write(self, iterator):
        return self.stage(self.spec, iterator, new_attempt_id())

    def commit(self, messages, batchId: int | None = None) -> None:
        self.commit_staged(self.spec, messages, batchId)

    def abort(self, messages, batchId: int | None = None) -> None:
        self.abort_staged(self.spec, messages)

