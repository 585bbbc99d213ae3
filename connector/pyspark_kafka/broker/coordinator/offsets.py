"""The ``__consumer_offsets`` store: committed offsets and group metadata, kept in a compacted topic.

As in Kafka, every change is a record appended to the internal topic ``__consumer_offsets``
(``cleanup.policy=compact``; ``offsets.topic.num.partitions`` partitions, ``segment.bytes`` from
``offsets.topic.segment.bytes``). A group lives in partition ``abs(javaHashCode(group_id)) %
partitions`` (Kafka's ``GroupCoordinator.partitionFor``). The in-memory cache is rebuilt by
replaying the topic when the store is loaded, so commits survive a ``kill -9`` (records are in
the OS page cache after ``pwrite``; a crash of the machine itself loses what was not flushed,
as with a single Kafka broker).

The record layouts (Kafka's ``GroupCoordinatorRecordSerde``) are in :mod:`~pyspark_kafka.broker.coordinator.group_records`.
The store reaches the topic only through a :class:`~pyspark_kafka.broker.coordinator.partition_writer.PartitionWriter`
(the broker's logs, or memory in unit tests).

Transactional offset commits (KIP-98), for the transaction coordinator (``coordinator/txn.py``):

- :meth:`OffsetStore.stage_txn_offsets` ``(producer_id, producer_epoch, group_id, offsets)`` appends
  the offsets as a *transactional* batch (attributes bit 4, the producer's id and epoch) to the
  group's partition and keeps them pending: OffsetFetch does not see them (with
  ``require_stable`` it answers UNSTABLE_OFFSET_COMMIT for those partitions).
- :meth:`OffsetStore.complete_txn` ``(producer_id, commit)`` writes a COMMIT or ABORT marker
  (:meth:`PartitionWriter.append_marker`: a control batch) to every ``__consumer_offsets`` partition the
  producer staged offsets in; on commit the pending offsets become the group's committed offsets.

On load, transactional offsets are applied only when their COMMIT marker follows; those still
open stay pending until :meth:`~OffsetStore.complete_txn`.

Snapshots keep restarts flat: replaying every commit ever made took 6.6 s after 340,590 commits.
:meth:`OffsetStore.write_snapshots` writes, per partition, the current state (the latest
GroupMetadata and offset records of its groups, in the layouts above, as one record batch) to
``<next offset, 20 digits>-<leader epoch>-<crc, hex>.coordinator-snapshot`` in the partition's
directory (epoch and CRC: those of the log's batch just before the snapshot's offset), at a clean
shutdown and whenever :data:`SNAPSHOT_EVERY_RECORDS` records were appended since the last
snapshots, counted over **all** partitions: then every partition appended to since its own last
snapshot gets a new one, so a restart after ``kill -9`` replays at most about that many records
however the commits spread over the partitions. The records a load replays (those after the newest
snapshot) count too, and a load that replayed that many writes the snapshots at once: a broker killed
again and again before that many new commits still replays no more than about that many. :meth:`OffsetStore.load` starts from the newest
snapshot that the log still covers, whose batch identity matches the log's, and replays only the
batches after it; a missing, unreadable, out-of-range or mismatched snapshot means the previous
one (the two newest are kept) or a full replay. No snapshot is written for a partition while a
transaction has offsets pending in it, while its high watermark is below its log end (a
replicated partition: its tail could still be truncated), or that this broker has not loaded
(a follower in the cluster); the replay from the previous one stays correct.

The replicated cluster uses the same snapshots (a leader loads a partition on election from its
newest matching snapshot): a snapshot only covers records below the high watermark, which
KIP-101 truncation keeps, and the batch identity check rejects one whose log diverged anyway
(an unclean election).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from kio.serial.errors import DecodeError
from kio.serial.readers import read_int16

from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.coordinator.group_records import (  # noqa: F401 (re-exported: the store's vocabulary)
    GroupRecord,
    Member,
    OffsetAndMetadata,
    consumer_group_key,
    consumer_group_value,
    group_key,
    group_value,
    is_expired,
    offset_key,
    offset_value,
    parse_consumer_group_value,
    parse_group_value,
    parse_key,
    parse_offset_value,
)
from pyspark_kafka.broker.coordinator.internal_topics import (  # noqa: F401 (TopicPartition re-exported)
    OFFSETS_TOPIC,
    Cursor,
    TopicPartition,
    partition_for,
)
from pyspark_kafka.broker.coordinator.partition_writer import PartitionWriter
from pyspark_kafka.broker.errors import (
    CoordinatorNotAvailableError,
    InvalidCommitOffsetSizeError,
    KafkaError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from pyspark_kafka.broker.log.record_batch import CONTROL_BIT, CONTROL_COMMIT, TRANSACTIONAL_BIT
from pyspark_kafka.broker.log.records import decode_batch, encode_batch

log = get_logger(__name__)

SNAPSHOT_SUFFIX = ".coordinator-snapshot"
SNAPSHOT_EVERY_RECORDS = 20_000
"""Records appended (over all partitions) after which the partitions appended to get new snapshots."""
SNAPSHOTS_KEPT = 2


# --- the store --------------------------------------------------------------------------------


@dataclass
class _PendingTxn:
    producer_epoch: int
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)


class OffsetStore:
    """Committed offsets and group metadata of all groups, backed by ``__consumer_offsets``.

    ``OffsetStore(writer, config)`` with a :class:`PartitionWriter` and the BrokerConfig; call :meth:`load`
    once (replays the topic when it exists). The topic is created (compacted, with
    ``offsets.topic.num.partitions`` partitions) by the first write, as Kafka creates it on first
    use. Used from the broker's event loop thread only. Write methods append first and update the
    cache only after the append succeeded, so a failed write never changes what OffsetFetch
    returns. They raise :class:`InvalidCommitOffsetSizeError` (INVALID_COMMIT_OFFSET_SIZE) when the
    records exceed the topic's ``max.message.bytes`` and :class:`CoordinatorNotAvailableError`
    (COORDINATOR_NOT_AVAILABLE) when the log cannot be written.
    """

    def __init__(self, writer: PartitionWriter, config) -> None:
        self.writer = writer
        self.config = config
        # latest persisted metadata of each group: found by load(), then kept up to date by store_group()
        self.loaded_groups: dict[str, GroupRecord] = {}
        # latest persisted state of each KIP-848 consumer group (consumer_group_value's dict)
        self.consumer_groups: dict[str, dict] = {}
        self._offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self._pending: dict[int, _PendingTxn] = {}
        self._since_snapshot: dict[int, int] = {}  # partition -> records appended since its last snapshot
        self._loaded: set[int] = set()  # partitions loaded (load(partitions))
        self.replayed_records = 0  # records the last load() replayed from the log (after its snapshots)
        #: False: never write nor read snapshots (every load replays the whole log)
        self.snapshots = True
        #: ``() -> int``, the partition count of ``__consumer_offsets``: the controller's (set by
        #: ``cluster/coordinators.py``); by default the local log's, else ``offsets.topic.num.partitions``
        self.partition_count = self._local_partition_count
        #: ``(partition)`` called after each append, so the leader's high watermark moves and followers waiting in
        #: a fetch are woken (set by ``cluster/coordinators.py``; by default nothing)
        self.on_append = lambda partition: None

    def _local_partition_count(self) -> int:
        count = self.writer.partition_count(OFFSETS_TOPIC)
        return count if count is not None else self.config.get_int("offsets.topic.num.partitions")

    # -- loading ------------------------------------------------------------------------------
    def load(self, partitions: Iterable[int]) -> None:
        """Rebuild the cache of ``partitions`` of ``__consumer_offsets`` (the partitions this broker just became
        the leader of, Kafka's ``GroupCoordinator.onElection``), each after :meth:`unload`: per partition the
        newest usable snapshot, then the batches after it (groups into :attr:`loaded_groups`)."""
        partitions = list(partitions)
        for partition in partitions:
            self.unload(partition)
        self._loaded |= set(partitions)
        count = snapshots = 0
        for partition in partitions:
            if not self.writer.has_log(OFFSETS_TOPIC, partition):
                continue
            start = self._load_snapshot(partition) if self.snapshots else 0
            snapshots += start > 0
            replayed = 0
            for batch in self.writer.read(OFFSETS_TOPIC, partition, start):
                self._replay(batch, partition)
                replayed += len(batch.records)
            count += replayed
            # the records after the newest snapshot count towards the next one across restarts: counted from
            # zero at every start, a broker killed before each SNAPSHOT_EVERY_RECORDS-th commit never wrote one
            # and replayed its whole log at every start (issue #38: 200,000 commits over 10 kill -9 restarts,
            # the committed offset answered 4.3-4.6 s after the last start)
            if replayed:
                self._since_snapshot[partition] = self._since_snapshot.get(partition, 0) + replayed
        self.replayed_records = count
        if self.snapshots and sum(self._since_snapshot.values()) >= SNAPSHOT_EVERY_RECORDS:
            for p in list(self._since_snapshot):  # the cache reflects each log up to its end here
                self.write_snapshots(p)
        log.info("loaded %s: %d snapshots, %d records replayed: %d groups with offsets, %d with metadata, "
                 "%d open transactions", OFFSETS_TOPIC, snapshots, count, len(self._offsets),
                 len(self.loaded_groups), len(self._pending))

    def unload(self, partition: int) -> None:
        """Forget the groups (offsets, metadata, pending transactional offsets) of ``__consumer_offsets``
        partition ``partition``: this broker no longer leads it (Kafka's ``GroupCoordinator.onResignation``)."""
        def mine(group_id: str) -> bool:
            return self.partition_of(group_id) == partition

        self._loaded.discard(partition)
        self._since_snapshot.pop(partition, None)
        for cache in (self._offsets, self.loaded_groups, self.consumer_groups):
            for group_id in [g for g in cache if mine(g)]:
                del cache[group_id]
        for producer_id, pending in list(self._pending.items()):
            for group_id in [g for g in pending.offsets if mine(g)]:
                del pending.offsets[group_id]
            if not pending.offsets:
                del self._pending[producer_id]

    def _snapshots(self, partition: int) -> list[tuple[int, tuple[int, int] | None, str]]:
        """``(next offset, (leader epoch, crc) or None, name)`` of the partition's snapshots, oldest first
        (a name without epoch and CRC, as written before they were added, has None)."""
        found = []
        for name in self.writer.snapshot_names(OFFSETS_TOPIC, partition, SNAPSHOT_SUFFIX):
            parts = name[: -len(SNAPSHOT_SUFFIX)].split("-")
            try:
                if len(parts) == 1 and parts[0].isdigit():
                    found.append((int(parts[0]), None, name))
                elif len(parts) == 3 and parts[0].isdigit():
                    found.append((int(parts[0]), (int(parts[1]), int(parts[2], 16)), name))
            except ValueError:
                continue
        return sorted(found, key=lambda f: f[0])

    def _load_snapshot(self, partition: int) -> int:
        """Apply the newest snapshot the log covers and matches; return the offset to replay from (0 = none)."""
        bounds = self.writer.offsets(OFFSETS_TOPIC, partition)
        for next_offset, identity, name in reversed(self._snapshots(partition)):
            if not bounds.log_start_offset <= next_offset <= bounds.log_end_offset:
                continue
            if identity is not None and next_offset > 0 and \
                    self.writer.batch_identity(OFFSETS_TOPIC, partition, next_offset - 1) != identity:
                log.info("ignoring %s-%d snapshot %s: the log before it changed (truncated or compacted)",
                         OFFSETS_TOPIC, partition, name)
                continue
            try:
                batch = decode_batch(self.writer.read_snapshot(OFFSETS_TOPIC, partition, name))
            except Exception as e:  # a torn or foreign file: replay the whole log instead
                log.warning("ignoring unreadable %s-%d snapshot %s: %s", OFFSETS_TOPIC, partition, name, e)
                continue
            self._replay(batch)
            return next_offset
        return 0

    def write_snapshots(self, partition: int | None = None) -> None:
        """Write a snapshot of each ``__consumer_offsets`` partition this store has loaded (or only
        ``partition``) at its log end offset, and remove all but the :data:`SNAPSHOTS_KEPT` newest.
        Skips a partition with pending transactional offsets or whose high watermark is below its log end."""
        local = self.writer.partition_count(OFFSETS_TOPIC)
        if local is None or not self.snapshots:
            return
        count = self.partition_count()
        for p in range(count) if partition is None else (partition,):
            if self._write_snapshot(p, count):
                self._since_snapshot.pop(p, None)

    def _write_snapshot(self, p: int, num_partitions: int) -> bool:
        bounds = self.writer.offsets(OFFSETS_TOPIC, p)
        if (bounds is None or p not in self._loaded
                or bounds.high_watermark < bounds.log_end_offset
                or any(partition_for(g, num_partitions) == p for pending in self._pending.values()
                       for g in pending.offsets)):
            return False
        groups = {g for g in (*self._offsets, *self.loaded_groups, *self.consumer_groups)
                  if partition_for(g, num_partitions) == p}
        records = [(group_key(g), group_value(self.loaded_groups[g])) for g in sorted(groups)
                   if g in self.loaded_groups]
        records += [(consumer_group_key(g), consumer_group_value(self.consumer_groups[g])) for g in sorted(groups)
                    if g in self.consumer_groups]
        records += [(offset_key(g, t, part), offset_value(v)) for g in sorted(groups)
                    for (t, part), v in sorted(self._offsets.get(g, {}).items())]
        next_offset = bounds.log_end_offset
        identity = self.writer.batch_identity(OFFSETS_TOPIC, p, next_offset - 1)
        name = f"{next_offset:020d}" if identity is None else f"{next_offset:020d}-{identity[0]}-{identity[1]:08x}"
        name += SNAPSHOT_SUFFIX
        try:
            self.writer.write_snapshot(OFFSETS_TOPIC, p, name, encode_batch(records or [(group_key(""), None)], 0))
        except OSError as e:
            log.warning("cannot write %s-%d snapshot %s: %s", OFFSETS_TOPIC, p, name, e)
            return False
        for _, _, old in self._snapshots(p)[:-SNAPSHOTS_KEPT]:
            self.writer.delete_snapshot(OFFSETS_TOPIC, p, old)
        return True

    def _replay(self, batch, partition: int | None = None) -> None:
        attributes = batch.attributes
        if attributes & CONTROL_BIT:  # a marker ends the producer's offsets staged in this partition only
            for record in batch.records:
                c = Cursor(record.key)
                c.read(read_int16)
                self._resolve(batch.producer_id, c.read(read_int16) == CONTROL_COMMIT, partition)
            return
        for record in batch.records:
            try:
                key = parse_key(record.key)
            except (ValueError, TypeError, DecodeError) as e:
                log.warning("skipping unreadable %s record at offset %d: %s", OFFSETS_TOPIC, record.offset, e)
                continue
            if key[0] == "consumer_group":
                if record.value is None:
                    self.consumer_groups.pop(key[1], None)
                else:
                    try:
                        self.consumer_groups[key[1]] = parse_consumer_group_value(record.value)
                    except (ValueError, DecodeError) as e:
                        log.warning("skipping unreadable consumer group record of %s: %s", key[1], e)
                continue
            if key[0] == "group":
                if record.value is None:
                    self.loaded_groups.pop(key[1], None)
                else:
                    self.loaded_groups[key[1]] = parse_group_value(record.value)
                continue
            _, group_id, topic, partition = key
            value = None if record.value is None else parse_offset_value(record.value)
            if attributes & TRANSACTIONAL_BIT:
                pending = self._pending.setdefault(batch.producer_id, _PendingTxn(batch.producer_epoch))
                pending.offsets.setdefault(group_id, {})[(topic, partition)] = value
            else:
                self._apply(group_id, {(topic, partition): value})

    def _apply(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | None]) -> None:
        group = self._offsets.setdefault(group_id, {})
        for tp, value in offsets.items():
            if value is None:
                group.pop(tp, None)
            else:
                group[tp] = value
        if not group:
            del self._offsets[group_id]

    def _resolve(self, producer_id: int, commit: bool, partition: int | None = None) -> None:
        """A marker of ``producer_id``: its staged offsets (all, or only ``partition``'s groups) become committed
        (``commit``) or are dropped."""
        pending = self._pending.get(producer_id)
        if pending is None:
            return
        done = {g: o for g, o in pending.offsets.items() if partition is None or self.partition_of(g) == partition}
        for group_id in done:
            del pending.offsets[group_id]
        if not pending.offsets:
            del self._pending[producer_id]
        if commit:
            for group_id, offsets in done.items():
                self._apply(group_id, offsets)

    # -- writing ------------------------------------------------------------------------------
    def partition_of(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition holding ``group_id`` (Kafka's ``partitionFor``); the topic is the
        controller's (created through FindCoordinator or Metadata), nothing is created here."""
        return partition_for(group_id, self.partition_count())

    def _append(self, group_id: str, batch: bytes, now_ms: int) -> None:
        partition = self.partition_of(group_id)
        if sum(self._since_snapshot.values()) >= SNAPSHOT_EVERY_RECORDS and self.snapshots:
            for p in list(self._since_snapshot):  # the cache reflects each log up to its end here
                self.write_snapshots(p)
        try:
            appended = self.writer.append(OFFSETS_TOPIC, partition, batch, now_ms)
        except (RecordTooLargeError, RecordBatchTooLargeError) as e:
            raise InvalidCommitOffsetSizeError(
                f"the commit for group {group_id!r} is {len(batch)} bytes, more than {OFFSETS_TOPIC} accepts "
                f"({e}); commit fewer partitions or shorter metadata per request"
            ) from None
        except KafkaError as e:
            raise CoordinatorNotAvailableError(f"cannot write {OFFSETS_TOPIC} for group {group_id!r}: {e}") from e
        self._since_snapshot[partition] = self._since_snapshot.get(partition, 0) + appended
        self.on_append(partition)

    def commit(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata], now_ms: int) -> None:
        """Persist ``{(topic, partition): OffsetAndMetadata}`` for ``group_id`` in one batch, then cache it."""
        if not offsets:
            return
        records = [(offset_key(group_id, t, p), offset_value(v)) for (t, p), v in offsets.items()]
        self._append(group_id, encode_batch(records, now_ms), now_ms)
        self._apply(group_id, offsets)

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition], now_ms: int) -> None:
        """Write tombstones for the committed offsets of ``partitions`` that exist, then drop them."""
        committed = self._offsets.get(group_id, {})
        doomed = [tp for tp in partitions if tp in committed]
        if not doomed:
            return
        self._append(group_id, encode_batch([(offset_key(group_id, t, p), None) for t, p in doomed], now_ms), now_ms)
        self._apply(group_id, {tp: None for tp in doomed})

    def store_group(self, group_id: str, group: GroupRecord | None, now_ms: int) -> None:
        """Persist the group's metadata (None: a tombstone, the group is gone)."""
        self._store(group_id, group_key(group_id), None if group is None else group_value(group),
                    self.loaded_groups, group, now_ms)

    def store_consumer_group(self, group_id: str, state: dict | None, now_ms: int) -> None:
        """Persist a KIP-848 group's state (None: a tombstone, the group is gone)."""
        self._store(group_id, consumer_group_key(group_id), None if state is None else consumer_group_value(state),
                    self.consumer_groups, state, now_ms)

    def _store(self, group_id: str, key: bytes, value: bytes | None, cache: dict, entry, now_ms: int) -> None:
        """Append one record (``value`` None: a tombstone) for ``group_id``, then cache ``entry`` in ``cache``
        (None: drop the group from it)."""
        self._append(group_id, encode_batch([(key, value)], now_ms), now_ms)
        if entry is None:
            cache.pop(group_id, None)
        else:
            cache[group_id] = entry

    def delete_group(self, group_id: str, now_ms: int) -> None:
        """Tombstones for all of the group's offsets and its metadata, in one batch."""
        committed = self._offsets.get(group_id, {})
        records = [(offset_key(group_id, t, p), None) for t, p in committed]
        records.append((group_key(group_id), None))
        self._append(group_id, encode_batch(records, now_ms), now_ms)
        self._offsets.pop(group_id, None)
        self.loaded_groups.pop(group_id, None)

    # -- reading ------------------------------------------------------------------------------
    def committed(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """All committed offsets of ``group_id`` (a copy; empty when none)."""
        return dict(self._offsets.get(group_id, {}))

    def group_ids(self) -> set[str]:
        """Groups that have committed offsets."""
        return set(self._offsets)

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """True when an open transaction staged an offset for ``tp`` in ``group_id``."""
        return any(tp in p.offsets.get(group_id, ()) for p in self._pending.values())

    def expired(self, group_id: str, now_ms: int, retention_ms: int, empty_since_ms: int) -> list[TopicPartition]:
        """The partitions of ``group_id`` whose offsets expired (see :func:`is_expired`)."""
        return [tp for tp, v in self._offsets.get(group_id, {}).items()
                if is_expired(v, now_ms, retention_ms, empty_since_ms)]

    # -- transactions (KIP-98) ----------------------------------------------------------------
    def stage_txn_offsets(self, producer_id: int, producer_epoch: int, group_id: str,
                          offsets: Mapping[TopicPartition, OffsetAndMetadata], now_ms: int) -> None:
        """Append ``offsets`` as a transactional batch of ``producer_id``/``producer_epoch``; keep them pending.

        They become committed offsets only through ``complete_txn(producer_id, commit=True)``.
        Raises InvalidCommitOffsetSizeError or CoordinatorNotAvailableError (nothing staged then).
        """
        if not offsets:
            return
        records = [(offset_key(group_id, t, p), offset_value(v)) for (t, p), v in offsets.items()]
        batch = encode_batch(records, now_ms, producer_id=producer_id, producer_epoch=producer_epoch,
                             attributes=TRANSACTIONAL_BIT)
        self._append(group_id, batch, now_ms)
        pending = self._pending.setdefault(producer_id, _PendingTxn(producer_epoch))
        pending.producer_epoch = producer_epoch
        pending.offsets.setdefault(group_id, {}).update(offsets)

    def complete_txn(self, producer_id: int, commit: bool, now_ms: int, coordinator_epoch: int = 0,
                     partition: int | None = None) -> bool:
        """End ``producer_id``'s transaction on ``__consumer_offsets``: write a COMMIT/ABORT marker to each
        partition it staged offsets in; on commit, its offsets become visible to OffsetFetch.

        Returns False (and writes nothing) when the producer has no pending offsets.
        Raises CoordinatorNotAvailableError when a marker cannot be written (the offsets stay pending).
        """
        pending = self._pending.get(producer_id)
        if pending is None:
            return False
        targets = sorted({self.partition_of(g) for g in pending.offsets})
        if partition is not None:  # a WriteTxnMarkers for one partition (replicated cluster)
            if partition not in targets:
                return False
            targets = [partition]
        for target in targets:
            try:
                self.writer.append_marker(OFFSETS_TOPIC, target, producer_id, pending.producer_epoch, commit,
                                          coordinator_epoch, now_ms)
            except KafkaError as e:
                raise CoordinatorNotAvailableError(f"cannot write a transaction marker to {OFFSETS_TOPIC}-{target}: {e}") from e
            self.on_append(target)
        self._resolve(producer_id, commit, partition)
        return True
