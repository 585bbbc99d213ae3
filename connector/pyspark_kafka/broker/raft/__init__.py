"""The controller quorum: the cluster metadata log replicated by Raft (KRaft, KIP-595).

:class:`RaftMetadataLog` (voters and observers, elections, majority commit; the Raft APIs it serves on the
controller listener are in ``raft_apis.py``), :class:`MetadataLogStorage` (``__cluster_metadata-0`` on disk),
:class:`QuorumStateStore` (``quorum-state``). See docs/replication.md "Controller quorum".
"""

from pyspark_kafka.broker.raft.config import QuorumConfig, QuorumConfigError, parse_voters
from pyspark_kafka.broker.raft.raft_apis import Role
from pyspark_kafka.broker.raft.raft_client import RaftMetadataLog
from pyspark_kafka.broker.raft.quorum_state import ElectionState, QuorumStateStore
from pyspark_kafka.broker.raft.storage import MetadataLogStorage

__all__ = ["ElectionState", "MetadataLogStorage", "QuorumConfig", "QuorumConfigError", "QuorumStateStore",
           "RaftMetadataLog", "Role", "parse_voters"]
