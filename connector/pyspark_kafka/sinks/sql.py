"""Exactly-once SQL sink ``pykafka-sql``: rows and Kafka offsets in one database transaction.

Built on SQLAlchemy Core; SQLite (WAL, busy timeout, ``BEGIN IMMEDIATE``) is the
embedded default, PostgreSQL the real server (any SQLAlchemy dialect with
``INSERT ... SELECT`` and correlated ``NOT EXISTS`` should work).

Tables (names from the options ``table`` and ``offsetsTable``, default ``pykafka_offsets``):

- target ``<table>``: the DataFrame's columns (created from the Spark schema
  when missing and ``createTable=true``).
- ``<offsetsTable>``: ``(sink_id, topic, partition) -> next_offset, batch_id, updated_ms``.
- ``<offsetsTable>_sinks``: one row per sink id: target table, offsetsFrom,
  topic set, last committed streaming batch id. Its row is the commit lock.
- ``<offsetsTable>_stage_<sinkId>``: staged rows, tagged ``_pk_sink``, ``_pk_attempt``.

Protocol (see :mod:`pyspark_kafka.sinks.common` and ``docs/exactly-once.md``):
tasks insert into the staging table (short transactions per Arrow batch) and
return a :class:`~pyspark_kafka.sinks.common.StagedWrite`; the driver's commit,
in ONE transaction, checks the sink row, moves the committed attempts' staged
rows whose offset is ``>=`` the stored next offset of their topic-partition,
advances the next offsets, records the batch id and deletes all staged rows of
the sink id. One query or job writes a given sink id at a time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Iterator, Mapping, Optional

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from pyspark_kafka.errors import OptionError, errors_as_messages
from pyspark_kafka.options import get_option, parse_bool, parse_int
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
    new_attempt_id,
    parse_sink_config,
    require_streaming_for_batch_mode,
    span_of_arrow,
)
from pyspark_kafka.kafka.topic_partition import TopicPartition

DEFAULT_OFFSETS_TABLE = "pykafka_offsets"
DEFAULT_SQLITE_FILE = "pykafka-sink.db"
ATTEMPT_COL = "_pk_attempt"
SINK_COL = "_pk_sink"


def default_url() -> str:
    """Embedded SQLite file ``pykafka-sink.db`` in the working directory (local mode only)."""
    return "sqlite:///" + os.path.abspath(DEFAULT_SQLITE_FILE)


def safe_url(url: str) -> str:
    """The URL with its password hidden, for messages."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


def staging_table_name(offsets_table: str, sink_id: str) -> str:
    """``<offsetsTable>_stage_<slug>_<hash>``, at most 63 characters (PostgreSQL's limit)."""
    slug = re.sub(r"[^a-z0-9]+", "_", sink_id.lower()).strip("_")[:24]
    digest = hashlib.sha1(sink_id.encode()).hexdigest()[:8]
    return f"{offsets_table}_stage_{slug}_{digest}"[:63]


@dataclass(frozen=True)
class SqlSinkSpec:
    """Everything a writer needs, parsed on the driver from the options (picklable).

    - ``url``: SQLAlchemy URL; ``table``; ``offsets_table``; ``sink_id`` (default: table).
    - ``create_table``: create the target from the Spark schema when missing.
    - ``busy_timeout_ms``: SQLite lock wait (ms).
    """

    url: str
    table: str
    offsets_table: str
    sink_id: str
    create_table: bool
    busy_timeout_ms: int
    config: SinkConfig
    schema: StructType

    @property
    def staging_table(self) -> str:
        return staging_table_name(self.offsets_table, self.sink_id)

    @property
    def identity(self) -> SinkIdentity:
        return SinkIdentity(
            who=f"sinkId '{self.sink_id}' in offsets table '{self.offsets_table}' of {safe_url(self.url)}",
            new_id_fix="give this query its own option 'sinkId'",
            reset_fix=f"call pyspark_kafka.sinks.sql.reset_sink(url, '{self.sink_id}')",
        )


