"""Exactly-once Delta Lake sink ``pykafka-delta``: data files and Kafka offsets in one Delta commit.

Built on ``deltalake`` (delta-rs, ``pip install "pyspark-kafka[delta]"``); no JVM Delta needed.

The protocol (the shared rules are :mod:`pyspark_kafka.sinks.common`; see ``docs/exactly-once.md``):

1. **Tasks** write their rows as Parquet data files straight into the table directory
   (``[<col>=<value>/]part-<n>-<attempt id>.<codec>.parquet``, one file per partition value),
   through the table's storage (local files, or deltalake's object store with the ``storage.*``
   options), and return a :class:`DeltaStagedWrite`: per file its path, size, partition values,
   row count, Delta statistics and the (min, max) offset per source topic-partition. A file no
   commit references is invisible to every Delta reader (the log, not the directory, defines
   the table), exactly as with Spark's own Delta writer; ``VACUUM`` deletes such orphans.
2. **The driver's commit** reads the stored offsets of the batch's topic-partitions from the
   table's *app transactions* (Delta protocol ``txn`` action, "SetTransaction": ``appId``,
   ``version``), keeps new files, drops files whose rows are all stored, rewrites mixed files
   keeping ``offset >= next offset``, and makes ONE Delta commit with every kept file (``add``
   actions) plus one ``txn`` action per advanced topic-partition: ``appId`` =
   :func:`txn_app_id` (sink id + topic + partition), ``version`` = the next offset (first offset
   not stored). Data and offsets are therefore atomic by Delta's protocol. This follows
   kafka-delta-ingest (delta-rs' Kafka daemon), which keeps one ``txn`` per Kafka partition
   (``<app id>-<partition>``); it stores the last written offset, we store the *next* offset
   (Spark's ``startingOffsets`` convention, as every sink of this package), and name the topic
   too (a query may read several topics).
3. ``offsetsFrom=batch`` (aggregations): one ``txn`` ``pykafka:<sinkId>:batch`` with the
   micro-batch id as version, the idempotence key Spark's own Delta sink also uses
   (``txnAppId`` = query id, ``txnVersion`` = batch id).
4. Each commit also carries, in its ``commitInfo``, a ``pykafka`` entry (sink id, offsetsFrom,
   topics, batch id, cumulative next offsets): the sink's own topic/mode checks and
   :func:`stored_offsets` use it to enumerate topic-partitions; the offsets themselves are read
   from the ``txn`` actions, which Delta checkpoints keep forever.

Concurrency: delta-rs commits optimistically and re-tries over concurrent *blind appends* of
other writers. A concurrent commit that set the same app transaction (another writer of the
same sink id) makes delta-rs refuse ours ("Concurrent transaction failed"); the sink then
re-reads the offsets and redoes the decision (up to ``maxCommitRetries`` times), so a batch is
neither lost nor doubled, and gives up with a :class:`~pyspark_kafka.sinks.common.SinkError`.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from pyspark_kafka.errors import OptionError, errors_as_messages
from pyspark_kafka.options import get_option
from pyspark_kafka.sinks.common import (
    OFFSETS_FROM_BATCH,
    OffsetSpan,
    SinkConfig,
    SinkError,
    SinkIdentity,
    SinkUnavailableError,
    StagedWrite,
    advance,
    check_offset_columns,
    check_same,
    check_topics,
    merge_spans,
    missing_dependency,
    StagedSinkWriter,
    parse_sink_config,
    require_streaming_for_batch_mode,
    rows_after,
    span_of_arrow,
    span_verdict,
)
from pyspark_kafka.kafka.topic_partition import TopicPartition

SINK = "pykafka-delta"
DEFAULT_SINK_ID = "pykafka"
#: key of the sink's entry in a Delta ``commitInfo``
METADATA_KEY = "pykafka"
#: Spark partition column types the sink can write as Delta partition values
_PARTITION_TYPES = ("string", "int", "bigint", "smallint", "tinyint", "boolean", "date")
_SAFE_DIR = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _deltalake():
    """Import ``deltalake`` or raise SinkError naming ``pip install "pyspark-kafka[delta]"``."""
    try:
        import deltalake
    except ImportError:
        raise missing_dependency("deltalake", "delta", SINK) from None
    return deltalake


def txn_app_id(sink_id: str, topic: str, partition: int) -> str:
    """Delta ``txn`` app id holding the next offset of ``topic``-``partition`` for ``sink_id``.

    ``pykafka:<sinkId>:<topic>:<partition>``; unambiguous because Kafka topic names cannot hold
    ``:`` (legal characters ``[a-zA-Z0-9._-]``) and the partition is an integer.
    """
    return f"pykafka:{sink_id}:{topic}:{int(partition)}"


def batch_app_id(sink_id: str) -> str:
    """Delta ``txn`` app id holding the last committed micro-batch id (``offsetsFrom=batch``)."""
    return f"pykafka:{sink_id}:batch"


def partition_value(value) -> Optional[str]:
    """A Delta partition value as the protocol serialises it ("Partition Value Serialization").

    None → None (null); bool → ``true``/``false``; date → ``YYYY-MM-DD``; int/str → ``str()``.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def partition_dir(columns: tuple[str, ...], values: tuple[Optional[str], ...]) -> str:
    """Hive-style directory of a partition (``col=value/...``), a cosmetic layout only.

    Delta readers take partition values from the ``add`` action, never from the path, so a
    value outside ``[A-Za-z0-9_.-]`` gets a neutral stand-in (``__v<hash>``) instead of
    escaping; null is ``__HIVE_DEFAULT_PARTITION__`` as Spark writes it.
    """
    import hashlib

    parts = []
    for c, v in zip(columns, values):
        if v is None:
            shown = "__HIVE_DEFAULT_PARTITION__"
        elif _SAFE_DIR.match(v):
            shown = v
        else:
            shown = "__v" + hashlib.sha1(v.encode("utf-8")).hexdigest()[:12]
        parts.append(f"{c if _SAFE_DIR.match(c) else 'col'}={shown}")
    return "/".join(parts)


