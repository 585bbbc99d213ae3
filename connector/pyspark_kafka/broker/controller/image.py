"""The cluster metadata image: what the committed metadata records say (Kafka's ``MetadataImage``).

Records are JSON objects encoded as UTF-8 bytes (Kafka's are binary ``ApiMessage`` records such as
``RegisterBrokerRecord``, ``TopicRecord``, ``PartitionRecord``, ``PartitionChangeRecord``; ours carry the same
fields under a ``type``):

- ``{"type": "broker", "id", "epoch", "host", "port", "listeners"}``: a broker (re-)registered with a new broker
  epoch; it is fenced until it asks to be unfenced (Kafka's ``RegisterBrokerRecord``). ``listeners`` (optional,
  ``[[name, host, port], ...]``) is every advertised listener (the record's endpoints); ``host``/``port`` are the
  first one's, the address other brokers use. ``capacity``/``nofile`` (optional): how many partitions it can keep
  open and its open-file limit.
- ``{"type": "fence", "id", "epoch"}`` / ``{"type": "unfence", "id", "epoch"}``: Kafka's ``FenceBrokerRecord`` /
  ``UnfenceBrokerRecord``.
- ``{"type": "topic", "name", "topic_id", "configs"}``: a topic (Kafka's ``TopicRecord`` + ``ConfigRecord``).
- ``{"type": "partition", "topic", "partition", "replicas", "isr", "leader", "leader_epoch", "partition_epoch"}``
  (and ``adding``/``removing`` during a reassignment, KIP-455): a partition's whole state (Kafka writes
  ``PartitionRecord`` once and ``PartitionChangeRecord`` deltas; ours always carries the whole state, so
  replaying the last record of a partition is enough).
- ``{"type": "config", "name", "configs"}``: a topic's whole set of config overrides after AlterConfigs /
  IncrementalAlterConfigs (Kafka's ``ConfigRecord``s, one per key; ours carries them all); every broker applies it.
- ``{"type": "dynamic_config", "resource", "name", "configs"}``: the whole set of dynamic configs of a broker
  resource (``resource`` "broker", ``name`` a node id or "" for the cluster default) or of a group (``resource``
  "group"), after AlterConfigs / IncrementalAlterConfigs; the brokers it concerns apply it.
- ``{"type": "remove_topic", "name", "topic_id"}``: a deleted topic (Kafka's ``RemoveTopicRecord``); every broker
  deletes its local logs of it.
- ``{"type": "acl", "id", "resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
  "permission_type"}``: an ACL binding under its id (a UUID string), codes as on the wire (Kafka's
  ``AccessControlEntryRecord``); ``{"type": "remove_acl", "id"}``: its removal (Kafka's
  ``RemoveAccessControlEntryRecord``). Written by :mod:`~pyspark_kafka.broker.controller.acl_control`; every
  broker's authorizer uses the image's ACLs.
- ``{"type": "scram_credential", "name", "mechanism", "salt", "stored_key", "server_key", "iterations"}``: a user's
  SCRAM credential for one mechanism (its wire id: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512; bytes in base64), never a
  password or salted password (Kafka's ``UserScramCredentialRecord``); ``{"type": "remove_scram_credential",
  "name", "mechanism"}``: its removal (Kafka's ``RemoveUserScramCredentialRecord``). Written by
  :mod:`~pyspark_kafka.broker.controller.scram_control`; every broker authenticates SASL/SCRAM clients and answers
  DescribeUserScramCredentials from the image's credentials (Kafka's ``ScramImage``).
- ``{"type": "producer_ids", "broker", "next"}``: a block of producer ids handed to a broker ends before ``next``
  (Kafka's ``ProducerIdsRecord``).
- ``{"type": "feature", "name", "level"}``: a finalized feature level (Kafka's ``FeatureLevelRecord``; level 0
  removes the feature). The active controller writes ``metadata.version`` and ``group.version`` when its image has
  no ``metadata.version`` (Kafka's bootstrap metadata, :data:`BOOTSTRAP_FEATURES`).

:class:`ClusterImage` applies records in offset order; controller and brokers build the same image.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from pyspark_kafka.broker.security.acls import AclBinding
from pyspark_kafka.broker.controller.scram_control import credential_of, credential_record
from pyspark_kafka.broker.security.scram import MECHANISM_BY_ID, ScramCredential

NO_LEADER = -1


def encode(record: dict) -> bytes:
    """One metadata record as bytes (compact JSON)."""
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode()


_DECODER = json.JSONDecoder()


class DecodedRecord(bytes):
    """The bytes of one metadata record carrying its decoded dict (``record``), which :func:`decode` returns
    without decoding again. A metadata log replaying its records at start hands the same object to every listener
    (the snapshot keeper, the controller, the broker), so each record is decoded once, not three times; the dict
    is shared and must not be changed (every reader copies what it keeps, as :meth:`ClusterImage.apply`)."""

    record: dict


def decoded_record(raw: bytes) -> bytes:
    """``raw`` as a :class:`DecodedRecord`, or ``raw`` itself when it is not a metadata record (each reader's own
    :func:`decode` then raises, as before)."""
    try:
        record = decode(raw)
    except ValueError:
        return raw
    out = DecodedRecord(raw)
    out.record = record
    return out


def decode(raw: bytes) -> dict:
    """The record dict of ``raw``; raises ValueError for bytes that are not a JSON object with a ``type``.
    A :class:`DecodedRecord` gives its ``record`` (shared: not to be changed)."""
    if type(raw) is DecodedRecord:
        return raw.record
    record = _DECODER.decode(raw if isinstance(raw, str) else raw.decode())  # json.loads without its bytes sniffing
    if not isinstance(record, dict) or "type" not in record:
        raise ValueError(f"not a metadata record: {raw[:80]!r}")
    return record


def acl_record(acl_id: str, b: AclBinding) -> dict:
    """The ``acl`` record of binding ``b`` under ``acl_id`` (Kafka's ``AccessControlEntryRecord`` fields)."""
    return {"type": "acl", "id": acl_id, "resource_type": int(b.resource_type), "resource_name": b.resource_name,
            "pattern_type": int(b.pattern_type), "principal": b.principal, "host": b.host,
            "operation": int(b.operation), "permission_type": int(b.permission)}


def binding_of(record: dict) -> AclBinding:
    """The binding an ``acl`` record carries (unknown codes become UNKNOWN, as Kafka's ``fromCode``)."""
    return AclBinding.from_wire(record["resource_type"], record["resource_name"], record["pattern_type"],
                                record["principal"], record["host"], record["operation"], record["permission_type"])


@dataclass(frozen=True)
class BrokerRegistration:
    """A registered broker: id, broker epoch (the metadata offset of its registration), address (its first
    listener's), fenced, and every advertised listener ``((name, host, port), ...)`` (empty when the registration
    record names none: a record written before registrations carried them)."""

    id: int
    epoch: int
    host: str
    port: int
    fenced: bool = True
    listeners: tuple[tuple[str, str, int], ...] = ()
    capacity: int = -1  # how many partitions the broker can keep open (-1: not said), and its ulimit -n
    nofile: int = -1

    def endpoint(self, listener: str | None) -> tuple[str, int]:
        """``(host, port)`` this broker advertises on ``listener`` (a listener name such as ``SASL_SSL``), as
        Kafka's ``BrokerRegistration.node(listenerName)``; the first listener's address when ``listener`` is None
        or not registered (Kafka leaves such a broker out: every broker of a cluster is expected to have the same
        listener names)."""
        for name, host, port in self.listeners:
            if name == listener:
                return host, port
        return self.host, self.port


@dataclass(frozen=True)
class PartitionState:
    """One partition's replicas (preferred leader first), ISR, leader (-1: offline), leader epoch, partition epoch.

    During a reassignment (KIP-455, Kafka's ``PartitionRegistration``) ``replicas`` is the target replicas followed
    by the ``removing`` ones, and ``adding`` names the target replicas that are not yet caught up into the ISR.
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        """Whether a reassignment is in progress (replicas being added or removed)."""
        return bool(self.adding or self.removing)

    def record(self, topic: str, partition: int) -> dict:
        """This state as a ``partition`` record of ``topic``/``partition``."""
        out = {"type": "partition", "topic": topic, "partition": partition, "replicas": list(self.replicas),
               "isr": list(self.isr), "leader": self.leader, "leader_epoch": self.leader_epoch,
               "partition_epoch": self.partition_epoch}
        if self.reassigning:
            out.update(adding=list(self.adding), removing=list(self.removing))
        return out


@dataclass
class TopicImage:
    """A topic: name, id (UUID string), config overrides and its partitions by index."""

    name: str
    topic_id: str
    configs: dict[str, str] = field(default_factory=dict)
    partitions: dict[int, PartitionState] = field(default_factory=dict)


METADATA_VERSION = "metadata.version"
METADATA_VERSION_4_4_IV2 = 33
"""``metadata.version`` level of Kafka's ``MetadataVersion.IBP_4_4_IV2`` (Kafka 4.4.0's latest production level;
``kafka-features`` prints it as ``4.4-IV2``). Kafka 4.4.0 supports levels 7 (``3.3-IV3``) to 33."""

BOOTSTRAP_FEATURES: tuple[tuple[str, int], ...] = (
    (METADATA_VERSION, METADATA_VERSION_4_4_IV2),
    ("group.version", 1),  # KIP-848 consumer groups (ConsumerGroupHeartbeat 68, ConsumerGroupDescribe 69)
)
"""``(name, level)`` a new cluster finalizes: the ``feature`` records the active controller writes when its metadata
log has no ``metadata.version`` (Kafka 4.4's ``ActivationRecordsGenerator``: a log without ``metadata.version``
gets the bootstrap records of ``kafka-storage format``, one ``FeatureLevelRecord`` per feature). Kafka's other
features are not finalized here (docs/broker-behaviour.md, "Features")."""


class ClusterImage:
    """Brokers and topics as of ``offset`` (the last applied record's offset, -1 before any).

    :meth:`apply` ignores records of unknown types (forward compatibility) and raises nothing.
    """

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[str, TopicImage] = {}
        #: topic id -> name, kept by :meth:`apply` with :attr:`topics` (Fetch and Produce by topic id ask it per
        #: request: a dict lookup, not a scan of every topic)
        self.topic_names_by_id: dict[str, str] = {}
        #: (resource "broker" / "group", name) -> configs: dynamic broker configs (name a node id, "" the cluster
        #: default) and group configs (Kafka's ConfigRecord of BROKER / GROUP resources)
        self.dynamic_configs: dict[tuple[str, str], dict[str, str]] = {}
        #: acl id -> binding (Kafka's ``AclsImage``); the same dict object for the image's life (authorizers read it)
        self.acls: dict[str, AclBinding] = {}
        #: (user, mechanism name) -> SCRAM credential (Kafka's ``ScramImage``); the same dict object for the image's
        #: life (the broker's SASL/SCRAM servers read it)
        self.scram: dict[tuple[str, str], ScramCredential] = {}
        self.next_producer_id = 0  # the first producer id no block has handed out
        #: finalized feature levels (Kafka's ``FeaturesImage``): name -> level, from ``feature`` records
        self.features: dict[str, int] = {}
        self.offset = -1

    def apply(self, offset: int, record: dict) -> None:
        """Apply the committed ``record`` at ``offset``."""
        self.offset = offset
        kind = record["type"]
        if kind == "broker":
            self.brokers[record["id"]] = BrokerRegistration(
                record["id"], record["epoch"], record["host"], record["port"], True,
                tuple((str(n), str(h), int(p)) for n, h, p in record.get("listeners") or ()),
                int(record.get("capacity", -1)), int(record.get("nofile", -1)))
        elif kind in ("fence", "unfence"):
            b = self.brokers.get(record["id"])
            if b is not None and b.epoch == record["epoch"]:
                self.brokers[b.id] = replace(b, fenced=kind == "fence")
        elif kind == "topic":
            before = self.topics.get(record["name"])
            if before is not None:
                self.topic_names_by_id.pop(before.topic_id, None)
            self.topics[record["name"]] = TopicImage(record["name"], record["topic_id"], dict(record.get("configs") or {}))
            self.topic_names_by_id[record["topic_id"]] = record["name"]
        elif kind == "partition":
            topic = self.topics.get(record["topic"])
            if topic is not None:
                topic.partitions[record["partition"]] = PartitionState(
                    tuple(record["replicas"]), tuple(record["isr"]), record["leader"], record["leader_epoch"],
                    record["partition_epoch"], tuple(record.get("adding", ())), tuple(record.get("removing", ())))
        elif kind == "config":
            t = self.topics.get(record["name"])
            if t is not None:
                t.configs = dict(record["configs"])
        elif kind == "dynamic_config":
            self.dynamic_configs[(record["resource"], record["name"])] = dict(record["configs"])
        elif kind == "acl":
            self.acls[record["id"]] = binding_of(record)
        elif kind == "remove_acl":
            self.acls.pop(record["id"], None)
        elif kind == "scram_credential":
            got = credential_of(record)
            if got is not None:
                self.scram[got[:2]] = got[2]
        elif kind == "remove_scram_credential":
            self.scram.pop((record["name"], MECHANISM_BY_ID.get(record["mechanism"])), None)
        elif kind == "producer_ids":
            self.next_producer_id = max(self.next_producer_id, record["next"])
        elif kind == "feature":
            if int(record["level"]) > 0:
                self.features[record["name"]] = int(record["level"])
            else:  # Kafka's FeaturesDelta: level 0 removes the finalized feature
                self.features.pop(record["name"], None)
        elif kind == "remove_topic":
            t = self.topics.get(record["name"])
            if t is not None and record.get("topic_id") in (None, t.topic_id):
                del self.topics[record["name"]]
                self.topic_names_by_id.pop(t.topic_id, None)

    def snapshot_records(self) -> list[dict]:
        """Records that rebuild this image when applied in order to an empty one (a metadata snapshot, KIP-630:
        Kafka's ``MetadataImage.write``). Each broker is a ``broker`` record (and ``unfence`` when unfenced), each
        topic a ``topic`` record with its config overrides then one ``partition`` record per partition; then the
        dynamic configs, the ACLs, the SCRAM credentials and the producer id block. Applied at the snapshot's last offset, they give an
        image equal to this one (:meth:`same_as`)."""
        out: list[dict] = [{"type": "feature", "name": name, "level": level}
                           for name, level in sorted(self.features.items())]  # first, as Kafka's snapshots
        for b in sorted(self.brokers.values(), key=lambda b: b.id):
            out.append({"type": "broker", "id": b.id, "epoch": b.epoch, "host": b.host, "port": b.port,
                        **({"listeners": [list(lst) for lst in b.listeners]} if b.listeners else {}),
                        **({"capacity": b.capacity, "nofile": b.nofile} if b.capacity >= 0 else {})})
            if not b.fenced:
                out.append({"type": "unfence", "id": b.id, "epoch": b.epoch})
        for name in sorted(self.topics):
            t = self.topics[name]
            out.append({"type": "topic", "name": name, "topic_id": t.topic_id, "configs": dict(t.configs)})
            out += [t.partitions[p].record(name, p) for p in sorted(t.partitions)]
        for (resource, name), configs in sorted(self.dynamic_configs.items()):
            out.append({"type": "dynamic_config", "resource": resource, "name": name, "configs": dict(configs)})
        for acl_id in sorted(self.acls):
            out.append(acl_record(acl_id, self.acls[acl_id]))
        if self.scram:
            out += [credential_record(user, mech, c) for (user, mech), c in sorted(self.scram.items())]
        if self.next_producer_id:
            out.append({"type": "producer_ids", "broker": -1, "next": self.next_producer_id})
        return out

    def same_as(self, other: "ClusterImage") -> bool:
        """Whether ``other`` holds the same metadata at the same offset (brokers, topics with their configs and
        partitions, dynamic configs, ACLs, SCRAM credentials, producer ids, finalized features)."""
        return (self.offset, self.brokers, self.topics, self.dynamic_configs, self.acls, self.scram,
                self.next_producer_id, self.features) == (other.offset, other.brokers, other.topics,
                                                          other.dynamic_configs, other.acls, other.scram,
                                                          other.next_producer_id, other.features)

    def finalized_features(self) -> dict[str, int]:
        """Finalized feature levels (name -> level). A log without a ``metadata.version`` record (written before
        this record existed, or not yet activated) counts as :data:`BOOTSTRAP_FEATURES`, today's levels: the
        active controller then writes them (Kafka 4.4: "metadata.version absent" means the bootstrap records)."""
        if METADATA_VERSION not in self.features:
            return dict(BOOTSTRAP_FEATURES)
        return dict(self.features)

    def live_brokers(self) -> list[BrokerRegistration]:
        """Unfenced brokers, by id."""
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        """The state of ``topic``/``partition`` (None when unknown)."""
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)
