"""The coordinators' one way to their internal partitions (Kafka's coordinator-common ``PartitionWriter``
and the read side of its ``CoordinatorLoader``).

The group, offsets and transaction coordinators never hold a partition log: they append record batches,
write transaction markers, replay batches and keep snapshot files through a :class:`PartitionWriter`.
Two implementations:

- :class:`LogPartitionWriter` over the broker's partition logs (the replica manager's
  :class:`~pyspark_kafka.broker.log.manager.LogManager`), in the single node and in the replicated cluster,
  where a coordinator only writes the internal partitions it leads (``cluster/coordinators.py`` then moves
  the high watermark and waits for the ISR after each write);
- :class:`InMemoryPartitionWriter`, batches and snapshots kept in dicts, so each coordinator's state
  machine is unit-tested without a broker, a socket or a disk (a "restart" is a new coordinator over
  the same writer).

A batch is written as the encoded RecordBatch v2 bytes the coordinator built
(:func:`~pyspark_kafka.broker.log.records.encode_batch`) and read back decoded (kio's ``RecordBatch``).
Snapshots are opaque bytes under a name the coordinator chooses (see ``coordinator/offsets.py``).
"""

from __future__ import annotations

import abc
import zlib
from pathlib import Path
from typing import Iterator, NamedTuple

from pyspark_kafka.broker.errors import UnknownTopicOrPartitionError
from pyspark_kafka.broker.log.checkpoint import atomic_write
from pyspark_kafka.broker.log.records import batch_identity, control_batch, decode_batch, iter_batches


class LogOffsets(NamedTuple):
    """A partition's log start offset, log end offset and high watermark."""

    log_start_offset: int
    log_end_offset: int
    high_watermark: int


class PartitionWriter(abc.ABC):
    """Appends to, reads and snapshots the partitions of the coordinators' internal topics.

    Writes raise :class:`~pyspark_kafka.broker.errors.KafkaError` subclasses from the log (e.g.
    RecordTooLargeError, InvalidProducerEpochError) and UnknownTopicOrPartitionError when the
    partition is not here. Used from the broker's event loop only.
    """

    # -- topics ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def partition_count(self, topic: str) -> int | None:
        """Partitions of internal ``topic`` here, None when it does not exist."""

    @abc.abstractmethod
    def create_topic(self, topic: str, num_partitions: int, segment_bytes: int) -> int:
        """Create ``topic`` compacted (``cleanup.policy=compact``, ``segment.bytes``) unless it exists;
        returns its partition count."""

    @abc.abstractmethod
    def has_log(self, topic: str, partition: int) -> bool:
        """Whether this broker keeps a log of ``topic``/``partition``."""

    # -- writing --------------------------------------------------------------------------------
    @abc.abstractmethod
    def append(self, topic: str, partition: int, batch: bytes, now_ms: int) -> int:
        """Append one encoded record batch; returns the number of records appended."""

    @abc.abstractmethod
    def append_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, now_ms: int) -> None:
        """Append a COMMIT (``commit``) or ABORT control batch of ``producer_id`` (KIP-98)."""

    # -- loading (CoordinatorLoader) -----------------------------------------------------------
    @abc.abstractmethod
    def read(self, topic: str, partition: int, from_offset: int = 0) -> Iterator:
        """Every batch from ``max(log start offset, from_offset)``, decoded, in offset order."""

    @abc.abstractmethod
    def offsets(self, topic: str, partition: int) -> LogOffsets | None:
        """The partition's :class:`LogOffsets`, None when there is no log."""

    @abc.abstractmethod
    def batch_identity(self, topic: str, partition: int, offset: int) -> tuple[int, int] | None:
        """``(leader epoch, crc)`` of the batch holding ``offset``, None when none holds it."""

    # -- snapshots ------------------------------------------------------------------------------
    @abc.abstractmethod
    def snapshot_names(self, topic: str, partition: int, suffix: str) -> list[str]:
        """Names of the partition's snapshots ending in ``suffix`` (any order)."""

    @abc.abstractmethod
    def read_snapshot(self, topic: str, partition: int, name: str) -> bytes:
        """A snapshot's bytes; OSError when it is gone or unreadable."""

    @abc.abstractmethod
    def write_snapshot(self, topic: str, partition: int, name: str, data: bytes) -> None:
        """Write a snapshot atomically (a crash leaves the old one or the new one); OSError on failure."""

    @abc.abstractmethod
    def delete_snapshot(self, topic: str, partition: int, name: str) -> None:
        """Remove a snapshot (no error when it is gone)."""