def is_remote(uri: str) -> bool:
    """True for object store URIs (``s3://``, ``az://``, ``gs://``, ...), False for local paths."""
    return "://" in uri and not uri.startswith("file://")


def local_path(uri: str) -> str:
    """Absolute local path of a local table URI (plain path or ``file://``)."""
    return os.path.abspath(uri[len("file://"):] if uri.startswith("file://") else uri)


@dataclass(frozen=True)
class DeltaSinkSpec:
    """Parsed options of the Delta sink (picklable; shipped to the tasks).

    - ``uri``: the table (local absolute path or object store URI; option ``path``).
    - ``storage_options``: ``storage.*`` options without the prefix (deltalake storage options;
      Spark lower-cases option names, which object_store's keys accept).
    - ``partition_by``: partition columns (option ``partitionBy``, comma-separated).
    - ``sink_id``: names the query's app transactions (option ``sinkId``, default ``pykafka``).
    - ``compression``: Parquet codec of the data files (option ``compression``, default snappy).
    - ``max_commit_retries``: re-decisions after a concurrent commit of the same sink id.
    - ``file_columns``: the DataFrame's columns written to the data files (all but partition columns).
    - ``arrow_schema_bytes``: serialized ``pyarrow.Schema`` of the DataFrame (Spark types → Arrow, UTC).
    """

    uri: str
    storage_options: tuple[tuple[str, str], ...]
    partition_by: tuple[str, ...]
    sink_id: str
    compression: str
    max_commit_retries: int
    config: SinkConfig
    arrow_schema_bytes: bytes = b""

    @property
    def storage(self) -> Optional[dict[str, str]]:
        return dict(self.storage_options) or None

    @property
    def arrow_schema(self):
        import pyarrow as pa

        return pa.ipc.read_schema(pa.py_buffer(self.arrow_schema_bytes))

    @property
    def identity(self) -> SinkIdentity:
        return SinkIdentity(
            who=f"sinkId '{self.sink_id}' in Delta table {self.uri}",
            new_id_fix="give this query its own option sinkId (or its own table)",
            reset_fix="use a new sinkId (the old app transactions stay in the table's log, unused)",
        )

    def filesystem(self):
        """A ``pyarrow.fs.FileSystem`` rooted at the table: local files, or deltalake's object store."""
        import pyarrow.fs as pafs

        if not is_remote(self.uri):
            return pafs.SubTreeFileSystem(local_path(self.uri), pafs.LocalFileSystem())
        from deltalake.fs import DeltaStorageHandler

        return pafs.PyFileSystem(DeltaStorageHandler(self.uri, self.storage))

    def open_table(self):
        """The table's latest snapshot (``deltalake.DeltaTable``). Raises SinkUnavailableError."""
        dl = _deltalake()
        try:
            return dl.DeltaTable(self.uri, storage_options=self.storage)
        except Exception as e:  # TableNotFoundError, object store errors
            raise SinkUnavailableError(f"cannot open the Delta table {self.uri}: {e}. Fix: check the path and "
                                       "the storage.* options.") from e


