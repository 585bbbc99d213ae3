"""All partition logs of the broker in one data directory (Kafka's ``LogManager``): their lifecycle (load,
recovery, create, delete, retention, cleaning, flush, checkpoints) for the topics of its
:class:`~pyspark_kafka.broker.log.topic_catalog.TopicCatalog` (``catalog``, the topic metadata).

``DATA_DIR`` layout::

    __topics.json                       topic name -> id, partition count, config overrides
    recovery-point-offset-checkpoint    per partition: offsets below are fsynced
    log-start-offset-checkpoint         per partition: first readable offset
    cleaner-offset-checkpoint           per compacted partition: where the last cleaning stopped
    .kafka_cleanshutdown                present only between a clean close and the next load
    <topic>-<partition>/                one PartitionLog (segments + partition.metadata)

Metadata is the source of truth and is written (atomically) before partition directories are
created and before they are removed, so a crash in between leaves at most a directory that the
next :meth:`LogManager.load` recognises (by the topic id in ``partition.metadata``) and removes.
"""

from __future__ import annotations

import os
import resource
import shutil
import time
import uuid
from pathlib import Path
from typing import Iterable

from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker import clock
from pyspark_kafka.broker.config import LIST_TOPIC_CONFIGS, BrokerConfig
from pyspark_kafka.broker.topic_config import LogConfig, validate_topic_config
from pyspark_kafka.broker.log.checkpoint import (
    atomic_write,
    fsync_dir,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from pyspark_kafka.broker.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    KafkaStorageError,
    PolicyViolationError,
    UnknownTopicOrPartitionError,
)
from pyspark_kafka.broker.log.cleaner import LogCleaner
from pyspark_kafka.broker.log.log_loader import RecoveryStats
from pyspark_kafka.broker.log.partition_log import PartitionLog
from pyspark_kafka.broker.log.topic_catalog import TOPICS_FILE, TopicCatalog, TopicInfo  # noqa: F401 - re-exported

log = get_logger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
PARTITION_METADATA_FILE = "partition.metadata"

MAX_PARTITIONS_PER_REQUEST = 10_000
"""Most partitions one CreateTopics or CreatePartitions request may create: Kafka's controller
refuses more with POLICY_VIOLATION "Excessively large number of partitions per request." (measured
on Kafka 4.3.1: 10,001 partitions in one request refused, also when spread over two topics)."""
FILES_PER_PARTITION = 3  # the active segment's .log, .index and .timeindex stay open
RESERVED_FILES = 512  # client connections, checkpoints, the internal topics' extra segments


