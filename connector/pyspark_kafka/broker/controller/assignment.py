"""Kafka's rack-unaware replica assignment (``StripedReplicaPlacer`` without racks; the older
``AdminUtils.assignReplicasToBrokersRackUnaware``).

Pure function, no I/O: the first replica of partition ``p`` is broker ``(start + p) mod n``; the other
replicas follow it, shifted by ``1 + (shift + p // n) mod (n - 1)`` steps, so partitions spread their
leaders and followers over every broker.
"""

from __future__ import annotations

from pyspark_kafka.broker.errors import InvalidPartitionsError, InvalidReplicationFactorError


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int, start: int = 0,
                    shift: int | None = None) -> list[list[int]]:
    """Replica lists (broker ids, preferred leader first) of ``partitions`` partitions.

    ``brokers``: the ids of the live, unfenced brokers (any order; sorted here); ``start`` the index of the
    first partition's leader and ``shift`` the first follower's distance (Kafka picks both at random;
    ``shift`` None = ``start``). Raises InvalidPartitionsError for ``partitions`` < 1 and
    InvalidReplicationFactorError for a factor < 1 or larger than the number of brokers (Kafka's message).
    """
    ids = sorted(brokers)
    n = len(ids)
    if partitions < 1:
        raise InvalidPartitionsError(f"Number of partitions must be larger than 0 (got {partitions}).")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"Replication factor must be larger than 0 (got {replication_factor}).")
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"Unable to replicate the partition {replication_factor} time(s): The target replication factor of "
            f"{replication_factor} cannot be reached because only {n} broker(s) are registered.")
    shift = start if shift is None else shift
    out = []
    for p in range(partitions):
        first = (start + p) % n
        if p > 0 and p % n == 0:
            shift += 1
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            step = 1 + (shift + j) % (n - 1)
            replicas.append(ids[(first + step) % n])
        out.append(replicas)
    return out