def _storage_options(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k[len("storage."):], v) for k, v in options.items() if k.lower().startswith("storage.")))


def _check_table_schema(spec: DeltaSinkSpec, table, arrow_schema) -> None:
    """Refuse a DataFrame whose columns differ from the existing table's (no schema evolution).

    Every DataFrame column must exist in the table with the same Delta type; table columns the
    DataFrame lacks must be nullable (their values read as null); partition columns must match.
    """
    dl = _deltalake()
    mine = {f.name: f for f in dl.Schema.from_arrow(arrow_schema).fields}
    theirs = {f.name: f for f in table.schema().fields}
    problems = []
    for name, f in mine.items():
        t = theirs.get(name)
        if t is None:
            problems.append(f"column '{name}' is not in the table")
        elif t.type != f.type:
            problems.append(f"column '{name}' is {f.type} in the DataFrame but {t.type} in the table")
    problems += [f"table column '{n}' is NOT NULL but missing from the DataFrame"
                 for n, t in theirs.items() if n not in mine and not t.nullable]
    stored_parts = tuple(table.metadata().partition_columns)
    if stored_parts != spec.partition_by:
        problems.append(f"the table is partitioned by {list(stored_parts)}, option partitionBy gives "
                        f"{list(spec.partition_by)}")
    if problems:
        raise SinkError(
            f"the DataFrame does not fit the Delta table {spec.uri}: {'; '.join(problems)}. This sink does not "
            "evolve a table's schema or partitioning. Fix: select/cast the columns to the table's schema, or "
            "change the table first (deltalake's DeltaTable.alter), or write to a new table."
        )


