"""Where the single node's coordinators live and how their writes complete: the single-node side of the
seam whose cluster side is :class:`~pyspark_kafka.broker.cluster.coordinators.ClusterCoordinators`.

Handlers of the group and transaction APIs ask ``broker.coordinators`` (one of the two) and never which
mode the broker runs in. On the single node this broker coordinates every group and transactional id
(:meth:`LocalCoordinators.find` answers this broker), a coordinator's write is complete once it is in the
local log (there is no ISR to wait for), and a transaction marker goes straight into the local partition.
"""

from __future__ import annotations

from pyspark_kafka.broker.clock import now_ms
from pyspark_kafka.broker.coordinator.internal_topics import OFFSETS_TOPIC
from pyspark_kafka.broker.errors import ErrorCode, KafkaError


class LocalCoordinators:
    """``LocalCoordinators(broker)`` for the single-node :class:`~pyspark_kafka.broker.server.Broker`
    (its ``advertised``, ``node_id``, ``replica_manager`` and ``group_coordinator``)."""

    def __init__(self, broker) -> None:
        self.broker = broker

    async def find(self, key: str, key_type: int, listener: str | None = None) -> dict:
        """FindCoordinator's entry for ``key``: this broker, advertised on ``listener``."""
        host, port = self.broker.advertised(listener)
        return {"key": key, "node_id": self.broker.node_id, "host": host, "port": port,
                "error_code": ErrorCode.none, "error_message": None}

    async def group_write_done(self, group_id: str) -> ErrorCode:
        """A group coordinator write is complete once appended here: NONE."""
        return ErrorCode.none

    async def txn_write_done(self, transactional_id: str) -> ErrorCode:
        """A transaction coordinator write is complete once appended here: NONE."""
        return ErrorCode.none

    async def apply_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                           coordinator_epoch: int) -> ErrorCode:
        """WriteTxnMarkers for one partition: the COMMIT/ABORT marker into the local partition (a
        ``__consumer_offsets`` partition completes the producer's staged offsets there, Kafka's
        ``GroupCoordinator.onTransactionCompleted``). Returns the partition's error code
        (UNKNOWN_TOPIC_OR_PARTITION, the log's producer-epoch errors)."""
        broker = self.broker
        try:
            if topic == OFFSETS_TOPIC:
                broker.group_coordinator.ensure_loaded().offsets.complete_txn(
                    producer_id, commit, now_ms(), coordinator_epoch, partition=partition)
            elif not broker.replica_manager.append_marker(topic, partition, producer_id, producer_epoch, commit,
                                                          now_ms(), coordinator_epoch):
                return ErrorCode.unknown_topic_or_partition
        except KafkaError as exc:
            return exc.error_code
        return ErrorCode.none
