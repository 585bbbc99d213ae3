"""Producer state of one partition: idempotent sequences, ongoing transactions, aborted transactions.

Kafka's ``ProducerStateManager`` for one partition log, kept in memory and rebuilt from the log:

- per **producer id**: the producer epoch, the metadata of its last 5 batches (first/last
  sequence, last offset) for duplicate detection, and the first offset of its ongoing
  transaction on this partition, if any (KIP-98);
- the **last stable offset** (LSO) input: the smallest first offset of an ongoing transaction;
- the **aborted transaction index**: ``(producer id, first offset, last offset)`` of each
  aborted transaction, which read_committed Fetch responses list so clients drop the records
  (Kafka keeps it in ``.txnindex`` files; here it is part of the snapshot).

Rules (Kafka's ``ProducerAppendInfo``), checked per batch carrying a producer id:

- epoch lower than the known one → INVALID_PRODUCER_EPOCH (47);
- a batch already among the producer's last 5 (same epoch, same sequence range) is a
  **duplicate**: the broker acknowledges it with the original offsets and appends nothing;
- a new epoch must start at sequence 0, the same epoch must continue at last sequence + 1
  (wrapping after 2^31-1) → else OUT_OF_ORDER_SEQUENCE_NUMBER (45); an unknown producer id
  (e.g. its batches were deleted by retention) may start at any sequence (KIP-360);
- a non-transactional batch from a producer with an ongoing transaction → INVALID_TXN_STATE (48).

Snapshots: ``<offset 20 digits>.snapshot`` (JSON) in the partition directory hold the state
of the log up to ``offset``; loading takes the newest snapshot not past the log end offset and
replays the batch headers after it (control batches also have their one record read).
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.log.checkpoint import atomic_write
from pyspark_kafka.broker.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from pyspark_kafka.broker.log.record_batch import (
    CONTROL_ABORT,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
)

log = get_logger(__name__)

INT32_MAX = 2**31 - 1
BATCHES_RETAINED = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (max.in.flight 5)
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
SNAPSHOTS_KEPT = 2



class BatchMetadata(NamedTuple):
    """One appended batch of a producer: sequences (inclusive) and offsets."""

    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int  # last offset - first offset
    timestamp: int  # the batch's max timestamp, ms

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class AbortedTxn(NamedTuple):
    """An aborted transaction on this partition: its first offset and the offset of its abort marker."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    """What the partition knows about one producer id."""

    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_RETAINED))
    txn_first_offset: int | None = None  # first offset of the ongoing transaction here
    last_timestamp: int = -1
    coordinator_epoch: int = -1  # of the transaction coordinator that wrote this producer's last marker

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this epoch and sequence range, if any."""
        if epoch != self.epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None


def last_sequence(header: BatchHeader) -> int:
    """The sequence of the batch's last record (sequences wrap to 0 after 2^31-1)."""
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (header.base_sequence + header.last_offset_delta) % (INT32_MAX + 1)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Kafka's ``inSequence``: ``next_seq`` directly follows ``last_seq`` (with wrap-around)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def check_sequence(entry: ProducerEntry | None, epoch: int, first_seq: int, where: str) -> None:
    """Raise OutOfOrderSequenceError unless ``first_seq`` may follow ``entry`` (Kafka's ``checkSequence``)."""
    if entry is None or entry.epoch == NO_PRODUCER_EPOCH:
        return  # unknown producer: any sequence (KIP-360)
    if epoch != entry.epoch:
        if first_seq != 0:
            raise OutOfOrderSequenceError(
                f"invalid sequence number {first_seq} for new epoch {epoch} of producer {entry.producer_id} "
                f"in {where}: a new epoch must start at sequence 0 (current epoch {entry.epoch})"
            )
        return
    if not entry.batches or in_sequence(entry.last_seq, first_seq):
        return
    raise OutOfOrderSequenceError(
        f"out of order sequence number for producer {entry.producer_id} in {where}: got {first_seq}, "
        f"expected {entry.last_seq + 1} (epoch {epoch}); an earlier batch was lost or reordered"
    )