def parse_spec(options: Mapping[str, str], schema: StructType, streaming: bool) -> SqlSinkSpec:
    """Parse and check the sink options against the DataFrame schema.

    Raises OptionError (bad option) or SinkError (missing offset columns).
    """
    table = get_option(options, "table") or get_option(options, "path")
    if not table:
        raise OptionError("option 'table' is required: .option('table', 'orders') names the target table")
    config = parse_sink_config(options)
    require_streaming_for_batch_mode(config, streaming)
    check_offset_columns(schema.fieldNames(), config)
    return SqlSinkSpec(
        url=get_option(options, "url") or default_url(),
        table=table,
        offsets_table=get_option(options, "offsetsTable", DEFAULT_OFFSETS_TABLE),
        sink_id=get_option(options, "sinkId") or table,
        create_table=parse_bool(options, "createTable", True),
        busy_timeout_ms=parse_int(options, "busyTimeoutMs", 60_000, minimum=0),
        config=config,
        schema=schema,
    )


def _utc(batch):
    """Timestamps with a time zone re-labelled UTC (same instants), so SQLite stores UTC wall time."""
    import pyarrow as pa

    cols = [
        c.cast(pa.timestamp(c.type.unit, tz="UTC")) if pa.types.is_timestamp(c.type) and c.type.tz else c
        for c in batch.columns
    ]
    return pa.RecordBatch.from_arrays(cols, names=batch.schema.names)


# --------------------------------------------------------------------------- engine


def open_engine(url: str, busy_timeout_ms: int = 60_000):
    """SQLAlchemy Engine for ``url``, checked by connecting once.

    SQLite: WAL journal, ``busy_timeout`` (ms), ``synchronous=FULL`` and
    ``BEGIN IMMEDIATE`` transactions, so tasks in several processes and the
    driver's commit share one file safely.

    Raises SinkUnavailableError naming the (password-hidden) URL, the driver's
    message and the fix.
    """
    import sqlalchemy as sa
    from sqlalchemy import event
    from sqlalchemy.pool import NullPool

    try:
        engine = sa.create_engine(url, poolclass=NullPool)
    except Exception as e:  # bad URL, unknown dialect, missing driver
        raise SinkUnavailableError(
            f"cannot use the database URL {safe_url(url)}: {e}. Fix: pass a SQLAlchemy URL in option 'url', "
            "e.g. 'sqlite:////abs/path/sink.db' or 'postgresql+psycopg2://user:pw@host:5432/db', and install "
            "its driver (pip install 'pyspark-kafka[postgres]')."
        ) from e
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_conn, _record):
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as e:
        engine.dispose()
        reason = " ".join(str(getattr(e, "orig", None) or e).split())
        raise SinkUnavailableError(
            f"cannot connect to the database {safe_url(url)}: {reason}. Fix: check that "
            "the server runs and accepts connections from this host (or, for SQLite, that the directory exists "
            "and is writable), and the URL in option 'url'."
        ) from e
    return engine


def spark_to_sql_type(dt):
    """SQLAlchemy column type for a Spark atomic type.

    Raises SinkError for nested types (struct, array, map) with the fix (``to_json``).
    """
    import sqlalchemy as sa
    from pyspark.sql import types as T

    table = [
        (T.StringType, lambda: sa.Text()),
        (T.BinaryType, lambda: sa.LargeBinary()),
        (T.LongType, lambda: sa.BigInteger()),
        (T.IntegerType, lambda: sa.Integer()),
        (T.ShortType, lambda: sa.SmallInteger()),
        (T.ByteType, lambda: sa.SmallInteger()),
        (T.BooleanType, lambda: sa.Boolean()),
        (T.DoubleType, lambda: sa.Double()),
        (T.FloatType, lambda: sa.Float()),
        (T.DateType, lambda: sa.Date()),
        (T.TimestampType, lambda: sa.DateTime(timezone=True)),
        (T.TimestampNTZType, lambda: sa.DateTime(timezone=False)),
    ]
    for cls, make in table:
        if isinstance(dt, cls):
            return make()
    if isinstance(dt, T.DecimalType):
        return sa.Numeric(dt.precision, dt.scale)
    raise SinkError(
        f"Spark type {dt.simpleString()} has no SQL column type in this sink. Fix: convert the column, "
        "e.g. F.to_json(col) for structs, arrays and maps."
    )


