"""The ``__consumer_offsets`` store: committed offsets and group metadata, kept in a compacted topic.

As in Kafka, every change is a record appended to the internal topic ``__consumer_offsets``
(``cleanup.policy=compact``; ``offsets.topic.num.partitions`` partitions, ``segment.bytes`` from
``offsets.topic.segment.bytes``). A group lives in partition ``abs(javaHashCode(group_id)) %
partitions`` (Kafka's ``GroupCoordinator.partitionFor``). The in-memory cache is rebuilt by
replaying the topic when the store is loaded, so commits survive a ``kill -9`` (records are in
the OS page cache after ``pwrite``; a crash of the machine itself loses what was not flushed,
as with a single Kafka broker).

Record layouts (Kafka's own ``GroupCoordinatorRecordSerde`` formats, big-endian, strings are
int16-length UTF-8, bytes are int32-length; a null value is a tombstone)::

    OffsetCommitKey   (key version 1):   group string, topic string, partition int32
    OffsetCommitValue (value version 3): offset int64, leader_epoch int32, metadata string,
                                         commit_timestamp int64
                      (value version 1, used when an expire timestamp is set: offset int64,
                                         metadata string, commit_timestamp int64, expire_timestamp int64)
    GroupMetadataKey  (key version 2):   group string
    GroupMetadataValue(value version 3): protocol_type string, generation int32, protocol string?,
                                         leader string?, current_state_timestamp int64,
                                         members [member_id string, group_instance_id string?,
                                         client_id string, client_host string, rebalance_timeout int32,
                                         session_timeout int32, subscription bytes, assignment bytes]
    ConsumerGroupMetadataKey (key version 3): group string (KIP-848 groups, Kafka's key layout)
                      value (ours, not Kafka's: Kafka splits a consumer group over seven record types):
                                         version int16 (0), state bytes (UTF-8 JSON of the whole group:
                                         epochs, members, assignments, target assignment; see
                                         ``coordinator/consumer_group.py``)

Transactional offset commits (KIP-98), for the transaction coordinator (``coordinator/txn.py``):

- :meth:`OffsetStore.stage_txn_offsets` ``(producer_id, producer_epoch, group_id, offsets)`` appends
  the offsets as a *transactional* batch (attributes bit 4, the producer's id and epoch) to the
  group's partition and keeps them pending: OffsetFetch does not see them (with
  ``require_stable`` it answers UNSTABLE_OFFSET_COMMIT for those partitions).
- :meth:`OffsetStore.complete_txn` ``(producer_id, commit)`` writes a COMMIT or ABORT marker
  (``PartitionLog.append_marker``: a control batch) to every ``__consumer_offsets`` partition the
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
however the commits spread over the partitions. :meth:`OffsetStore.load` starts from the newest
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

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from kio.serial.errors import DecodeError
from kio.serial.readers import (
    read_int16,
    read_int32,
    read_int64,
    read_legacy_bytes,
    read_legacy_string,
    read_nullable_legacy_string,
)
from kio.serial.writers import (
    write_int16,
    write_int32,
    write_int64,
    write_legacy_bytes,
    write_legacy_string,
    write_nullable_legacy_string,
)

from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.coordinator.internal_topics import Cursor, encode_fields, ensure_internal_topic, partition_for
from pyspark_kafka.broker.errors import (
    CoordinatorNotAvailableError,
    InvalidCommitOffsetSizeError,
    KafkaError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from pyspark_kafka.broker.log.record_batch import CONTROL_BIT, CONTROL_COMMIT, TRANSACTIONAL_BIT
from pyspark_kafka.broker.log.checkpoint import atomic_write
from pyspark_kafka.broker.log.records import batch_identity, decode_batch, encode_batch, iter_batches

log = get_logger(__name__)

SNAPSHOT_SUFFIX = ".coordinator-snapshot"
SNAPSHOT_EVERY_RECORDS = 20_000
"""Records appended (over all partitions) after which the partitions appended to get new snapshots."""
SNAPSHOTS_KEPT = 2

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3
CONSUMER_GROUP_KEY_VERSION = 3
CONSUMER_GROUP_VALUE_VERSION = 0


@dataclass(frozen=True)
class OffsetAndMetadata:
    """One committed offset: the next offset to consume, its leader epoch (-1 unknown), the client's
    metadata string, the commit time and an explicit expiry time (ms since the epoch; -1 none)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1