class ProducerStateManager:
    """Producer state of one partition (see the module docstring). Not thread-safe.

    ``ProducerStateManager(dir, where)``; ``where`` names the partition in error messages.
    """

    def __init__(self, dir: Path | str, where: str) -> None:
        # a string, its Path made on first use (:attr:`dir`): a start makes one manager per partition
        self._dir = os.fspath(dir)
        self._dir_path: Path | None = dir if isinstance(dir, Path) else None
        self.where = where
        self.producers: dict[int, ProducerEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.aborted: list[AbortedTxn] = []  # by last offset (marker order)

    @property
    def dir(self) -> Path:
        """The partition directory holding the snapshots."""
        if self._dir_path is None:
            self._dir_path = Path(self._dir)
        return self._dir_path

    # -- validation ---------------------------------------------------------------------------
    def check_batches(self, headers: list[BatchHeader]) -> BatchMetadata | None:
        """Validate a produce request's batches against the state; return the duplicate batch if one is.

        A duplicate means the whole request was appended before (the producer retried it): the
        caller answers with the duplicate's offsets and appends nothing. Raises
        InvalidProducerEpochError, OutOfOrderSequenceError, InvalidTxnStateError; the state is
        not changed.
        """
        pending: dict[int, ProducerEntry] = {}
        for header in headers:
            pid = header.producer_id
            if pid == NO_PRODUCER_ID or header.is_control:
                continue
            entry = pending.get(pid) or self.producers.get(pid)
            epoch = header.producer_epoch
            if entry is not None and entry.epoch != NO_PRODUCER_EPOCH and epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} sent epoch {epoch} to {self.where}, older than its current epoch {entry.epoch}: "
                    "this producer was fenced by a newer instance with the same transactional.id or restarted"
                )
            if header.base_sequence == NO_SEQUENCE:
                continue
            if entry is not None:
                duplicate = entry.find_duplicate(epoch, header.base_sequence, last_sequence(header))
                if duplicate is not None:
                    return duplicate
            check_sequence(entry, epoch, header.base_sequence, self.where)
            if entry is not None and entry.txn_first_offset is not None and not header.is_transactional:
                raise InvalidTxnStateError(
                    f"producer {pid} sent a non-transactional batch to {self.where} while its transaction is open"
                )
            simulated = ProducerEntry(pid, epoch)
            simulated.batches.append(BatchMetadata(header.base_sequence, last_sequence(header), 0, 0, -1))
            simulated.txn_first_offset = entry.txn_first_offset if entry is not None else None
            pending[pid] = simulated
        return None

    # -- updates (after offsets are assigned) ---------------------------------------------------
    def on_batch(self, header: BatchHeader, control: int | None = None, coordinator_epoch: int = -1) -> AbortedTxn | None:
        """Apply one appended batch (offsets assigned). ``control`` is the marker type of a control batch,
        ``coordinator_epoch`` the epoch its marker carries (kept, as Kafka's ``ProducerStateEntry``).

        Returns the AbortedTxn recorded for an abort marker that closed a transaction.
        """
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        if header.producer_epoch != entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        if header.is_control:
            entry.coordinator_epoch = coordinator_epoch
            return self._end_txn(entry, header.base_offset, control)
        if header.base_sequence != NO_SEQUENCE:
            entry.batches.append(BatchMetadata(
                header.base_sequence, last_sequence(header), header.last_offset, header.last_offset_delta,
                header.max_timestamp,
            ))
        if header.is_transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = self._ongoing[pid] = header.base_offset
        return None

    def _end_txn(self, entry: ProducerEntry, marker_offset: int, control: int | None) -> AbortedTxn | None:
        first, entry.txn_first_offset = entry.txn_first_offset, None
        self._ongoing.pop(entry.producer_id, None)
        if first is None or control != CONTROL_ABORT:
            return None
        aborted = AbortedTxn(entry.producer_id, first, marker_offset)
        self.aborted.append(aborted)
        return aborted

    # -- queries ------------------------------------------------------------------------------
    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an ongoing transaction (None when none is open)."""
        return min(self._ongoing.values()) if self._ongoing else None

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound)`` (Kafka's ``collectAbortedTxns``)."""
        return [a for a in self.aborted if a.last_offset >= fetch_offset and a.first_offset < upper_bound]

    # -- retention and truncation ---------------------------------------------------------------
    def on_log_start_offset(self, log_start_offset: int) -> None:
        """Forget aborted transactions wholly below the new log start offset."""
        self.aborted = [a for a in self.aborted if a.last_offset >= log_start_offset]

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers without an open transaction whose last batch is older than ``expiration_ms``
        (Kafka's ``producer.id.expiration.ms``); returns how many. A later batch of such a producer
        is accepted with any sequence, as for an unknown producer."""
        expired = [pid for pid, e in self.producers.items()
                   if e.txn_first_offset is None and now_ms - e.last_timestamp > expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def reset(self) -> None:
        self.producers.clear()
        self._ongoing.clear()
        self.aborted.clear()

    # -- snapshots ----------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "version": SNAPSHOT_VERSION,
            "producers": [
                [e.producer_id, e.epoch, e.txn_first_offset, e.last_timestamp, [list(b) for b in e.batches],
                 e.coordinator_epoch]
                for e in self.producers.values()
            ],
            "aborted": [list(a) for a in self.aborted],
        }

    def load_json(self, doc: dict) -> None:
        if doc.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"unsupported producer snapshot version {doc.get('version')!r}")
        self.reset()
        for pid, epoch, txn_first, last_ts, batches, *rest in doc["producers"]:  # rest: coordinator epoch (newer)
            entry = ProducerEntry(pid, epoch, txn_first_offset=txn_first, last_timestamp=last_ts,
                                  coordinator_epoch=rest[0] if rest else -1)
            entry.batches.extend(BatchMetadata(*b) for b in batches)
            self.producers[pid] = entry
            if txn_first is not None:
                self._ongoing[pid] = txn_first
        self.aborted = [AbortedTxn(*a) for a in doc["aborted"]]

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files in the directory, ascending."""
        found = []
        for name in os.listdir(self._dir):
            stem, _, suffix = name.partition(".")
            if "." + suffix == SNAPSHOT_SUFFIX and len(stem) == 20 and stem.isdigit():
                found.append(int(stem))
        return sorted(found)

    def _snapshot_file(self, offset: int) -> str:
        return f"{self._dir}/{offset:020d}{SNAPSHOT_SUFFIX}"

    def _snapshot_path(self, offset: int) -> Path:
        return Path(self._snapshot_file(offset))

    def take_snapshot(self, offset: int) -> None:
        """Write the state of the log up to ``offset`` (exclusive) and keep the newest 2 snapshots."""
        atomic_write(self._snapshot_path(offset), json.dumps(self.to_json(), separators=(",", ":")).encode())
        for old in self.snapshot_offsets()[:-SNAPSHOTS_KEPT]:
            self._snapshot_path(old).unlink(missing_ok=True)

    def load_snapshot(self, log_end_offset: int, snapshot_offsets: list[int] | None = None) -> int:
        """Load the newest readable snapshot at or below ``log_end_offset``; return its offset (0: none).

        Snapshots past the log end offset (the log was truncated after a crash) are deleted.
        ``snapshot_offsets``: the snapshot files' offsets, ascending, from a listing of the directory made just
        before by a caller that also removed every ``*.tmp`` leftover (the log loader's one listing of a
        partition directory at start); without it the directory is listed here (twice: leftovers, snapshots).
        """
        if snapshot_offsets is None:
            for name in os.listdir(self._dir):
                if name.endswith(SNAPSHOT_SUFFIX + ".tmp"):
                    (self.dir / name).unlink(missing_ok=True)
            snapshot_offsets = self.snapshot_offsets()
        for offset in reversed(snapshot_offsets):
            path = self._snapshot_file(offset)
            if offset > log_end_offset:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                continue
            try:
                with open(path, "rb") as f:
                    self.load_json(json.loads(f.read()))
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.warning("%s: ignoring unreadable producer snapshot %s (%s)", self.where, os.path.basename(path), e)
                continue
            return offset
        self.reset()
        return 0