def parse_spec(options: Mapping[str, str], schema: StructType, streaming: bool, overwrite: bool) -> DeltaSinkSpec:
    """Parse the options, then create the table (first write) or check that the DataFrame fits it.

    Raises OptionError (bad option, overwrite), SinkError (missing offset columns, schema
    mismatch, deltalake not installed), SinkUnavailableError (storage unreachable).
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    dl = _deltalake()
    uri = get_option(options, "path")
    if not uri:
        raise OptionError("the Delta sink needs the table's location: .save('/data/events') / .start(...) "
                          "or option 'path' (object stores: 's3://bucket/events' with storage.* options)")
    if overwrite:
        raise OptionError(
            "pykafka-delta appends only (mode 'append', output mode 'append'); an overwrite would have to drop "
            "the stored offsets. Fix: write to a new table, or delete the table's rows first."
        )
    config = parse_sink_config(options)
    require_streaming_for_batch_mode(config, streaming)
    check_offset_columns(schema.fieldNames(), config)
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    partition_by = tuple(c.strip() for c in (get_option(options, "partitionBy") or "").split(",") if c.strip())
    for c in partition_by:
        if c not in types:
            raise OptionError(f"option partitionBy names column '{c}', which the DataFrame lacks "
                              f"(columns: {sorted(types)})")
        if types[c] not in _PARTITION_TYPES:
            raise OptionError(f"option partitionBy: column '{c}' is {types[c]}; partition columns must be one of "
                              f"{list(_PARTITION_TYPES)}. Fix: partition by a derived column, e.g. to_date(ts).")
    if len(partition_by) == len(types):
        raise OptionError("option partitionBy names every column: a Delta data file needs at least one other column")
    try:
        retries = int(get_option(options, "maxCommitRetries", "10"))
    except ValueError:
        raise OptionError("option maxCommitRetries must be an integer (re-decisions after a concurrent commit)") from None
    if not is_remote(uri):
        uri = local_path(uri)
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    spec = DeltaSinkSpec(
        uri=uri,
        storage_options=_storage_options(options),
        partition_by=partition_by,
        sink_id=get_option(options, "sinkId", DEFAULT_SINK_ID),
        compression=get_option(options, "compression", "snappy"),
        max_commit_retries=max(0, retries),
        config=config,
        arrow_schema_bytes=arrow_schema.serialize().to_pybytes(),
    )
    try:
        exists = dl.DeltaTable.is_deltatable(uri, storage_options=spec.storage)
        if not exists:
            if not is_remote(uri):
                os.makedirs(uri, exist_ok=True)
            dl.DeltaTable.create(uri, arrow_schema, mode="ignore", partition_by=list(partition_by) or None,
                                 storage_options=spec.storage)
    except SinkError:
        raise
    except Exception as e:
        raise SinkUnavailableError(f"cannot create or open the Delta table {uri}: {e}. Fix: check the path and the "
                                   "storage.* options.") from e
    _check_table_schema(spec, spec.open_table(), arrow_schema)
    return spec


# --------------------------------------------------------------------------- tasks


@dataclass
class DeltaStagedWrite(StagedWrite):
    """Commit message of one task attempt: :class:`StagedWrite` plus per data file

    ``{"path": relative path, "size": bytes, "partition_values": {col: str|None}, "rows": n,
    "span": {(topic, partition): (min, max)}, "stats": Delta stats JSON}``.
    """

    file_info: list = field(default_factory=list)


class _FileBuilder:
    """One data file being written by a task: a ParquetWriter plus its row count, span and stats."""

    def __init__(self, fs, rel: str, schema, compression: str, partition_values: dict):
        import pyarrow.parquet as pq

        self.rel = rel
        self.partition_values = partition_values
        if "/" in rel:
            fs.create_dir(rel.rsplit("/", 1)[0], recursive=True)
        self.stream = fs.open_output_stream(rel)
        self.writer = pq.ParquetWriter(self.stream, schema, compression=compression)
        self.rows = 0
        self.spans: list[OffsetSpan] = []
        self.nulls: dict[str, int] = {}
        self.mins: dict[str, int] = {}
        self.maxs: dict[str, int] = {}

    def add(self, table) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.writer.write_table(table)
        self.rows += table.num_rows
        for name in table.column_names:
            col = table[name]
            if pa.types.is_nested(col.type):
                continue
            self.nulls[name] = self.nulls.get(name, 0) + col.null_count
            if pa.types.is_integer(col.type) and col.null_count < len(col):
                mm = pc.min_max(col)
                lo, hi = mm["min"].as_py(), mm["max"].as_py()
                self.mins[name] = lo if name not in self.mins else min(lo, self.mins[name])
                self.maxs[name] = hi if name not in self.maxs else max(hi, self.maxs[name])

    def close(self, fs) -> dict:
        self.writer.close()
        self.stream.close()
        size = fs.get_file_info(self.rel).size
        stats = {"numRecords": self.rows, "minValues": self.mins, "maxValues": self.maxs, "nullCount": self.nulls}
        return {"path": self.rel, "size": int(size), "partition_values": self.partition_values, "rows": self.rows,
                "span": merge_spans(self.spans), "stats": json.dumps(stats, separators=(",", ":"))}


def _split_by_partition(table, columns: tuple[str, ...]):
    """``[(values tuple of Delta partition strings, rows of that partition)]`` of a ``pyarrow.Table``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not columns:
        return [((), table)]
    keys = table.select(list(columns)).group_by(list(columns)).aggregate([]).to_pylist()
    out = []
    for key in keys:
        mask = pa.repeat(True, table.num_rows)
        for c in columns:
            v = key[c]
            m = pc.is_null(table[c]) if v is None else pc.fill_null(pc.equal(table[c], v), False)
            mask = pc.and_(mask, m)
        out.append((tuple(partition_value(key[c]) for c in columns), table.filter(mask)))
    return out


