"""The durable election state of one Raft replica: ``<data dir>/__cluster_metadata-0/quorum-state``.

Kafka's ``FileQuorumStateStore`` (KIP-595): a small JSON file written atomically (temp file,
fsync, rename) before the replica acts on a new epoch or casts a vote, so that after a crash it
never votes twice in one epoch nor goes back to an older epoch. The format is Kafka's
``data_version`` 0 layout::

    {"clusterId":"","leaderId":2,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":0},{"voterId":1},{"voterId":2}],"data_version":0}

``leaderId``/``votedId`` -1 mean none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pyspark_kafka.broker.log.checkpoint import atomic_write
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger(__name__)

FILE_NAME = "quorum-state"


@dataclass(frozen=True)
class ElectionState:
    """``epoch`` (leader epoch, int32), ``leader_id`` and ``voted_id`` (node ids, -1 for none)."""

    epoch: int = 0
    leader_id: int = -1
    voted_id: int = -1


class QuorumStateStore:
    """Reads and writes ``quorum-state`` in ``directory`` (the metadata log's directory)."""

    def __init__(self, directory: str | Path, voters: list[int]) -> None:
        self.path = Path(directory) / FILE_NAME
        self.voters = sorted(voters)

    def read(self) -> ElectionState:
        """The stored state; a missing file is epoch 0 with no leader and no vote.

        Raises ValueError naming the file when it exists but is not Kafka's JSON layout
        (never guessed: a replica that forgot its vote could vote twice in one epoch).
        """
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return ElectionState()
        try:
            data = json.loads(text)
            return ElectionState(int(data["leaderEpoch"]), int(data.get("leaderId", -1)), int(data.get("votedId", -1)))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{self.path} is not a valid quorum-state file ({exc}): restore it or, losing this "
                             f"replica's vote, delete it together with the metadata log directory") from None

    def write(self, state: ElectionState) -> None:
        """Store ``state`` durably (atomic replace + fsync)."""
        data = {"clusterId": "", "leaderId": state.leader_id, "leaderEpoch": state.epoch, "votedId": state.voted_id,
                "appliedOffset": 0, "currentVoters": [{"voterId": v} for v in self.voters], "data_version": 0}
        atomic_write(self.path, json.dumps(data, separators=(",", ":")).encode())
