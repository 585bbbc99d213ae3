"""The group and transaction coordinators in the replicated cluster: they move with the leadership of their
internal partitions (Kafka's ``GroupCoordinator.onElection/onResignation``, ``TransactionStateManager`` and
``TransactionMarkerChannelManager``).

- **Internal topics through the controller.** ``__consumer_offsets`` (``offsets.topic.num.partitions``,
  ``offsets.topic.replication.factor``) and ``__transaction_state`` (``transaction.state.log.num.partitions``,
  ``transaction.state.log.replication.factor``, ``min.insync.replicas`` = ``transaction.state.log.min.isr``) are
  created by the controller like any topic when the first FindCoordinator needs them; with fewer live brokers
  than the replication factor FindCoordinator answers COORDINATOR_NOT_AVAILABLE (Kafka's
  ``AutoTopicCreationManager``). Their partitions replicate through the normal data path.
- **FindCoordinator** names the leader of partition ``abs(javaHashCode(key)) % partitions``
  (:func:`~pyspark_kafka.broker.coordinator.internal_topics.partition_for`).
- **Load / unload.** A broker that becomes leader of an internal partition (at a new leader epoch) replays it
  into its coordinator; one that stops leading forgets its state; requests for keys it does not own are
  answered NOT_COORDINATOR (the client finds the coordinator again).
- **Writes wait for the ISR** (acks=all): :meth:`ClusterCoordinators.write_done` after a coordinator append;
  NOT_LEADER_OR_FOLLOWER becomes NOT_COORDINATOR, a timeout (``offsets.commit.timeout.ms``) or too small an ISR
  COORDINATOR_NOT_AVAILABLE (Kafka's ``GroupCoordinatorService`` / ``TransactionStateManager`` error mapping).
  A classic group's generation becomes Stable only once the ISR has its record (``write_done`` of the group
  coordinator's ``classic`` half, as Kafka's ``CoordinatorRuntime`` completes a write's future at the high
  watermark): a member joining during that wait gets the generation rebalanced, not half-formed.
- **Transaction markers** go to each partition's current leader: in-process when it is this broker, else
  WriteTxnMarkers (27) v1; NOT_LEADER_OR_FOLLOWER or a connection failure retries against the leader the metadata
  image names then, every ``RETRY_BACKOFF_S``, for as long as this broker coordinates the transaction. When
  every marker is written the transaction is recorded CompleteCommit / CompleteAbort.
"""

from __future__ import annotations

import asyncio
import time

from pyspark_kafka.broker.cluster.peer_client import PeerClient
from pyspark_kafka.broker.coordinator.internal_topics import partition_for
from pyspark_kafka.broker.coordinator.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from pyspark_kafka.broker.coordinator.txn import STATE_SEGMENT_BYTES
from pyspark_kafka.broker.errors import ErrorCode, KafkaError, NotLeaderOrFollowerError
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger("pyspark_kafka.broker")

GROUP_KEY, TXN_KEY = 0, 1
RETRY_BACKOFF_S = 0.1  # Kafka's TransactionMarkerChannelManager retries with retry.backoff.ms (100)
TOPIC_WAIT_S = 2.0  # FindCoordinator waits this long for a just-created internal partition to have a leader


def _now_ms() -> int:
    return int(time.time() * 1000)