def _bookkeeping_tables(md, offsets_table: str):
    import sqlalchemy as sa

    offsets = sa.Table(
        offsets_table,
        md,
        sa.Column("sink_id", sa.String(255), primary_key=True),
        sa.Column("topic", sa.String(255), primary_key=True),
        sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("next_offset", sa.BigInteger, nullable=False),
        sa.Column("batch_id", sa.BigInteger),
        sa.Column("updated_ms", sa.BigInteger, nullable=False),
    )
    sinks = sa.Table(
        f"{offsets_table}_sinks",
        md,
        sa.Column("sink_id", sa.String(255), primary_key=True),
        sa.Column("target_table", sa.String(255), nullable=False),
        sa.Column("offsets_from", sa.String(16), nullable=False),
        sa.Column("topics", sa.Text, nullable=False),
        sa.Column("last_batch_id", sa.BigInteger),
        sa.Column("updated_ms", sa.BigInteger, nullable=False),
    )
    return offsets, sinks


class SqlStore:
    """The sink's tables in one database; all SQL of the protocol lives here.

    Created on the driver (``prepare=True`` creates/checks tables) and in tasks
    (``prepare=False``: only reflects what the driver created).
    """

    def __init__(self, spec: SqlSinkSpec, prepare: bool):
        import sqlalchemy as sa

        self.spec = spec
        self.engine = open_engine(spec.url, spec.busy_timeout_ms)
        self.md = sa.MetaData()
        self.offsets, self.sinks = _bookkeeping_tables(self.md, spec.offsets_table)
        self.columns = spec.schema.fieldNames()
        stage_cols = [sa.Column(f.name, spark_to_sql_type(f.dataType)) for f in spec.schema.fields]
        self.stage = sa.Table(
            spec.staging_table,
            self.md,
            sa.Column(SINK_COL, sa.String(255), nullable=False),
            sa.Column(ATTEMPT_COL, sa.String(128), nullable=False),
            *stage_cols,
        )
        if prepare:
            self._prepare()
        self._target = None

    def target(self, conn):
        """The target table, reflected through ``conn`` on first use (driver only)."""
        import sqlalchemy as sa

        if self._target is None:
            self._target = sa.Table(self.spec.table, sa.MetaData(), autoload_with=conn)
        return self._target

    def _prepare(self) -> None:
        import sqlalchemy as sa

        with self.engine.begin() as conn:  # one connection: SQLite allows one writer
            insp = sa.inspect(conn)
            if insp.has_table(self.spec.staging_table):
                have = [c["name"] for c in insp.get_columns(self.spec.staging_table)]
                if have != [SINK_COL, ATTEMPT_COL, *self.columns]:
                    # staged rows are uncommitted by definition: a new schema replaces them
                    self.stage.drop(conn)
            self.md.create_all(conn, checkfirst=True)
            if not insp.has_table(self.spec.table):
                if not self.spec.create_table:
                    raise SinkError(
                        f"table '{self.spec.table}' does not exist in {safe_url(self.spec.url)}. Fix: create it, "
                        "or set option createTable=true to create it from the DataFrame schema."
                    )
                cols = [sa.Column(f.name, spark_to_sql_type(f.dataType)) for f in self.spec.schema.fields]
                sa.Table(self.spec.table, sa.MetaData(), *cols).create(conn)
            have = {c["name"] for c in sa.inspect(conn).get_columns(self.spec.table)}
        missing = [c for c in self.columns if c not in have]
        if missing:
            raise SinkError(
                f"table '{self.spec.table}' has no column(s) {missing} of the DataFrame. Fix: add them "
                "(ALTER TABLE) or select only the table's columns before writing."
            )

    # ---------------------------------------------------------------- tasks

    def stage_batches(self, batches: Iterator, attempt_id: str) -> StagedWrite:
        """Insert Arrow batches into the staging table, one short transaction each.

        SQLite: the rows go as tuples straight to the DB-API cursor's ``executemany``
        (values converted column by column with SQLAlchemy's own bind processors, so
        they are stored exactly as SQLAlchemy would store them, about 3x faster).
        Other dialects: SQLAlchemy's ``executemany`` (batched "insertmanyvalues" on
        PostgreSQL). Returns the commit message: attempt id, offset span, row count.
        """
        spans, rows = [], 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if self.spec.config.offsets_from != OFFSETS_FROM_BATCH:
                spans.append(span_of_arrow(batch, self.spec.config.columns))
            batch = _utc(batch)
            with self.engine.begin() as conn:
                if self.engine.dialect.name == "sqlite":
                    conn.exec_driver_sql(self._insert_sql, self._stage_tuples(batch, attempt_id))
                else:
                    conn.execute(self.stage.insert(), self._stage_dicts(batch, attempt_id))
            rows += batch.num_rows
        return StagedWrite(attempt_id=attempt_id, offsets=merge_spans(spans), rows=rows)

    @functools.cached_property
    def _insert_sql(self) -> str:
        """``INSERT INTO <staging> (all columns) VALUES (?, ...)`` in the dialect's paramstyle."""
        return str(self.stage.insert().compile(dialect=self.engine.dialect))

    def _stage_tuples(self, batch, attempt_id: str) -> list[tuple]:
        """Rows of ``batch`` as tuples in staging-column order, values bound as SQLAlchemy binds them."""
        dialect = self.engine.dialect
        columns = []
        for column in list(self.stage.columns)[2:]:  # the DataFrame's columns, after _pk_sink, _pk_attempt
            values = batch.column(column.name).to_pylist()
            process = column.type.bind_processor(dialect)
            columns.append(values if process is None else [process(v) for v in values])
        n = batch.num_rows
        return list(zip([self.spec.sink_id] * n, [attempt_id] * n, *columns))

    def _stage_dicts(self, batch, attempt_id: str) -> list[dict]:
        """Rows of ``batch`` as dicts, with the sink id and attempt id columns."""
        records = batch.to_pylist()
        for r in records:
            r[SINK_COL] = self.spec.sink_id
            r[ATTEMPT_COL] = attempt_id
        return records

    # ---------------------------------------------------------------- driver

    def clean_staging(self) -> None:
        """Delete every staged row of this sink id (failed, aborted or killed attempts)."""
        with self.engine.begin() as conn:
            conn.execute(self.stage.delete().where(self.stage.c[SINK_COL] == self.spec.sink_id))

    def commit(self, messages: list, batch_id: Optional[int], overwrite: bool) -> int:
        """Publish the committed attempts' rows and the new offsets in ONE transaction.

        ``batch_id`` is the streaming micro-batch id (None for batch jobs).
        Returns the number of rows moved into the target table. Raises
        SinkMismatchError when the sink row belongs to another query; the
        transaction is then rolled back and nothing changes.
        """
        import sqlalchemy as sa

        spec, cfg = self.spec, self.spec.config
        msgs = [m for m in messages if m is not None]
        attempts = [m.attempt_id for m in msgs if m.rows]
        span = merge_spans(m.offsets for m in msgs)
        now = int(time.time() * 1000)
        o, s, st = self.offsets, self.sinks, self.stage
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(s).where(s.c.sink_id == spec.sink_id).with_for_update()).mappings().first()
            stored_topics = frozenset(json.loads(row["topics"])) if row else frozenset()
            check_same(spec.identity, "target table", row and row["target_table"], spec.table)
            check_same(spec.identity, "offsetsFrom", row and row["offsets_from"], cfg.offsets_from)
            topics = check_topics(spec.identity, stored_topics, cfg.topics, {t for t, _ in span})
            last_batch = row["last_batch_id"] if row else None
            skip = (
                cfg.offsets_from == OFFSETS_FROM_BATCH
                and batch_id is not None
                and last_batch is not None
                and batch_id <= last_batch
            )
            moved = 0
            if not skip:
                if overwrite:
                    conn.execute(self.target(conn).delete())
                    conn.execute(o.delete().where(o.c.sink_id == spec.sink_id))
                if attempts:
                    moved = self._move_staged(conn, attempts)
                self._advance_offsets(conn, span, batch_id, now)
            values = dict(
                target_table=spec.table,
                offsets_from=cfg.offsets_from,
                topics=json.dumps(sorted(topics)),
                last_batch_id=batch_id if (batch_id is not None and not skip) else last_batch,
                updated_ms=now,
            )
            if row:
                conn.execute(s.update().where(s.c.sink_id == spec.sink_id).values(**values))
            else:
                conn.execute(s.insert().values(sink_id=spec.sink_id, **values))
            conn.execute(st.delete().where(st.c[SINK_COL] == spec.sink_id))
        return moved

    def _move_staged(self, conn, attempts: list[str]) -> int:
        import sqlalchemy as sa

        st, o, cols = self.stage, self.offsets, self.spec.config.columns
        cond = [st.c[SINK_COL] == self.spec.sink_id, st.c[ATTEMPT_COL].in_(attempts)]
        if self.spec.config.offsets_from != OFFSETS_FROM_BATCH:
            row_topic = sa.literal(cols.fixed_topic) if cols.fixed_topic is not None else st.c[cols.topic]
            already = sa.exists(
                sa.select(sa.literal(1)).where(
                    o.c.sink_id == self.spec.sink_id,
                    o.c.topic == row_topic,
                    o.c.partition == st.c[cols.partition],
                    st.c[cols.offset] < o.c.next_offset,
                )
            )
            cond.append(~already)
        select = sa.select(*[st.c[c] for c in self.columns]).where(*cond)
        result = conn.execute(self.target(conn).insert().from_select(self.columns, select))
        return max(result.rowcount or 0, 0)

    def _advance_offsets(self, conn, span, batch_id, now) -> None:
        import sqlalchemy as sa

        o, sid = self.offsets, self.spec.sink_id
        stored = {
            (r.topic, r.partition): r.next_offset
            for r in conn.execute(sa.select(o.c.topic, o.c.partition, o.c.next_offset).where(o.c.sink_id == sid))
        }
        for (topic, part), nxt in advance(stored, span).items():
            if (topic, part) not in span:
                continue
            key = (o.c.sink_id == sid, o.c.topic == topic, o.c.partition == part)
            if (topic, part) in stored:
                conn.execute(o.update().where(*key).values(next_offset=nxt, batch_id=batch_id, updated_ms=now))
            else:
                conn.execute(
                    o.insert().values(
                        sink_id=sid, topic=topic, partition=part, next_offset=nxt, batch_id=batch_id, updated_ms=now
                    )
                )

    def close(self) -> None:
        self.engine.dispose()


