"""The controller role of a combined-mode node (``process.roles=broker,controller``, Kafka's combined mode).

A combined node runs the :class:`~pyspark_kafka.broker.controller.quorum_controller.QuorumController` on a
one-voter metadata log (:class:`~pyspark_kafka.broker.controller.single_voter_log.SingleVoterMetadataLog`, the
voter is this node) and the cluster broker (:class:`~pyspark_kafka.broker.cluster.broker_lifecycle.BrokerLifecycle`)
in one process and one event loop, with one node id, as Apache Kafka runs a combined node. The broker reads the
controller's own metadata log (no copy, no fetch) and reaches the controller through an
:class:`InProcessChannel` (the channel's JSON requests, without a socket).

The metadata log lives in ``<data dir>/__cluster_metadata-0/`` (Kafka's ``metadata.log.dir`` defaults to the first
log dir too); the log manager leaves that directory alone (it has no ``partition.metadata``).

Data-dir migration: a data directory written by the single-node broker of earlier versions keeps its topics in
``__topics.json``, its ACLs in ``acls.json``, its dynamic configs in ``__dynamic_configs.json`` and its SCRAM
credentials in ``scram-credentials.json``. When the metadata log is empty and any of these hold something,
:func:`migration_records` turns them into metadata records (the same topic ids, this node the only replica and
leader, leader epoch 0; each credential a ``scram_credential`` record with its salt, keys and iterations, so every
password still works), appended once before the controller starts: nothing is silently ignored. The credentials
file is migrated into a non-empty metadata log too (a combined node of an earlier version of this branch kept its
credentials in the file beside its metadata log). ``acls.json``, ``__dynamic_configs.json`` and
``scram-credentials.json`` are then renamed ``<name>.migrated`` (kept for an older version, read by no later
start); ``__topics.json`` stays, as the log manager's local catalogue.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger("pyspark_kafka.controller")

METADATA_DIR = "__cluster_metadata-0"
#: Kafka's defaults for the internal topics' replication (3, 3, 2) cannot be met by one node; a combined node
#: uses 1 unless the config sets them (Kafka's config/server.properties for a one-node combined node does the same).
COMBINED_DEFAULTS = {"offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
                     "transaction.state.log.min.isr": "1"}


def parse_voters(value: str) -> dict[int, tuple[str, int]]:
    """``controller.quorum.voters`` (``id@host:port,...``) as ``{id: (host, port)}``; ConfigError when malformed.

    Used by the cluster broker (:mod:`~pyspark_kafka.broker.cluster.broker_lifecycle`) too; it lives here so that
    module imports this one and not the other way round (no import cycle)."""
    from pyspark_kafka.broker.errors import ConfigError

    voters = {}
    for item in filter(None, (v.strip() for v in value.split(","))):
        try:
            node, address = item.split("@", 1)
            host, port = address.rsplit(":", 1)
            voters[int(node)] = (host.strip("[]"), int(port))
        except ValueError:
            raise ConfigError(f"controller.quorum.voters entry {item!r} is not id@host:port "
                              "(e.g. 3000@127.0.0.1:9093)") from None
    return voters


def node_roles(config: BrokerConfig) -> frozenset[str]:
    """``process.roles`` as a set (``{"broker"}``, ``{"controller"}`` or both); ConfigError for another role."""
    from pyspark_kafka.broker.errors import ConfigError

    roles = frozenset(r.strip() for r in (config.get("process.roles") or "").split(",") if r.strip())
    unknown = roles - {"broker", "controller"}
    if unknown or not roles:
        raise ConfigError(f"process.roles={config.get('process.roles')!r}: give broker, controller or "
                          "broker,controller (Kafka's KRaft roles)")
    return roles


def node_kind(config: BrokerConfig) -> str:
    """What a :class:`~pyspark_kafka.broker.server.Broker` with ``config`` runs, decided once at its construction:
    ``"combined"`` (``process.roles=broker,controller`` and ``controller.quorum.voters`` empty or naming only this
    node: a one-node cluster, :class:`CombinedController`) or ``"broker"`` (``process.roles=broker`` with
    ``controller.quorum.voters``: a broker of a split cluster).

    Raises ConfigError, naming the fix, for every other combination (Kafka's ``KafkaConfig`` validation):
    ``process.roles=broker`` without voters (a broker needs its controllers; one node uses the default roles
    ``broker,controller``), ``process.roles=controller`` (no broker; the controller runs from the node command),
    and a combined node whose voters name other nodes or not this one.
    """
    from pyspark_kafka.broker.errors import ConfigError

    roles = node_roles(config)
    node_id = config.get_int("node.id")
    text = (config.get("controller.quorum.voters") or "").strip(", ")
    voters = parse_voters(text) if text else {}
    if roles == {"broker"}:
        if not voters:
            raise ConfigError(
                "process.roles=broker needs controller.quorum.voters: a broker-only node is a broker of a cluster "
                "whose controllers it must know (Kafka: \"either controller.quorum.bootstrap.servers must contain "
                "the set of bootstrap controllers or controller.quorum.voters must contain a parseable set of "
                "controllers\"). For one node, use the default process.roles=broker,controller; for a broker of a "
                "split cluster, give controller.quorum.voters=id@host:port,...")
        if node_id in voters:
            raise ConfigError(f"If process.roles contains just the 'broker' role, the node id {node_id} must not be "
                              f"included in the set of voters controller.quorum.voters={text}: give the broker "
                              "another node.id")
        return "broker"
    if roles == {"controller"}:
        raise ConfigError("process.roles=controller runs no broker: start a controller with "
                          "'python -m pyspark_kafka.broker.cluster.node --roles controller', or use "
                          "process.roles=broker,controller for one node")
    if not voters or set(voters) == {node_id}:
        return "combined"
    if node_id not in voters:
        raise ConfigError(f"If process.roles contains the 'controller' role, the node id {node_id} must be included "
                          f"in the set of voters controller.quorum.voters={text}: give this node's id@host:port, "
                          "or leave controller.quorum.voters empty for one node")
    raise ConfigError(f"controller.quorum.voters={text} names other voters: a combined node runs only as a "
                      "one-node cluster here; run a quorum of several controllers as process.roles=controller "
                      "nodes with process.roles=broker nodes (the cluster command)")


class InProcessChannel:
    """``InProcessChannel(handle)``: the combined node's broker calling its own controller's ``handle(request)``.

    Requests and answers pass through JSON as on the controller channel (:mod:`~pyspark_kafka.broker.controller.channel`),
    so the broker sees the same values (lists, string keys) as a broker of a split cluster. :meth:`call` raises
    ConnectionError when the controller does not answer within ``timeout_s`` seconds, as ``ChannelClient`` does.
    """

    def __init__(self, handle) -> None:
        self._handle = handle

    async def call(self, request: dict, timeout_s: float = 10.0) -> dict:
        """Answer ``request`` (a controller-channel dict) with the controller's answer dict."""
        request = json.loads(json.dumps(request))
        try:
            answer = await asyncio.wait_for(self._handle(request), timeout_s)
        except asyncio.TimeoutError:
            raise ConnectionError(f"the controller did not answer {request.get('op')} within {timeout_s:g} s") from None
        return json.loads(json.dumps(answer))

    def close(self) -> None:
        """Nothing to close (no connection)."""


def migration_records(data_dir: Path, node_id: int) -> list[dict]:
    """The metadata records that carry a single-node data directory's state into the metadata log.

    ``data_dir``: the node's data directory; ``node_id``: this node (the only replica and leader of each
    partition). Topics (``__topics.json``: names, ids, partition counts, config overrides) become ``topic`` and
    ``partition`` records at leader epoch 0; ACLs (``acls.json``) ``acl`` records; dynamic broker and group configs
    (``__dynamic_configs.json``) ``dynamic_config`` records; SCRAM credentials (``scram-credentials.json``)
    ``scram_credential`` records (:func:`scram_migration_records`). Empty when there is nothing to carry over. Raises
    KafkaStorageError when one of the files cannot be read (the data is left untouched).
    """
    from pyspark_kafka.broker.controller.image import PartitionState, acl_record
    from pyspark_kafka.broker.dynamic_config import DYNAMIC_CONFIGS_FILE
    from pyspark_kafka.broker.log.topic_catalog import TopicCatalog
    from pyspark_kafka.broker.security.acls import FILE_NAME as ACLS_FILE, AclStore

    records: list[dict] = []
    catalog = TopicCatalog(data_dir)
    catalog.load()
    me = (node_id,)
    for name, info in sorted(catalog.topics().items()):
        records.append({"type": "topic", "name": name, "topic_id": str(info.topic_id), "configs": dict(info.configs)})
        records += [PartitionState(me, me, node_id, 0, 0).record(name, p) for p in range(info.num_partitions)]
    if (data_dir / ACLS_FILE).exists():
        for binding in sorted(AclStore(data_dir).bindings, key=repr):
            records.append(acl_record(str(uuid.uuid4()), binding))
    path = data_dir / DYNAMIC_CONFIGS_FILE
    if path.exists():
        doc = json.loads(path.read_text())
        for level, name in (("default", ""), ("broker", str(node_id))):
            if doc.get(level):
                records.append({"type": "dynamic_config", "resource": "broker", "name": name,
                                "configs": dict(doc[level])})
        for group, configs in sorted(doc.get("groups", {}).items()):
            if configs:
                records.append({"type": "dynamic_config", "resource": "group", "name": group, "configs": dict(configs)})
    return records + scram_migration_records(data_dir)


def scram_migration_records(data_dir: Path) -> list[dict]:
    """One ``scram_credential`` record per user and mechanism of ``data_dir/scram-credentials.json`` (the single
    node's credential store: salt, StoredKey, ServerKey, iterations), so each password works as before. Empty when
    there is no such file. Raises KafkaStorageError when it cannot be read (the file is left untouched)."""
    from pyspark_kafka.broker.controller.scram_control import credential_record
    from pyspark_kafka.broker.security.credentials import FILE_NAME as SCRAM_FILE, CredentialStore

    if not (data_dir / SCRAM_FILE).exists():
        return []
    return [credential_record(user, mech, c) for user, mechs in CredentialStore(data_dir).users().items()
            for mech, c in mechs.items()]


MIGRATED_SUFFIX = ".migrated"


def retire_migrated_files(data_dir: Path, only_credentials: bool = False) -> list[Path]:
    """Rename ``acls.json``, ``__dynamic_configs.json`` and ``scram-credentials.json`` to ``<name>.migrated`` once
    their content is in the metadata log, so that no later start reads them beside the metadata records (a stale
    value would otherwise come back, and the broker would warn of ACLs and credentials it does not use).
    ``__topics.json`` stays: the log manager keeps its local topic catalogue there. ``only_credentials``: rename
    only ``scram-credentials.json`` (its migration into a non-empty metadata log). Returns the new paths."""
    from pyspark_kafka.broker.dynamic_config import DYNAMIC_CONFIGS_FILE
    from pyspark_kafka.broker.security.acls import FILE_NAME as ACLS_FILE
    from pyspark_kafka.broker.security.credentials import FILE_NAME as SCRAM_FILE
    from pyspark_kafka.kafka.fsutil import fsync_dir

    moved = []
    for name in (SCRAM_FILE,) if only_credentials else (ACLS_FILE, DYNAMIC_CONFIGS_FILE, SCRAM_FILE):
        path = data_dir / name
        if path.exists():
            target = path.with_name(name + MIGRATED_SUFFIX)
            os.replace(path, target)
            moved.append(target)
    if moved:
        fsync_dir(data_dir)
    return moved


class CombinedController:
    """``CombinedController(node_id, data_dir, config, cluster_id)``: the controller role of a combined node.

    :meth:`start` loads (or creates) the one-voter metadata log in ``data_dir/__cluster_metadata-0``, migrates a
    single-node data directory on its first start (:func:`migration_records`) and starts the
    :class:`~pyspark_kafka.broker.controller.quorum_controller.QuorumController`; ``metadata_log``, ``controller``
    and ``channel`` (an :class:`InProcessChannel`) are then what the node's broker lifecycle uses. :meth:`stop`
    after the broker stopped.
    """

    def __init__(self, node_id: int, data_dir: Path, config: BrokerConfig, cluster_id: str) -> None:
        from pyspark_kafka.broker.controller.metadata_snapshot import metadata_snapshots
        from pyspark_kafka.broker.controller.single_voter_log import SingleVoterMetadataLog

        self.node_id = node_id
        self.data_dir = Path(data_dir)
        self.config = config
        self.cluster_id = cluster_id
        snapshots = metadata_snapshots(self.data_dir / METADATA_DIR, config.get)
        self.metadata_log = SingleVoterMetadataLog(node_id, self.data_dir, node_id, snapshots=snapshots)
        self.controller = None
        #: the broker's channel to this controller (built now, so the broker lifecycle is built with the node;
        #: answers once :meth:`start` started the controller)
        self.channel = InProcessChannel(self._handle)

    async def start(self) -> None:
        """Load the metadata log, migrate a single-node data directory once, start the controller."""
        from pyspark_kafka.broker.controller.image import encode
        from pyspark_kafka.broker.controller.quorum_controller import QuorumController
        from pyspark_kafka.broker.security.credentials import FILE_NAME as SCRAM_FILE

        await self.metadata_log.start()
        first_start = self.metadata_log.committed_offset() == 0
        # the credentials file also into a non-empty log: a combined node of an earlier version of this branch kept
        # its credentials in the file beside its metadata log
        records = (migration_records(self.data_dir, self.node_id) if first_start
                   else scram_migration_records(self.data_dir))
        if first_start or (self.data_dir / SCRAM_FILE).exists():
            if records:
                await self.metadata_log.append([encode(r) for r in records])
                kinds = {}
                for r in records:
                    kinds[r["type"]] = kinds.get(r["type"], 0) + 1
                log.info("data directory %s migrated to the metadata log: %s", self.data_dir,
                         ", ".join(f"{n} {k} records" for k, n in sorted(kinds.items())))
            retire_migrated_files(self.data_dir, only_credentials=not first_start)
        # one image for the node: the snapshot keeper's, which the metadata log applies each record to first
        self.controller = QuorumController(self.metadata_log, self.config, self.cluster_id, combined_node=self.node_id,
                                           image=self.metadata_log.shared_image())
        await self.controller.start()

    def advertise(self, host: str, port: int) -> None:
        """The address DescribeQuorum v2 gives for this voter (``host``, ``port``: the node's first advertised
        listener), under the first ``controller.listener.names`` name (``CONTROLLER``), as Kafka's combined node
        names its controller listener. Our node answers the controller's APIs (DescribeQuorum, DescribeCluster
        for controllers, the admin APIs that ``--bootstrap-controller`` tools send) on its client listeners; it
        has no listener of its own for them (docs/controller-quorum.md)."""
        name = (self.config.get("controller.listener.names") or "CONTROLLER").split(",")[0].strip()
        self.metadata_log.voter_endpoints = [{"name": name, "host": host, "port": port}]

    async def _handle(self, request: dict) -> dict:
        """The controller's answer to a channel ``request``; RuntimeError before :meth:`start`."""
        if self.controller is None:
            raise RuntimeError(f"node {self.node_id}: a controller request ({request.get('op')}) before the "
                               "controller started: a start-up ordering bug")
        return await self.controller.handle(request)

    async def stop(self) -> None:
        """Stop the controller's timers and close the metadata log."""
        if self.controller is not None:
            await self.controller.stop()
        await self.metadata_log.stop()
