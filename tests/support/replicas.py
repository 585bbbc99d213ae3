"""Partitions this broker leads, for tests of the :class:`~pyspark_kafka.broker.replica_manager.ReplicaManager`
without a server: what the broker lifecycle does when the metadata image makes this broker the only replica and
leader of a partition (an ISR of one, leader epoch 0)."""

from __future__ import annotations

from pyspark_kafka.broker.cluster.partition import Partition
from pyspark_kafka.broker.controller.image import PartitionState


def lead(rm, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    """Create ``topic`` with ``partitions`` partitions (and ``configs``) in ``rm``'s log manager if it does not
    exist, and make ``rm``'s broker the leader and only in-sync replica of each, at leader epoch 0."""
    if rm.logs.topic(topic) is None:
        rm.logs.create_topic(topic, partitions, configs or {})
    me = rm.node_id
    for index in range(partitions):
        plog = rm.logs.get_log(topic, index)
        part = Partition(topic, index, me, plog, PartitionState((), (), -2, -1, -1))
        part.update_state(PartitionState((me,), (me,), me, 0, 0), 0)
        rm.partitions[(topic, index)] = part
