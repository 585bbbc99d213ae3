"""The Raft log on disk: ``<data dir>/__cluster_metadata-0/`` (Kafka's ``KafkaMetadataLog``).

A :class:`~pyspark_kafka.broker.log.partition_log.PartitionLog` (Kafka's segment format: ``.log``,
``.index``, ``.timeindex``, recovery after a crash) plus a **leader epoch cache** (Kafka's
``LeaderEpochFileCache``): the first offset of every leader epoch found in the log, kept in the
``leader-epoch-checkpoint`` file (Kafka's text format: version 0, entry count, ``epoch start_offset``
lines). Every batch carries the leader epoch of the leader that appended it in
``partitionLeaderEpoch``; followers store the leader's batches with their epochs unchanged, so the
epochs and offsets of two replicas' logs can be compared (KIP-595's log matching rule).

The cache is rebuilt from the batch headers when the log is loaded (the log, recovered, is the
truth; the checkpoint is rewritten from it), so a crash between an append and the checkpoint
write cannot leave them apart. Every append is fsynced before it returns: a voter acknowledges
(by fetching past it) only records that survive a SIGKILL, as Raft requires.

Records of the metadata log are opaque bytes (the values of the batches' records, keys null);
the leader also writes a control batch at the start of each epoch (Kafka's
``LeaderChangeMessage``, control type 2) which is never handed to listeners.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Iterator, NamedTuple

from kio.schema.leader_change_message.v0.data import LeaderChangeMessage, Voter
from kio.serial import entity_reader, entity_writer

from pyspark_kafka.broker import clock
from pyspark_kafka.broker.topic_config import LogConfig
from pyspark_kafka.broker.errors import CorruptRecordError
from pyspark_kafka.broker.log.checkpoint import atomic_write
from pyspark_kafka.broker.log.partition_log import PartitionLog
from pyspark_kafka.broker.log.record_batch import CONTROL_BIT, validate_batches
from pyspark_kafka.broker.log.records import decode_batch, encode_batch

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
#: Control record type of Kafka's LeaderChangeMessage (``ControlRecordType.LEADER_CHANGE``).
LEADER_CHANGE = 2


class EpochEntry(NamedTuple):
    """One leader epoch of the log: ``epoch`` and the offset of its first batch."""

    epoch: int
    start_offset: int


def leader_change_batch(leader_id: int, voters: list[int], granting: list[int], timestamp_ms: int) -> bytes:
    """A control batch holding Kafka's ``LeaderChangeMessage`` v0 (key: version 0, type 2 LEADER_CHANGE)."""
    buf = io.BytesIO()
    entity_writer(LeaderChangeMessage)(buf, LeaderChangeMessage(
        version=0, leader_id=leader_id, voters=tuple(Voter(voter_id=v) for v in voters),
        granting_voters=tuple(Voter(voter_id=v) for v in granting)))
    key = (0).to_bytes(2, "big") + LEADER_CHANGE.to_bytes(2, "big")
    return encode_batch([(key, buf.getvalue())], timestamp_ms, attributes=CONTROL_BIT)