@dataclass(frozen=True)
class MemberRecord:
    """A group member as persisted in GroupMetadataValue (timeouts in ms)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupRecord:
    """A group's persisted state: protocol type, generation, chosen protocol, leader, members."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp_ms: int
    members: tuple[MemberRecord, ...] = ()


TopicPartition = tuple[str, int]


# --- record keys and values (pure functions) -------------------------------------------------


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey v1 bytes for ``group_id``/``topic``/``partition``."""
    return encode_fields((write_int16, OFFSET_KEY_VERSION), (write_legacy_string, group_id),
                   (write_legacy_string, topic), (write_int32, partition))


def group_key(group_id: str) -> bytes:
    """GroupMetadataKey v2 bytes for ``group_id``."""
    return encode_fields((write_int16, GROUP_KEY_VERSION), (write_legacy_string, group_id))


def offset_value(value: OffsetAndMetadata) -> bytes:
    """OffsetCommitValue bytes: v3, or v1 when ``expire_timestamp_ms`` is set (Kafka's choice)."""
    if value.expire_timestamp_ms >= 0:
        return encode_fields((write_int16, OFFSET_VALUE_VERSION_WITH_EXPIRY), (write_int64, value.offset),
                       (write_legacy_string, value.metadata), (write_int64, value.commit_timestamp_ms),
                       (write_int64, value.expire_timestamp_ms))
    return encode_fields((write_int16, OFFSET_VALUE_VERSION), (write_int64, value.offset), (write_int32, value.leader_epoch),
                   (write_legacy_string, value.metadata), (write_int64, value.commit_timestamp_ms))


def group_value(group: GroupRecord) -> bytes:
    """GroupMetadataValue v3 bytes."""
    parts: list[tuple] = [
        (write_int16, GROUP_VALUE_VERSION), (write_legacy_string, group.protocol_type), (write_int32, group.generation),
        (write_nullable_legacy_string, group.protocol), (write_nullable_legacy_string, group.leader),
        (write_int64, group.state_timestamp_ms), (write_int32, len(group.members)),
    ]
    for m in group.members:
        parts += [
            (write_legacy_string, m.member_id), (write_nullable_legacy_string, m.group_instance_id),
            (write_legacy_string, m.client_id), (write_legacy_string, m.client_host),
            (write_int32, m.rebalance_timeout_ms), (write_int32, m.session_timeout_ms),
            (write_legacy_bytes, m.subscription), (write_legacy_bytes, m.assignment),
        ]
    return encode_fields(*parts)


def consumer_group_key(group_id: str) -> bytes:
    """ConsumerGroupMetadataKey (key version 3) bytes for ``group_id``."""
    return encode_fields((write_int16, CONSUMER_GROUP_KEY_VERSION), (write_legacy_string, group_id))


def consumer_group_value(state: dict) -> bytes:
    """Our value of a KIP-848 group's record: version int16 0, then the group's state as JSON bytes."""
    return encode_fields((write_int16, CONSUMER_GROUP_VALUE_VERSION),
                         (write_legacy_bytes, json.dumps(state, sort_keys=True).encode()))


def parse_consumer_group_value(data: bytes) -> dict:
    """The state dict of :func:`consumer_group_value` bytes; ValueError for another version or bad JSON."""
    c = Cursor(data)
    version = c.read(read_int16)
    if version != CONSUMER_GROUP_VALUE_VERSION:
        raise ValueError(f"unsupported consumer group value version {version}")
    state = json.loads(c.read(read_legacy_bytes).decode())
    if not isinstance(state, dict):
        raise ValueError("consumer group value is not a JSON object")
    return state


def parse_key(data: bytes) -> tuple:
    """``("offset", group, topic, partition)``, ``("group", group)`` or ``("consumer_group", group)``;
    ValueError for other versions."""
    c = Cursor(data)
    version = c.read(read_int16)
    if version in (0, 1):
        return "offset", c.read(read_legacy_string), c.read(read_legacy_string), c.read(read_int32)
    if version == GROUP_KEY_VERSION:
        return "group", c.read(read_legacy_string)
    if version == CONSUMER_GROUP_KEY_VERSION:
        return "consumer_group", c.read(read_legacy_string)
    raise ValueError(f"unknown __consumer_offsets key version {version}")


def parse_offset_value(data: bytes) -> OffsetAndMetadata:
    """OffsetCommitValue v0..v3 → :class:`OffsetAndMetadata`."""
    c = Cursor(data)
    version = c.read(read_int16)
    offset = c.read(read_int64)
    epoch = c.read(read_int32) if version >= 3 else -1
    metadata = c.read(read_legacy_string)
    commit_ts = c.read(read_int64)
    expire_ts = c.read(read_int64) if version == 1 else -1
    return OffsetAndMetadata(offset, epoch, metadata, commit_ts, expire_ts)


def parse_group_value(data: bytes) -> GroupRecord:
    """GroupMetadataValue v3 → :class:`GroupRecord` (other versions: ValueError)."""
    c = Cursor(data)
    version = c.read(read_int16)
    if version != GROUP_VALUE_VERSION:
        raise ValueError(f"unsupported GroupMetadataValue version {version}")
    protocol_type = c.read(read_legacy_string)
    generation = c.read(read_int32)
    protocol = c.read(read_nullable_legacy_string)
    leader = c.read(read_nullable_legacy_string)
    state_ts = c.read(read_int64)
    members = []
    for _ in range(c.read(read_int32)):
        members.append(MemberRecord(
            c.read(read_legacy_string), c.read(read_nullable_legacy_string), c.read(read_legacy_string),
            c.read(read_legacy_string), c.read(read_int32), c.read(read_int32), c.read(read_legacy_bytes),
            c.read(read_legacy_bytes),
        ))
    return GroupRecord(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def is_expired(value: OffsetAndMetadata, now_ms: int, retention_ms: int, empty_since_ms: int) -> bool:
    """KIP-211: an offset of an Empty group expires ``retention_ms`` after the later of the commit and
    the moment the group became empty; an explicit expire timestamp (OffsetCommit v2-v4
    ``retention_time``) wins when set."""
    if value.expire_timestamp_ms >= 0:
        return now_ms >= value.expire_timestamp_ms
    return now_ms >= max(value.commit_timestamp_ms, empty_since_ms) + retention_ms


# --- the store --------------------------------------------------------------------------------


@dataclass
class _PendingTxn:
    producer_epoch: int
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)


class OffsetStore:
    """Committed offsets and group metadata of all groups, backed by ``__consumer_offsets``.

    ``OffsetStore(logs, config)`` with the broker's LogManager and BrokerConfig; call :meth:`load`
    once (replays the topic when it exists). The topic is created (compacted, with
    ``offsets.topic.num.partitions`` partitions) by the first write, as Kafka creates it on first
    use. Used from the broker's event loop thread only. Write methods append first and update the
    cache only after the append succeeded, so a failed write never changes what OffsetFetch
    returns. They raise :class:`InvalidCommitOffsetSizeError` (INVALID_COMMIT_OFFSET_SIZE) when the
    records exceed the topic's ``max.message.bytes`` and :class:`CoordinatorNotAvailableError`
    (COORDINATOR_NOT_AVAILABLE) when the log cannot be written.
    """

    def __init__(self, logs, config) -> None:
        self.logs = logs
        self.config = config
        # latest persisted metadata of each group: found by load(), then kept up to date by store_group()
        self.loaded_groups: dict[str, GroupRecord] = {}
        # latest persisted state of each KIP-848 consumer group (consumer_group_value's dict)
        self.consumer_groups: dict[str, dict] = {}
        self._offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self._pending: dict[int, _PendingTxn] = {}
        self._since_snapshot: dict[int, int] = {}  # partition -> records appended since its last snapshot
        self._loaded: set[int] | None = set()  # partitions loaded (load(partitions)); None: all (load())
        self.replayed_records = 0  # records the last load() replayed from the log (after its snapshots)
        #: False: never write nor read snapshots (every load replays the whole log)
        self.snapshots = True
        #: replicated cluster: ``() -> int``, the partition count of the controller's ``__consumer_offsets``
        self.partition_count = None
        #: replicated cluster: ``(partition)`` called after each append, so the leader's high watermark moves and
        #: followers waiting in a fetch are woken
        self.on_append = None

    # -- loading ------------------------------------------------------------------------------
    def load(self, partitions: Iterable[int] | None = None) -> None:
        """Rebuild the cache from ``__consumer_offsets``: per partition the newest usable snapshot,
        then the batches after it (groups into :attr:`loaded_groups`).

        ``partitions`` None: every partition, the cache cleared first (the single node); else only those
        partitions, after :meth:`unload` of each (a replicated cluster: the partitions this broker just became
        the leader of, Kafka's ``GroupCoordinator.onElection``)."""
        info = self.logs.topic(OFFSETS_TOPIC)
        if partitions is None:
            self._offsets.clear()
            self._pending.clear()
            self.loaded_groups.clear()
            self.consumer_groups.clear()
            self._since_snapshot.clear()
            self._loaded = None
            partitions = range(info.num_partitions if info is not None else 0)
        else:
            partitions = list(partitions)
            for partition in partitions:
                self.unload(partition)
            self._loaded = {*(self._loaded or ()), *partitions}
        count = snapshots = 0
        for partition in partitions:
            plog = self.logs.get_log(OFFSETS_TOPIC, partition)
            if plog is None:
                continue
            start = self._load_snapshot(plog) if self.snapshots else 0
            snapshots += start > 0
            for batch in iter_batches(plog, start):
                self._replay(batch, partition)
                count += len(batch.records)
        self.replayed_records = count
        log.info("loaded %s: %d snapshots, %d records replayed: %d groups with offsets, %d with metadata, "
                 "%d open transactions", OFFSETS_TOPIC, snapshots, count, len(self._offsets),
                 len(self.loaded_groups), len(self._pending))

    def unload(self, partition: int) -> None:
        """Forget the groups (offsets, metadata, pending transactional offsets) of ``__consumer_offsets``
        partition ``partition``: this broker no longer leads it (Kafka's ``GroupCoordinator.onResignation``)."""
        def mine(group_id: str) -> bool:
            return self.partition_of(group_id) == partition

        if self._loaded is not None:
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

    @staticmethod
    def _snapshots(plog) -> list[tuple[int, tuple[int, int] | None, Path]]:
        """``(next offset, (leader epoch, crc) or None, path)`` of ``plog``'s snapshot files, oldest first
        (a name without epoch and CRC, as written before they were added, has None)."""
        found = []
        for path in Path(plog.dir).glob(f"*{SNAPSHOT_SUFFIX}"):
            parts = path.name[: -len(SNAPSHOT_SUFFIX)].split("-")
            try:
                if len(parts) == 1 and parts[0].isdigit():
                    found.append((int(parts[0]), None, path))
                elif len(parts) == 3 and parts[0].isdigit():
                    found.append((int(parts[0]), (int(parts[1]), int(parts[2], 16)), path))
            except ValueError:
                continue
        return sorted(found, key=lambda f: f[0])

    def _load_snapshot(self, plog) -> int:
        """Apply the newest snapshot the log covers and matches; return the offset to replay from (0 = none)."""
        for next_offset, identity, path in reversed(self._snapshots(plog)):
            if not plog.log_start_offset <= next_offset <= plog.log_end_offset:
                continue
            if identity is not None and next_offset > 0 and batch_identity(plog, next_offset - 1) != identity:
                log.info("ignoring %s snapshot %s: the log before it changed (truncated or compacted)",
                         OFFSETS_TOPIC, path)
                continue
            try:
                batch = decode_batch(path.read_bytes())
            except Exception as e:  # a torn or foreign file: replay the whole log instead
                log.warning("ignoring unreadable %s snapshot %s: %s", OFFSETS_TOPIC, path, e)
                continue
            self._replay(batch)
            return next_offset
        return 0

    def write_snapshots(self, partition: int | None = None) -> None:
        """Write a snapshot of each ``__consumer_offsets`` partition this store has loaded (or only
        ``partition``) at its log end offset, and remove all but the :data:`SNAPSHOTS_KEPT` newest.
        Skips a partition with pending transactional offsets or whose high watermark is below its log end."""
        info = self.logs.topic(OFFSETS_TOPIC)
        if info is None or not self.snapshots:
            return
        count = self.partition_count() if self.partition_count is not None else info.num_partitions
        for p in range(count) if partition is None else (partition,):
            if self._write_snapshot(p, count):
                self._since_snapshot.pop(p, None)

    def _write_snapshot(self, p: int, num_partitions: int) -> bool:
        plog = self.logs.get_log(OFFSETS_TOPIC, p)
        if (plog is None or (self._loaded is not None and p not in self._loaded)
                or plog.high_watermark < plog.log_end_offset
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
        next_offset = plog.log_end_offset
        identity = batch_identity(plog, next_offset - 1)
        name = f"{next_offset:020d}" if identity is None else f"{next_offset:020d}-{identity[0]}-{identity[1]:08x}"
        path = Path(plog.dir) / f"{name}{SNAPSHOT_SUFFIX}"
        try:
            atomic_write(path, encode_batch(records or [(group_key(""), None)], 0))
        except OSError as e:
            log.warning("cannot write %s snapshot %s: %s", OFFSETS_TOPIC, path, e)
            return False
        for _, _, old in self._snapshots(plog)[:-SNAPSHOTS_KEPT]:
            old.unlink(missing_ok=True)
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
        """The ``__consumer_offsets`` partition holding ``group_id`` (the topic is created if missing).

        Raises KafkaError when the topic cannot be created. In a replicated cluster (``partition_count`` set)
        the topic is the controller's: its partition count comes from the metadata, nothing is created here.
        """
        if self.partition_count is not None:
            return partition_for(group_id, self.partition_count())
        info = ensure_internal_topic(self.logs, OFFSETS_TOPIC, self.config.get_int("offsets.topic.num.partitions"),
                                     self.config.get_int("offsets.topic.segment.bytes"))
        return partition_for(group_id, info.num_partitions)

    def _append(self, group_id: str, batch: bytes, now_ms: int) -> None:
        partition = self.partition_of(group_id)
        if sum(self._since_snapshot.values()) >= SNAPSHOT_EVERY_RECORDS and self.snapshots:
            for p in list(self._since_snapshot):  # the cache reflects each log up to its end here
                self.write_snapshots(p)
        try:
            result = self.logs.get_log(OFFSETS_TOPIC, partition).append(batch, now_ms=now_ms)
        except (RecordTooLargeError, RecordBatchTooLargeError) as e:
            raise InvalidCommitOffsetSizeError(
                f"the commit for group {group_id!r} is {len(batch)} bytes, more than {OFFSETS_TOPIC} accepts "
                f"({e}); commit fewer partitions or shorter metadata per request"
            ) from None
        except KafkaError as e:
            raise CoordinatorNotAvailableError(f"cannot write {OFFSETS_TOPIC} for group {group_id!r}: {e}") from e
        self._since_snapshot[partition] = self._since_snapshot.get(partition, 0) + result.record_count
        if self.on_append is not None:
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
        value = None if group is None else group_value(group)
        self._append(group_id, encode_batch([(group_key(group_id), value)], now_ms), now_ms)
        if group is None:
            self.loaded_groups.pop(group_id, None)
        else:
            self.loaded_groups[group_id] = group

    def store_consumer_group(self, group_id: str, state: dict | None, now_ms: int) -> None:
        """Persist a KIP-848 group's state (None: a tombstone, the group is gone)."""
        value = None if state is None else consumer_group_value(state)
        self._append(group_id, encode_batch([(consumer_group_key(group_id), value)], now_ms), now_ms)
        if state is None:
            self.consumer_groups.pop(group_id, None)
        else:
            self.consumer_groups[group_id] = state

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
            plog = self.logs.get_log(OFFSETS_TOPIC, target)
            try:
                plog.append_marker(producer_id, pending.producer_epoch, commit, coordinator_epoch, now_ms=now_ms)
            except KafkaError as e:
                raise CoordinatorNotAvailableError(f"cannot write a transaction marker to {OFFSETS_TOPIC}-{target}: {e}") from e
            if self.on_append is not None:
                self.on_append(target)
        self._resolve(producer_id, commit, partition)
        return True