class LogPartitionWriter(PartitionWriter):
    """:class:`PartitionWriter` over the broker's partition logs (``LogPartitionWriter(logs)``, the replica
    manager's LogManager): the only place a coordinator reaches a
    :class:`~pyspark_kafka.broker.log.partition_log.PartitionLog`. Snapshots are files in the partition's
    directory."""

    def __init__(self, logs) -> None:
        self.logs = logs

    def _log(self, topic: str, partition: int):
        plog = self.logs.get_log(topic, partition)
        if plog is None:
            raise UnknownTopicOrPartitionError(f"this broker has no log of {topic}-{partition}")
        return plog

    def partition_count(self, topic: str) -> int | None:
        info = self.logs.topic(topic)
        return None if info is None else info.num_partitions

    def create_topic(self, topic: str, num_partitions: int, segment_bytes: int) -> int:
        info = self.logs.topic(topic)
        if info is None:
            info = self.logs.create_topic(topic, num_partitions,
                                     {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)})
        return info.num_partitions

    def has_log(self, topic: str, partition: int) -> bool:
        return self.logs.get_log(topic, partition) is not None

    def append(self, topic: str, partition: int, batch: bytes, now_ms: int) -> int:
        return self._log(topic, partition).append(batch, now_ms=now_ms).record_count

    def append_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, now_ms: int) -> None:
        self._log(topic, partition).append_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                                                  now_ms=now_ms)

    def read(self, topic: str, partition: int, from_offset: int = 0) -> Iterator:
        return iter_batches(self._log(topic, partition), from_offset)

    def offsets(self, topic: str, partition: int) -> LogOffsets | None:
        plog = self.logs.get_log(topic, partition)
        if plog is None:
            return None
        return LogOffsets(plog.log_start_offset, plog.log_end_offset, plog.high_watermark)

    def batch_identity(self, topic: str, partition: int, offset: int) -> tuple[int, int] | None:
        return batch_identity(self._log(topic, partition), offset)

    def _dir(self, topic: str, partition: int) -> Path:
        return Path(self._log(topic, partition).dir)

    def snapshot_names(self, topic: str, partition: int, suffix: str) -> list[str]:
        return [p.name for p in self._dir(topic, partition).glob(f"*{suffix}")]

    def read_snapshot(self, topic: str, partition: int, name: str) -> bytes:
        return (self._dir(topic, partition) / name).read_bytes()

    def write_snapshot(self, topic: str, partition: int, name: str, data: bytes) -> None:
        atomic_write(self._dir(topic, partition) / name, data)

    def delete_snapshot(self, topic: str, partition: int, name: str) -> None:
        (self._dir(topic, partition) / name).unlink(missing_ok=True)


class _MemoryLog:
    """One in-memory partition: ``(base offset, batch bytes)`` in offset order, and its snapshots."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, bytes]] = []
        self.end = 0
        self.snapshots: dict[str, bytes] = {}

    def add(self, batch: bytes, record_count: int) -> int:
        # the base offset (bytes 0..8) is the log's end offset, as a partition log assigns it
        self.batches.append((self.end, self.end.to_bytes(8, "big") + batch[8:]))
        self.end += record_count
        return record_count


class InMemoryPartitionWriter(PartitionWriter):
    """:class:`PartitionWriter` keeping every partition in memory: batches get consecutive offsets, the high
    watermark is the log end, a batch's identity is ``(0, crc32 of its bytes)``. For unit tests: a coordinator
    built over the same writer after another one wrote to it replays what a restarted broker would.

    ``fail_appends`` set to a KafkaError instance makes every append and marker raise it (a full disk, a
    lost leadership), to test that a failed write changes no state.
    """

    def __init__(self) -> None:
        self.topics: dict[str, list[_MemoryLog]] = {}
        self.fail_appends: Exception | None = None

    def _log(self, topic: str, partition: int) -> _MemoryLog:
        logs = self.topics.get(topic)
        if logs is None or not 0 <= partition < len(logs):
            raise UnknownTopicOrPartitionError(f"no in-memory log of {topic}-{partition}")
        return logs[partition]

    def partition_count(self, topic: str) -> int | None:
        logs = self.topics.get(topic)
        return None if logs is None else len(logs)

    def create_topic(self, topic: str, num_partitions: int, segment_bytes: int) -> int:
        return len(self.topics.setdefault(topic, [_MemoryLog() for _ in range(num_partitions)]))

    def has_log(self, topic: str, partition: int) -> bool:
        return 0 <= partition < len(self.topics.get(topic, ()))

    def append(self, topic: str, partition: int, batch: bytes, now_ms: int) -> int:
        plog = self._log(topic, partition)
        if self.fail_appends is not None:
            raise self.fail_appends
        return plog.add(batch, len(decode_batch(batch).records))

    def append_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, now_ms: int) -> None:
        plog = self._log(topic, partition)
        if self.fail_appends is not None:
            raise self.fail_appends
        plog.add(control_batch(producer_id, producer_epoch, commit, coordinator_epoch, now_ms), 1)

    def read(self, topic: str, partition: int, from_offset: int = 0) -> Iterator:
        for base, data in self._log(topic, partition).batches:
            batch = decode_batch(data)
            if base + len(batch.records) > from_offset:
                yield batch

    def offsets(self, topic: str, partition: int) -> LogOffsets | None:
        if not self.has_log(topic, partition):
            return None
        end = self._log(topic, partition).end
        return LogOffsets(0, end, end)

    def batch_identity(self, topic: str, partition: int, offset: int) -> tuple[int, int] | None:
        batches = self._log(topic, partition).batches
        for (base, data), nxt in zip(batches, [b for b, _ in batches[1:]] + [self._log(topic, partition).end]):
            if base <= offset < nxt:
                return 0, zlib.crc32(data)
        return None

    def snapshot_names(self, topic: str, partition: int, suffix: str) -> list[str]:
        return [n for n in self._log(topic, partition).snapshots if n.endswith(suffix)]

    def read_snapshot(self, topic: str, partition: int, name: str) -> bytes:
        try:
            return self._log(topic, partition).snapshots[name]
        except KeyError:
            raise FileNotFoundError(name) from None

    def write_snapshot(self, topic: str, partition: int, name: str, data: bytes) -> None:
        self._log(topic, partition).snapshots[name] = data

    def delete_snapshot(self, topic: str, partition: int, name: str) -> None:
        self._log(topic, partition).snapshots.pop(name, None)