class MetadataLogStorage:
    """``__cluster_metadata-0`` under ``data_dir``: append as leader or follower, read, truncate, epochs.

    ``MetadataLogStorage(data_dir: Path, config: LogConfig | None)``. Offsets are int64, sizes
    bytes. Not thread-safe (one event loop). Raises KafkaStorageError when the directory cannot
    be loaded.
    """

    def __init__(self, data_dir: str | Path, config: LogConfig | None = None) -> None:
        self.dir = Path(data_dir) / f"{METADATA_TOPIC}-{METADATA_PARTITION}"
        # clean_shutdown=False, recovery point 0: every start re-validates the (small) log, so a
        # SIGKILL at any moment leaves a log of whole, CRC-valid batches.
        self.log = PartitionLog(METADATA_TOPIC, METADATA_PARTITION, self.dir, config or LogConfig())
        self.epochs: list[EpochEntry] = []
        for segment in self.log.segments:
            for _, header in segment.iter_headers(0):
                if not self.epochs or header.partition_leader_epoch > self.epochs[-1].epoch:
                    self.epochs.append(EpochEntry(header.partition_leader_epoch, header.base_offset))
        self._write_checkpoint()

    # -- state -------------------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        """The log end offset (next offset to be written)."""
        return self.log.log_end_offset

    @property
    def last_epoch(self) -> int:
        """Leader epoch of the last batch (0 for an empty log)."""
        return self.epochs[-1].epoch if self.epochs else 0

    def epoch_at(self, offset: int) -> int:
        """The leader epoch of the batch holding ``offset`` (0 before the first epoch or for an empty log)."""
        epoch = 0
        for entry in self.epochs:
            if entry.start_offset > offset:
                break
            epoch = entry.epoch
        return epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(largest epoch <= epoch, its end offset)`` (Kafka's ``LeaderEpochFileCache.endOffsetFor``).

        The end offset of an epoch is the start offset of the next higher epoch, or the log end
        offset for the latest one. ``(-1, -1)`` when every epoch in the log is above ``epoch``
        (or the log is empty and ``epoch`` < 0).
        """
        found = -1
        for i, entry in enumerate(self.epochs):
            if entry.epoch > epoch:
                break
            found = i
        if found < 0:
            return (0, 0) if not self.epochs and epoch >= 0 else (-1, -1)
        end = self.epochs[found + 1].start_offset if found + 1 < len(self.epochs) else self.end_offset
        return self.epochs[found].epoch, end

    def _write_checkpoint(self) -> None:
        lines = ["0", str(len(self.epochs))] + [f"{e.epoch} {e.start_offset}" for e in self.epochs]
        atomic_write(self.dir / EPOCH_CHECKPOINT, ("\n".join(lines) + "\n").encode())

    def _note_epoch(self, epoch: int, start_offset: int) -> None:
        if not self.epochs or epoch > self.epochs[-1].epoch:
            self.epochs.append(EpochEntry(epoch, start_offset))
            self._write_checkpoint()

    # -- appends -----------------------------------------------------------------------------
    def append_as_leader(self, records: list[bytes], epoch: int) -> tuple[int, int]:
        """Append ``records`` (values, keys null) as one batch of leader epoch ``epoch``; fsync.

        Returns ``(base offset, last offset)``. Raises ValueError for an empty list.
        """
        if not records:
            raise ValueError("append needs at least one record")
        return self._append(encode_batch([(None, r) for r in records], clock.now_ms()), epoch)

    def append_leader_change(self, epoch: int, leader_id: int, voters: list[int], granting: list[int]) -> int:
        """Append the ``LeaderChangeMessage`` control batch opening ``epoch``; returns its offset."""
        return self._append(leader_change_batch(leader_id, voters, granting, clock.now_ms()), epoch)[1]

    def _append(self, batch: bytes, epoch: int) -> tuple[int, int]:
        self.log.leader_epoch = epoch
        result = self.log.append(batch)
        self._note_epoch(epoch, result.base_offset)
        self.log.flush()
        return result.base_offset, result.last_offset

    def append_as_follower(self, records: bytes) -> int:
        """Append the leader's batches (offsets and epochs as the leader wrote them); fsync.

        The first batch must start at the log end offset (the follower fetched from there).
        Returns how many batches were appended. Raises CorruptRecordError when the bytes are not
        whole valid batches or do not continue the log (nothing is written then).
        """
        if not records:
            return 0
        headers = validate_batches(records)  # CorruptRecordError on a torn or bad batch
        expected = self.end_offset
        for header in headers:
            if header.base_offset != expected:
                raise CorruptRecordError(
                    f"{METADATA_TOPIC}-0: a fetched batch starts at offset {header.base_offset}, the log ends at "
                    f"{expected}: the leader's answer does not continue this log")
            expected = header.next_offset
        view = memoryview(records)
        position = 0
        for header in headers:
            self.log.leader_epoch = header.partition_leader_epoch
            self.log.append(bytes(view[position:position + header.size]))
            self._note_epoch(header.partition_leader_epoch, header.base_offset)
            position += header.size
        self.log.flush()
        return len(headers)

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after ``offset`` (a batch boundary) and the epochs starting there."""
        if offset >= self.end_offset:
            return
        self.log.truncate_to(offset)
        self.epochs = [e for e in self.epochs if e.start_offset < self.end_offset]
        self._write_checkpoint()
        self.log.flush()

    # -- reads -------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (one batch at least).

        Raises OffsetOutOfRangeError when ``offset`` is outside the log.
        """
        return self.log.read(offset, max_bytes).read_bytes()

    def records(self, start: int, end: int) -> Iterator[tuple[int, bytes]]:
        """``(offset, value)`` of every data record with ``start <= offset < end`` (control batches skipped)."""
        if start >= end:
            return
        segments = self.log.segments
        for i, segment in enumerate(segments):
            if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
                continue
            found = segment.translate_offset(start)
            if found is None:
                continue
            for position, header in segment.iter_headers(found[0]):
                if header.base_offset >= end:
                    return
                if header.is_control or header.last_offset < start:
                    continue
                batch = decode_batch(segment.read_batch(position, header.size))
                for record in batch.records:
                    offset = record.offset  # kio gives absolute offsets (base offset + delta)
                    if start <= offset < end:
                        yield offset, record.value if record.value is not None else b""

    def leader_changes(self) -> list[tuple[int, int, int, list[int]]]:
        """``(offset, epoch, leader id, granting voters)`` of every ``LeaderChangeMessage`` in the log, in order."""
        found = []
        for segment in self.log.segments:
            for position, header in segment.iter_headers(0):
                if not header.is_control:
                    continue
                record = decode_batch(segment.read_batch(position, header.size)).records[0]
                if record.key is None or int.from_bytes(record.key[2:4], "big") != LEADER_CHANGE:
                    continue
                message = entity_reader(LeaderChangeMessage)(record.value, 0)[0]
                found.append((header.base_offset, header.partition_leader_epoch, message.leader_id,
                              [v.voter_id for v in message.granting_voters]))
        return found

    def close(self) -> None:
        """Flush and close the segment files."""
        self.log.close()
