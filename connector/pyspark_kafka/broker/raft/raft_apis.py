"""The Raft APIs a controller quorum member serves (KIP-595): Vote (52), BeginQuorumEpoch (53),
EndQuorumEpoch (54), DescribeQuorum (55), Fetch (1) on ``__cluster_metadata`` and DescribeCluster (60) on the
controller listener, as Kafka's ``KafkaRaftClient.handle*Request`` answer them.

:class:`RaftApis` is the request-serving half of
:class:`~pyspark_kafka.broker.raft.raft_client.RaftMetadataLog` (a mixin over its state: role, epoch, leader,
voters, storage, the replicas' fetch progress); the election and replication half is in ``raft_client.py``.
Also here: the replica :class:`Role`, the leader's :class:`ReplicaProgress` of each replica, and
:func:`metadata_partition`, both halves use them.
"""

from __future__ import annotations

import asyncio
import enum
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.raft.storage import METADATA_PARTITION, METADATA_TOPIC
from pyspark_kafka.broker.raft.transport import (
    BEGIN_QUORUM_EPOCH, DESCRIBE_CLUSTER, DESCRIBE_QUORUM, END_QUORUM_EPOCH, FETCH, VOTE,
)

CONTROLLER_LISTENER = "CONTROLLER"  # the listener name DescribeQuorum v2 gives the voters' endpoints
NO_DIRECTORY_ID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: no KIP-853 directory ids here
OBSERVER_SESSION_TIMEOUT_S = 300.0  # Kafka's LeaderState.OBSERVER_SESSION_TIMEOUT_MS: an observer silent this long is dropped


class Role(enum.Enum):
    """A replica's state in its epoch (Kafka's ``UnattachedState``/``CandidateState``/``LeaderState``/``FollowerState``)."""

    UNATTACHED = "Unattached"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"


@dataclass
class ReplicaProgress:
    """What the leader knows of one replica: log end offset and times (ms since the epoch, -1 unknown)."""

    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_fetch_mono: float = float("-inf")
    #: the leader's log end offset at this replica's last fetch (-1 none): KIP-836's caught-up rule
    last_fetch_leader_end: int = -1


def _now_ms() -> int:
    return int(time.time() * 1000)


def metadata_partition(response: Any) -> Any:
    """The single ``__cluster_metadata``-0 partition of a Raft response (ValueError when absent)."""
    topics = getattr(response, "topics", None)
    if topics is None:
        topics = response.responses
    for topic in topics:
        for p in topic.partitions:
            return p
    raise ValueError("the response names no partition")


