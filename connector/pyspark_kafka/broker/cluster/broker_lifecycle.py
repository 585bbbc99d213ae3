"""A broker's life in the replicated cluster (Kafka's ``BrokerLifecycleManager``, ``BrokerMetadataPublisher`` and
the ``ReplicaManager.applyDelta`` that makes replicas leaders or followers).

- Registers with the controller (``register``: the answer is the broker epoch), heartbeats every
  ``broker.heartbeat.interval.ms`` asking to be unfenced once its metadata has caught up to its registration;
  re-registers when the controller answers STALE_BROKER_EPOCH (it was fenced and forgotten, or restarted).
- Observes the metadata log (:class:`~pyspark_kafka.broker.controller.single_voter_log.SingleVoterMetadataLog` with one
  controller; with several a :class:`~pyspark_kafka.broker.raft.RaftMetadataLog` observer, and controller requests
  go through a :class:`~pyspark_kafka.broker.controller.channel.ControllerRouter` to the active controller) and
  builds the same :class:`~pyspark_kafka.broker.controller.image.ClusterImage` as the controller; each changed
  partition naming this broker as a replica is created locally (the controller's topic id) and made leader
  (leader epoch stamped in new batches, an entry in the leader-epoch cache) or follower (the
  :class:`~pyspark_kafka.broker.cluster.replica_fetcher.ReplicaFetcher` truncates and fetches from the leader).
- ACLs (Kafka's ``AclPublisher`` feeding ``StandardAuthorizer``): the broker's authorizer uses the image's ACLs
  (``acl`` / ``remove_acl`` records, written by the controller for forwarded CreateAcls / DeleteAcls), never
  ``acls.json``; each record applied is used by the next authorization decision.
- SCRAM credentials (Kafka's ``ScramPublisher``): SASL/SCRAM authentication and DescribeUserScramCredentials read
  the image's (``scram_credential`` records, written by the controller for forwarded AlterUserScramCredentials),
  never ``scram-credentials.json``; the SCRAM JAAS users of the config are written as records before registering.
- Checks the ISR of the partitions it leads every ``replica.lag.time.max.ms`` / 2 and sends AlterPartition
  (``alter_partition``) for shrinks and expansions.
- On a clean stop, a controlled shutdown (``shutdown``): the controller moves its leaderships at once.
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import sys
import threading
import time
import uuid

from pyspark_kafka.broker.cluster.combined import parse_voters
from pyspark_kafka.broker.cluster.coordinators import ClusterCoordinators
from pyspark_kafka.broker.cluster.leader_epoch import LeaderEpochCache, batched_writes, write_durably
from pyspark_kafka.broker.cluster.partition import Partition, mono_ms
from pyspark_kafka.broker.cluster.producer_ids import ClusterProducerIdManager
from pyspark_kafka.broker.cluster.replica_fetcher import ReplicaFetcher
from pyspark_kafka.broker.controller.channel import ChannelClient, ControllerRouter
from pyspark_kafka.broker.controller.image import ClusterImage, PartitionState, decode
from pyspark_kafka.broker.controller.metadata_snapshot import metadata_snapshots
from pyspark_kafka.broker.controller.single_voter_log import SingleVoterMetadataLog
from pyspark_kafka.broker.errors import ConfigError, ErrorCode
from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.coordinator.internal_topics import INTERNAL_TOPICS

log = get_logger("pyspark_kafka.broker")
#: Raft mode: ``id@host:port,...`` of each controller's channel (set by ``pyspark_kafka.broker.cluster.node``).
CHANNELS_ENV = "PYSPARK_KAFKA_CONTROLLER_CHANNELS"


class BrokerRegistrationError(RuntimeError):
    """The broker did not register with the controller quorum within ``initial.broker.registration.timeout.ms``
    (Kafka's ``BrokerLifecycleManager``: it shuts down). The message names the controller's last refusal, e.g.
    INCONSISTENT_CLUSTER_ID for a data directory of another cluster, and the fix."""


def _dump_tasks() -> None:
    """SIGUSR2: every asyncio task of this broker with its stack, on stderr (node.log)."""
    for task in asyncio.all_tasks():
        print(f"--- {task!r}", file=sys.stderr)
        task.print_stack(file=sys.stderr)
    sys.stderr.flush()


class BrokerLifecycle:
    """``BrokerLifecycle(broker)`` for a :class:`~pyspark_kafka.broker.server.Broker` in a replicated cluster.

    :meth:`start` once the listener is bound (the registration carries the advertised address); :meth:`stop`
    on shutdown. ``image`` is the broker's metadata image (Metadata answers from it).
    """

    def __init__(self, broker, local_controller=None) -> None:
        self.broker = broker
        self.config = broker.config
        self.node_id = broker.node_id
        #: a combined node: from :meth:`start` on, the broker's image is the metadata log's snapshot keeper's, which
        #: its controller reads too, applied once per committed record before the listeners hear of it. Kafka's
        #: combined node replays each record twice (the controller's state, the broker's MetadataImage): the same
        #: state, so one image serves both roles here. The broker only reads it. Until then (the lifecycle is built
        #: with the Broker, before the controller's log is loaded) an empty image of its own.
        self._local_controller = local_controller
        self._shared_image = False
        self.image = ClusterImage()
        #: a combined node: the metadata log is its controller's own (started and stopped by the controller)
        self._own_log = local_controller is None
        if local_controller is not None:
            self.metadata_log = local_controller.metadata_log
            self.channel = local_controller.channel
            self.controller_id = self.node_id
            voters = {}
        else:
            voters = parse_voters(self.config.get("controller.quorum.voters"))
        # The broker's metadata log copy (Raft) and snapshots (KIP-630) live beside its log directory (the log
        # manager owns every directory inside it).
        data_dir = broker.data_dir.parent / f"{broker.data_dir.name}.metadata"
        snapshots = metadata_snapshots(data_dir / "__cluster_metadata-0", self.config.get) if voters else None
        if not voters:
            pass
        elif len(voters) == 1:
            (self.controller_id, self.controller_address), = voters.items()
            self.metadata_log = SingleVoterMetadataLog(self.node_id, data_dir, self.controller_id,
                                                       self.controller_address, snapshots=snapshots)
            self.channel = ChannelClient(*self.controller_address)
        else:
            channels = parse_voters(os.environ.get(CHANNELS_ENV, ""))
            if set(channels) != set(voters):
                raise ConfigError(f"controller.quorum.voters names {sorted(voters)} but {CHANNELS_ENV} gives the "
                                  f"controller channels of {sorted(channels)}: give id@host:port for each voter")
            from pyspark_kafka.broker.raft import RaftMetadataLog
            from pyspark_kafka.broker.raft.config import DEFAULTS as QUORUM_DEFAULTS

            # A Raft observer (KIP-595): fetches __cluster_metadata from the leader into data_dir.
            # the broker's Raft client uses the controllers' controller.quorum.* timings, as Kafka's brokers do
            quorum = {name: self.config.get(name) for name in ("controller.quorum.voters", *QUORUM_DEFAULTS)}
            self.metadata_log = RaftMetadataLog(data_dir, {"node.id": str(self.node_id), **quorum}, snapshots=snapshots)
            self.channel = ControllerRouter(channels, self.metadata_log.leader)
            self.controller_id = -1
        self.replica_manager = broker.replica_manager
        if broker.authorizer is not None:
            self._use_metadata_acls(broker.authorizer)
        self._use_metadata_credentials()
        self.fetcher = ReplicaFetcher(self.replica_manager, self.config, self._address_of)
        self.broker_epoch = -1
        self.registered_offset = 1 << 62
        #: (topic, partition) -> None while :meth:`start` replays the log (each applied once after), else None
        self._replayed_partitions: dict[tuple[str, int], None] | None = None
        #: topic names of the ``remove_topic`` records :meth:`start` replays (checked against the image after it)
        self._replayed_removals: dict[str, None] | None = None
        self.caught_up = asyncio.Event()
        """Set once the metadata image reached this broker's registration record (Kafka's
        ``BrokerLifecycleManager.initialCatchUpFuture``)."""
        self.unfenced = asyncio.Event()
        """Set once, after :attr:`caught_up`, this broker's own image shows its registration unfenced; the server
        processes requests only then, as Kafka's ``BrokerServer.startup`` enables request processing only after
        ``lifecycleManager.setReadyToUnfence()`` completed. Serving at :attr:`caught_up` alone answered a client's
        first Metadata without this broker (a fenced broker is not listed): librdkafka took "0 brokers" as a
        partial answer and sent nothing more until another request (issue 25, ``test_connect_at_listen.py``)."""
        self.lag_max_ms = self.config.get_int("replica.lag.time.max.ms")
        #: the controller's last refusal of this broker's registration (INCONSISTENT_CLUSTER_ID), for the shutdown message
        self.refusal = ""
        #: set (with :attr:`failure`) when the broker must stop: it did not register within
        #: ``initial.broker.registration.timeout.ms``; ``serve`` then stops and raises :attr:`failure`
        self.failed = asyncio.Event()
        self.failure: BrokerRegistrationError | None = None
        self._registered_once = False  # Kafka's initialRegistrationSucceeded: the timeout applies before it only
        self._tasks: list[asyncio.Task] = []
        self._proposals: set[asyncio.Task] = set()  # AlterPartition requests in flight
        self._stopping = False  # Python 3.11's wait_for can swallow a cancellation: loops also check this flag
        #: (topic, partition) -> None: elections of this broker whose leader-epoch checkpoints are being written
        #: (:meth:`_write_elections`); the replica takes the new leadership once its checkpoint is durable
        self._elections: dict[tuple[str, int], None] = {}
        self._election_task: asyncio.Task | None = None
        self._election_done: asyncio.Event | None = None  # set when _election_task ends
        # the group and transaction coordinators follow the leadership of their internal partitions
        self.coordinators = ClusterCoordinators(self)
        self.coordinators.install()

    def _use_metadata_acls(self, authorizer) -> None:
        """The authorizer decides from this broker's metadata image; ACLs a single-node ``acls.json`` holds in
        this data directory are not used (logged once, naming the file and what to do)."""
        ignored, path = authorizer.bindings, getattr(authorizer.store, "path", None)
        authorizer.use_metadata(self.image.acls)
        if ignored and path is not None and path.exists():  # a combined node migrated and renamed it: not ignored
            log.warning("broker %d: the %d ACLs in %s are not used in a cluster (ACLs are the controller's metadata "
                        "records, replicated to every broker): re-create them with CreateAcls (kafka-acls.sh) "
                        "through any broker, then remove the file", self.node_id, len(ignored),
                        path)

    def _use_metadata_credentials(self) -> None:
        """SASL/SCRAM authentication and DescribeUserScramCredentials read this broker's metadata image (Kafka's
        ``ScramPublisher``); a single-node ``scram-credentials.json`` left in a split broker's data directory is not
        used (logged once, naming the file and what to do; a combined node migrated and renamed it)."""
        from pyspark_kafka.broker.security.credentials import FILE_NAME

        self.broker.security.use_metadata(self.image.scram)
        path = self.broker.data_dir / FILE_NAME
        if path.exists():
            log.warning("broker %d: the SCRAM credentials in %s are not used in a cluster (credentials are the "
                        "controller's metadata records, replicated to every broker): re-create the users with "
                        "AlterUserScramCredentials (kafka-configs.sh --entity-type users) through any broker, then "
                        "remove the file", self.node_id, path)

    async def _seed_scram_users(self) -> None:
        """Write the SCRAM JAAS users of this broker's config (``user_<name>="<password>"``, our extension) as
        credential records through the controller, before the registration: those the image lacks, or holds with
        another password (checked with the stored salt and iterations). One request per mechanism (Kafka's
        controller refuses a user named twice in one request). A refusal is logged with the controller's message;
        ConnectionError when no controller answers (the registration is retried)."""
        import base64
        import hashlib

        from pyspark_kafka.broker.security.scram import (DEFAULT_ITERATIONS, MECHANISMS,
                                                         credential_from_salted_password)

        by_mechanism: dict[str, list[dict]] = {}
        for (user, mech), password in sorted(self.broker.security.scram_seeds.items()):
            algo, mech_id = MECHANISMS[mech]
            held = self.image.scram.get((user, mech))
            if held is not None:
                salted = hashlib.pbkdf2_hmac(algo, password.encode(), held.salt, held.iterations)
                if credential_from_salted_password(mech, held.salt, salted, held.iterations) == held:
                    continue
            salt = os.urandom(32)  # Kafka's ScramFormatter: a random salt
            salted = hashlib.pbkdf2_hmac(algo, password.encode(), salt, DEFAULT_ITERATIONS)
            by_mechanism.setdefault(mech, []).append(
                {"name": user, "mechanism": mech_id, "iterations": DEFAULT_ITERATIONS,
                 "salt": base64.b64encode(salt).decode(), "salted_password": base64.b64encode(salted).decode()})
        for mech, upsertions in by_mechanism.items():
            answer = await self.forward({"op": "alter_user_scram_credentials", "deletions": [],
                                         "upsertions": upsertions})
            if answer.get("error_code") == ErrorCode.not_controller:
                raise ConnectionError(f"SCRAM users of the JAAS config: {answer.get('error_message')}")
            refused = [r for r in answer.get("results", ()) if r["error_code"]]
            if answer.get("error_code") or refused:
                log.warning("broker %d: the controller refused SCRAM users of the JAAS config (%s): %s", self.node_id,
                            mech, answer.get("error_message") or [(r["user"], r["error_message"]) for r in refused])
            else:
                log.info("broker %d: SCRAM users of the JAAS config written for %s: %s", self.node_id, mech,
                         [u["name"] for u in upsertions])

    def _address_of(self, node: int):
        b = self.image.brokers.get(node)
        return None if b is None else (b.host, b.port)

    async def start(self) -> None:
        shared = self._local_controller.metadata_log.shared_image() if self._local_controller is not None else None
        if shared is not None:  # a combined node, its controller started: read the one image from now on
            self.image, self._shared_image = shared, True
            if self.broker.authorizer is not None:
                self.broker.authorizer.use_metadata(shared.acls)
            self.broker.security.use_metadata(shared.scram)
        self.producer_ids = ClusterProducerIdManager(self)
        coordinator = self.broker.txn_coordinator
        coordinator.producer_ids = self.producer_ids  # cluster-unique producer ids (KIP-730)
        # the records the log replays now (its whole tail, at once): the image takes each, the replicas only the
        # last state of each partition (Kafka's MetadataLoader publishes one delta after its initial catch-up, and
        # ReplicaManager.applyDelta applies each partition's final state once)
        self._replayed_partitions, self._replayed_removals = {}, {}
        try:
            self.metadata_log.subscribe(self._on_record)
        finally:
            replayed, self._replayed_partitions = self._replayed_partitions, None
            removed, self._replayed_removals = self._replayed_removals, None
        for name in removed:
            # a replayed deletion removes the local log only when the image has no topic of that name or one of
            # another topic id (deleted and created again): the name alone would delete the newer topic's records
            # (Kafka tells a deleted topic's logs from a newer one's by topic id, KIP-516)
            image_topic, local = self.image.topics.get(name), self.replica_manager.logs.topic(name)
            if local is not None and (image_topic is None or str(local.topic_id) != image_topic.topic_id):
                self._remove_topic(name)
        with batched_writes():
            for topic, index in replayed:
                try:
                    self._apply_partition(topic, index)
                except Exception:
                    log.exception("applying the replayed state of %s-%d failed", topic, index)
        if self._own_log:
            await self.metadata_log.start()
        self._tasks = [asyncio.create_task(self._heartbeat_loop()), asyncio.create_task(self._isr_loop())]
        if threading.current_thread() is threading.main_thread():  # an EmbeddedBroker runs in another thread
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, _dump_tasks)  # diagnosis: stuck tasks

    async def stop(self) -> None:
        self._stopping = True
        self.replica_manager.shutting_down = True
        for key in list(self.replica_manager.partitions):  # acks=all waiters answer NOT_LEADER_OR_FOLLOWER now
            self.replica_manager.notify_append(*key)
        if self.broker_epoch >= 0:
            try:
                await self.channel.call({"op": "shutdown", "node_id": self.node_id,
                                         "broker_epoch": self.broker_epoch}, timeout_s=5)
            except ConnectionError:
                log.warning("controlled shutdown: the controller did not answer; it fences this broker after "
                            "broker.session.timeout.ms")
        if self._election_task is not None:  # its checkpoint writes end (no thread outlives the stop)
            await asyncio.gather(self._election_task, return_exceptions=True)
        for t in [*self._tasks, *self._proposals]:
            t.cancel()
        await asyncio.gather(*self._tasks, *self._proposals, return_exceptions=True)
        await self.fetcher.close()
        self.coordinators.close()
        if self._own_log:
            await self.metadata_log.stop()
        self.channel.close()

    # --- controller requests ---------------------------------------------------------------

    async def call(self, request: dict, timeout_s: float = 10, attempt_timeout_s: float | None = None) -> dict:
        """Send one request to the controller (forwarded admin requests use this); ConnectionError when it is down.

        ``attempt_timeout_s`` (s, several controllers only): the longest wait for one controller before the
        router tries the next (default 5 s)."""
        if attempt_timeout_s is not None and isinstance(self.channel, ControllerRouter):
            return await self.channel.call(request, timeout_s, attempt_timeout_s=attempt_timeout_s)
        return await self.channel.call(request, timeout_s)

    async def forward(self, request: dict, timeout_s: float = 10, wait_s: float = 5) -> dict:
        """Forward an admin request to the active controller (Kafka's forwarding, KIP-590) and, when it changed
        the metadata (its answer's ``offset``), wait until this broker's image has applied that offset (at most
        ``wait_s`` s), so the client's next Metadata sees the change. ConnectionError when no controller answers."""
        answer = await self.call(request, timeout_s)
        offset = answer.get("offset", -1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while self.image.offset < offset and loop.time() < deadline:
            await asyncio.sleep(0.02)
        return answer

    async def _register(self) -> None:
        if self.broker.security.scram_seeds:
            await self._seed_scram_users()  # before the registration: in the image before this broker serves
        # every advertised listener (Kafka's BrokerRegistration endpoints): Metadata and FindCoordinator answer
        # with the address on the client's listener
        listeners = [[lst.name, *lst.advertised()] for lst in self.broker.security.listeners]
        from pyspark_kafka.broker.log.manager import partition_capacity

        from pyspark_kafka.broker import meta_properties

        # a split broker sends the cluster id of its meta.properties (none at its first start): the controller
        # refuses another cluster's (Kafka's BrokerRegistrationRequest.clusterId, INCONSISTENT_CLUSTER_ID)
        stored = meta_properties.read(self.broker.data_dir) if self.broker.controller_role is None else None
        # how many partitions it can keep open: the controller refuses topics beyond it (the single node's rule)
        answer = await self.call({"op": "register", "node_id": self.node_id, "host": self.broker.host,
                                  "port": self.broker.port, "listeners": listeners,
                                  "cluster_id": "" if stored is None else stored.cluster_id,
                                  "capacity": partition_capacity(),
                                  "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                                  # a combined node: whether its logs were closed cleanly at the last stop (the
                                  # clean-shutdown marker; Kafka's previousBrokerEpoch from its .kafka_cleanshutdown)
                                  **({"clean_shutdown": self.replica_manager.logs.clean_shutdown}
                                     if self.broker.controller_role is not None else {})})
        if answer.get("error_code", 0) != 0:
            self._registration_refused(answer)
            return
        self.broker_epoch = answer["broker_epoch"]
        self._registered_once = True
        if answer.get("cluster_id"):
            self.broker.cluster_id = answer["cluster_id"]  # one id for the whole cluster
            if stored is None and self.broker.controller_role is None:  # a split broker's first registration
                meta_properties.note_cluster_id(self.broker.data_dir, self.node_id, answer["cluster_id"])
        self.registered_offset = self.broker_epoch
        self._check_caught_up()
        log.info("broker %d registered with the controller %s: broker epoch %d", self.node_id,
                 getattr(self.channel, "active", self.controller_id), self.broker_epoch)
        self.producer_ids.prefetch()

    def _registration_refused(self, answer: dict) -> None:
        """Log a refused registration (Kafka's BrokerLifecycleManager: "Unable to register broker {} because the
        controller returned error {}", then a retry after a back-off). INCONSISTENT_CLUSTER_ID is logged as an error
        naming the data directory and the fix: no retry can succeed with that ``meta.properties``."""
        code, message = answer.get("error_code"), answer.get("error_message", "")
        try:
            name = ErrorCode(code).name.upper()
        except ValueError:
            name = str(code)
        text = f"Unable to register broker {self.node_id} because the controller returned error {name}: {message}"
        if code == ErrorCode.inconsistent_cluster_id:
            log.error("%s. The data directory %s belongs to another cluster (its meta.properties holds another "
                      "cluster.id): start this broker on a fresh data directory, or point it at the controllers of "
                      "the cluster it belongs to (controller.quorum.voters)", text, self.broker.data_dir)
            self.refusal = text + (f". The data directory {self.broker.data_dir} belongs to another cluster: start "
                                   "this broker on a fresh data directory, or point it at that cluster's controllers")
        else:
            log.info("%s", text)

    def _check_registration_timeout(self, started: float) -> None:
        """Shut the broker down when it has not registered within ``initial.broker.registration.timeout.ms`` of its
        start (Kafka's ``BrokerLifecycleManager.RegistrationTimeoutEvent``: "Shutting down because we were unable
        to register with the controller quorum."): sets :attr:`failure`, which ends ``serve``."""
        timeout_s = self.config.get_int("initial.broker.registration.timeout.ms") / 1000
        if self.failure is None and not self._registered_once and time.monotonic() - started >= timeout_s:
            message = "Shutting down because we were unable to register with the controller quorum."
            if self.refusal:
                message += " " + self.refusal
            log.error("%s", message)
            self.failure = BrokerRegistrationError(message)
            self.failed.set()

    async def _heartbeat_loop(self) -> None:
        interval = self.config.get_int("broker.heartbeat.interval.ms") / 1000
        started = time.monotonic()
        while not self._stopping:
            self._check_registration_timeout(started)
            if self.failure is not None:
                return
            try:
                if self.broker_epoch < 0:
                    await self._register()
                    if self.broker_epoch < 0:  # refused: a retry after a back-off
                        await asyncio.sleep(min(interval, 0.5))
                        continue
                # a controller silent for a heartbeat interval is left for the next one (Kafka 4.4's heartbeat
                # channel: request timeout = broker.heartbeat.interval.ms), well within broker.session.timeout.ms
                answer = await self.call({"op": "heartbeat", "node_id": self.node_id, "broker_epoch": self.broker_epoch,
                                          "want_fence": False, "caught_up_offset": self.image.offset},
                                         attempt_timeout_s=max(interval, 0.1))
                if answer["error_code"] == ErrorCode.stale_broker_epoch:
                    self.broker_epoch = -1
                    continue
                wait = interval if not answer.get("is_fenced") else min(interval, 0.1)
            except ConnectionError as exc:
                log.debug("heartbeat to the controller failed: %s", exc)
                wait = min(interval, 0.5)
            await asyncio.sleep(wait)

    # --- metadata ----------------------------------------------------------------------------

    def _check_caught_up(self) -> None:
        if not self.caught_up.is_set() and self.image.offset >= self.registered_offset:
            log.info("broker %d caught up with the metadata log at offset %d", self.node_id, self.image.offset)
            self.caught_up.set()
        if self.caught_up.is_set() and not self.unfenced.is_set():
            me = self.image.brokers.get(self.node_id)
            if me is not None and me.epoch == self.broker_epoch and not me.fenced:
                log.info("broker %d unfenced at metadata offset %d: serving requests", self.node_id, self.image.offset)
                self.unfenced.set()

    def _on_record(self, offset: int, raw: bytes) -> None:
        record = decode(raw)
        if not self._shared_image:  # a combined node's controller applied it already (its listener runs first)
            self.image.apply(offset, record)
        self._check_caught_up()
        kind = record["type"]
        if not self.coordinators.ready and offset >= self.registered_offset:
            self.coordinators.caught_up()  # the image is current: coordinators may load now
        try:
            if kind == "partition":
                if self._replayed_partitions is not None:  # start's replay: applied once, after it
                    self._replayed_partitions[(record["topic"], record["partition"])] = None
                elif self._is_election(record["topic"], record["partition"]):
                    self._defer_election(record["topic"], record["partition"])
                else:
                    self._apply_partition(record["topic"], record["partition"])
            elif kind == "remove_topic":
                if self._replayed_removals is not None:  # start's replay: decided by the final image, after it
                    self._replayed_removals[record["name"]] = None
                else:
                    self._remove_topic(record["name"], record.get("topic_id"))
            elif kind == "config" and self.replica_manager.logs.topic(record["name"]) is not None:
                # a topic config change reaches every broker hosting a replica (Kafka's ConfigRecord)
                self.replica_manager.logs.alter_topic_configs(record["name"], record["configs"])
            elif kind == "dynamic_config":  # dynamic broker / group configs (Kafka's ConfigRecord)
                self.broker.dynamic_configs.apply_record(record["resource"], record["name"], record["configs"],
                                                         self.node_id)
            elif kind in ("acl", "remove_acl") and self.broker.authorizer is not None:
                self.broker.authorizer.acls_changed()  # Kafka's StandardAuthorizer.addAcl / removeAcl
            elif kind == "broker" and record["id"] != self.node_id:
                # a restarted broker: its address may have changed; followers reconnect through address_of
                pass
        except Exception:
            log.exception("applying metadata record %d (%s) failed", offset, kind)

    def _is_election(self, topic: str, index: int) -> bool:
        """Whether the image makes this broker the leader of an existing local replica at a leader epoch its
        checkpoint does not hold yet (the write :meth:`_write_elections` does off the event loop). Only with a
        running event loop."""
        state = self.image.partition(topic, index)
        part = self.replica_manager.partitions.get((topic, index))
        if state is None or part is None or state.leader != self.node_id:
            return False
        if part.state.leader == self.node_id and part.state.leader_epoch == state.leader_epoch:
            return False
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return state.leader_epoch > part.epochs.latest_epoch()

    def _defer_election(self, topic: str, index: int) -> None:
        """Leave the election of ``topic``/``index`` to :meth:`_write_elections`, which starts once the metadata
        batch being delivered has been applied (one task for all elections of the batch)."""
        if self._election_task is None:
            self._election_done = asyncio.Event()
            self._election_task = asyncio.get_running_loop().create_task(self._write_elections())
        self._elections[(topic, index)] = None
        self.replica_manager.electing[(topic, index)] = self._election_done  # Produce and Fetch wait for it

    async def _write_elections(self) -> None:
        """Make this broker the leader of the deferred elections, each once its new leader epoch's checkpoint is
        durable.

        Kafka 4.4 answers requests while its metadata publisher applies the unfence's elections:
        ``BrokerServer.startup`` enables request processing once the controller's heartbeat answer says
        unfenced (``BrokerLifecycleManager.initialUnfenceFuture``), not once the broker applied the records, and
        ``BrokerMetadataPublisher`` sets the metadata cache's image before ``ReplicaManager.applyDelta`` makes
        the leaders. ``Partition.makeLeader`` writes the ``leader-epoch-checkpoint`` (fsynced) under the
        partition's lock before it leads, so no produce is taken at the new leader epoch before it is durable.
        Here the image (Metadata answers) is current at once; the checkpoint files of the batch are written in
        worker threads (:func:`~pyspark_kafka.broker.cluster.leader_epoch.write_durably`), the event loop
        serving requests meanwhile; each replica keeps its old state (not the leader: Produce and Fetch answer
        NOT_LEADER_OR_FOLLOWER or UNKNOWN_LEADER_EPOCH, both retriable) until its file is durable, then takes the
        image's state. A partition whose state or log end moved meanwhile is applied as any other (its
        checkpoint written then, on the event loop)."""
        try:
            while self._elections and not self._stopping:
                keys, self._elections = list(self._elections), {}
                files: dict = {}
                planned: dict[tuple[str, int], tuple[int, int, list[tuple[int, int]]]] = {}
                for key in keys:
                    if not self._is_election(*key):
                        continue  # applied meanwhile (a later record) or gone
                    part, state = self.replica_manager.partitions[key], self.image.partition(*key)
                    leo = part.log.log_end_offset
                    entries = part.epochs.entries_after(state.leader_epoch, leo)
                    files[part.epochs.path] = LeaderEpochCache.body(entries)
                    planned[key] = (state.leader_epoch, leo, entries)
                failed = await asyncio.to_thread(write_durably, files) if files else set()
                if self._stopping:
                    return
                for key, (epoch, leo, entries) in planned.items():
                    part, state = self.replica_manager.partitions.get(key), self.image.partition(*key)
                    if part is None:
                        continue
                    if (part.epochs.path not in failed and state is not None and state.leader == self.node_id
                            and state.leader_epoch == epoch and part.log.log_end_offset == leo
                            and part.epochs.latest_epoch() < epoch):
                        part.epochs.assigned_durably(entries)  # the apply below finds the epoch written
                    try:
                        self._apply_partition(*key)
                    except Exception:
                        log.exception("applying the election of %s-%d failed", *key)
        finally:
            self._election_task = None
            electing = self.replica_manager.electing
            for key in [k for k, e in electing.items() if e is self._election_done]:
                del electing[key]
            self._election_done.set()

    def elections_pending(self) -> bool:
        """Whether elections of this broker wait for their leader-epoch checkpoints (:meth:`_write_elections`)."""
        return bool(self._elections) or self._election_task is not None

    def _apply_partition(self, topic: str, index: int) -> None:
        state = self.image.partition(topic, index)
        rm = self.replica_manager
        key = (topic, index)
        if state is None or self.node_id not in state.replicas:
            part = rm.partitions.pop(key, None)
            if part is not None:  # no longer a replica (reassignment, KIP-455): stop fetching, delete the log
                self.fetcher.stop_following(topic, index)
                if topic in INTERNAL_TOPICS:
                    self.coordinators.on_partition(topic, index, part.state, None)
                rm.notify_append(topic, index)
                rm.logs.delete_partition_log(topic, index)
                log.info("%s-%d: this broker is no longer a replica (replicas %s): local log deleted", topic,
                         index, None if state is None else list(state.replicas))
            return
        logs = rm.logs
        if logs.topic(topic) is None:
            t = self.image.topics[topic]
            logs.create_topic(topic, max(t.partitions) + 1 if t.partitions else 1, t.configs,
                              topic_id=uuid.UUID(t.topic_id))
        plog = logs.get_log(topic, index)
        if plog is None:
            t = self.image.topics[topic]
            if index >= logs.topic(topic).num_partitions:  # a partition added later: grow the local topic
                logs.create_partitions(topic, max(t.partitions) + 1)
            plog = logs.open_partition_log(topic, index)  # or one this broker was removed from and is added to
        part = rm.partitions.get(key)
        now = mono_ms()
        if part is None:
            part = Partition(topic, index, self.node_id, plog, PartitionState((), (), -2, -1, -1),
                             propose_isr=self._propose_isr)
            rm.partitions[key] = part
        old = part.state
        part.update_state(state, now)
        if topic in INTERNAL_TOPICS:
            self.coordinators.on_partition(topic, index, old, state)
        if state.leader == self.node_id:
            self.fetcher.stop_following(topic, index)
            if old.leader != self.node_id or old.leader_epoch != state.leader_epoch:
                log.info("%s-%d: leader at leader epoch %d, ISR %s, LEO %d, HW %d", topic, index, state.leader_epoch,
                         list(state.isr), plog.log_end_offset, plog.high_watermark)
            rm.notify_append(topic, index)  # waiting produces and fetches re-check (HW, leadership)
        else:
            if old.leader != state.leader or old.leader_epoch != state.leader_epoch:
                rm.notify_append(topic, index)  # acks=all waiters learn they lost leadership
                if state.leader >= 0:
                    self.fetcher.follow(part)
                else:
                    self.fetcher.stop_following(topic, index)

    def _remove_topic(self, topic: str, topic_id: str | None = None) -> None:
        """A ``remove_topic`` record (DeleteTopics): stop replicating every partition of ``topic`` and delete its
        local logs (Kafka's ``ReplicaManager.applyDelta`` for deleted topics).

        ``topic_id``: the deleted topic's id. The local logs are deleted only when they belong to it: a restarted
        broker replays the deletion of a topic that was created again under its name since, and the name alone
        deleted the newer topic's records (Kafka tells a deleted topic's logs from a newer one's by topic id,
        KIP-516). A record without an id, or local logs without one, delete by name as before."""
        rm = self.replica_manager
        for key in [k for k in rm.partitions if k[0] == topic]:
            rm.partitions.pop(key)
            self.fetcher.stop_following(*key)
            rm.notify_append(*key)
        local = rm.logs.topic(topic)
        if local is None:
            return
        local_id = local.topic_id
        if topic_id is not None and local_id is not None and local_id != uuid.UUID(str(topic_id)):
            log.info("topic %s (id %s) deleted: the local logs belong to topic id %s (created again since), kept",
                     topic, topic_id, local_id)
            return
        rm.logs.delete_topic(topic)
        log.info("topic %s deleted: local logs removed", topic)

    # --- ISR ---------------------------------------------------------------------------------

    async def _isr_loop(self) -> None:
        period = max(0.05, self.lag_max_ms / 2000)
        while not self._stopping:
            await asyncio.sleep(period)
            now = mono_ms()
            for part in list(self.replica_manager.partitions.values()):
                try:
                    part.shrink_isr(self.lag_max_ms, now)
                except Exception:
                    log.exception("ISR check of %s-%d failed", part.topic, part.index)

    def _propose_isr(self, part: Partition, isr: tuple[int, ...]) -> None:
        # asyncio keeps only a weak reference to a task: the set keeps it until done (then read, see below)
        task = asyncio.get_running_loop().create_task(self._alter_partition(part, isr))
        self._proposals.add(task)
        task.add_done_callback(self._proposal_done)

    def _proposal_done(self, task: asyncio.Task) -> None:
        self._proposals.discard(task)
        if not task.cancelled() and task.exception() is not None:  # read: never "Task exception was never retrieved"
            log.error("AlterPartition proposal failed", exc_info=task.exception())

    async def _alter_partition(self, part: Partition, isr: tuple[int, ...]) -> None:
        st = part.state
        try:
            answer = await self.call({"op": "alter_partition", "node_id": self.node_id,
                                      "broker_epoch": self.broker_epoch, "topic": part.topic,
                                      "partition": part.index, "leader_epoch": st.leader_epoch,
                                      "partition_epoch": st.partition_epoch, "isr": list(isr)})
            ok = answer["error_code"] == 0
            if not ok:
                log.info("%s-%d: AlterPartition to ISR %s answered %d", part.topic, part.index, list(isr),
                         answer["error_code"])
        except ConnectionError as exc:
            ok = False
            log.warning("%s-%d: AlterPartition failed: %s", part.topic, part.index, exc)
        if ok and answer.get("state", {}).get("partition_epoch") == st.partition_epoch:
            ok = False  # the controller found nothing to change and wrote no record: no newer state will arrive
        if not ok and part.state is st:  # refused, and no newer state arrived: allow the next proposal
            part.pending_isr = None
