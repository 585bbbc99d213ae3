"""The replicated embedded cluster: the broker's replication state per partition (``partition``), the
leader-epoch checkpoint (``leader_epoch``), the follower's fetcher (``replica_fetcher``), the broker's life with the
controller (``broker_lifecycle``), node processes (``node``) and :class:`EmbeddedCluster` (``embedded_cluster``).
See docs/replication.md."""

from pyspark_kafka.broker.cluster.embedded_cluster import EmbeddedCluster

__all__ = ["EmbeddedCluster"]
