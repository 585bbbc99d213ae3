"""What the two coordinators share about their internal topics (``__consumer_offsets``,
``__transaction_state``): which partition a key lives in, and reading and writing the fields
of their record keys and values (the topics are created and written through
``coordinator/partition_writer.py``).

Record fields use Kafka's classic encodings (big-endian ints, int16-length UTF-8 strings,
int32-length bytes), written and read with kio's primitive serializers.
"""

from __future__ import annotations

import io
from typing import Callable

from kio.serial.readers import Reader

OFFSETS_TOPIC = "__consumer_offsets"
"""The group coordinator's internal topic (Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME``)."""
TRANSACTION_STATE_TOPIC = "__transaction_state"
"""The transaction coordinator's internal topic (Kafka's ``Topic.TRANSACTION_STATE_TOPIC_NAME``)."""
INTERNAL_TOPICS = (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
"""Every internal topic: written only by the coordinators, never by a client (Kafka's ``Topic.INTERNAL_TOPICS``)."""
TopicPartition = tuple[str, int]
"""A ``(topic, partition)`` pair, as the coordinators and assignors key their state (Kafka's ``TopicPartition``)."""


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (signed 32-bit, over UTF-16 code units)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, num_partitions: int) -> int:
    """The internal-topic partition of a group id or transactional id.

    Kafka's ``Utils.abs(key.hashCode) % partitions`` (``GroupCoordinator.partitionFor``,
    ``TransactionStateManager.partitionFor``), where ``Utils.abs(Integer.MIN_VALUE)`` is 0.
    """
    h = java_string_hash(key)
    return (0 if h == -(2**31) else abs(h)) % num_partitions


def encode_fields(*fields: tuple[Callable, object]) -> bytes:
    """Concatenate ``(kio writer, value)`` pairs, e.g. ``(write_int16, 0), (write_legacy_string, "g")``."""
    buf = io.BytesIO()
    for writer, value in fields:
        writer(buf, value)
    return buf.getvalue()


class Cursor:
    """Sequential reads of kio primitives from ``data``: ``Cursor(b).read(read_int16)``.

    Raises kio's ``DecodeError`` when the data ends early.
    """

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def read(self, reader: Reader):
        value, size = reader(self.data, self.pos)
        self.pos += size
        return value
