"""Reading a topic back for the idempotence and transaction tests of the broker."""

from __future__ import annotations

from support.eos_check import read_topic

DEADLINE_S = 30.0


def read_all(bootstrap: str, topic: str, partitions: int = 1,
             isolation: str = "read_uncommitted") -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record of partitions ``0..partitions-1`` of ``topic`` as ``(partition, offset, key, value)``,
    read from offset 0 up to the end (the LSO for read_committed) of each partition, with an independent
    confluent-kafka consumer (:func:`support.eos_check.read_topic`)."""
    return read_topic(bootstrap, topic, isolation, timeout_s=DEADLINE_S, partitions=range(partitions))


def values(records) -> list[bytes]:
    return [r[3] for r in records]
