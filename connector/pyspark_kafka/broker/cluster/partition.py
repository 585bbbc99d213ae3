"""One partition's replication state on one broker (Kafka's ``cluster.Partition``).

The leader tracks each follower's log end offset and the last time it was caught up (``lastCaughtUpTimeMs``: the
follower's fetch reached the leader's LEO as of its previous fetch); the high watermark is the smallest LEO over
the ISR and never moves backwards; a follower that has not caught up for ``replica.lag.time.max.ms`` leaves the ISR
and one whose LEO reaches the high watermark (at the current leader epoch) joins it again, both through the
controller (AlterPartition: ``propose_isr``). A follower keeps the high watermark the leader sends, capped by its
own LEO.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from pyspark_kafka.broker.cluster.leader_epoch import LeaderEpochCache
from pyspark_kafka.broker.controller.image import PartitionState
from pyspark_kafka.broker.log.partition_log import PartitionLog
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger("pyspark_kafka.broker")


def mono_ms() -> int:
    """Monotonic time in ms (replica lag is measured on it, never on wall-clock time)."""
    return int(time.monotonic() * 1000)


@dataclass
class ReplicaProgress:
    """What the leader knows of one follower: its LEO (-1 unknown) and when it last caught up (monotonic ms)."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = 0
    last_fetch_ms: int = 0


@dataclass
class Partition:
    """``Partition(topic, index, node_id, log, state)``: this broker's replica of ``topic``/``index``.

    ``state`` is the controller's :class:`PartitionState` (replicas, ISR, leader, leader epoch, partition epoch);
    ``propose_isr(partition, isr)`` sends an AlterPartition (set by the broker lifecycle; None: no controller).
    """

    topic: str
    index: int
    node_id: int
    log: PartitionLog
    state: PartitionState
    epochs: LeaderEpochCache = None
    followers: dict[int, ReplicaProgress] = field(default_factory=dict)
    propose_isr: Callable[["Partition", tuple[int, ...]], None] | None = None
    pending_isr: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.epochs is None:
            self.epochs = LeaderEpochCache(self.log.dir)
        # Kafka reads the HW from replication-offset-checkpoint; not kept here, so after a load it is the log
        # start offset until the leader's fetch answers (follower) or the ISR's LEOs move it (leader)
        self.log.high_watermark = self.log.log_start_offset

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.node_id

    @property
    def isr(self) -> tuple[int, ...]:
        """The ISR as the leader acts on it: the committed one, or a pending expansion's (Kafka's maximal ISR)."""
        if self.pending_isr is not None and len(self.pending_isr) > len(self.state.isr):
            return self.pending_isr
        return self.state.isr

    def update_state(self, state: PartitionState, now_ms: int) -> bool:
        """Apply the controller's new state; True when this broker became leader (at a new leader epoch)."""
        old = self.state
        self.state = state
        self.pending_isr = None
        if state.leader != self.node_id:
            return False
        if old.leader != self.node_id or old.leader_epoch != state.leader_epoch:
            self.log.leader_epoch = state.leader_epoch
            self.epochs.assign(state.leader_epoch, self.log.log_end_offset)
            # Kafka's makeLeader: every follower's progress starts unknown, caught up as of now
            self.followers = {r: ReplicaProgress(-1, now_ms) for r in state.replicas if r != self.node_id}
            self.maybe_increment_hw()
            return True
        for r in state.replicas:
            if r != self.node_id:
                self.followers.setdefault(r, ReplicaProgress(-1, now_ms))
        self.maybe_increment_hw()
        return False

    # --- leader --------------------------------------------------------------------------------

    def maybe_increment_hw(self) -> bool:
        """Leader: HW = min LEO over the ISR (Kafka's ``maybeIncrementLeaderHW``); True when it moved (forward only)."""
        leos = [self.log.log_end_offset]
        for r in self.isr:
            if r != self.node_id:
                leos.append(self.followers.get(r, ReplicaProgress()).log_end_offset)
        new_hw = max(0, min(leos))
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            return True
        return False

    def update_follower(self, replica: int, fetch_offset: int, now_ms: int) -> bool:
        """Leader: a follower fetched at ``fetch_offset`` (= its LEO). Returns True when the HW moved.

        Kafka's ``Replica.updateFetchState``: caught up when the fetch reaches the leader's LEO, or the LEO the
        leader had at the follower's previous fetch. A follower outside the ISR whose LEO reaches the HW (and the
        start of the current leader epoch) is proposed back into the ISR.
        """
        progress = self.followers.setdefault(replica, ReplicaProgress(-1, 0))
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            progress.last_caught_up_ms = now_ms
        elif fetch_offset >= progress.last_fetch_leader_leo:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_leader_leo = leo
        progress.last_fetch_ms = now_ms
        if (replica not in self.isr and replica in self.state.replicas and self.pending_isr is None
                and fetch_offset >= self.log.high_watermark
                and fetch_offset >= self.epochs.end_offset_for(self.state.leader_epoch - 1, leo)[1]):
            self._propose(tuple(r for r in self.state.replicas if r in self.state.isr or r == replica))
        return self.maybe_increment_hw()

    def shrink_isr(self, lag_max_ms: int, now_ms: int) -> None:
        """Leader: propose an ISR without the followers not caught up for ``lag_max_ms`` (Kafka's ``maybeShrinkIsr``)."""
        if not self.is_leader or self.pending_isr is not None:
            return
        out = [r for r in self.state.isr if r != self.node_id
               and now_ms - self.followers.get(r, ReplicaProgress()).last_caught_up_ms > lag_max_ms]
        if out:
            log.info("%s-%d: followers %s are out of sync (not caught up for replica.lag.time.max.ms=%d)",
                     self.topic, self.index, out, lag_max_ms)
            self._propose(tuple(r for r in self.state.isr if r not in out))

    def _propose(self, isr: tuple[int, ...]) -> None:
        if self.propose_isr is not None and isr != self.state.isr:
            self.pending_isr = isr
            self.propose_isr(self, isr)

    # --- follower --------------------------------------------------------------------------------

    def append_as_follower(self, records: bytes, leader_hw: int) -> None:
        """Follower: append fetched batches (offsets and epochs kept), note new epochs, HW = min(leader's, LEO)."""
        if records:
            from pyspark_kafka.broker.log.record_batch import validate_batches
            for header in validate_batches(records):
                if header.partition_leader_epoch > self.epochs.latest_epoch():
                    self.epochs.assign(header.partition_leader_epoch, header.base_offset)
            self.log.append_as_follower(records)
        self.log.high_watermark = max(self.log.high_watermark, min(leader_hw, self.log.log_end_offset))

    def truncate_to(self, offset: int) -> None:
        """Follower: cut the log at ``offset`` (KIP-101 truncation) and the epoch cache with it."""
        if offset < self.log.log_end_offset:
            log.info("%s-%d: truncating the follower's log from %d to %d", self.topic, self.index,
                     self.log.log_end_offset, offset)
            self.log.truncate_to(offset)
        self.epochs.truncate_from_end(self.log.log_end_offset)
