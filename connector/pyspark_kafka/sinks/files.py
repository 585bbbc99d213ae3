"""Exactly-once Parquet sink ``pykafka-parquet``: files + offsets in one atomic commit manifest.

Directory layout (``path`` option, or ``.save(path)`` / ``.start(path)``)::

    <path>/part-<seq>-<n>-<tag>.parquet    committed data files (what Spark's parquet reader sees)
    <path>/_pykafka_tmp/<attempt id>/...   staged files of task attempts (invisible: leading "_")
    <path>/_pykafka_log/<seq>.json         commit manifests, seq = 0, 1, 2, ... (20 digits)

A manifest lists the files of one commit (final name and staged name), the
cumulative next offset of every topic-partition, the topic set, offsetsFrom and
the streaming batch id. Publishing it (temp file + fsync + ``link``, which fails
if the name exists, + directory fsync) IS the commit; the staged files are
renamed into place afterwards, and a commit interrupted between the two is
rolled forward by the next commit. Spark's parquet reader ignores names
starting with ``_`` or ``.``, so it never sees staged files; within one commit
it may see the renamed files appear one after another. :func:`read_committed`
reads through the manifests and is exact at any moment.

One query or job writes a given directory at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from typing import Iterator, Mapping, Optional

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from pyspark_kafka.errors import OptionError, errors_as_messages
from pyspark_kafka.kafka.fsutil import atomic_write, fsync_dir, fsync_file
from pyspark_kafka.options import get_option
from pyspark_kafka.sinks.common import (
    OFFSETS_FROM_BATCH,
    SinkConfig,
    SinkError,
    SinkIdentity,
    SinkUnavailableError,
    OffsetSpan,
    StagedWrite,
    advance,
    check_offset_columns,
    check_same,
    check_topics,
    merge_spans,
    StagedSinkWriter,
    parse_sink_config,
    require_streaming_for_batch_mode,
    rows_after,
    span_of_arrow,
    span_verdict,
)
from pyspark_kafka.kafka.topic_partition import TopicPartition

TMP_DIR = "_pykafka_tmp"
LOG_DIR = "_pykafka_log"
MANIFEST_VERSION = 1


def manifest_name(seq: int) -> str:
    """File name of commit ``seq`` in ``_pykafka_log``: 20 zero-padded digits + ``.json``."""
    return f"{seq:020d}.json"


def encode_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): n}`` → ``{"t": {"p": n}}`` (Spark's offset JSON shape)."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), n in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(n)
    return out


def decode_offsets(doc: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    """Inverse of :func:`encode_offsets`."""
    return {(t, int(p)): int(n) for t, ps in doc.items() for p, n in ps.items()}


class ManifestLog:
    """The ``_pykafka_log`` directory of a sink path: ordered, immutable commit manifests."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.log_dir = os.path.join(self.path, LOG_DIR)
        self.tmp_dir = os.path.join(self.path, TMP_DIR)

    def sequence(self) -> list[int]:
        """Sequence numbers of the published manifests, ascending."""
        if not os.path.isdir(self.log_dir):
            return []
        return sorted(int(n[:-5]) for n in os.listdir(self.log_dir) if n.endswith(".json") and n[:-5].isdigit())

    def read(self, seq: int) -> dict:
        """Manifest ``seq`` as a dict (keys: version, seq, batch_id, offsets_from, topics, offsets, files)."""
        with open(os.path.join(self.log_dir, manifest_name(seq)), encoding="utf-8") as f:
            return json.load(f)

    def latest(self) -> Optional[dict]:
        """The newest manifest, or None before the first commit."""
        seqs = self.sequence()
        return self.read(seqs[-1]) if seqs else None

    def publish(self, manifest: dict) -> None:
        """Atomically publish ``manifest`` under its ``seq``: temp + fsync + link + dir fsync.

        Raises SinkError when that sequence number already exists (another writer
        committed concurrently); nothing is then published by this call.
        """
        os.makedirs(self.log_dir, exist_ok=True)
        final = os.path.join(self.log_dir, manifest_name(manifest["seq"]))
        try:
            atomic_write(final, json.dumps(manifest, sort_keys=True).encode("utf-8"), overwrite=False)
        except FileExistsError:
            raise SinkError(
                f"commit {manifest['seq']} of {self.path} was published by another writer at the same time. "
                "Fix: let only one query or job write a sink directory at a time."
            ) from None

    def roll_forward(self, manifest: Optional[dict]) -> None:
        """Finish the renames of a published manifest whose commit was interrupted."""
        if not manifest:
            return
        moved = False
        for f in manifest["files"]:
            final = os.path.join(self.path, f["name"])
            staged = os.path.join(self.path, f["staged"])
            if not os.path.exists(final) and os.path.exists(staged):
                os.rename(staged, final)
                moved = True
        if moved:
            fsync_dir(self.path)

    def clean_tmp(self) -> None:
        """Delete all staged attempt directories (orphans of failed or killed attempts).

        Call only after :meth:`roll_forward` of the latest manifest, which may still
        need staged files.
        """
        if os.path.isdir(self.tmp_dir):
            for name in os.listdir(self.tmp_dir):
                shutil.rmtree(os.path.join(self.tmp_dir, name), ignore_errors=True)

    def recover(self) -> None:
        """Roll the latest commit forward, then delete orphan staged files."""
        self.roll_forward(self.latest())
        self.clean_tmp()


