"""The records of ``__consumer_offsets`` (Kafka's ``GroupCoordinatorRecordSerde``): keys and values of committed
offsets, classic group metadata and KIP-848 group state, as pure encode / parse functions, and the
dataclasses they carry (:class:`OffsetAndMetadata`, :class:`GroupRecord`, :class:`Member`).

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

A transactional offset commit is an OffsetCommit record in a transactional batch; a COMMIT / ABORT
control batch ends it (``coordinator/offsets.py``).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field, replace

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

from pyspark_kafka.broker.coordinator.internal_topics import Cursor, TopicPartition, encode_fields

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



@dataclass
class Member:
    """One classic group member: the seven fields GroupMetadataValue persists, plus the coordinator's
    runtime handles (futures of a waiting JoinGroup / SyncGroup, the session timer; not persisted, not compared).

    ``protocols`` = ``[(name, metadata)]`` in the member's preference order (timeouts in ms); a persisted
    member (:meth:`persisted`, or one parsed from a record) carries only the chosen protocol's metadata, its
    subscription.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future | None = field(default=None, repr=False, compare=False)
    sync_future: asyncio.Future | None = field(default=None, repr=False, compare=False)
    heartbeat_timer: asyncio.TimerHandle | None = field(default=None, repr=False, compare=False)

    def metadata(self, protocol: str | None) -> bytes:
        """The member's metadata (subscription) for ``protocol``; empty when it does not support it."""
        return next((m for n, m in self.protocols if n == protocol), b"")

    def persisted(self, protocol: str | None) -> "Member":
        """A detached copy as GroupMetadataValue keeps it: ``protocol``'s metadata only, no runtime handles."""
        return replace(self, protocols=[(protocol or "", self.metadata(protocol))], join_future=None,
                       sync_future=None, heartbeat_timer=None)

    @property
    def subscription(self) -> bytes:
        """The persisted member's subscription (the metadata of its first protocol)."""
        return self.protocols[0][1] if self.protocols else b""


@dataclass(frozen=True)
class GroupRecord:
    """A group's persisted state: protocol type, generation, chosen protocol, leader, members."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp_ms: int
    members: tuple[Member, ...] = ()



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
        members.append(Member(
            c.read(read_legacy_string), c.read(read_nullable_legacy_string), c.read(read_legacy_string),
            c.read(read_legacy_string), c.read(read_int32), c.read(read_int32),
            [(protocol or "", c.read(read_legacy_bytes))], c.read(read_legacy_bytes),
        ))
    return GroupRecord(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def is_expired(value: OffsetAndMetadata, now_ms: int, retention_ms: int, empty_since_ms: int) -> bool:
    """KIP-211: an offset of an Empty group expires ``retention_ms`` after the later of the commit and
    the moment the group became empty; an explicit expire timestamp (OffsetCommit v2-v4
    ``retention_time``) wins when set."""
    if value.expire_timestamp_ms >= 0:
        return now_ms >= value.expire_timestamp_ms
    return now_ms >= max(value.commit_timestamp_ms, empty_since_ms) + retention_ms

