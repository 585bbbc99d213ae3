"""Exactly-once Apache Iceberg sink ``pykafka-iceberg``: one Iceberg append per Spark commit, the
Kafka offsets in that snapshot's summary.

Built on ``pyiceberg`` (``pip install "pyspark-kafka[iceberg]"``); no JVM Iceberg needed.

- **Catalog**: the ``catalog.*`` options (prefix removed) are passed to
  ``pyiceberg.catalog.load_catalog(name, **props)`` (``catalog.name`` default ``pykafka``). With no
  ``catalog.type``/``catalog.uri`` the embedded default is a SQL catalog on a SQLite file
  (``<cwd>/pykafka-iceberg.db``) with a local warehouse (``<cwd>/pykafka-warehouse``), so it runs
  with nothing else installed. Option ``table``: ``namespace.name`` (the namespace is created when
  missing; the table is created on first write from the DataFrame's schema, unpartitioned).
- **Tasks** write Parquet data files under ``<table location>/data/`` through the table's FileIO,
  without Iceberg field ids (as ``add_files`` expects), and return a :class:`IcebergStagedWrite`.
- **The driver's commit** finds the stored offsets in the summary of the newest snapshot of this
  sink id among the current snapshot's ancestors, keeps new files, drops files whose rows are all
  stored, rewrites mixed files keeping ``offset >= next offset``, and commits ONE append
  (pyiceberg ``Transaction.add_files``) whose snapshot summary holds ``pykafka.sink-id``,
  ``pykafka.offsets`` (cumulative next offsets, Spark's offset JSON), ``pykafka.topics``,
  ``pykafka.offsets-from`` and ``pykafka.batch-id``. This is how Flink's Iceberg sink keeps its
  position (``flink.job-id`` and ``flink.max-committed-checkpoint-id`` in the snapshot summary,
  found by walking the snapshot ancestry) and the Iceberg Kafka Connect sink its offsets.
- **Concurrency**: the append asserts the branch head it read (Iceberg's optimistic commit); a
  concurrent commit makes the catalog refuse it (``CommitFailedException``), and the sink
  re-reads the table and decides again (``maxCommitRetries`` times), so a batch is neither lost
  nor doubled.

Limits: no partitioned tables, no schema evolution (a DataFrame must match the table), and
expiring the snapshot that holds a sink's newest offsets (``expire_snapshots``) while another
writer's snapshots follow it loses the sink's position: keep the sink's newest snapshot.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from pyspark_kafka.errors import OptionError, errors_as_messages
from pyspark_kafka.options import get_option
from pyspark_kafka.sinks.common import (
    OFFSETS_FROM_BATCH,
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

SINK = "pykafka-iceberg"
DEFAULT_SINK_ID = "pykafka"
DEFAULT_CATALOG_NAME = "pykafka"
#: snapshot summary keys written by this sink
SUMMARY_SINK_ID = "pykafka.sink-id"
SUMMARY_OFFSETS = "pykafka.offsets"
SUMMARY_TOPICS = "pykafka.topics"
SUMMARY_OFFSETS_FROM = "pykafka.offsets-from"
SUMMARY_BATCH_ID = "pykafka.batch-id"


def _pyiceberg():
    """Import ``pyiceberg`` (with its SQL catalog) or raise SinkError naming ``pip install "pyspark-kafka[iceberg]"``."""
    try:
        import pyiceberg.catalog  # noqa: F401
        import pyiceberg.catalog.sql  # noqa: F401  (needs sqlalchemy, a core dependency here)
    except ImportError:
        raise missing_dependency("pyiceberg", "iceberg", SINK) from None
    import pyiceberg

    return pyiceberg


def default_catalog_properties(cwd: Optional[str] = None) -> dict[str, str]:
    """The embedded catalog: SQL catalog on ``<cwd>/pykafka-iceberg.db``, warehouse ``<cwd>/pykafka-warehouse``."""
    cwd = os.path.abspath(cwd or os.getcwd())
    return {"type": "sql", "uri": f"sqlite:///{cwd}/pykafka-iceberg.db", "warehouse": f"file://{cwd}/pykafka-warehouse"}


def catalog_properties(props: Optional[Mapping[str, str]]) -> dict[str, str]:
    """``load_catalog`` properties: the given ones, or the embedded default when no ``type``/``uri`` is given.

    A local warehouse directory of the default (or a ``file://``/plain-path warehouse) is created.
    """
    props = {k: v for k, v in (props or {}).items()}
    if "type" not in props and "uri" not in props and "py-catalog-impl" not in props:
        props = {**default_catalog_properties(), **props}
    wh = props.get("warehouse")
    if wh and ("://" not in wh or wh.startswith("file://")):
        os.makedirs(wh[len("file://"):] if wh.startswith("file://") else wh, exist_ok=True)
    return props


def load_catalog(props: Optional[Mapping[str, str]]):
    """A pyiceberg catalog from the sink's ``catalog.*`` options (``name`` selects the catalog name)."""
    _pyiceberg()
    from pyiceberg.catalog import load_catalog as _load

    props = catalog_properties(props)
    name = props.pop("name", DEFAULT_CATALOG_NAME)
    try:
        return _load(name, **props)
    except Exception as e:
        raise SinkUnavailableError(f"cannot load the Iceberg catalog '{name}' ({props.get('type', '?')}, "
                                   f"{props.get('uri', '')}): {e}. Fix: check the catalog.* options.") from e


@dataclass(frozen=True)
class IcebergSinkSpec:
    """Parsed options of the Iceberg sink (picklable; shipped to the tasks).

    - ``table``: ``namespace.name`` (option ``table``, or ``path`` / ``.save(name)``).
    - ``catalog``: ``catalog.*`` options without the prefix.
    - ``sink_id``: option ``sinkId`` (default ``pykafka``); several queries may write one table
      under different sink ids.
    - ``location``, ``io_properties``: the table's data location and FileIO properties (tasks).
    - ``arrow_schema_bytes``: the table's Arrow schema without field ids (files are cast to it).
    """

    table: str
    catalog: tuple[tuple[str, str], ...]
    sink_id: str
    compression: str
    max_commit_retries: int
    config: SinkConfig
    location: str = ""
    io_properties: tuple[tuple[str, str], ...] = ()
    arrow_schema_bytes: bytes = b""

    @property
    def arrow_schema(self):
        import pyarrow as pa

        return pa.ipc.read_schema(pa.py_buffer(self.arrow_schema_bytes))

    @property
    def identity(self) -> SinkIdentity:
        return SinkIdentity(
            who=f"sinkId '{self.sink_id}' in Iceberg table {self.table}",
            new_id_fix="give this query its own option sinkId (or its own table)",
            reset_fix="use a new sinkId",
        )

    def load_table(self):
        try:
            return load_catalog(dict(self.catalog)).load_table(self.table)
        except SinkError:
            raise
        except Exception as e:
            raise SinkUnavailableError(f"cannot load the Iceberg table {self.table}: {e}") from e

    def file_io(self):
        from pyiceberg.io import load_file_io

        return load_file_io(dict(self.io_properties), self.location)


def _file_schema(iceberg_schema):
    """The Arrow schema of the data files: the table's, without Iceberg field ids."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return schema_to_pyarrow(iceberg_schema, include_field_ids=False)


def _same_kind(mine, theirs) -> bool:
    """True when a DataFrame column of Arrow type ``mine`` is stored losslessly as the table's ``theirs``.

    Equal types; string/large_string and binary/large_binary alike; an integer into a wider or
    equal integer (Spark's byte/short become Iceberg int); timestamps of equal time-zone-ness.
    """
    import pyarrow as pa

    t = pa.types
    if mine == theirs:
        return True
    for group in (t.is_string, t.is_large_string), (t.is_binary, t.is_large_binary):
        if any(g(mine) for g in group) and any(g(theirs) for g in group):
            return True
    if t.is_signed_integer(mine) and t.is_signed_integer(theirs):
        return mine.bit_width <= theirs.bit_width
    if t.is_timestamp(mine) and t.is_timestamp(theirs):
        return (mine.tz is None) == (theirs.tz is None)
    return False


def _check_schema(spec_table: str, df_arrow, table_arrow) -> None:
    """Refuse a DataFrame whose columns are not the table's (names and types; no schema evolution)."""
    import pyarrow as pa

    theirs = {f.name: f.type for f in table_arrow}
    problems = []
    for f in df_arrow:
        t = theirs.get(f.name)
        if t is None:
            problems.append(f"column '{f.name}' is not in the table")
            continue
        if not _same_kind(f.type, t):
            problems.append(f"column '{f.name}' is {f.type} in the DataFrame but {t} in the table")
    if problems:
        raise SinkError(f"the DataFrame does not fit the Iceberg table {spec_table}: {'; '.join(problems)}. This sink "
                        "does not evolve a table's schema. Fix: select/cast the columns to the table's schema, or "
                        "evolve the table first (pyiceberg's update_schema), or write to a new table.")


def parse_spec(options: Mapping[str, str], schema: StructType, streaming: bool, overwrite: bool) -> IcebergSinkSpec:
    """Parse the options, create the namespace and table when missing, check the DataFrame fits the table.

    Raises OptionError, SinkError (offset columns, schema, pyiceberg missing), SinkUnavailableError.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    _pyiceberg()
    name = get_option(options, "table") or get_option(options, "path")
    if not name or "." not in name.strip("."):
        raise OptionError("the Iceberg sink needs option 'table' as 'namespace.name' (e.g. 'kafka.events')")
    if overwrite:
        raise OptionError("pykafka-iceberg appends only (mode 'append', output mode 'append'); an overwrite would have "
                          "to drop the stored offsets. Fix: write to a new table.")
    if get_option(options, "partitionBy"):
        raise OptionError("pykafka-iceberg writes unpartitioned tables only. Fix: remove option partitionBy, or "
                          "use pykafka-delta for a partitioned table.")
    config = parse_sink_config(options)
    require_streaming_for_batch_mode(config, streaming)
    check_offset_columns(schema.fieldNames(), config)
    try:
        retries = int(get_option(options, "maxCommitRetries", "10"))
    except ValueError:
        raise OptionError("option maxCommitRetries must be an integer (re-decisions after a concurrent commit)") from None
    catalog_opts = tuple(sorted((k[len("catalog."):], v) for k, v in options.items() if k.lower().startswith("catalog.")))
    catalog = load_catalog(dict(catalog_opts))
    df_arrow = to_arrow_schema(schema, timezone="UTC")
    namespace = name.rsplit(".", 1)[0]
    try:
        catalog.create_namespace_if_not_exists(namespace)
        table = catalog.create_table_if_not_exists(name, schema=df_arrow)
    except Exception as e:
        raise SinkUnavailableError(f"cannot create or load the Iceberg table {name}: {e}") from e
    if not table.spec().is_unpartitioned():
        raise SinkError(f"the Iceberg table {name} is partitioned; pykafka-iceberg writes unpartitioned tables only")
    table_arrow = _file_schema(table.schema())
    _check_schema(name, df_arrow, table_arrow)
    return IcebergSinkSpec(
        table=name,
        catalog=catalog_opts,
        sink_id=get_option(options, "sinkId", DEFAULT_SINK_ID),
        compression=get_option(options, "compression", "snappy"),
        max_commit_retries=max(0, retries),
        config=config,
        location=table.location(),
        io_properties=tuple(sorted({**catalog.properties, **table.io.properties}.items())),
        arrow_schema_bytes=table_arrow.serialize().to_pybytes(),
    )


# --------------------------------------------------------------------------- tasks


@dataclass
class IcebergStagedWrite(StagedWrite):
    """Commit message of one task attempt: :class:`StagedWrite` plus ``file_info`` =
    ``[{"path": full URI, "rows": n, "span": {(topic, partition): (min, max)}}]``."""

    file_info: list = field(default_factory=list)


def _write_file(spec: IcebergSinkSpec, io, path: str, tables) -> None:
    import pyarrow.parquet as pq

    with io.new_output(path).create(overwrite=True) as out:
        with pq.ParquetWriter(out, spec.arrow_schema, compression=spec.compression) as w:
            for t in tables:
                w.write_table(t)


def stage_batches(spec: IcebergSinkSpec, batches: Iterator, attempt_id: str) -> IcebergStagedWrite:
    """Write a task's Arrow batches as one Parquet data file under ``<location>/data/``; the commit message.

    Batches are cast to the table's Arrow schema (missing nullable columns become nulls).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = spec.arrow_schema
    path = f"{spec.location.rstrip('/')}/data/pykafka-{attempt_id}.parquet"
    io = spec.file_io()
    rows, spans = 0, []
    out = io.new_output(path).create(overwrite=True)
    writer = None
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            if spec.config.offsets_from != OFFSETS_FROM_BATCH:
                spans.append(span_of_arrow(table, spec.config.columns))
            cols = [table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
                    for f in target]
            if writer is None:
                writer = pq.ParquetWriter(out, target, compression=spec.compression)
            writer.write_table(pa.Table.from_arrays(cols, schema=target))
            rows += table.num_rows
    finally:
        if writer is not None:
            writer.close()
        out.close()
    if rows == 0:
        _delete(io, [path])
        return IcebergStagedWrite(attempt_id=attempt_id)
    span = merge_spans(spans)
    return IcebergStagedWrite(attempt_id=attempt_id, offsets=span, rows=rows, files=[path],
                              file_info=[{"path": path, "rows": rows, "span": span}])


# --------------------------------------------------------------------------- driver


def sink_snapshot_summary(table, sink_id: str) -> Optional[dict]:
    """Summary (``{key: value}``) of the newest snapshot of ``sink_id`` among the current snapshot's ancestors."""
    from pyiceberg.table.snapshots import ancestors_of

    for snap in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snap.summary
        if summary is not None and summary.get(SUMMARY_SINK_ID) == sink_id:
            return dict(summary.additional_properties)
    return None


def _decode(text: Optional[str]) -> dict[TopicPartition, int]:
    doc = json.loads(text) if text else {}
    return {(t, int(p)): int(n) for t, ps in doc.items() for p, n in ps.items()}


def _encode(offsets: Mapping[TopicPartition, int]) -> str:
    out: dict[str, dict[str, int]] = {}
    for (t, p), n in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(n)
    return json.dumps(out, separators=(",", ":"))


def _delete(io, paths) -> None:
    for p in paths:
        try:
            io.delete(p)
        except Exception:
            pass  # unreferenced either way; remove_orphan_files cleans leftovers


def _rewrite_new_rows(spec: IcebergSinkSpec, io, info: dict, stored) -> Optional[dict]:
    import pyarrow.parquet as pq

    with io.new_input(info["path"]).open() as f:
        table = pq.read_table(f)
    kept = rows_after(table, spec.config.columns, stored)
    if kept.num_rows == 0:
        return None
    path = info["path"][: -len(".parquet")] + "-r.parquet"
    _write_file(spec, io, path, [kept])
    return {"path": path, "rows": kept.num_rows, "span": span_of_arrow(kept, spec.config.columns)}


def commit(spec: IcebergSinkSpec, messages: list, batch_id: Optional[int]) -> Optional[int]:
    """One Iceberg append with the new rows' files; offsets in its snapshot summary.

    Returns the new snapshot id, or None when nothing was new. Raises SinkMismatchError,
    SinkError (concurrent commits beyond ``maxCommitRetries``, other commit failures).
    """
    _pyiceberg()
    from pyiceberg.exceptions import CommitFailedException

    cfg = spec.config
    io = spec.file_io()
    infos = [i for m in messages if m is not None for i in getattr(m, "file_info", [])]
    span = merge_spans(i["span"] for i in infos)
    last_error = None
    for _ in range(spec.max_commit_retries + 1):
        table = spec.load_table()
        summary = sink_snapshot_summary(table, spec.sink_id) or {}
        check_same(spec.identity, "offsetsFrom", summary.get(SUMMARY_OFFSETS_FROM), cfg.offsets_from)
        stored_topics = frozenset(json.loads(summary[SUMMARY_TOPICS])) if SUMMARY_TOPICS in summary else frozenset()
        topics = check_topics(spec.identity, stored_topics, cfg.topics, {t for t, _ in span})
        stored = _decode(summary.get(SUMMARY_OFFSETS))
        last_batch = int(summary[SUMMARY_BATCH_ID]) if summary.get(SUMMARY_BATCH_ID) not in (None, "") else None
        rewritten = []
        if cfg.offsets_from == OFFSETS_FROM_BATCH:
            if batch_id is not None and last_batch is not None and batch_id <= last_batch:
                _delete(io, [i["path"] for i in infos])
                return None
            keep = list(infos)
        else:
            keep = []
            for info in infos:
                verdict = span_verdict(info["span"], stored)
                if verdict == "new":
                    keep.append(info)
                elif verdict == "mixed":
                    new = _rewrite_new_rows(spec, io, info, stored)
                    if new is not None:
                        keep.append(new)
                        rewritten.append(new["path"])
        nxt = advance(stored, span)
        if not keep and nxt == stored and cfg.offsets_from != OFFSETS_FROM_BATCH:
            _delete(io, [i["path"] for i in infos])
            return None
        props = {
            SUMMARY_SINK_ID: spec.sink_id,
            SUMMARY_OFFSETS: _encode(nxt),
            SUMMARY_TOPICS: json.dumps(sorted(topics)),
            SUMMARY_OFFSETS_FROM: cfg.offsets_from,
            SUMMARY_BATCH_ID: str(batch_id if batch_id is not None else (last_batch if last_batch is not None else "")),
        }
        # pyiceberg re-applies a refused append on the refreshed table by itself (table property
        # commit.retry.num-retries, default 4): our file choice depends on the snapshot we read, so
        # that retry must not happen; this commit sees 0 retries (not stored in the table).
        table.metadata = table.metadata.model_copy(
            update={"properties": {**table.metadata.properties, "commit.retry.num-retries": "0"}})
        try:
            with table.transaction() as tx:
                tx.add_files([i["path"] for i in keep], snapshot_properties=props, check_duplicate_files=False)
        except CommitFailedException as e:
            _delete(io, rewritten)
            last_error = e
            continue  # a concurrent commit moved the branch: decide again on the new snapshot
        kept = {i["path"] for i in keep}
        _delete(io, [i["path"] for i in infos if i["path"] not in kept])
        snap = spec.load_table().current_snapshot()
        return snap.snapshot_id if snap else None
    _delete(io, [i["path"] for i in infos])
    raise SinkError(f"the Iceberg commit into {spec.table} was refused {spec.max_commit_retries + 1} times by "
                    f"concurrent commits ({last_error}). Nothing of this batch is visible. Fix: fewer concurrent "
                    "writers on the table, or a higher maxCommitRetries.")


def abort(spec: IcebergSinkSpec, messages) -> None:
    """Delete the data files of the attempts Spark reports for an aborted job (none are referenced)."""
    _delete(spec.file_io(), [i["path"] for m in (messages or []) if m is not None for i in getattr(m, "file_info", [])])


class _IcebergWriter(StagedSinkWriter):
    stage, commit_staged, abort_staged = staticmethod(stage_batches), staticmethod(commit), staticmethod(abort)


@errors_as_messages
class IcebergBatchWriter(_IcebergWriter, DataSourceArrowWriter):
    """Batch ``df.write.format("pykafka-iceberg")``: one append for the job, exactly once by the offsets."""


@errors_as_messages
class IcebergStreamWriter(_IcebergWriter, DataSourceStreamArrowWriter):
    """Streaming ``writeStream.format("pykafka-iceberg")``: one append per micro-batch."""


@errors_as_messages
class IcebergSinkDataSource(DataSource):
    """Data source ``pykafka-iceberg`` (write only): exactly-once into an Apache Iceberg table.

    Options: ``table`` (``namespace.name``, required), ``catalog.*`` (pyiceberg catalog properties;
    default an embedded SQLite catalog), ``sinkId`` (default ``pykafka``), ``compression``,
    ``maxCommitRetries``, ``topicColumn``/``partitionColumn``/``offsetColumn`` or ``topic``,
    ``offsetsFrom``, ``topics``. See ``docs/sinks.md``.
    """

    @classmethod
    def name(cls) -> str:
        return SINK

    def writer(self, schema: StructType, overwrite: bool):
        return IcebergBatchWriter(parse_spec(self.options, schema, False, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool):
        return IcebergStreamWriter(parse_spec(self.options, schema, True, overwrite))


# --------------------------------------------------------------------------- readers


def stored_offsets(table: str, sink_id: str = DEFAULT_SINK_ID,
                   catalog: Optional[Mapping[str, str]] = None) -> dict[TopicPartition, int]:
    """Next offsets of ``sink_id`` in the Iceberg table ``table`` (``namespace.name``) of ``catalog``.

    From the summary of the sink's newest snapshot; empty when the table does not exist (a first
    run) or holds no snapshot of ``sink_id``.
    """
    _pyiceberg()
    from pyiceberg.exceptions import NoSuchTableError

    cat = load_catalog(catalog)
    try:
        t = cat.load_table(table)
    except NoSuchTableError:
        return {}
    summary = sink_snapshot_summary(t, sink_id)
    return _decode(summary.get(SUMMARY_OFFSETS)) if summary else {}


def read_table(table: str, catalog: Optional[Mapping[str, str]] = None):
    """All rows of an Iceberg table as a ``pyarrow.Table`` (pyiceberg's reader)."""
    return load_catalog(catalog).load_table(table).scan().to_arrow()