# --------------------------------------------------------------------------- Spark classes


class _SqlWriterBase:
    def __init__(self, spec: SqlSinkSpec, overwrite: bool):
        self.spec = spec
        self.overwrite = overwrite

    def write(self, iterator) -> StagedWrite:
        store = SqlStore(self.spec, prepare=False)
        try:
            return store.stage_batches(iterator, new_attempt_id())
        finally:
            store.close()

    def _commit(self, messages, batch_id):
        store = SqlStore(self.spec, prepare=False)
        try:
            store.commit(messages, batch_id, self.overwrite)
        finally:
            store.close()

    def _abort(self):
        store = SqlStore(self.spec, prepare=False)
        try:
            store.clean_staging()
        finally:
            store.close()


@errors_as_messages
class SqlBatchWriter(_SqlWriterBase, DataSourceArrowWriter):
    """Batch ``df.write.format("pykafka-sql")``: exactly-once by the stored offsets.

    Created once per job on the driver: creates/checks the tables and deletes
    staged rows left by killed earlier jobs of the same sink id.
    """

    def __init__(self, spec: SqlSinkSpec, overwrite: bool):
        super().__init__(spec, overwrite)
        store = SqlStore(spec, prepare=True)
        try:
            store.clean_staging()
        finally:
            store.close()

    def commit(self, messages) -> None:
        self._commit(messages, None)

    def abort(self, messages) -> None:
        self._abort()