@dataclass(frozen=True)
class ParquetSinkSpec:
    """Parsed options of the Parquet sink (picklable): ``path``, ``compression``, common config."""

    path: str
    compression: str
    config: SinkConfig

    @property
    def identity(self) -> SinkIdentity:
        return SinkIdentity(
            who=f"sink directory {self.path}",
            new_id_fix="write this query to its own directory",
            reset_fix="write to a new directory",
        )


def parse_spec(options: Mapping[str, str], schema: StructType, streaming: bool, overwrite: bool) -> ParquetSinkSpec:
    """Parse and check the options. Raises OptionError or SinkError (missing offset columns)."""
    path = get_option(options, "path")
    if not path:
        raise OptionError(
            "the Parquet sink needs a directory: .save('/data/out') / .start('/data/out') or option 'path'"
        )
    if overwrite:
        raise OptionError(
            "pykafka-parquet appends only (mode 'append', output mode 'append'); overwriting would drop the "
            "stored offsets. Fix: write to a new path, or delete the directory first."
        )
    config = parse_sink_config(options)
    require_streaming_for_batch_mode(config, streaming)
    check_offset_columns(schema.fieldNames(), config)
    path = os.path.abspath(path)
    try:
        os.makedirs(os.path.join(path, LOG_DIR), exist_ok=True)
    except OSError as e:
        raise SinkUnavailableError(f"cannot create the sink directory {path}: {e}. Fix: choose a writable path.") from e
    return ParquetSinkSpec(path, get_option(options, "compression", "snappy"), config)


def stage_batches(spec: ParquetSinkSpec, batches: Iterator, attempt_id: str) -> StagedWrite:
    """Write a task's Arrow batches to ``_pykafka_tmp/<attempt_id>/part-0.parquet`` (fsynced).

    Returns the commit message; no file when the task had no rows.
    """
    import pyarrow.parquet as pq

    rel = os.path.join(TMP_DIR, attempt_id, "part-0.parquet")
    full = os.path.join(spec.path, rel)
    writer, spans, rows = None, [], 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if spec.config.offsets_from != OFFSETS_FROM_BATCH:
                spans.append(span_of_arrow(batch, spec.config.columns))
            if writer is None:
                os.makedirs(os.path.dirname(full), exist_ok=True)
                writer = pq.ParquetWriter(full, batch.schema, compression=spec.compression)
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        return StagedWrite(attempt_id=attempt_id)
    fsync_file(full)
    return StagedWrite(attempt_id=attempt_id, offsets=merge_spans(spans), rows=rows, files=[rel])


def file_verdict(span: OffsetSpan, stored: Mapping[TopicPartition, int]) -> str:
    """``"new"``, ``"old"`` or ``"mixed"`` for a staged file with offset ``span`` (see ``common.span_verdict``)."""
    return span_verdict(span, stored)


def _filter_file(spec: ParquetSinkSpec, rel: str, stored: Mapping[TopicPartition, int]) -> tuple[Optional[str], int]:
    """Rewrite a staged file keeping rows with ``offset >= stored next offset``; (new rel path or None, rows)."""
    import pyarrow.parquet as pq

    kept = rows_after(pq.read_table(os.path.join(spec.path, rel)), spec.config.columns, stored)
    if kept.num_rows == 0:
        return None, 0
    new_rel = rel[: -len(".parquet")] + "-filtered.parquet"
    pq.write_table(kept, os.path.join(spec.path, new_rel), compression=spec.compression)
    fsync_file(os.path.join(spec.path, new_rel))
    return new_rel, kept.num_rows