def partition_capacity() -> int:
    """How many partitions this process can keep open: (open-file limit - 512) / 3 files each.

    Kafka has no such broker-wide cap; it needs one open file per segment and runs out of file
    descriptors too, but later and less gracefully. Raising ``ulimit -n`` raises this capacity.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(0, (soft - RESERVED_FILES) // FILES_PER_PARTITION)


# IncrementalAlterConfigs operations (KIP-339).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def merge_topic_configs(configs: dict[str, str], ops: Iterable[tuple[str, int, str | None]],
                        config: BrokerConfig) -> dict[str, str]:
    """``configs`` (a topic's overrides) after IncrementalAlterConfigs' ``(name, op, value)`` changes (KIP-339: 0 SET,
    1 DELETE, 2 APPEND, 3 SUBTRACT for list configs, starting from the broker default ``config`` gives).

    Raises InvalidConfigError for an unknown name, a bad value, APPEND/SUBTRACT of a non-list config or an unknown
    operation. A pure function: the single broker and the cluster's controller path both use it."""
    configs = dict(configs)
    for name, op, value in ops:
        validate_topic_config(name, None)  # unknown names fail here
        if op == OP_SET:
            configs[name] = validate_topic_config(name, value)
        elif op == OP_DELETE:
            configs.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if name not in LIST_TOPIC_CONFIGS:
                raise InvalidConfigError(f"config {name} is not a list: APPEND/SUBTRACT apply only to list configs")
            current = (configs.get(name) or config.topic_default(name) or "").split(",")
            items = [v for v in (value or "").split(",") if v]
            merged = current + [v for v in items if v not in current] if op == OP_APPEND else [
                v for v in current if v not in items]
            configs[name] = validate_topic_config(name, ",".join(v for v in merged if v))
        else:
            raise InvalidConfigError(f"unknown config operation {op} for {name}: use 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT")
    return {k: v for k, v in configs.items() if v is not None}


def prepare_data_dir(path: Path) -> bool:
    """Create the broker's data directory ``path`` if missing; ``True`` when it is new (absent, empty, or
    holding only ``meta.properties``).

    Raises :class:`KafkaStorageError` naming the path and the fix when it is a file (or another
    non-directory) or cannot be created.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise KafkaStorageError(f"the data directory {path} is a file, not a directory: give --data-dir (data_dir=) "
                                "a directory path, new or one a broker wrote before")
    try:
        # new: missing, empty, or holding only the meta.properties a combined node writes first (meta_properties.py)
        fresh = not path.exists() or next((p for p in path.iterdir() if p.name != "meta.properties"), None) is None
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise KafkaStorageError(f"cannot create the data directory {path}: {e.strerror or e}; give --data-dir "
                                "(data_dir=) a path this user can write") from None
    return fresh


class LogManager:
    """The :class:`PartitionLog` of every partition under ``data_dir``, for the topics of ``catalog``.

    ``LogManager(data_dir, BrokerConfig(...))``, then :meth:`load` (creates the directory,
    recovers after a crash). Call :meth:`close` on shutdown (flush, checkpoints, clean-shutdown
    marker). Used from one asyncio thread; no locking.
    """

    def __init__(self, data_dir: Path, config: BrokerConfig) -> None:
        self.data_dir = Path(data_dir)
        self.config = config
        self.catalog = TopicCatalog(self.data_dir)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._log_configs: dict[str, LogConfig] = {}
        self.recovery_stats: dict[tuple[str, int], RecoveryStats] = {}
        self.offline: dict[tuple[str, int], str] = {}  # partitions load could not open, and why
        self.clean_shutdown = False  # whether the last load found the clean-shutdown marker
        self._closed = False
        self._last_checkpoint_ms = 0
        self.cleaner = LogCleaner()

    # -- load -------------------------------------------------------------------------------
    def load(self) -> None:
        """Read topic metadata and open every partition log, recovering after an unclean shutdown.

        With the clean-shutdown marker present nothing is re-validated; otherwise each partition
        re-validates its segments from its recovery point (see :class:`PartitionLog`). The marker
        is removed so that a later crash is detected. Raises :class:`KafkaStorageError` when the
        metadata file is unreadable (the data is left untouched).
        """
        fresh = prepare_data_dir(self.data_dir)
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        self.clean_shutdown = marker.exists()
        self.catalog.load()
        recovery_points = read_offset_checkpoint(self.data_dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = read_offset_checkpoint(self.data_dir / LOG_START_OFFSET_CHECKPOINT)
        self.cleaner = LogCleaner(read_offset_checkpoint(self.data_dir / CLEANER_OFFSET_CHECKPOINT))
        started = time.monotonic()
        with_metadata = self._remove_stale_dirs()
        capacity = partition_capacity()
        self.offline = {}
        log_configs: dict[tuple, LogConfig] = {}  # topics with the same overrides share one (frozen) LogConfig
        for info in self.catalog.topics().values():
            overrides = tuple(sorted(info.configs.items()))
            try:
                if overrides not in log_configs:
                    log_configs[overrides] = LogConfig.from_configs(self.config, info.configs)
                self._log_configs[info.name] = log_configs[overrides]
            except (InvalidConfigError, ValueError) as e:  # a config a later version refuses
                log.error("topic %s has invalid config overrides (%s): using the broker defaults", info.name, e)
                self._log_configs[info.name] = LogConfig.from_configs(self.config, {})
            for partition in range(info.num_partitions):
                key = (info.name, partition)
                if len(self._logs) >= capacity:
                    self.offline[key] = "over the open-file capacity"
                    continue
                try:
                    self._open_log(
                        info,
                        partition,
                        recovery_point=recovery_points.get(key, 0),
                        log_start_offset=start_offsets.get(key, 0),
                        clean=self.clean_shutdown,
                        has_metadata=f"{info.name}-{partition}" in with_metadata,
                    )
                except (OSError, KafkaStorageError, ValueError) as e:
                    # One damaged partition must not keep the others offline (Kafka marks a log dir offline).
                    self.offline[key] = f"{type(e).__name__}: {e}"
                    log.error("partition %s-%d is offline: cannot open its log (%s: %s); the other partitions are "
                              "served. Move %s aside and restart to recreate it empty", info.name, partition,
                              type(e).__name__, e, self._partition_dir(info.name, partition))
        over = sum(1 for why in self.offline.values() if why == "over the open-file capacity")
        if over:
            log.error("%d partitions are offline: the topic metadata lists more partitions than this process can "
                      "keep open (capacity %d with ulimit -n %d); raise the open-file limit and restart",
                      over, capacity, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        if self.clean_shutdown:
            marker.unlink()
            fsync_dir(self.data_dir)
        scanned = sum(s.segments_scanned for s in self.recovery_stats.values())
        truncated = sum(s.bytes_truncated for s in self.recovery_stats.values())
        log.info(
            "loaded %d topics, %d partitions from %s in %.0f ms (%s shutdown; re-validated %d segments, "
            "truncated %d bytes)",
            len(self.catalog.topics()), len(self._logs), self.data_dir, (time.monotonic() - started) * 1000,
            "new data directory, no" if fresh else "clean" if self.clean_shutdown else "unclean", scanned, truncated,
        )
        self._closed = False
        # a clean start changes neither file (two fsynced writes saved; Kafka's loadLogs writes neither); an empty
        # map read may be a missing or malformed file: written
        if not recovery_points or not start_offsets or self._checkpointed() != (recovery_points, start_offsets):
            self.checkpoint()

    def _partition_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def _remove_stale_dirs(self) -> set[str]:
        """Remove directories of deleted topics: ``*-delete`` leftovers and partition directories whose
        ``partition.metadata`` names a topic id that no current topic has. Return the names of the directories
        kept whose ``partition.metadata`` names a topic id (the data directory's one listing: :meth:`load` then
        neither makes those directories nor looks for their file again)."""
        live_ids = {str(t.topic_id) for t in self.catalog.topics().values()}
        kept: set[str] = set()
        for entry in os.scandir(self.data_dir):
            if not entry.is_dir():
                continue
            if entry.name.endswith("-delete"):
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            topic_id = _read_partition_metadata(entry.path)
            topic, _, partition = entry.name.rpartition("-")
            info = self.catalog.topic(topic)
            known = info is not None and partition.isdigit() and int(partition) < info.num_partitions
            if topic_id is not None and (topic_id not in live_ids or not known):
                log.info("removing %s: it belongs to a deleted topic (id %s)", entry.path, topic_id)
                shutil.rmtree(entry.path, ignore_errors=True)
            elif topic_id is not None:
                kept.add(entry.name)
        return kept

    def _open_log(self, info: TopicInfo, partition: int, *, recovery_point: int = 0, log_start_offset: int = 0,
                  clean: bool = True, has_metadata: bool = False) -> PartitionLog:
        """Open (or create) the log of ``info``'s ``partition``; ``has_metadata``: its directory is known to exist
        with a ``partition.metadata`` naming a topic id (found by :meth:`load`'s listing; nothing to make)."""
        directory = self._partition_dir(info.name, partition)
        if not has_metadata:
            directory.mkdir(parents=True, exist_ok=True)
            metadata = directory / PARTITION_METADATA_FILE
            if not metadata.exists():
                atomic_write(metadata, f"version: 0\ntopic_id: {info.topic_id}\n".encode())
        partition_log = PartitionLog(
            info.name,
            partition,
            directory,
            self._log_configs[info.name],
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            clean_shutdown=clean,
        )
        self._logs[(info.name, partition)] = partition_log
        self.recovery_stats[(info.name, partition)] = partition_log.recovery_stats
        partition_log.on_flush = self._after_flush
        return partition_log

    def _after_flush(self) -> None:
        """A recovery point advanced: rewrite the checkpoints at most every
        ``log.flush.offset.checkpoint.interval.ms`` (Kafka's periodic checkpoint, done on the append path)."""
        now = time.monotonic_ns() // 1_000_000
        if now - self._last_checkpoint_ms >= self.config.get_int("log.flush.offset.checkpoint.interval.ms"):
            self.checkpoint()

    # -- topics -----------------------------------------------------------------------------
    def topics(self) -> dict[str, TopicInfo]:
        """All topics by name (a copy)."""
        return self.catalog.topics()

    def topic(self, name: str) -> TopicInfo | None:
        """Topic ``name``, or None."""
        return self.catalog.topic(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        """The topic with this id (Fetch v13+ and Metadata v10+ name topics by id), or None."""
        return self.catalog.topic_by_id(topic_id)

    def open_partitions(self) -> dict[tuple[str, int], PartitionLog]:
        """The partition logs that are open (the offline ones excluded), by ``(topic, partition)``."""
        return self._logs

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def log_config(self, topic: str) -> LogConfig:
        """The effective :class:`LogConfig` of ``topic``; UnknownTopicOrPartitionError if there is none."""
        try:
            return self._log_configs[topic]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"This server does not host this topic: {topic!r}") from None

    def create_topic(self, name: str, num_partitions: int | None, configs: dict[str, str] | None = None,
                     validate_only: bool = False, replication_factor: int = -1,
                     topic_id: uuid.UUID | None = None) -> TopicInfo:
        """Create ``name`` with ``num_partitions`` partitions (-1/None: ``num.partitions``) and config overrides.

        Raises InvalidTopicError (name rules, or a ``.``/``_`` collision with an existing topic,
        as Kafka), TopicExistsError, InvalidPartitionsError, InvalidReplicationFactorError (only 1
        or -1 on this single broker), InvalidConfigError. With ``validate_only`` nothing is created.
        ``topic_id`` (a replicated cluster: the controller's topic id and assignment) skips the replication
        factor check: this broker then holds its replicas of a topic the controller created.
        """
        self.catalog.check_new_name(name)
        if num_partitions is None or num_partitions == -1:
            num_partitions = self.config.get_int("num.partitions")
        if num_partitions < 1:
            raise InvalidPartitionsError(f"Number of partitions must be larger than 0 (got {num_partitions}).")
        self.check_capacity(num_partitions)
        if replication_factor not in (-1, 1) and topic_id is None:
            raise InvalidReplicationFactorError(
                f"Replication factor: {replication_factor} larger than available brokers: 1. "
                "This embedded broker is a single node: use replication factor 1 (or -1 for the default)."
            )
        clean_configs = {k: validate_topic_config(k, v) for k, v in (configs or {}).items()}
        clean_configs = {k: v for k, v in clean_configs.items() if v is not None}
        log_config = LogConfig.from_configs(self.config, clean_configs)
        info = TopicInfo(name, topic_id or uuid.uuid4(), num_partitions, clean_configs)
        if validate_only:
            return info
        self.catalog.put(info)
        self._log_configs[name] = log_config
        for partition in range(num_partitions):
            self._open_log(info, partition)
        fsync_dir(self.data_dir)
        log.info("created topic %s (%d partitions, configs %s)", name, num_partitions, clean_configs)
        return info

    def delete_topic(self, name: str) -> TopicInfo:
        """Delete the topic and all its data (metadata first, then the directories); return what it was.

        Raises UnknownTopicOrPartitionError.
        """
        info = self.catalog.require(name)
        self.catalog.remove(name)
        self._log_configs.pop(name, None)
        for partition in range(info.num_partitions):
            partition_log = self._logs.pop((name, partition), None)
            self.recovery_stats.pop((name, partition), None)
            self.cleaner.forget(name, partition)
            if partition_log is not None:
                partition_log.delete()
        log.info("deleted topic %s", name)
        return info

    def delete_partition_log(self, name: str, partition: int) -> bool:
        """Close and delete one partition's local log, keeping the topic (a replicated cluster's broker that is no
        longer a replica of it: reassignment, KIP-455). True when a log was deleted; :meth:`open_partition_log`
        opens it again (empty)."""
        partition_log = self._logs.pop((name, partition), None)
        self.recovery_stats.pop((name, partition), None)
        self.cleaner.forget(name, partition)
        if partition_log is None:
            return False
        partition_log.delete()
        log.info("deleted the local log of %s-%d", name, partition)
        return True

    def open_partition_log(self, name: str, partition: int) -> PartitionLog:
        """The log of an existing partition of ``name``, opened (created empty) when it is not open.
        Raises UnknownTopicOrPartitionError for an unknown topic or a partition beyond its count."""
        info = self.catalog.require(name)
        if not 0 <= partition < info.num_partitions:
            raise UnknownTopicOrPartitionError(f"topic {name!r} has no partition {partition}")
        return self._logs.get((name, partition)) or self._open_log(info, partition)

    def create_partitions(self, name: str, new_total: int, validate_only: bool = False) -> TopicInfo:
        """Grow ``name`` to ``new_total`` partitions (Kafka never shrinks a topic).

        Raises UnknownTopicOrPartitionError, InvalidPartitionsError.
        """
        info = self.catalog.require(name)
        if new_total == info.num_partitions:
            raise InvalidPartitionsError(f"Topic already has {info.num_partitions} partitions.")
        if new_total < info.num_partitions:
            raise InvalidPartitionsError(
                f"Topic currently has {info.num_partitions} partitions, which is higher than the requested "
                f"{new_total}."
            )
        self.check_capacity(new_total - info.num_partitions)
        grown = TopicInfo(info.name, info.topic_id, new_total, info.configs)
        if validate_only:
            return grown
        self.catalog.put(grown)
        for partition in range(info.num_partitions, new_total):
            self._open_log(grown, partition)
        fsync_dir(self.data_dir)
        return grown

    def partition_count(self) -> int:
        """Partitions of all topics, open or offline."""
        return self.catalog.partition_count()

    def check_capacity(self, added: int) -> None:
        """Raise PolicyViolationError when ``added`` more partitions would exceed
        :data:`MAX_PARTITIONS_PER_REQUEST` or :func:`partition_capacity` (nothing is created)."""
        if added > MAX_PARTITIONS_PER_REQUEST:
            raise PolicyViolationError("Excessively large number of partitions per request.")
        capacity = partition_capacity()
        if self.partition_count() + added > capacity:
            raise PolicyViolationError(
                f"this broker can keep {capacity} partitions open (ulimit -n "
                f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]}, {FILES_PER_PARTITION} files each) and has "
                f"{self.partition_count()}; {added} more do not fit: delete topics or raise the open-file limit")

    # -- configs ----------------------------------------------------------------------------
    def alter_topic_configs(self, topic: str, configs: dict[str, str], validate_only: bool = False) -> TopicInfo:
        """Replace all of ``topic``'s overrides with ``configs`` (AlterConfigs semantics)."""
        info = self.catalog.require(topic)
        clean = {k: validate_topic_config(k, v) for k, v in configs.items()}
        return self._set_configs(info, {k: v for k, v in clean.items() if v is not None}, validate_only)

    def _set_configs(self, info: TopicInfo, configs: dict[str, str], validate_only: bool) -> TopicInfo:
        log_config = LogConfig.from_configs(self.config, configs)
        updated = TopicInfo(info.name, info.topic_id, info.num_partitions, configs)
        if validate_only:
            return updated
        self.catalog.put(updated)
        self._log_configs[info.name] = log_config
        for partition in range(info.num_partitions):
            partition_log = self._logs.get((info.name, partition))
            if partition_log is not None:
                partition_log.config = log_config
        return updated

    def refresh_log_configs(self) -> None:
        """Recompute every topic's :class:`LogConfig` after a broker default changed (a dynamic broker config:
        ``log.cleanup.policy``, ``log.retention.ms``, ...); topic overrides keep precedence."""
        for info in self.catalog.topics().values():
            try:
                log_config = LogConfig.from_configs(self.config, info.configs)
            except (InvalidConfigError, ValueError):
                continue
            self._log_configs[info.name] = log_config
            for partition in range(info.num_partitions):
                partition_log = self._logs.get((info.name, partition))
                if partition_log is not None:
                    partition_log.config = log_config

    # -- maintenance ------------------------------------------------------------------------
    def run_retention(self, now_ms: int | None = None) -> int:
        """Apply retention to every log (see :meth:`PartitionLog.delete_old_segments`); returns segments deleted.

        Rewrites ``log-start-offset-checkpoint`` when a log start offset moved. The server calls
        this every ``log.retention.check.interval.ms``.
        """
        deleted = 0
        for partition_log in self._logs.values():
            deleted += partition_log.delete_old_segments(now_ms)
        if deleted:
            self.checkpoint()
        return deleted

    def run_cleaner(self, now_ms: int | None = None) -> int:
        """Compact every cleanable log whose ``cleanup.policy`` includes ``compact`` (see :mod:`.cleaner`
        for when a log is cleanable); returns the number of records removed. A log that fails to
        clean is logged and left as it was. The server calls this every ``log.cleaner.backoff.ms``
        (Kafka's cleaner thread cleans the filthiest log, then backs off that long when none is left)."""
        now = now_ms if now_ms is not None else clock.now_ms()
        removed = 0
        cleaned = False
        for partition_log in list(self._logs.values()):
            if not partition_log.config.compacts:
                continue
            try:
                stats = self.cleaner.clean(partition_log, now)
            except (OSError, KafkaStorageError) as e:
                log.error("cleaning %s-%s failed: %s", partition_log.topic, partition_log.partition, e)
                continue
            if stats is not None:
                cleaned = True
                removed += stats.records_removed
        if cleaned:
            self._write_cleaner_checkpoint()
        return removed

    def _write_cleaner_checkpoint(self) -> None:
        """``cleaner-offset-checkpoint`` (Kafka's file and format): each open partition's first dirty offset."""
        offsets = {key: offset for key, offset in self.cleaner.first_dirty_offsets().items() if key in self._logs}
        try:
            write_offset_checkpoint(self.data_dir / CLEANER_OFFSET_CHECKPOINT, offsets)
        except OSError as e:
            raise KafkaStorageError(f"cannot write {CLEANER_OFFSET_CHECKPOINT} in {self.data_dir}: {e}") from e

    def flush_due(self, now_ms: int | None = None) -> int:
        """Flush the logs whose ``flush.ms`` has passed; checkpoint when any did. Returns logs flushed.

        For the server's periodic task (Kafka's ``log.flush.scheduler.interval.ms``).
        """
        now = now_ms if now_ms is not None else clock.now_ms()
        flushed = sum(1 for partition_log in self._logs.values() if partition_log.flush_if_due(now))
        if flushed:
            self.checkpoint()
        return flushed

    def flush_all(self) -> None:
        """fsync every log and write both checkpoints."""
        for partition_log in self._logs.values():
            partition_log.flush()
        self.checkpoint()

    def _checkpointed(self) -> tuple[dict, dict]:
        """``({(topic, partition): recovery point}, {(topic, partition): log start offset})`` of the open logs."""
        return ({key: pl.recovery_point for key, pl in self._logs.items()},
                {key: pl.log_start_offset for key, pl in self._logs.items()})

    def checkpoint(self) -> None:
        """Write ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` atomically. Raises
        :class:`KafkaStorageError` naming the data directory when a write fails."""
        self._last_checkpoint_ms = time.monotonic_ns() // 1_000_000
        recovery_points, start_offsets = self._checkpointed()
        try:
            write_offset_checkpoint(self.data_dir / RECOVERY_POINT_CHECKPOINT, recovery_points)
            write_offset_checkpoint(self.data_dir / LOG_START_OFFSET_CHECKPOINT, start_offsets)
        except OSError as e:
            raise KafkaStorageError(f"cannot write checkpoints in {self.data_dir}: {e}") from e

    def close(self) -> None:
        """Clean shutdown: flush and close every log, write checkpoints, then the clean-shutdown marker."""
        if self._closed:
            return
        for partition_log in self._logs.values():
            partition_log.close()
        self.checkpoint()
        atomic_write(self.data_dir / CLEAN_SHUTDOWN_FILE, b"")
        self._closed = True


def _read_partition_metadata(directory: Path | str) -> str | None:
    """The ``topic_id`` in ``directory/partition.metadata``, or None (no such file, unreadable, or no
    ``topic_id`` line)."""
    try:
        # os calls, not Path.read_text: a start reads one file per partition
        fd = os.open(os.path.join(directory, PARTITION_METADATA_FILE), os.O_RDONLY)
        try:
            text = os.read(fd, 1 << 16).decode()
        finally:
            os.close(fd)
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            return value.strip()
    return None
