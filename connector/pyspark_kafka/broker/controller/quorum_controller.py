"""The controller state machine (Kafka's ``QuorumController`` with its ``ClusterControlManager``,
``ReplicationControlManager`` and ``BrokerHeartbeatManager``), on a :class:`MetadataLog`.

Every change is a metadata record appended to the log; the controller's :class:`ClusterImage` is built by
applying the committed records (also after a restart: replay), exactly as the brokers build theirs.

- Registration: ``register`` writes a ``broker`` record; the broker epoch is that record's offset (Kafka's rule),
  so a restarted broker gets a newer epoch and requests carrying an older one are refused (STALE_BROKER_EPOCH).
  A new registration is fenced until a heartbeat asks to be unfenced.
- Heartbeats (``broker.heartbeat.interval.ms``): a broker silent for ``broker.session.timeout.ms`` is fenced
  (``fence`` record) and every partition it leads gets a new leader from the ISR (or, with
  ``unclean.leader.election.enable``, from any live replica: a data loss that is logged); it leaves the ISR of
  the partitions it follows (KRaft removes fenced brokers from ISRs). A clean ``shutdown`` does the same at once
  (Kafka's controlled shutdown).
- A one-node cluster (the combined node's controller, whose image has one registered broker, the node itself):
  a clean restart changes no partition. The controlled shutdown writes only the ``fence`` record (no leader moves,
  no ISR member leaves), so the unfence elects nothing and every partition keeps its leader epoch; a restart whose
  logs were not closed cleanly gets new leader epochs as in Kafka (:meth:`QuorumController._register`). A
  deliberate difference from Kafka 4.4 (:meth:`QuorumController.one_node_cluster`); split clusters are Kafka's.
- An unfenced broker becomes leader of the offline partitions whose ISR names it (Kafka elects the last ISR
  member when it returns), or of those it replicates when unclean election is enabled.
- Topics: ``create_topics`` assigns replicas with :func:`~pyspark_kafka.broker.controller.assignment.assign_replicas`
  over the unfenced brokers and writes ``topic`` + ``partition`` records (leader = first replica, ISR = replicas).
- ``allocate_producer_ids`` (Kafka's AllocateProducerIds, KIP-730): blocks of 1000 producer ids, unique in the
  cluster, so idempotent and transactional producers on different brokers never share an id.
- Active controller = the metadata log's leader (with :class:`~pyspark_kafka.broker.raft.RaftMetadataLog`, the Raft
  leader of 3 voters). Every controller keeps its image from the committed records; a write op on a non-leader is
  answered NOT_CONTROLLER (41) with ``leader_id``. On becoming leader the controller first waits until its own
  epoch's first batch is committed (then every record of older epochs is committed and replayed into the image),
  and gives every registered broker a fresh ``broker.session.timeout.ms`` (Kafka's ``BrokerHeartbeatManager`` is
  likewise rebuilt on failover) rather than fencing them all at once.
- ``alter_partition`` (Kafka's AlterPartition, KIP-497): the leader proposes a new ISR at its leader epoch and
  partition epoch; stale epochs are refused with FENCED_LEADER_EPOCH / INVALID_UPDATE_VERSION, an ISR naming a
  fenced or unregistered replica with INELIGIBLE_REPLICA (107), an ISR without the leader or with non-replicas with
  INVALID_REQUEST, none of them writing a record; a change that changes nothing writes no record either. An ISR
  change that brings the last adding replica of a reassignment in completes it (KIP-455).
- Admin changes (``elect_leaders``, ``alter_reassignments``, ``create_partitions``, ``delete_topics``,
  ``alter_topic_configs``; ``create_acls`` / ``delete_acls`` with the rules of
  :mod:`~pyspark_kafka.broker.controller.acl_control`; ``alter_user_scram_credentials`` with those of
  :mod:`~pyspark_kafka.broker.controller.scram_control`), forwarded by
  brokers: rules in :mod:`~pyspark_kafka.broker.controller.partition_admin`; each answer carries the ``offset`` of
  its last record. ``auto.leader.rebalance.enable``: a periodic PREFERRED election of every partition.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import replace

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.topic_config import validate_topic_config, validate_topic_name
from pyspark_kafka.broker.controller import acl_control, partition_admin, scram_control
from pyspark_kafka.broker.controller.assignment import assign_replicas
from pyspark_kafka.broker.controller.image import (
    BOOTSTRAP_FEATURES, METADATA_VERSION, NO_LEADER, ClusterImage, decode, encode,
)
from pyspark_kafka.broker.controller.single_voter_log import MetadataLog
from pyspark_kafka.broker.coordinator.internal_topics import INTERNAL_TOPICS
from pyspark_kafka.broker.errors import (
    ErrorCode, InconsistentClusterIdError, InvalidRequestError, KafkaError, NotControllerError, TopicExistsError,
)
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger("pyspark_kafka.controller")
PRODUCER_ID_BLOCK = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


def _mono_ms() -> int:
    return int(time.monotonic() * 1000)


class QuorumController:
    """The active controller: answers controller-channel requests and fences silent brokers.

    ``QuorumController(metadata_log, config, cluster_id)``; :meth:`start` replays the log and starts the session check,
    :meth:`handle` answers one request dict (see :mod:`~pyspark_kafka.broker.controller.channel`). Used from
    one event loop; appends are serialised by a lock so each decision sees the image of the previous one.
    """

    def __init__(self, metadata_log: MetadataLog, config: BrokerConfig, cluster_id: str = "",
                 combined_node: int | None = None, image: ClusterImage | None = None) -> None:
        """``image``: an image the metadata log keeps current itself (a combined node's snapshot keeper's, applied
        before the log's listeners are called): the controller reads it instead of replaying every record into an
        image of its own. None: the controller's own image, fed by its subscription to ``metadata_log``."""
        self.log = metadata_log
        #: the node id of the combined node whose controller this is (``process.roles=broker,controller``, one
        #: voter); None for a controller of a split cluster. Only with it can :meth:`one_node_cluster` be true.
        self.combined_node = combined_node
        self.cluster_id = cluster_id  # every broker answers it (Kafka keeps it in each node's meta.properties)
        self.config = config
        self.image = ClusterImage() if image is None else image
        self.session_timeout_ms = config.get_int("broker.session.timeout.ms")
        self._last_heartbeat: dict[int, int] = {}
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task | None = None
        self._rebalancer: asyncio.Task | None = None
        self._active_epoch: int | None = None  # the leader epoch in which this controller last became active
        if image is None:
            metadata_log.subscribe(lambda offset, raw: self.image.apply(offset, decode(raw)))

    async def start(self) -> None:
        """Start the session-timeout check (every ``broker.heartbeat.interval.ms`` / 4, at least 50 ms)."""
        now = _mono_ms()
        for b in self.image.brokers.values():  # after a controller restart every broker gets a full session
            self._last_heartbeat[b.id] = now
        period = max(0.05, self.config.get_int("broker.heartbeat.interval.ms") / 4000)
        self._timer = asyncio.create_task(self._session_check(period))
        if self.config.get("auto.leader.rebalance.enable") == "true":
            interval = self.config.get_int("leader.imbalance.check.interval.seconds")
            self._rebalancer = asyncio.create_task(self._rebalance_leaders(interval))

    async def stop(self) -> None:
        tasks = [t for t in (self._timer, self._rebalancer) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _try_activate(self) -> bool:
        """True when this node is the active controller with its image caught up; on the first success in a
        leader epoch every registered broker gets a fresh session. Raises NotControllerError on a non-leader."""
        leader, epoch = self.log.leader()
        if leader != self.log.node_id:
            raise NotControllerError(f"node {self.log.node_id} is not the active controller (leader: "
                                     f"{'unknown' if leader is None else leader}, epoch {epoch}): retry on the leader")
        if self._active_epoch == epoch:
            return True
        start = getattr(self.log, "epoch_start_offset", None)
        if start is not None and (start < 0 or self.log.committed_offset() <= start):
            return False  # the epoch's LeaderChange batch is not committed: older records may still be uncommitted
        now = _mono_ms()
        for b in self.image.brokers.values():
            self._last_heartbeat[b.id] = now
        self._active_epoch = epoch
        log.info("node %d is the active controller in epoch %d: image replayed to offset %d, %d brokers get a "
                 "fresh session of %d ms", self.log.node_id, epoch, self.image.offset, len(self.image.brokers),
                 self.session_timeout_ms)
        return True

    async def _activate(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) until :meth:`_try_activate`; NotControllerError when not leader or not ready in time.
        Then, when the image has no ``metadata.version`` (a new cluster, or a log written before feature records),
        append the bootstrap ``feature`` records (Kafka 4.4's ``ActivationRecordsGenerator``: "The metadata log
        appears to be empty. Appending ... bootstrap record(s)")."""
        deadline = time.monotonic() + timeout_s
        while not self._try_activate():
            if time.monotonic() > deadline:
                raise NotControllerError(f"node {self.log.node_id} leads but its epoch is not committed yet: retry")
            await asyncio.sleep(0.02)
        if METADATA_VERSION not in self.image.features:
            records = [{"type": "feature", "name": name, "level": level} for name, level in BOOTSTRAP_FEATURES]
            offset = await self._append(records)
            log.info("no metadata.version in the metadata log: appended %d bootstrap feature records (%s) up to "
                     "offset %d", len(records), ", ".join(f"{n}={v}" for n, v in BOOTSTRAP_FEATURES), offset)

    async def _append(self, records: list[dict]) -> int:
        return await self.log.append([encode(r) for r in records]) if records else self.image.offset

    # --- requests --------------------------------------------------------------------------

    async def handle(self, request: dict) -> dict:
        """Answer one controller-channel request (``op`` names it); errors are Kafka codes in ``error_code``."""
        op = request.get("op")
        try:
            if op == "quorum":
                leader, epoch = self.log.leader()
                return {"error_code": 0, "node_id": self.log.node_id, "leader_id": -1 if leader is None else leader,
                        "leader_epoch": epoch, "active": self._active_epoch == epoch and leader == self.log.node_id}
            if op == "describe_quorum":  # DescribeQuorum (55), forwarded by a broker (KIP-595): the Raft leader's
                return {"error_code": 0, **self.log.describe_quorum()}  # view; NOT_CONTROLLER on another voter
            if op == "fetch_metadata":
                if not hasattr(self.log, "read"):
                    raise InvalidRequestError("this controller's metadata log is the Raft quorum: fetch it with "
                                              "Raft Fetch (1) on the controller.quorum.voters address")
                records = await self.log.read(request["offset"], request.get("max_records", 1000),
                                              request.get("wait_ms", 0))
                return {"error_code": 0, "records": [r.decode() for r in records],
                        "end_offset": self.log.committed_offset()}
            async with self._lock:
                await self._activate()
                if op in self._OPS:
                    return await getattr(self, self._OPS[op])(request)
        except NotControllerError as exc:
            leader, _ = self.log.leader()
            return {"error_code": int(exc.error_code), "error_message": str(exc),
                    "leader_id": -1 if leader is None else leader}
        except KafkaError as exc:
            return {"error_code": int(exc.error_code), "error_message": str(exc)}
        return {"error_code": int(ErrorCode.invalid_request), "error_message": f"unknown controller op {op!r}"}

    def one_node_cluster(self, node: int) -> bool:
        """Whether ``node`` is the only broker of a one-node cluster: this controller is the combined node's
        (``combined_node``) and its image has exactly one registered broker, the combined node itself.

        There a clean restart changes no partition (a deliberate difference from Kafka 4.4, whose
        ``ReplicationControlManager`` moves every leadership to -1 at the controlled shutdown and elects it again at
        the unfence: two new leader epochs and about 600 records a restart for 300 partitions, with nowhere else to
        move a leader to). See :meth:`_fence` and :meth:`_register`. False for every split cluster."""
        return (self.combined_node is not None and node == self.combined_node
                and len(self.image.brokers) == 1 and node in self.image.brokers)

    def _leave_partitions(self, node: int) -> list[dict]:
        """The partition records that take ``node`` out of leadership and the ISRs (Kafka's
        ``generateLeaderAndIsrUpdates`` with ``brokerToRemove``): a partition it leads gets a leader from the rest of
        its ISR that is live (or, with unclean leader election, any live replica), else none (-1) keeping the last
        ISR member; it leaves the ISR of the partitions it follows."""
        records: list[dict] = []
        live = {x.id for x in self.image.live_brokers()} - {node}
        for name, topic in self.image.topics.items():
            for p, st in topic.partitions.items():
                if node not in st.isr and st.leader != node:
                    continue
                isr = tuple(r for r in st.isr if r != node) or (st.isr if st.leader == node else ())
                leader = st.leader
                if st.leader == node:
                    leader = next((r for r in st.replicas if r in isr and r in live), NO_LEADER)
                    if leader == NO_LEADER and self._unclean(name):
                        leader = next((r for r in st.replicas if r in live), NO_LEADER)
                        if leader != NO_LEADER:
                            log.warning("unclean leader election for %s-%d: broker %d (not in the ISR %s) leads at "
                                        "leader epoch %d; records only the old ISR had are lost",
                                        name, p, leader, list(st.isr), st.leader_epoch + 1)
                            isr = (leader,)
                    if leader == NO_LEADER:
                        isr = st.isr  # Kafka keeps the last ISR member: it may come back with every record
                new = replace(st, isr=isr, leader=leader, leader_epoch=st.leader_epoch + (1 if leader != st.leader else 0),
                              partition_epoch=st.partition_epoch + 1)
                records.append(new.record(name, p))
        return records

    async def _register(self, req: dict) -> dict:
        node = req["node_id"]
        # the broker's stored cluster id (its meta.properties; empty at a split broker's first start, when it learns
        # the id from this answer) must be this cluster's: Kafka's ClusterControlManager.registerBroker refuses
        # another with INCONSISTENT_CLUSTER_ID, writing nothing
        if req.get("cluster_id") and req["cluster_id"] != self.cluster_id:
            raise InconsistentClusterIdError(f"Expected cluster ID {self.cluster_id}, but got cluster ID "
                                             f"{req['cluster_id']}")
        # a one-node cluster's node whose logs were not closed cleanly (no clean-shutdown marker: killed, or
        # stopped between its controlled shutdown and the close of its logs): its recovery may have truncated
        # records written at its current leader epochs, so it gets new ones, as Kafka 4.4's
        # ClusterControlManager.registerBroker does for every new incarnation that is not a clean restart
        # (ReplicationControlManager.handleBrokerShutdown: leaders -1 now, elected again at the unfence)
        cleanup: list[dict] = []
        if self.one_node_cluster(node) and req.get("clean_shutdown") is False:
            cleanup = self._leave_partitions(node)
            if cleanup:
                log.info("broker %d restarts after an unclean shutdown: %d partitions get new leader epochs",
                         node, len(cleanup))
        epoch = self.image.offset + 1 + len(cleanup)  # the offset of the registration record
        listeners = req.get("listeners")  # every advertised listener (Kafka's BrokerRegistrationRequest endpoints)
        await self._append(cleanup + [{"type": "broker", "id": node, "epoch": epoch, "host": req["host"], "port": req["port"],
                             **({"listeners": listeners} if listeners else {}),
                             **({"capacity": req["capacity"], "nofile": req.get("nofile", -1)}
                                if req.get("capacity", -1) >= 0 else {})}])
        self._last_heartbeat[node] = _mono_ms()
        await self._elect_for_offline(node)
        log.info("broker %d registered at %s:%d with broker epoch %d", node, req["host"], req["port"], epoch)
        return {"error_code": 0, "broker_epoch": epoch, "cluster_id": self.cluster_id}

    def _check_epoch(self, req: dict):
        b = self.image.brokers.get(req["node_id"])
        if b is None or b.epoch != req["broker_epoch"]:
            raise _StaleBrokerEpoch(f"broker {req['node_id']} epoch {req['broker_epoch']} is not the registered "
                                    f"one ({None if b is None else b.epoch}): register again")
        return b

    async def _heartbeat(self, req: dict) -> dict:
        b = self._check_epoch(req)
        self._last_heartbeat[b.id] = _mono_ms()
        if b.fenced and req.get("want_fence") is False and req.get("caught_up_offset", -1) >= b.epoch:
            await self._append([{"type": "unfence", "id": b.id, "epoch": b.epoch}])
            log.info("broker %d (epoch %d) unfenced", b.id, b.epoch)
            await self._elect_for_offline(b.id)
        return {"error_code": 0, "is_fenced": self.image.brokers[b.id].fenced}

    async def _shutdown(self, req: dict) -> dict:
        b = self._check_epoch(req)
        await self._fence(b.id, "controlled shutdown", controlled=True)
        return {"error_code": 0}

    async def _session_check(self, period_s: float) -> None:
        while True:
            await asyncio.sleep(period_s)
            now = _mono_ms()
            try:
                async with self._lock:
                    try:
                        if not self._try_activate():
                            continue
                    except NotControllerError:
                        continue  # a standby controller fences nobody
                    for b in list(self.image.brokers.values()):
                        if not b.fenced and now - self._last_heartbeat.get(b.id, now) > self.session_timeout_ms:
                            await self._fence(b.id, f"no heartbeat for broker.session.timeout.ms="
                                                    f"{self.session_timeout_ms}")
            except NotControllerError as exc:
                # e.g. a paused leader resumed: its fence record is in an old epoch, never committed (Raft)
                log.info("session check: leadership lost before the fencing was committed: %s", exc)
            except Exception:
                log.exception("session check failed")

    async def _rebalance_leaders(self, interval_s: int) -> None:
        """``auto.leader.rebalance.enable``: every ``leader.imbalance.check.interval.seconds`` the active controller
        moves leadership back to each partition's preferred replica where it is unfenced and in the ISR (KRaft's
        ``QuorumController`` balances every imbalanced partition; ``leader.imbalance.per.broker.percentage`` is
        not used)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                async with self._lock:
                    if not self._try_activate():
                        continue
                    records = partition_admin.imbalanced_elections(self.image)
                    if records:
                        await self._append(records)
                        log.info("auto leader rebalance: %d partitions moved to their preferred leader", len(records))
            except NotControllerError:
                continue
            except Exception:
                log.exception("auto leader rebalance failed")

    # --- elections -------------------------------------------------------------------------

    def _unclean(self, topic: str) -> bool:
        t = self.image.topics[topic]
        value = t.configs.get("unclean.leader.election.enable")
        return (value if value is not None else self.config.get("unclean.leader.election.enable")) == "true"

    async def _fence(self, node: int, why: str, controlled: bool = False) -> None:
        """Fence ``node``: a ``fence`` record, then new leaders for its partitions and ISRs without it
        (:meth:`_leave_partitions`).

        ``controlled``: a controlled shutdown. In a one-node cluster (:meth:`one_node_cluster`) it writes the
        ``fence`` record only: every partition keeps its leader, ISR and leader epoch, so the start's unfence elects
        nothing (there is no other broker to lead; a deliberate difference from Kafka, whose fence makes every leader
        -1). A fence for a missed session (``broker.session.timeout.ms``) is Kafka's everywhere."""
        b = self.image.brokers.get(node)
        if b is None or b.fenced:
            return
        keep = controlled and self.one_node_cluster(node)
        records: list[dict] = [{"type": "fence", "id": node, "epoch": b.epoch}]
        if not keep:
            records += self._leave_partitions(node)
        await self._append(records)
        log.info("broker %d (epoch %d) fenced: %s; %d partition changes%s", node, b.epoch, why, len(records) - 1,
                 " (a one-node cluster: every partition keeps its leader and leader epoch)" if keep else "")

    async def _elect_for_offline(self, node: int) -> None:
        """Partitions without a leader that ``node`` (now unfenced) may lead: elect it."""
        b = self.image.brokers.get(node)
        if b is None or b.fenced:
            return
        records = []
        for name, topic in self.image.topics.items():
            for p, st in topic.partitions.items():
                if st.leader != NO_LEADER or node not in st.replicas:
                    continue
                if node in st.isr:
                    isr = st.isr
                elif self._unclean(name):
                    log.warning("unclean leader election for %s-%d: broker %d (not in the ISR %s) leads; records "
                                "only the ISR had are lost", name, p, node, list(st.isr))
                    isr = (node,)
                else:
                    continue
                records.append(replace(st, isr=isr, leader=node, leader_epoch=st.leader_epoch + 1,
                                       partition_epoch=st.partition_epoch + 1).record(name, p))
        await self._append(records)

    # --- topics ----------------------------------------------------------------------------

    async def _create_topics(self, req: dict) -> dict:
        """CreateTopics: ``topics`` [{name, partitions, replication_factor, configs, assignments}], ``validate_only``.

        More than :data:`~pyspark_kafka.broker.log.manager.MAX_PARTITIONS_PER_REQUEST` (10,000) partitions in one
        request: every topic is refused with POLICY_VIOLATION and nothing is written (Kafka's controller,
        "Excessively large number of partitions per request.", measured on Apache Kafka 4.3.1)."""
        from pyspark_kafka.broker.log.manager import MAX_PARTITIONS_PER_REQUEST

        asked = sum(max(t.get("partitions") or 0, len(t.get("assignments") or ())) for t in req["topics"])
        if asked > MAX_PARTITIONS_PER_REQUEST:
            return {"error_code": 0, "topics": [
                {"name": t["name"], "error_code": int(ErrorCode.policy_violation),
                 "error_message": "Excessively large number of partitions per request."} for t in req["topics"]]}
        results = []
        for t in req["topics"]:
            try:
                results.append({"name": t["name"], "error_code": 0, **await self._create_topic(t, req.get("validate_only", False))})
            except KafkaError as exc:
                results.append({"name": t["name"], "error_code": int(exc.error_code), "error_message": str(exc)})
        return {"error_code": 0, "topics": results}

    def default_replication_factor(self, name: str) -> int:
        """``default.replication.factor`` (the brokers ask for the internal topics with their own factor:
        ``offsets.topic.replication.factor`` / ``transaction.state.log.replication.factor``)."""
        return self.config.get_int("default.replication.factor")

    async def _create_topic(self, t: dict, validate_only: bool) -> dict:
        name = t["name"]
        validate_topic_name(name)
        if name in INTERNAL_TOPICS and not t.get("internal"):
            raise InvalidRequestError(f"{name} is an internal topic: the brokers create it (with "
                                      "offsets.topic.* / transaction.state.log.* settings) on the first "
                                      "FindCoordinator that needs it")
        if name in self.image.topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        partitions = t.get("partitions", -1)
        if partitions in (-1, None):
            partitions = self.config.get_int("num.partitions")
        factor = t.get("replication_factor", -1)
        if factor in (-1, None):
            factor = self.default_replication_factor(name)
        configs = {k: v for k, v in ((k, validate_topic_config(k, v)) for k, v in (t.get("configs") or {}).items())
                   if v is not None}
        live = [b.id for b in self.image.live_brokers()]
        n = max(1, len(live))
        if t.get("assignments"):  # a manual assignment (Kafka's ReplicationControlManager.createTopic)
            assignment = partition_admin.manual_topic_assignment(self.image, t)
            partitions, factor = len(assignment), len(assignment[0])
        else:
            assignment = assign_replicas(live, partitions, factor, start=random.randrange(n), shift=random.randrange(n))
        self._check_capacity(assignment)
        if validate_only:
            return {"partitions": partitions, "replication_factor": factor, "topic_id": None}
        topic_id = str(uuid.uuid4())
        records = [{"type": "topic", "name": name, "topic_id": topic_id, "configs": configs}]
        records += [partition_admin.new_partition(self.image, r).record(name, p) for p, r in enumerate(assignment)]
        await self._append(records)
        log.info("created topic %s: %d partitions, replicas %s", name, partitions, assignment)
        return {"partitions": partitions, "replication_factor": factor, "topic_id": topic_id}

    def _check_capacity(self, assignment: list, pending: list = ()) -> None:
        """PolicyViolationError when a broker would host more partitions than it said it can keep open (its
        registration's ``capacity``, from its open-file limit): the single node's rule, kept for every node (Apache
        Kafka has no such check and fails later with "Too many open files"). Used by CreateTopics and
        CreatePartitions (also with ``validate_only``, as the single node's ``LogManager.check_capacity``).

        ``assignment``: the new partitions' replica lists ([[broker id]]); ``pending``: replica lists accepted
        earlier in the same request and not yet in the image (they count as hosted)."""
        from pyspark_kafka.broker.errors import PolicyViolationError
        from pyspark_kafka.broker.log.manager import FILES_PER_PARTITION

        added: dict[int, int] = {}
        for replicas in assignment:
            for r in replicas:
                added[r] = added.get(r, 0) + 1
        for node, more in sorted(added.items()):
            b = self.image.brokers.get(node)
            if b is None or b.capacity < 0:
                continue
            have = sum(1 for t in self.image.topics.values() for st in t.partitions.values() if node in st.replicas)
            have += sum(1 for replicas in pending if node in replicas)
            if have + more > b.capacity:
                raise PolicyViolationError(
                    f"broker {node} can keep {b.capacity} partitions open (ulimit -n {b.nofile}, "
                    f"{FILES_PER_PARTITION} files each) and has {have}; {more} more do not fit: delete topics or "
                    "raise the open-file limit")

    async def _allocate_producer_ids(self, req: dict) -> dict:
        """Kafka's AllocateProducerIds (KIP-730): a block of ``PRODUCER_ID_BLOCK_SIZE`` ids unique in the cluster."""
        self._check_epoch(req)
        first = self.image.next_producer_id
        await self._append([{"type": "producer_ids", "broker": req["node_id"], "next": first + PRODUCER_ID_BLOCK}])
        return {"error_code": 0, "first": first, "size": PRODUCER_ID_BLOCK}

    async def _alter_partition(self, req: dict) -> dict:
        self._check_epoch(req)
        st = self.image.partition(req["topic"], req["partition"])
        if st is None:
            return {"error_code": int(ErrorCode.unknown_topic_or_partition)}
        if st.leader != req["node_id"] or st.leader_epoch != req["leader_epoch"]:
            return {"error_code": int(ErrorCode.fenced_leader_epoch), "state": st.record(req["topic"], req["partition"])}
        if st.partition_epoch != req["partition_epoch"]:
            return {"error_code": int(ErrorCode.invalid_update_version), "state": st.record(req["topic"], req["partition"])}
        live = {b.id for b in self.image.live_brokers()}
        asked = list(req["isr"])
        if len(set(asked)) != len(asked) or not set(asked) <= set(st.replicas) or st.leader not in asked:
            # Kafka's Replicas.validateIsr and the leader check: INVALID_REQUEST
            return {"error_code": int(ErrorCode.invalid_request), "error_message":
                    f"the ISR {asked} must hold the leader {st.leader}, only replicas of {list(st.replicas)}, "
                    "each once"}
        ineligible = [r for r in asked if r not in live and r != st.leader and r not in st.isr]
        if ineligible:  # Kafka: a fenced / unregistered broker cannot join the ISR; nothing is written
            return {"error_code": int(ErrorCode.ineligible_replica), "error_message":
                    f"replicas {ineligible} are fenced or not registered: they cannot join the ISR of "
                    f"{req['topic']}-{req['partition']}", "state": st.record(req["topic"], req["partition"])}
        isr = tuple(r for r in st.replicas if r in asked)
        new = replace(st, isr=isr, partition_epoch=st.partition_epoch + 1)
        new = partition_admin.complete_reassignment(new, live)  # KIP-455: the adding replicas caught up
        if replace(new, partition_epoch=st.partition_epoch) == st:
            # Kafka's PartitionChangeBuilder builds no record when nothing changes: the metadata log never grows
            # without a change; the answer carries the current state (same partition epoch)
            return {"error_code": 0, "state": st.record(req["topic"], req["partition"])}
        await self._append([new.record(req["topic"], req["partition"])])
        if new.replicas != st.replicas:
            log.info("%s-%d: reassignment completed: replicas %s -> %s, leader %d", req["topic"], req["partition"],
                     list(st.replicas), list(new.replicas), new.leader)
        log.info("%s-%d: ISR %s -> %s (partition epoch %d)", req["topic"], req["partition"], list(st.isr),
                 list(isr), new.partition_epoch)
        return {"error_code": 0, "state": new.record(req["topic"], req["partition"])}


    # --- admin changes of topics and partitions (controller/partition_admin.py) ------------------

    #: the ops that change the metadata (run under the lock, once this controller is active): op -> method name
    _OPS = {"register": "_register", "heartbeat": "_heartbeat", "shutdown": "_shutdown",
            "create_topics": "_create_topics", "alter_partition": "_alter_partition",
            "allocate_producer_ids": "_allocate_producer_ids",
            "elect_leaders": "_elect_leaders", "alter_reassignments": "_alter_reassignments",
            "create_partitions": "_create_partitions", "delete_topics": "_delete_topics",
            "alter_topic_configs": "_alter_topic_configs", "alter_dynamic_configs": "_alter_dynamic_configs",
            "create_acls": "_create_acls", "delete_acls": "_delete_acls",
            "alter_user_scram_credentials": "_alter_user_scram_credentials"}

    async def _alter_user_scram_credentials(self, req: dict) -> dict:
        """AlterUserScramCredentials, forwarded (``deletions`` / ``upsertions`` as
        :func:`~pyspark_kafka.broker.controller.scram_control.alter_credentials` takes them): validated here, once,
        with Kafka's ``ScramControlManager`` rules; per user an error code and message, and the ``offset`` of the
        last record. The log names users and mechanisms only, never salts or keys."""
        results, records = scram_control.alter_credentials(lambda user, mech: (user, mech) in self.image.scram,
                                                           req.get("deletions") or [], req.get("upsertions") or [])
        offset = await self._append(records)
        for r in records:
            log.info("SCRAM credential of user %r for mechanism %d %s", r["name"], r["mechanism"],
                     "removed" if r["type"] == "remove_scram_credential" else "set")
        return {"error_code": 0, "results": results, "offset": offset}

    async def _create_acls(self, req: dict) -> dict:
        """CreateAcls, forwarded (``creations``: 7-field binding lists): rules in
        :mod:`~pyspark_kafka.broker.controller.acl_control`; per creation an error code and message."""
        results, records = acl_control.create_acls(self.image, req["creations"])
        offset = await self._append(records)
        for r in records:
            log.info("ACL %s created: %s", r["id"], {k: v for k, v in r.items() if k not in ("type", "id")})
        return {"error_code": 0, "results": results, "offset": offset}

    async def _delete_acls(self, req: dict) -> dict:
        """DeleteAcls, forwarded (``filters``: 7-field filter lists): per filter the matching ACLs."""
        results, records = acl_control.delete_acls(self.image, req["filters"])
        offset = await self._append(records)
        if records:
            log.info("ACLs deleted: %s", [r["id"] for r in records])
        return {"error_code": 0, "results": results, "offset": offset}

    async def _alter_dynamic_configs(self, req: dict) -> dict:
        """AlterConfigs / IncrementalAlterConfigs of a broker or group resource, forwarded by the broker that validated
        the new set (``resource`` "broker" / "group", ``name``, ``configs``): one ``dynamic_config`` record."""
        offset = await self._append([{"type": "dynamic_config", "resource": req["resource"], "name": req["name"],
                                      "configs": dict(req["configs"])}])
        log.info("%s %r: dynamic configs now %s", req["resource"], req["name"], sorted(req["configs"]))
        return {"error_code": 0, "offset": offset}

    async def _alter_topic_configs(self, req: dict) -> dict:
        """AlterConfigs / IncrementalAlterConfigs of a topic, forwarded by a broker that computed the new set of
        overrides (``name``, ``configs``): validated, then one ``config`` record every broker applies (Kafka's
        ``ConfigurationControlManager`` writing ``ConfigRecord``s). UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG."""
        name = req["name"]
        if name not in self.image.topics:
            return {"error_code": int(ErrorCode.unknown_topic_or_partition),
                    "error_message": f"Topic {name!r} does not exist"}
        configs = {k: v for k, v in ((k, validate_topic_config(k, v)) for k, v in req["configs"].items())
                   if v is not None}
        offset = await self._append([{"type": "config", "name": name, "configs": configs}])
        log.info("topic %s: config overrides now %s", name, configs)
        return {"error_code": 0, "offset": offset}

    async def _elect_leaders(self, req: dict) -> dict:
        """ElectLeaders (KIP-460): ``election_type`` 0/1, ``partitions`` {topic: [partition]} or None (all)."""
        results, records = partition_admin.elect_leaders(self.image, req["election_type"], req.get("partitions"))
        for r in records:
            old = self.image.partition(r["topic"], r["partition"])
            if r["leader"] not in old.isr:
                log.warning("unclean leader election (ElectLeaders UNCLEAN) for %s-%d: broker %d (not in the ISR %s) "
                            "leads at leader epoch %d; records only the old ISR had are lost", r["topic"],
                            r["partition"], r["leader"], list(old.isr), r["leader_epoch"])
        offset = await self._append(records)
        if records:
            log.info("ElectLeaders (%s): %d partitions get a new leader",
                     "PREFERRED" if req["election_type"] == 0 else "UNCLEAN", len(records))
        return {"error_code": 0, "results": results, "offset": offset}

    async def _alter_reassignments(self, req: dict) -> dict:
        """AlterPartitionReassignments (KIP-455): ``topics`` [{name, partitions: [{partition, replicas|None}]}]."""
        results, records = [], []
        for t in req["topics"]:
            out = []
            for p in t["partitions"]:
                code, message, new = partition_admin.alter_reassignment(self.image, t["name"], p["partition"],
                                                                        p.get("replicas"), req.get("allow_rf_change", True))
                if new is not None:
                    records.append(new.record(t["name"], p["partition"]))
                    log.info("%s-%d: reassignment to %s: replicas %s, adding %s, removing %s", t["name"],
                             p["partition"], p.get("replicas"), list(new.replicas), list(new.adding),
                             list(new.removing))
                out.append({"partition": p["partition"], "error_code": code, "error_message": message})
            results.append({"name": t["name"], "partitions": out})
        offset = await self._append(records)
        return {"error_code": 0, "topics": results, "offset": offset}

    async def _create_partitions(self, req: dict) -> dict:
        """CreatePartitions: ``topics`` [{name, count, assignments|None}], ``validate_only``.

        A topic whose new partitions would take a broker beyond its registered partition capacity is refused with
        POLICY_VIOLATION (:meth:`_check_capacity`; the single node's rule) and gets no partition."""
        results, records = [], []
        for t in req["topics"]:
            code, message, new = partition_admin.create_partitions(self.image, t["name"], t["count"],
                                                                   t.get("assignments"))
            if code == 0:
                try:
                    self._check_capacity([r["replicas"] for r in new], [r["replicas"] for r in records])
                except KafkaError as exc:
                    code, message, new = int(exc.error_code), str(exc), []
            results.append({"name": t["name"], "error_code": code, "error_message": message})
            if not req.get("validate_only"):
                records += new
        offset = await self._append(records)
        if records:
            log.info("CreatePartitions: %d new partitions", len(records))
        return {"error_code": 0, "topics": results, "offset": offset}

    async def _delete_topics(self, req: dict) -> dict:
        """DeleteTopics: ``names`` → per name error code, message and topic id."""
        results, records = [], []
        for name in req["names"]:
            code, message, topic_id, new = partition_admin.delete_topic(self.image, name)
            results.append({"name": name, "error_code": code, "error_message": message, "topic_id": topic_id})
            records += new
        offset = await self._append(records)
        if records:
            log.info("DeleteTopics: %s removed", [r["name"] for r in records])
        return {"error_code": 0, "topics": results, "offset": offset}


class _StaleBrokerEpoch(KafkaError):
    error_code = ErrorCode.stale_broker_epoch