def stage_batches(spec: DeltaSinkSpec, batches: Iterator, attempt_id: str) -> DeltaStagedWrite:
    """Write a task's Arrow batches as Delta data files (one per partition value); returns the commit message.

    Batches are cast to the DataFrame's Arrow schema (timestamps in UTC); the partition columns
    are not stored in the files (Delta keeps them in the ``add`` action). No file when the task
    had no rows.
    """
    import pyarrow as pa

    fs = spec.filesystem()
    target = spec.arrow_schema
    file_schema = pa.schema([f for f in target if f.name not in spec.partition_by])
    codec = spec.compression.lower()
    builders: dict[tuple, _FileBuilder] = {}
    rows = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch]).select(target.names).cast(target)
            rows += table.num_rows
            for values, part in _split_by_partition(table, spec.partition_by):
                b = builders.get(values)
                if b is None:
                    prefix = partition_dir(spec.partition_by, values)
                    name = f"part-{len(builders):05d}-{attempt_id}.{codec}.parquet"
                    b = builders[values] = _FileBuilder(
                        fs, f"{prefix}/{name}" if prefix else name, file_schema, spec.compression,
                        dict(zip(spec.partition_by, values)))
                if spec.config.offsets_from != OFFSETS_FROM_BATCH:
                    b.spans.append(span_of_arrow(part, spec.config.columns))
                b.add(part.select(file_schema.names))
    except BaseException:
        for b in builders.values():  # a failed attempt leaves no half-written file behind
            try:
                b.writer.close()
                b.stream.close()
                fs.delete_file(b.rel)
            except Exception:
                pass
        raise
    infos = [b.close(fs) for b in builders.values()]
    return DeltaStagedWrite(
        attempt_id=attempt_id,
        offsets=merge_spans(i["span"] for i in infos),
        rows=rows,
        files=[i["path"] for i in infos],
        file_info=infos,
    )


# --------------------------------------------------------------------------- driver


def sink_metadata(table, sink_id: str, history_limit: int = 100) -> Optional[dict]:
    """The ``pykafka`` entry of the newest commit of ``sink_id`` in the table's history, or None.

    Keys: ``sinkId``, ``offsetsFrom``, ``topics`` (list), ``batchId``, ``offsets``
    (``{"topic": {"partition": next offset}}``, cumulative).
    """
    for limit in (history_limit, None):
        entries = table.history(limit)
        for entry in entries:
            meta = entry.get(METADATA_KEY)
            if isinstance(meta, str):
                try:
                    meta = json.loads(meta)
                except ValueError:
                    continue
            if isinstance(meta, dict) and meta.get("sinkId") == sink_id:
                return meta
        if limit is not None and len(entries) < limit:
            return None
    return None


def _decode(doc: Mapping) -> dict[TopicPartition, int]:
    return {(t, int(p)): int(n) for t, ps in (doc or {}).items() for p, n in ps.items()}