@errors_as_messages
class SqlStreamWriter(_SqlWriterBase, DataSourceStreamArrowWriter):
    """Streaming ``writeStream.format("pykafka-sql")``: one database transaction per micro-batch.

    Spark builds this object again for every commit, so the constructor only
    creates/checks tables (idempotent) and never touches staged rows.
    """

    def __init__(self, spec: SqlSinkSpec, overwrite: bool):
        super().__init__(spec, overwrite)
        SqlStore(spec, prepare=True).close()

    def commit(self, messages, batchId: int) -> None:
        self._commit(messages, batchId)

    def abort(self, messages, batchId: int) -> None:
        self._abort()


@errors_as_messages
class SqlSinkDataSource(DataSource):
    """Data source ``pykafka-sql`` (write only): exactly-once into a SQL table.

    Options: ``url``, ``table`` (required), ``offsetsTable``, ``sinkId``,
    ``createTable``, ``topicColumn``/``partitionColumn``/``offsetColumn`` or ``topic``
    (constant source topic), ``offsetsFrom`` (``rows``|``batch``), ``topics``, ``busyTimeoutMs``.
    See ``docs/sinks.md``.
    """

    @classmethod
    def name(cls) -> str:
        return "pykafka-sql"

    def writer(self, schema: StructType, overwrite: bool):
        return SqlBatchWriter(parse_spec(self.options, schema, streaming=False), overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
        return SqlStreamWriter(parse_spec(self.options, schema, streaming=True), overwrite)


# --------------------------------------------------------------------------- resume


def stored_offsets(
    url: Optional[str] = None,
    sink_id: Optional[str] = None,
    *,
    table: Optional[str] = None,
    offsets_table: str = DEFAULT_OFFSETS_TABLE,
) -> dict[TopicPartition, int]:
    """Next offsets stored for a sink id: ``{(topic, partition): next_offset}``.

    ``sink_id`` defaults to ``table`` (the sink's own default). Empty when the
    sink never committed. Raises SinkUnavailableError when the database cannot
    be reached, OptionError when neither sink id nor table is given.
    """
    import sqlalchemy as sa

    sid = sink_id or table
    if not sid:
        raise OptionError("give sink_id (or table, the default sink id) to read the stored offsets")
    engine = open_engine(url or default_url())
    try:
        o, _ = _bookkeeping_tables(sa.MetaData(), offsets_table)
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table(offsets_table):
                return {}
            rows = conn.execute(sa.select(o.c.topic, o.c.partition, o.c.next_offset).where(o.c.sink_id == sid))
            return {(r.topic, int(r.partition)): int(r.next_offset) for r in rows}
    finally:
        engine.dispose()


def reset_sink(url: Optional[str], sink_id: str, *, offsets_table: str = DEFAULT_OFFSETS_TABLE) -> None:
    """Forget what the sink stored for ``sink_id``: its offsets, sink row and staged rows (one transaction).

    The target table's rows stay. Use it to start a query over on purpose (e.g. an
    ``offsetsFrom=batch`` query whose checkpoint was deleted). Raises
    SinkUnavailableError when the database cannot be reached.
    """
    import sqlalchemy as sa

    engine = open_engine(url or default_url())
    try:
        md = sa.MetaData()
        offsets, sinks = _bookkeeping_tables(md, offsets_table)
        with engine.begin() as conn:
            insp = sa.inspect(conn)
            for t in (offsets, sinks):
                if insp.has_table(t.name):
                    conn.execute(t.delete().where(t.c.sink_id == sink_id))
            stage = staging_table_name(offsets_table, sink_id)
            if insp.has_table(stage):
                conn.execute(sa.Table(stage, md, autoload_with=conn).delete())
    finally:
        engine.dispose()