class RaftApis:
    """Serving the Raft APIs: mixed into :class:`~pyspark_kafka.broker.raft.raft_client.RaftMetadataLog`,
    whose state it reads and changes (one asyncio loop, no locking)."""

    # -- serving the Raft APIs -----------------------------------------------------------------
    async def handle(self, api_key: int, version: int, request: Any) -> dict:
        """Answer one Raft request (the controller listener's dispatch); returns the response body dict."""
        if api_key == FETCH:
            return await self._handle_fetch(request)
        if api_key == DESCRIBE_CLUSTER:
            return self._handle_describe_cluster(request)
        p = metadata_partition(request) if request.topics and request.topics[0].partitions else None
        topic_ok = p is not None and request.topics[0].topic_name == METADATA_TOPIC and p.partition_index == 0
        if api_key == DESCRIBE_QUORUM:
            return self._handle_describe(topic_ok)
        if not topic_ok:
            return self._partition_answer(ErrorCode.unknown_topic_or_partition, api_key)
        if api_key == VOTE:
            return self._handle_vote(p)
        if api_key == BEGIN_QUORUM_EPOCH:
            return self._handle_begin(p)
        if api_key == END_QUORUM_EPOCH:
            return self._handle_end(p)
        raise ValueError(f"api key {api_key} is not a Raft API")

    def _partition_answer(self, error: int, api_key: int, **extra) -> dict:
        partition = {"partition_index": METADATA_PARTITION, "error_code": error, "error_message": None,
                     "leader_id": self.leader_id, "leader_epoch": self.epoch, **extra}
        if api_key == VOTE:
            partition.setdefault("vote_granted", False)
        answer = {"error_code": ErrorCode.none, "error_message": None,
                  "topics": [{"topic_name": METADATA_TOPIC, "partitions": [partition]}]}
        if api_key == DESCRIBE_QUORUM:  # v2 (KIP-853): the voters' controller endpoints
            answer["nodes"] = [{"node_id": v, "listeners": [{"name": CONTROLLER_LISTENER, "host": h, "port": p}]}
                               for v, (h, p) in sorted(self.voters.items())]
        return answer

    def _handle_vote(self, p: Any) -> dict:
        candidate, epoch = p.replica_id, p.replica_epoch
        if candidate not in self.voters or not self.is_voter():
            return self._partition_answer(ErrorCode.inconsistent_voter_set, VOTE)
        if epoch < self.epoch:
            return self._partition_answer(ErrorCode.none, VOTE, vote_granted=False)
        if epoch > self.epoch:
            self._transition(Role.UNATTACHED, epoch, -1, -1)
            self._reset_election_timer()
        granted = False
        if self.role is Role.UNATTACHED and self.voted_id in (-1, candidate):
            up_to_date = (p.last_offset_epoch, p.last_offset) >= (self.storage.last_epoch, self.storage.end_offset)
            if up_to_date:
                granted = True
                if self.voted_id != candidate:
                    self._transition(Role.UNATTACHED, self.epoch, -1, candidate)
                self._reset_election_timer()
        elif self.role is Role.CANDIDATE and candidate == self.node_id:
            granted = True
        return self._partition_answer(ErrorCode.none, VOTE, vote_granted=granted)

    def _handle_begin(self, p: Any) -> dict:
        if p.leader_id not in self.voters:
            return self._partition_answer(ErrorCode.inconsistent_voter_set, BEGIN_QUORUM_EPOCH)
        if p.leader_epoch < self.epoch:
            return self._partition_answer(ErrorCode.fenced_leader_epoch, BEGIN_QUORUM_EPOCH)
        if p.leader_epoch > self.epoch or self.role is not Role.FOLLOWER or self.leader_id != p.leader_id:
            if not (p.leader_epoch == self.epoch and self.role is Role.LEADER):
                self._become_follower(p.leader_epoch, p.leader_id)
        return self._partition_answer(ErrorCode.none, BEGIN_QUORUM_EPOCH)

    def _handle_end(self, p: Any) -> dict:
        if p.leader_epoch < self.epoch:
            return self._partition_answer(ErrorCode.fenced_leader_epoch, END_QUORUM_EPOCH)
        if p.leader_epoch > self.epoch:
            self._transition(Role.UNATTACHED, p.leader_epoch, -1, -1)
        elif self.role is Role.FOLLOWER and self.leader_id == p.leader_id:
            self._transition(Role.UNATTACHED, self.epoch, -1, self.voted_id)
        elif self.role is not Role.UNATTACHED:  # a candidate or another leader of this epoch: nothing to do
            return self._partition_answer(ErrorCode.none, END_QUORUM_EPOCH)
        # Kafka: the preferred successors stand first; the others wait a little longer.
        successors = list(p.preferred_successors)
        position = successors.index(self.node_id) if self.node_id in successors else len(successors)
        self._reset_election_timer(0.05 * position + random.uniform(0, 0.05))
        return self._partition_answer(ErrorCode.none, END_QUORUM_EPOCH)

    def _handle_describe_cluster(self, request: Any) -> dict:
        """DescribeCluster v1 on the controller listener (KIP-919): the voters as controller endpoints and
        the active controller; brokers (endpoint type 1) are asked of a broker: MISMATCHED_ENDPOINT_TYPE (114)."""
        controllers = request.endpoint_type == 2
        return {"throttle_time": 0, "error_code": ErrorCode.none if controllers else ErrorCode.mismatched_endpoint_type,
                "error_message": None if controllers else "the controller listener only describes controllers "
                                                           "(endpoint type 2): ask a broker for brokers",
                "endpoint_type": request.endpoint_type, "cluster_id": self.cluster_id,
                "controller_id": self.leader_id if controllers else -1,
                "brokers": [{"broker_id": v, "host": h, "port": p} for v, (h, p) in sorted(self.voters.items())]
                if controllers else []}

    def describe_quorum(self) -> dict:
        """The quorum as its leader describes it (DescribeQuorum, KIP-595 and KIP-836; Kafka's
        ``KafkaRaftClient.handleDescribeQuorumRequest`` over ``LeaderState``): ``leader_id``, ``leader_epoch``,
        ``high_watermark`` (-1 while the leader has none), ``voters`` and ``observers``, each replica as
        ``replica_id``, ``log_end_offset`` (its last fetch offset; -1 before its first fetch in this epoch),
        ``last_fetch_timestamp`` and ``last_caught_up_timestamp`` (ms since the epoch, -1 unknown); the leader itself
        at its log end, both times now (Kafka's ``RaftUtil.toReplicaState``). Observers that have not fetched for
        5 minutes are left out (Kafka's ``LeaderState.OBSERVER_SESSION_TIMEOUT_MS``). ``nodes``: each voter's
        controller endpoint (DescribeQuorum v2, KIP-853).

        Raises NotControllerError when this node is not the quorum leader (its Raft listener answers
        NOT_LEADER_OR_FOLLOWER instead, as Kafka's does)."""
        from pyspark_kafka.broker.errors import NotControllerError

        if self.role is not Role.LEADER:
            raise NotControllerError(f"controller {self.node_id} is not the quorum leader (leader "
                                     f"{self.leader_id}, epoch {self.epoch}): DescribeQuorum is answered by the leader")
        now = _now_ms()
        cutoff = time.monotonic() - OBSERVER_SESSION_TIMEOUT_S

        def state(node: int, r: ReplicaProgress) -> dict:
            return {"replica_id": node, "log_end_offset": r.end_offset,
                    "last_fetch_timestamp": r.last_fetch_ms, "last_caught_up_timestamp": r.last_caught_up_ms}

        voters = [state(self.node_id, ReplicaProgress(self.storage.end_offset, now, now))]
        voters += [state(v, r) for v, r in sorted(self._replicas.items())]
        for o in [o for o, r in self._observers.items() if r.last_fetch_mono < cutoff]:
            del self._observers[o]
        return {"leader_id": self.node_id, "leader_epoch": self.epoch, "high_watermark": self.high_watermark,
                "voters": voters, "observers": [state(o, r) for o, r in sorted(self._observers.items())],
                "nodes": [{"node_id": v, "listeners": [{"name": CONTROLLER_LISTENER, "host": h, "port": p}]}
                          for v, (h, p) in sorted(self.voters.items())]}

    def _handle_describe(self, topic_ok: bool) -> dict:
        if not topic_ok:
            return self._partition_answer(ErrorCode.unknown_topic_or_partition, DESCRIBE_QUORUM, high_watermark=-1,
                                          current_voters=[], observers=[])
        if self.role is not Role.LEADER:
            return self._partition_answer(ErrorCode.not_leader_or_follower, DESCRIBE_QUORUM, high_watermark=-1,
                                          current_voters=[], observers=[])
        quorum = self.describe_quorum()

        def state(r: dict) -> dict:
            return {**r, "replica_directory_id": NO_DIRECTORY_ID}

        return self._partition_answer(ErrorCode.none, DESCRIBE_QUORUM, high_watermark=quorum["high_watermark"],
                                      current_voters=[state(r) for r in quorum["voters"]],
                                      observers=[state(r) for r in quorum["observers"]])

    async def _handle_fetch(self, request: Any) -> dict:
        topic = request.topics[0] if request.topics else None
        p = topic.partitions[0] if topic is not None and topic.partitions else None
        if p is None or topic.topic != METADATA_TOPIC or p.partition != METADATA_PARTITION:
            return self._fetch_answer(ErrorCode.unknown_topic_or_partition)
        if self.role is not Role.LEADER:
            return self._fetch_answer(ErrorCode.not_leader_or_follower)
        if p.current_leader_epoch > self.epoch:
            return self._fetch_answer(ErrorCode.unknown_leader_epoch)
        if 0 <= p.current_leader_epoch < self.epoch:
            return self._fetch_answer(ErrorCode.fenced_leader_epoch)
        offset, replica = p.fetch_offset, request.replica_id
        if offset > 0:
            epoch, end = self.storage.end_offset_for_epoch(p.last_fetched_epoch)
            if epoch != p.last_fetched_epoch or offset > end:
                return self._fetch_answer(ErrorCode.none, diverging_epoch={"epoch": epoch, "end_offset": end})
        if offset < 0 or offset > self.storage.end_offset:
            return self._fetch_answer(ErrorCode.offset_out_of_range)
        version = self._version
        if replica >= 0:
            self._record_fetch(replica, offset)
        # Long poll until something is appended or committed, at most max_wait (capped at the fetch timeout).
        wait_s = min(request.max_wait.total_seconds(), self.config.fetch_timeout_ms / 1000)
        if offset == self.storage.end_offset and wait_s > 0:
            event = self._progress_event
            try:
                await asyncio.wait_for(event.wait(), wait_s)
            except asyncio.TimeoutError:
                pass
            if self._version != version:
                return self._fetch_answer(ErrorCode.not_leader_or_follower if self.role is not Role.LEADER
                                          else ErrorCode.fenced_leader_epoch)
        end = self.storage.end_offset if replica >= 0 else self.high_watermark
        records = self.storage.read(offset, p.partition_max_bytes) if offset < end else b""
        return self._fetch_answer(ErrorCode.none, records=records)

    def _record_fetch(self, replica: int, offset: int) -> None:
        now_ms, now = _now_ms(), time.monotonic()
        table = self._replicas if replica in self.voters else self._observers
        progress = table.setdefault(replica, ReplicaProgress())
        # KIP-836 (Kafka's LeaderState.ReplicaState.updateFollowerState): caught up now when the fetch reaches the
        # leader's log end; caught up at its previous fetch when it reaches the leader's log end of that fetch
        leader_end = self.storage.end_offset
        if offset >= leader_end:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
        elif progress.last_fetch_leader_end > 0 and offset >= progress.last_fetch_leader_end:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.last_fetch_leader_end = leader_end
        progress.end_offset, progress.last_fetch_mono = offset, now
        progress.last_fetch_ms = max(progress.last_fetch_ms, now_ms)
        if replica in self.voters:
            self._update_high_watermark()

    def _fetch_answer(self, error: int, records: bytes = b"", **extra) -> dict:
        partition = {"partition_index": METADATA_PARTITION, "error_code": error,
                     "high_watermark": self.high_watermark, "last_stable_offset": self.high_watermark,
                     "log_start_offset": 0, "current_leader": {"leader_id": self.leader_id, "leader_epoch": self.epoch},
                     "aborted_transactions": None, "records": records, **extra}
        return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0,
                "responses": [{"topic": METADATA_TOPIC, "partitions": [partition]}]}