class ClusterCoordinators:
    """``ClusterCoordinators(lifecycle)``: ties a cluster broker's coordinators to its metadata image.

    :meth:`install` before the coordinators load; :meth:`on_partition` for each metadata change of an internal
    partition this broker replicates. Used from the broker's event loop only.
    """

    def __init__(self, lifecycle) -> None:
        self.lifecycle = lifecycle
        self.broker = lifecycle.broker
        self.config = lifecycle.config
        self.rm = lifecycle.replica_manager
        self.groups = self.broker.group_coordinator
        self.txn = self.broker.txn_coordinator
        self._peers: dict[int, tuple[PeerClient, asyncio.Lock]] = {}
        #: False while the broker replays the metadata log up to its own registration: the leaders it sees then
        #: are history, so nothing is loaded (Kafka's broker publishes metadata only once caught up)
        self.ready = False

    def install(self) -> None:
        """Switch both coordinators to owning only the internal partitions this broker leads."""
        self.groups.offsets.partition_count = lambda: self.partition_count(OFFSETS_TOPIC)
        self.groups.offsets.on_append = lambda p: self._appended(OFFSETS_TOPIC, p)
        self.groups.classic.write_done = self.group_write_done  # Stable once the ISR has the generation's record
        self.txn.partition_count = lambda: self.partition_count(TRANSACTION_STATE_TOPIC)
        self.txn.on_append = lambda p: self._appended(TRANSACTION_STATE_TOPIC, p)

    def close(self) -> None:
        for client, _ in self._peers.values():
            client.close()

    # --- metadata ------------------------------------------------------------------------------

    def partition_count(self, topic: str) -> int:
        """Partitions of internal ``topic``: the controller's, or the configured count before it exists."""
        t = self.lifecycle.image.topics.get(topic)
        if t is not None and t.partitions:
            return max(t.partitions) + 1
        return self.config.get_int("offsets.topic.num.partitions" if topic == OFFSETS_TOPIC
                                   else "transaction.state.log.num.partitions")

    def caught_up(self) -> None:
        """The metadata image reached this broker's registration: load every internal partition it leads."""
        self.ready = True
        none = type("NoState", (), {"leader": -1, "leader_epoch": -1})()
        for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            for index in range(self.partition_count(topic) if topic in self.lifecycle.image.topics else 0):
                state = self.lifecycle.image.partition(topic, index)
                if state is not None and state.leader == self.lifecycle.node_id:
                    self.on_partition(topic, index, none, state)

    def on_partition(self, topic: str, index: int, old, new) -> None:
        """An internal partition's state changed (``old``/``new``: PartitionState, ``new`` None when this broker
        is no longer a replica): load its coordinator state on becoming leader, unload it on losing leadership.
        Ignored until :meth:`caught_up`."""
        if not self.ready:
            return
        me = self.lifecycle.node_id
        leads = new is not None and new.leader == me
        elected = leads and (old.leader != me or old.leader_epoch != new.leader_epoch)
        try:
            if elected:
                log.info("%s-%d: leader at epoch %d: loading the %s coordinator's state", topic, index,
                         new.leader_epoch, "group" if topic == OFFSETS_TOPIC else "transaction")
                if topic == OFFSETS_TOPIC:
                    self.groups.ensure_loaded().load_partition(index)
                else:
                    self.txn.load_partition(index, _now_ms())
            elif not leads and old.leader == me:
                log.info("%s-%d: no longer the leader: unloading the coordinator's state", topic, index)
                if topic == OFFSETS_TOPIC:
                    self.groups.unload_partition(index)
                else:
                    self.txn.unload_partition(index)
        except KafkaError:
            log.exception("%s-%d: loading the coordinator's state failed", topic, index)

    def _appended(self, topic: str, partition: int) -> None:
        part = self.rm.partitions.get((topic, partition))
        if part is not None and part.is_leader:
            part.maybe_increment_hw()
        self.rm.notify_append(topic, partition)  # followers waiting in a fetch take the records now

    # --- FindCoordinator --------------------------------------------------------------------------

    async def find(self, key: str, key_type: int, listener: str | None = None) -> dict:
        """FindCoordinator's entry for ``key``: the leader of its internal partition (created when missing),
        at the address it registered for ``listener`` (the client's listener name, as Metadata answers; the first
        listener's when it registered no such name). When this broker's election as that partition's leader is in
        progress (its leader-epoch checkpoint being written, a restart's unfence), the answer waits for it, at most
        :data:`TOPIC_WAIT_S` s, so the coordinator has loaded the partition's state when the client comes."""
        topic = OFFSETS_TOPIC if key_type == GROUP_KEY else TRANSACTION_STATE_TOPIC
        image = self.lifecycle.image
        if topic not in image.topics:
            error = await self._create_internal_topic(topic)
            if error is not None:
                return _no_coordinator(key, error)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + TOPIC_WAIT_S
            while topic not in image.topics and loop.time() < deadline:  # the metadata record arrives
                await asyncio.sleep(0.02)
        index = partition_for(key, self.partition_count(topic))
        if self.rm.electing:  # this broker's election as its leader in progress: answer once it leads and has loaded
            await self.rm.wait_for_elections([(topic, index)], TOPIC_WAIT_S)
        state = image.partition(topic, index)
        b = None if state is None or state.leader < 0 else image.brokers.get(state.leader)
        if b is None or b.fenced:
            return _no_coordinator(key, f"the {topic} partition of {key!r} has no leader now")
        host, port = b.endpoint(listener)  # the listener the client came in on (Kafka's getCoordinator)
        return {"key": key, "node_id": b.id, "host": host, "port": port, "error_code": ErrorCode.none,
                "error_message": None}

    async def create_internal_topic(self, topic: str) -> str | None:
        """Ask the controller for internal ``topic`` (``__consumer_offsets`` or ``__transaction_state``) with its
        own partition count, replication factor and configs, as Kafka's ``AutoTopicCreationManager`` does for
        FindCoordinator and for a Metadata request that names it. Returns None when it exists now, else why not
        (a message: too few live brokers for its replication factor, or the controller's answer)."""
        return await self._create_internal_topic(topic)

    async def _create_internal_topic(self, topic: str) -> str | None:
        """Ask the controller for ``topic``; None when it exists now, else why not (COORDINATOR_NOT_AVAILABLE)."""
        if topic == OFFSETS_TOPIC:
            rf = self.config.get_int("offsets.topic.replication.factor")
            configs = {"cleanup.policy": "compact", "compression.type": "producer",
                       "segment.bytes": self.config.get("offsets.topic.segment.bytes")}
        else:
            rf = self.config.get_int("transaction.state.log.replication.factor")
            configs = {"cleanup.policy": "compact", "segment.bytes": str(STATE_SEGMENT_BYTES),
                       "min.insync.replicas": self.config.get("transaction.state.log.min.isr"),
                       "unclean.leader.election.enable": "false"}
        live = len(self.lifecycle.image.live_brokers())
        if live < rf:  # Kafka's message (AutoTopicCreationManager), answered COORDINATOR_NOT_AVAILABLE
            message = (f"Number of alive brokers '{live}' does not meet the required replication factor '{rf}' for "
                       f"the {topic} topic (configured via '{'offsets.topic' if topic == OFFSETS_TOPIC else 'transaction.state.log'}"
                       ".replication.factor'). This error can be ignored if the cluster is starting up and not all "
                       "brokers are up yet.")
            log.info(message)
            return message
        try:
            answer = await self.lifecycle.call({"op": "create_topics", "topics": [
                {"name": topic, "partitions": self.partition_count(topic), "replication_factor": rf,
                 "configs": configs, "internal": True}]})
        except ConnectionError as exc:
            return f"the controller did not answer: {exc}"
        result = answer["topics"][0] if answer.get("topics") else answer
        if result.get("error_code") not in (0, ErrorCode.topic_already_exists):
            return result.get("error_message") or f"creating {topic} failed ({result.get('error_code')})"
        return None

    # --- ownership and writes ------------------------------------------------------------------

    async def write_done(self, topic: str, partition: int) -> ErrorCode:
        """Wait until the ISR has this broker's log of internal ``topic``/``partition`` up to its end (acks=all).

        NONE; NOT_COORDINATOR when the leadership moved; COORDINATOR_NOT_AVAILABLE on ``offsets.commit.timeout.ms``
        (ms) or an ISR below ``min.insync.replicas``.
        """
        plog = self.rm.logs.get_log(topic, partition)
        if plog is None:
            return ErrorCode.not_coordinator
        self._appended(topic, partition)
        try:
            await self.rm.wait_for_replication(topic, partition, plog.log_end_offset,
                                               self.config.get_int("offsets.commit.timeout.ms"))
        except NotLeaderOrFollowerError:
            return ErrorCode.not_coordinator
        except KafkaError as exc:
            log.info("%s-%d: a coordinator write did not reach the ISR: %s", topic, partition, exc)
            return ErrorCode.coordinator_not_available
        return ErrorCode.none

    async def group_write_done(self, group_id: str) -> ErrorCode:
        """:meth:`write_done` for ``group_id``'s ``__consumer_offsets`` partition."""
        return await self.write_done(OFFSETS_TOPIC, self.groups.offsets.partition_of(group_id))

    async def txn_write_done(self, transactional_id: str) -> ErrorCode:
        """:meth:`write_done` for ``transactional_id``'s ``__transaction_state`` partition."""
        return await self.write_done(TRANSACTION_STATE_TOPIC, self.txn.partition_of(transactional_id))

    # --- transaction markers ---------------------------------------------------------------------

    async def apply_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                           coordinator_epoch: int) -> ErrorCode:
        """Write one marker into this broker's leader replica of ``topic``/``partition`` and wait for its ISR
        (WriteTxnMarkers is acks=all). A ``__consumer_offsets`` partition completes the producer's staged offsets
        there (Kafka's ``GroupCoordinator.onTransactionCompleted``). Returns the partition's error code."""
        try:
            if topic == OFFSETS_TOPIC:
                self.rm.leader_partition(topic, partition)
                if partition not in (self.groups.owned or ()):
                    return ErrorCode.not_leader_or_follower
                self.groups.offsets.complete_txn(producer_id, commit, _now_ms(), coordinator_epoch,
                                                 partition=partition)
            elif not self.rm.append_marker(topic, partition, producer_id, producer_epoch, commit, _now_ms(),
                                           coordinator_epoch):
                return ErrorCode.unknown_topic_or_partition
        except KafkaError as exc:
            return exc.error_code
        code = await self.write_done(topic, partition)
        return ErrorCode.not_leader_or_follower if code == ErrorCode.not_coordinator else code

    async def write_markers(self, meta, commit: bool) -> None:
        """Write the markers of prepared transaction ``meta`` to each partition's leader, retrying, then record
        its completion. Gives up when this broker stops coordinating it (the next coordinator completes it)."""
        txn_id = meta.transactional_id
        remaining = sorted(meta.partitions)
        attempts = 0
        while remaining:
            if self.txn.transactions.get(txn_id) is not meta or not self.txn.owns(txn_id) or self.lifecycle._stopping:
                log.info("transaction of %r: no longer coordinated here; markers left for the next coordinator",
                         txn_id)
                return
            results = await asyncio.gather(*(self._send_marker(t, p, meta, commit) for t, p in remaining))
            failed = [(tp, code) for tp, code in zip(remaining, results)
                      if code not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition)]
            remaining = [tp for tp, _ in failed]
            if remaining:
                attempts += 1
                if attempts % 50 == 1:
                    log.info("transaction of %r: markers to %s not written yet (%s); retrying", txn_id,
                             remaining, [int(c) for _, c in failed])
                await asyncio.sleep(RETRY_BACKOFF_S)
        if self.txn.markers_written(meta, commit, _now_ms()):
            await self.txn_write_done(txn_id)

    async def _send_marker(self, topic: str, partition: int, meta, commit: bool) -> ErrorCode:
        state = self.lifecycle.image.partition(topic, partition)
        if state is None:
            return ErrorCode.unknown_topic_or_partition
        if state.leader < 0:
            return ErrorCode.not_leader_or_follower
        epoch = self._coordinator_epoch(meta.transactional_id)
        if state.leader == self.lifecycle.node_id:
            return await self.apply_marker(topic, partition, meta.producer_id, meta.producer_epoch, commit, epoch)
        from kio.schema.write_txn_markers.v1.request import (WritableTxnMarker, WritableTxnMarkerTopic,
                                                             WriteTxnMarkersRequest)
        from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse
        from kio.static.primitive import i16, i32, i64

        request = WriteTxnMarkersRequest(markers=(WritableTxnMarker(
            producer_id=i64(meta.producer_id), producer_epoch=i16(meta.producer_epoch), transaction_result=commit,
            topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=(i32(partition),)),),
            coordinator_epoch=i32(epoch)),))
        peer = self._peer(state.leader)
        if peer is None:
            return ErrorCode.not_leader_or_follower
        client, lock = peer
        try:
            async with lock:  # PeerClient: one request at a time per connection
                response = await client.send(request, WriteTxnMarkersResponse,
                                             self.config.get_int("request.timeout.ms") / 1000)
        except ConnectionError as exc:
            log.debug("WriteTxnMarkers to broker %d failed: %s", state.leader, exc)
            return ErrorCode.not_leader_or_follower
        for marker in response.markers:
            for t in marker.topics:
                for p in t.partitions:
                    return ErrorCode(int(p.error_code))
        return ErrorCode.unknown_server_error

    def _coordinator_epoch(self, transactional_id: str) -> int:
        """The leader epoch of the id's ``__transaction_state`` partition (Kafka's coordinator epoch)."""
        st = self.lifecycle.image.partition(TRANSACTION_STATE_TOPIC, self.txn.partition_of(transactional_id))
        return 0 if st is None else st.leader_epoch

    def _peer(self, node: int):
        b = self.lifecycle.image.brokers.get(node)
        if b is None:
            return None
        entry = self._peers.get(node)
        if entry is None or entry[0].address != (b.host, b.port):
            if entry is not None:
                entry[0].close()
            entry = self._peers[node] = (PeerClient(b.host, b.port, f"txn-coordinator-{self.lifecycle.node_id}"),
                                         asyncio.Lock())
        return entry


def _no_coordinator(key: str, message: str) -> dict:
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.coordinator_not_available,
            "error_message": message}