def _encode(offsets: Mapping[TopicPartition, int]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for (t, p), n in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(n)
    return out


def _delete(fs, paths) -> None:
    for p in paths:
        try:
            fs.delete_file(p)
        except Exception:
            pass  # already gone, or VACUUM's job later: an unreferenced file is invisible


def _rewrite_new_rows(spec: DeltaSinkSpec, fs, info: dict, stored: Mapping[TopicPartition, int]) -> Optional[dict]:
    """Rewrite a mixed data file keeping ``offset >= next offset``; the new file's info, or None if no row is new."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with fs.open_input_file(info["path"]) as f:
        table = pq.read_table(f)
    full = table
    for c, v in info["partition_values"].items():  # offset columns may be partition columns
        if c not in full.column_names:
            typ = spec.arrow_schema.field(c).type
            full = full.append_column(c, pa.array([v] * table.num_rows, pa.string()).cast(typ))
    new_rows = rows_after(full, spec.config.columns, stored)
    if new_rows.num_rows == 0:
        return None
    head, _, tail = info["path"].rpartition("/")
    rel = (f"{head}/" if head else "") + "part-r" + tail[len("part-"):]  # the new rows of a replayed file
    b = _FileBuilder(fs, rel, table.schema, spec.compression, info["partition_values"])
    b.add(new_rows.select(table.column_names))
    b.spans.append(span_of_arrow(new_rows, spec.config.columns))
    return b.close(fs)


def _add_action(info: dict, now_ms: int):
    from deltalake.transaction import AddAction

    return AddAction(info["path"], info["size"], info["partition_values"], now_ms, True, info["stats"])


def commit(spec: DeltaSinkSpec, messages: list, batch_id: Optional[int]) -> Optional[int]:
    """One Delta commit: the new rows' data files + one ``txn`` per advanced topic-partition.

    Returns the committed table version, or None when nothing was new (replayed batch). Raises
    SinkMismatchError (the sink id holds another query's offsets), SinkError (concurrent writers
    of the same sink id beyond ``maxCommitRetries``, other commit failures); data files not
    committed are deleted.
    """
    _deltalake()
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import CommitProperties, Transaction

    cfg = spec.config
    fs = spec.filesystem()
    msgs = [m for m in messages if m is not None and getattr(m, "file_info", None)]
    infos = [i for m in msgs for i in m.file_info]
    span = merge_spans(i["span"] for i in infos)
    last_error = None
    for _ in range(spec.max_commit_retries + 1):
        table = spec.open_table()
        meta = sink_metadata(table, spec.sink_id)
        check_same(spec.identity, "offsetsFrom", meta and meta.get("offsetsFrom"), cfg.offsets_from)
        topics = check_topics(spec.identity, frozenset(meta["topics"]) if meta else frozenset(), cfg.topics,
                              {t for t, _ in span})
        cumulative = _decode(meta.get("offsets")) if meta else {}
        txns = []
        if cfg.offsets_from == OFFSETS_FROM_BATCH:
            last_batch = table.transaction_version(batch_app_id(spec.sink_id))
            if batch_id is not None and last_batch is not None and batch_id <= last_batch:
                _delete(fs, [i["path"] for i in infos])  # replayed micro-batch: already committed
                return None
            keep, rewritten = list(infos), []
            if batch_id is not None:
                txns.append(Transaction(batch_app_id(spec.sink_id), int(batch_id)))
            stored = {}
        else:
            stored = {}
            for tp in span:
                v = table.transaction_version(txn_app_id(spec.sink_id, *tp))
                if v is not None:
                    stored[tp] = int(v)
            keep, rewritten = [], []
            for info in infos:
                verdict = span_verdict(info["span"], stored)
                if verdict == "new":
                    keep.append(info)
                elif verdict == "mixed":
                    new = _rewrite_new_rows(spec, fs, info, stored)
                    if new is not None:
                        keep.append(new)
                        rewritten.append(new["path"])
            nxt = advance(stored, span)
            txns = [Transaction(txn_app_id(spec.sink_id, t, p), n, int(time.time() * 1000))
                    for (t, p), n in sorted(nxt.items()) if stored.get((t, p)) != n]
            cumulative.update(nxt)
        if not keep and not txns:
            _delete(fs, [i["path"] for i in infos])  # everything was stored already: no empty commit
            return None
        meta_out = {"sinkId": spec.sink_id, "offsetsFrom": cfg.offsets_from, "topics": sorted(topics),
                    "batchId": batch_id if batch_id is not None else (meta or {}).get("batchId"),
                    "offsets": _encode(cumulative)}
        now = int(time.time() * 1000)
        try:
            table.create_write_transaction(
                [_add_action(i, now) for i in keep], "append", table.schema(),
                partition_by=list(spec.partition_by) or None,
                commit_properties=CommitProperties(custom_metadata={METADATA_KEY: meta_out}, app_transactions=txns),
            )
        except CommitFailedError as e:
            _delete(fs, rewritten)
            last_error = e
            if "oncurrent" in str(e):
                continue  # another writer set the same app transaction: decide again on the new snapshot
            raise SinkError(f"the Delta commit into {spec.uri} failed: {e}. Nothing of this batch is visible; the "
                            "query can be restarted.") from e
        kept = {i["path"] for i in keep}
        _delete(fs, [i["path"] for i in infos if i["path"] not in kept])
        return spec.open_table().version()
    _delete(fs, [i["path"] for i in infos])
    raise SinkError(
        f"the Delta commit into {spec.uri} was refused {spec.max_commit_retries + 1} times: another writer keeps "
        f"committing offsets of the same sink id '{spec.sink_id}' ({last_error}). Nothing of this batch is "
        "visible. Fix: let one query write a sink id at a time (give each query its own option sinkId)."
    )


def abort(spec: DeltaSinkSpec, messages) -> None:
    """Delete the data files of the attempts Spark reports for an aborted job (none are referenced)."""
    fs = spec.filesystem()
    _delete(fs, [i["path"] for m in (messages or []) if m is not None for i in getattr(m, "file_info", [])])


class _DeltaWriter(StagedSinkWriter):
    stage, commit_staged, abort_staged = staticmethod(stage_batches), staticmethod(commit), staticmethod(abort)


@errors_as_messages
class DeltaBatchWriter(_DeltaWriter, DataSourceArrowWriter):
    """Batch ``df.write.format("pykafka-delta")``: one Delta commit for the job, exactly once by the offsets."""


@errors_as_messages
class DeltaStreamWriter(_DeltaWriter, DataSourceStreamArrowWriter):
    """Streaming ``writeStream.format("pykafka-delta")``: one Delta commit per micro-batch."""


@errors_as_messages
class DeltaSinkDataSource(DataSource):
    """Data source ``pykafka-delta`` (write only): exactly-once into a Delta Lake table.

    Options: ``path`` (required; ``.save(path)`` / ``.start(path)``), ``storage.*`` (deltalake
    storage options), ``partitionBy`` (comma-separated columns), ``sinkId`` (default ``pykafka``),
    ``compression`` (default snappy), ``maxCommitRetries`` (default 10),
    ``topicColumn``/``partitionColumn``/``offsetColumn`` or ``topic``, ``offsetsFrom``, ``topics``.
    See ``docs/sinks.md``.
    """

    @classmethod
    def name(cls) -> str:
        return SINK

    def writer(self, schema: StructType, overwrite: bool):
        return DeltaBatchWriter(parse_spec(self.options, schema, False, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool):
        return DeltaStreamWriter(parse_spec(self.options, schema, True, overwrite))


# --------------------------------------------------------------------------- readers


def stored_offsets(uri: str, sink_id: str = DEFAULT_SINK_ID,
                   storage_options: Optional[Mapping[str, str]] = None) -> dict[TopicPartition, int]:
    """Next offsets of ``sink_id`` in the Delta table ``uri``: ``{(topic, partition): next_offset}``.

    The topic-partitions come from the sink's newest ``commitInfo`` entry, each value from its
    ``txn`` app transaction (the authoritative one; the entry's copy if the txn is absent).
    Empty when the table does not exist yet (a first run) or holds nothing of ``sink_id``.
    Raises SinkError when deltalake is not installed, SinkUnavailableError when the storage fails.
    """
    dl = _deltalake()
    if not is_remote(uri):
        uri = local_path(uri)
    opts = dict(storage_options) if storage_options else None
    try:
        if not dl.DeltaTable.is_deltatable(uri, storage_options=opts):
            return {}
        table = dl.DeltaTable(uri, storage_options=opts)
    except Exception as e:
        raise SinkUnavailableError(f"cannot open the Delta table {uri}: {e}") from e
    meta = sink_metadata(table, sink_id)
    if not meta:
        return {}
    out = {}
    for (t, p), n in _decode(meta.get("offsets")).items():
        v = table.transaction_version(txn_app_id(sink_id, t, p))
        out[(t, p)] = int(v) if v is not None else n
    return out


def is_delta_table(path: str) -> bool:
    """True when ``path`` is a local directory holding a Delta log (``_delta_log``)."""
    return not is_remote(path) and os.path.isdir(os.path.join(local_path(path), "_delta_log"))