def commit(spec: ParquetSinkSpec, messages: list, batch_id: Optional[int]) -> Optional[dict]:
    """Commit staged files: roll forward, check, filter by offsets, publish manifest, rename, clean.

    Returns the published manifest (the previous one when nothing new arrived,
    None when a replayed ``offsetsFrom=batch`` micro-batch is skipped). Raises
    SinkMismatchError when the directory's manifests belong to another query;
    nothing is published then.
    """
    log = ManifestLog(spec.path)
    cfg = spec.config
    last = log.latest()
    log.roll_forward(last)
    msgs = [m for m in messages if m is not None and m.files]
    span = merge_spans(m.offsets for m in msgs)
    stored = decode_offsets(last["offsets"]) if last else {}
    check_same(spec.identity, "offsetsFrom", last and last["offsets_from"], cfg.offsets_from)
    stored_topics = frozenset(last["topics"]) if last else frozenset()
    topics = check_topics(spec.identity, stored_topics, cfg.topics, {t for t, _ in span})
    last_batch = last.get("batch_id") if last else None
    replayed = batch_id is not None and last_batch is not None and batch_id <= last_batch
    if cfg.offsets_from == OFFSETS_FROM_BATCH and replayed:
        log.clean_tmp()
        return None
    seq = last["seq"] + 1 if last else 0
    files = []
    for m in msgs:
        verdict = "new" if cfg.offsets_from == OFFSETS_FROM_BATCH else file_verdict(m.offsets, stored)
        for rel in m.files:
            if verdict == "old":
                continue
            rows = m.rows
            if verdict == "mixed":
                rel, rows = _filter_file(spec, rel, stored)
                if rel is None:
                    continue
            tag = m.attempt_id.rsplit("-", 1)[-1]
            files.append({"name": f"part-{seq:06d}-{len(files):05d}-{tag}.parquet", "staged": rel, "rows": rows})
    next_offsets = advance(stored, span)
    if last and not files and next_offsets == stored and cfg.offsets_from != OFFSETS_FROM_BATCH:
        log.clean_tmp()  # nothing new (e.g. a rerun backfill): no empty manifest
        return last
    manifest = {
        "version": MANIFEST_VERSION,
        "seq": seq,
        "batch_id": batch_id if batch_id is not None else last_batch,
        "offsets_from": cfg.offsets_from,
        "topics": sorted(topics),
        "offsets": encode_offsets(next_offsets),
        "files": files,
        "committed_ms": int(time.time() * 1000),
    }
    log.publish(manifest)
    log.roll_forward(manifest)
    log.clean_tmp()
    return manifest


def _recover(spec: ParquetSinkSpec, messages) -> None:
    """An aborted job: roll the manifest log forward or back (:meth:`ManifestLog.recover`), which deletes
    what was staged and not published."""
    ManifestLog(spec.path).recover()


class _ParquetWriter(StagedSinkWriter):
    stage, commit_staged, abort_staged = staticmethod(stage_batches), staticmethod(commit), staticmethod(_recover)


@errors_as_messages
class ParquetBatchWriter(_ParquetWriter, DataSourceArrowWriter):
    """Batch ``df.write.format("pykafka-parquet")``: exactly-once by the stored offsets.

    Created once per job on the driver: recovers what a killed earlier run left.
    """

    def __init__(self, spec: ParquetSinkSpec):
        super().__init__(spec)
        ManifestLog(spec.path).recover()


@errors_as_messages
class ParquetStreamWriter(_ParquetWriter, DataSourceStreamArrowWriter):
    """Streaming ``writeStream.format("pykafka-parquet")``: one manifest per micro-batch."""


@errors_as_messages
class ParquetSinkDataSource(DataSource):
    """Data source ``pykafka-parquet`` (write only): exactly-once into a Parquet directory.

    Options: ``path`` (required), ``compression`` (pyarrow codec, default snappy),
    ``topicColumn``/``partitionColumn``/``offsetColumn`` or ``topic`` (constant source topic),
    ``offsetsFrom``, ``topics``.
    See ``docs/sinks.md``.
    """

    @classmethod
    def name(cls) -> str:
        return "pykafka-parquet"

    def writer(self, schema: StructType, overwrite: bool):
        return ParquetBatchWriter(parse_spec(self.options, schema, False, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool):
        return ParquetStreamWriter(parse_spec(self.options, schema, True, overwrite))


# --------------------------------------------------------------------------- readers


def committed_files(path: str) -> list[str]:
    """Absolute paths of all committed data files, in commit order.

    A file whose commit is published but not yet renamed is read from its staged place.
    """
    log = ManifestLog(path)
    out = []
    for seq in log.sequence():
        for f in log.read(seq)["files"]:
            final = os.path.join(log.path, f["name"])
            out.append(final if os.path.exists(final) else os.path.join(log.path, f["staged"]))
    return out


def read_committed(path: str):
    """All committed rows of a sink directory as one ``pyarrow.Table`` (empty table if none)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = committed_files(path)
    if not files:
        return pa.table({})
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")


def stored_offsets(path: str) -> dict[TopicPartition, int]:
    """Next offsets stored by the latest manifest: ``{(topic, partition): next_offset}``.

    Empty when nothing was committed yet (also when ``path`` does not exist: a
    first run). Raises SinkUnavailableError when ``path`` is not a directory.
    """
    if not os.path.exists(path):
        return {}
    if not os.path.isdir(path):
        raise SinkUnavailableError(f"sink path {path} is not a directory. Fix: pass the directory the sink writes to.")
    last = ManifestLog(path).latest()
    return decode_offsets(last["offsets"]) if last else {}
