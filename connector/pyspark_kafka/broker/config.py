"""Broker configuration with Apache Kafka's names and defaults, and the tables of topic configs.

- :data:`BROKER_DEFAULTS`: broker config name -> default value (a string, or ``None`` where Kafka has
  no default, e.g. ``log.flush.interval.ms``).
- :data:`TOPIC_CONFIG_TO_BROKER`: topic config name -> the broker config that supplies its default
  (Kafka's ``ServerTopicConfigSynonyms``); :data:`TOPIC_ONLY_DEFAULTS`: topic configs without one.
  Together (:data:`TOPIC_CONFIG_NAMES`) they are every topic config Apache Kafka 4.3.1 lists.
- :class:`BrokerConfig`: validated broker configs.

Topic-level rules (one override's check, the effective :class:`~pyspark_kafka.broker.topic_config.LogConfig`
of a topic, topic names) are in :mod:`pyspark_kafka.broker.topic_config`.
"""

from __future__ import annotations

import re
from typing import Iterator, Mapping

from pyspark_kafka.broker.errors import ConfigError, InvalidConfigError

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647

#: Broker config name -> default (Kafka 3.x/4.x defaults; ``None`` = no default).
BROKER_DEFAULTS: dict[str, str | None] = {
    # identity and listeners
    "broker.id": "0",
    "node.id": "0",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "advertised.listeners": None,
    "listener.security.protocol.map": "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
    "inter.broker.listener.name": None,  # accepted (single broker: no inter-broker traffic)
    "security.inter.broker.protocol": "PLAINTEXT",
    "log.dirs": None,
    # TLS (Kafka's SslConfigs; listener.name.<name>.ssl.* overrides per listener)
    "ssl.keystore.type": "JKS",
    "ssl.keystore.location": None,
    "ssl.keystore.password": None,
    "ssl.key.password": None,
    "ssl.keystore.certificate.chain": None,
    "ssl.keystore.key": None,
    "ssl.truststore.type": "JKS",
    "ssl.truststore.location": None,
    "ssl.truststore.password": None,
    "ssl.truststore.certificates": None,
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.protocol": "TLSv1.3",
    "ssl.cipher.suites": "",
    "ssl.endpoint.identification.algorithm": "https",  # a client-side check; accepted
    "ssl.principal.mapping.rules": "DEFAULT",
    # SASL (Kafka's SaslConfigs / BrokerSecurityConfigs)
    "sasl.enabled.mechanisms": "GSSAPI",
    "sasl.mechanism.inter.broker.protocol": "GSSAPI",
    "sasl.jaas.config": None,
    "connections.max.reauth.ms": "0",
    "sasl.server.max.receive.size": "524288",
    # authorization (Kafka's StandardAuthorizer: broker/security/authorizer.py)
    "authorizer.class.name": "",
    "super.users": None,
    "allow.everyone.if.no.acl.found": "false",
    # topics
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "auto.leader.rebalance.enable": "true",  # cluster: the controller's periodic preferred leader election
    "leader.imbalance.check.interval.seconds": "300",
    # requests
    "socket.request.max.bytes": "104857600",
    "queued.max.requests": "500",
    "queued.max.request.bytes": "268435456",  # Kafka: -1 (unbounded); ours bounds request memory
    "max.connections": "2147483647",
    "max.connections.per.ip": "2147483647",
    "max.connections.per.ip.overrides": "",
    "connections.max.idle.ms": "600000",
    "message.max.bytes": "1048588",
    "fetch.max.bytes": "57671680",
    "compression.type": "producer",
    "compression.gzip.level": "-1",  # levels used when compression.type names the codec
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    # log segments and indexes
    "log.segment.bytes": "1073741824",
    "log.roll.ms": "604800000",
    "log.roll.jitter.ms": "0",
    "log.index.interval.bytes": "4096",
    "log.index.size.max.bytes": "10485760",
    "log.preallocate": "false",
    "log.segment.delete.delay.ms": "0",
    # retention and cleanup
    "log.retention.ms": "604800000",
    "log.retention.bytes": "-1",
    "log.retention.check.interval.ms": "300000",
    "log.local.retention.ms": "-2",  # tiered storage: accepted, not used (no remote storage)
    "log.local.retention.bytes": "-2",
    "log.cleanup.policy": "delete",
    "log.cleaner.delete.retention.ms": "86400000",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.max.compaction.lag.ms": str(LONG_MAX),
    "log.cleaner.min.cleanable.ratio": "0.5",
    # timestamps
    "log.message.timestamp.type": "CreateTime",
    "log.message.timestamp.before.max.ms": str(LONG_MAX),
    "log.message.timestamp.after.max.ms": str(LONG_MAX),
    # durability
    "log.flush.interval.messages": str(LONG_MAX),
    "log.flush.interval.ms": None,
    "log.flush.scheduler.interval.ms": str(LONG_MAX),
    "log.flush.offset.checkpoint.interval.ms": "60000",
    "log.flush.start.offset.checkpoint.interval.ms": "60000",
    # internal topics, groups, transactions
    "offsets.topic.num.partitions": "1",
    "offsets.topic.replication.factor": "3",  # used by the replicated cluster only (docs/replication.md)
    "offsets.topic.segment.bytes": "104857600",
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
    "offsets.commit.timeout.ms": "5000",
    "offset.metadata.max.bytes": "4096",
    "log.cleaner.enable": "true",
    "log.cleaner.backoff.ms": "15000",  # how often the cleaner looks for a cleanable log
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    # KIP-848 consumer groups (GroupCoordinatorConfig)
    "group.consumer.session.timeout.ms": "45000",
    "group.consumer.heartbeat.interval.ms": "5000",
    "group.consumer.assignors": "uniform,range",
    "group.consumer.assignment.interval.ms": "1000",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.max.timeout.ms": "900000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "transactional.id.expiration.ms": "604800000",
    "producer.id.expiration.ms": "86400000",
    # KRaft roles (docs/replication.md): broker,controller with no voters = a one-node cluster (combined node)
    "process.roles": "broker,controller",
    "controller.quorum.voters": "",
    "controller.quorum.bootstrap.servers": "",
    # the Raft client's timings, on controllers and on brokers (observers) alike (raft/config.py, KIP-595)
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "controller.quorum.election.backoff.max.ms": "1000",
    "controller.quorum.request.timeout.ms": "2000",
    # metadata log snapshots (KIP-630, controller/snapshots.py): Kafka's MetadataLogConfig names and defaults
    "metadata.log.max.record.bytes.between.snapshots": "20971520",
    "metadata.log.max.snapshot.interval.ms": "3600000",
    "controller.listener.names": "CONTROLLER",
    "broker.session.timeout.ms": "9000",
    "broker.heartbeat.interval.ms": "2000",
    # a broker not registered with the controllers this long after its start shuts down (Kafka's default)
    "initial.broker.registration.timeout.ms": "60000",
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.backoff.ms": "1000",
    "request.timeout.ms": "30000",
}

#: Broker configs that Kafka 4.3.1 defines without a default (their value comes from the coarser
#: unit config, ``log.retention.hours``/``log.roll.hours`` = 168); here they carry that value.
_KAFKA_UNSET_DEFAULTS = frozenset({"log.retention.ms", "log.roll.ms"})

#: Broker configs without a default whose topic synonym falls back to another broker config.
_BROKER_DEFAULT_FALLBACKS: dict[str, str] = {"log.flush.interval.ms": "log.flush.scheduler.interval.ms"}

#: Broker configs given in coarser units, rewritten to the ms config (Kafka's precedence: ms > minutes > hours).
_UNIT_SYNONYMS: dict[str, tuple[str, int]] = {
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.roll.hours": ("log.roll.ms", 3_600_000),
}

#: Topic config -> broker config supplying its default (Kafka's ServerTopicConfigSynonyms).
TOPIC_CONFIG_TO_BROKER: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
}

#: Topic configs without a broker synonym (Kafka's ``LogConfig``): name -> Kafka's default.
#: Accepted and described; none is enforced (single broker, no tiered storage, no throttling).
TOPIC_ONLY_DEFAULTS: dict[str, str] = {
    "follower.replication.throttled.replicas": "",
    "leader.replication.throttled.replicas": "",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
}

#: Every topic config name this broker accepts (Kafka 4.3.1's list).
TOPIC_CONFIG_NAMES: tuple[str, ...] = tuple(sorted({*TOPIC_CONFIG_TO_BROKER, *TOPIC_ONLY_DEFAULTS}))

#: Topic configs holding a comma-separated list (IncrementalAlterConfigs APPEND/SUBTRACT apply).
LIST_TOPIC_CONFIGS = frozenset({"cleanup.policy", "follower.replication.throttled.replicas",
                                "leader.replication.throttled.replicas"})

_BOOL = "bool"
_LONG = "long"
_INT = "int"
_DOUBLE = "double"
_STRING = "string"
_REPLICAS = "replicas"  # "", "*" or partition:broker,... (Kafka's ThrottledReplicaListValidator)

# Types of the configs that are not plain strings, with Kafka's lower bounds.
_TYPES: dict[str, tuple[str, int | float | None]] = {
    "broker.id": (_INT, -1),
    "node.id": (_INT, -1),
    "num.partitions": (_INT, 1),
    "default.replication.factor": (_INT, 1),
    "auto.create.topics.enable": (_BOOL, None),
    "allow.everyone.if.no.acl.found": (_BOOL, None),
    "delete.topic.enable": (_BOOL, None),
    "min.insync.replicas": (_INT, 1),
    "unclean.leader.election.enable": (_BOOL, None),
    "auto.leader.rebalance.enable": (_BOOL, None),
    "leader.imbalance.check.interval.seconds": (_LONG, 1),
    "socket.request.max.bytes": (_INT, 1),
    "queued.max.requests": (_INT, 1),
    "queued.max.request.bytes": (_LONG, -1),
    "max.connections": (_INT, 0),
    "max.connections.per.ip": (_INT, 0),
    "connections.max.idle.ms": (_LONG, 1),
    "connections.max.reauth.ms": (_LONG, 0),
    "sasl.server.max.receive.size": (_INT, 1),
    "message.max.bytes": (_INT, 0),
    "fetch.max.bytes": (_INT, 1024),
    "log.segment.bytes": (_INT, 14),
    "log.roll.ms": (_LONG, 1),
    "log.roll.jitter.ms": (_LONG, 0),
    "log.index.interval.bytes": (_INT, 0),
    "log.index.size.max.bytes": (_INT, 4),
    "log.preallocate": (_BOOL, None),
    "log.segment.delete.delay.ms": (_LONG, 0),
    "log.retention.ms": (_LONG, -1),
    "log.retention.bytes": (_LONG, None),
    "log.retention.check.interval.ms": (_LONG, 1),
    "log.cleaner.delete.retention.ms": (_LONG, 0),
    "log.cleaner.min.compaction.lag.ms": (_LONG, 0),
    "log.cleaner.max.compaction.lag.ms": (_LONG, 1),
    "log.cleaner.min.cleanable.ratio": (_DOUBLE, 0),
    "log.message.timestamp.before.max.ms": (_LONG, 0),
    "log.message.timestamp.after.max.ms": (_LONG, 0),
    "log.flush.interval.messages": (_LONG, 1),
    "log.flush.interval.ms": (_LONG, 0),
    "log.flush.scheduler.interval.ms": (_LONG, 0),
    "log.flush.offset.checkpoint.interval.ms": (_INT, 0),
    "log.flush.start.offset.checkpoint.interval.ms": (_INT, 0),
    "offsets.topic.num.partitions": (_INT, 1),
    "offsets.topic.replication.factor": (_INT, 1),
    "offsets.topic.segment.bytes": (_INT, 1),
    "offsets.retention.minutes": (_INT, 1),
    "offsets.retention.check.interval.ms": (_LONG, 1),
    "offset.metadata.max.bytes": (_INT, 0),
    "log.cleaner.enable": (_BOOL, None),
    "log.cleaner.backoff.ms": (_LONG, 0),
    "offsets.commit.timeout.ms": (_INT, 1),
    "group.initial.rebalance.delay.ms": (_INT, 0),
    "group.min.session.timeout.ms": (_INT, 0),
    "group.max.session.timeout.ms": (_INT, 0),
    "group.consumer.session.timeout.ms": (_INT, 1),
    "group.consumer.heartbeat.interval.ms": (_INT, 1),
    "group.consumer.assignment.interval.ms": (_INT, 0),
    "transaction.state.log.num.partitions": (_INT, 1),
    "transaction.state.log.replication.factor": (_INT, 1),
    "transaction.state.log.min.isr": (_INT, 1),
    "transaction.max.timeout.ms": (_INT, 1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (_INT, 1),
    "transactional.id.expiration.ms": (_INT, 1),
    "producer.id.expiration.ms": (_INT, 1),
    "broker.session.timeout.ms": (_INT, 1),
    "metadata.log.max.record.bytes.between.snapshots": (_INT, 1),
    "metadata.log.max.snapshot.interval.ms": (_LONG, 0),
    "broker.heartbeat.interval.ms": (_INT, 1),
    "initial.broker.registration.timeout.ms": (_INT, 1),
    "replica.lag.time.max.ms": (_LONG, 1),
    "replica.fetch.wait.max.ms": (_INT, 0),
    "replica.fetch.max.bytes": (_INT, 0),
    "replica.fetch.backoff.ms": (_INT, 0),
    "request.timeout.ms": (_INT, 0),
    "log.local.retention.ms": (_LONG, -2),
    "log.local.retention.bytes": (_LONG, -2),
    "compression.gzip.level": (_INT, -1),
    "compression.lz4.level": (_INT, 1),
    "compression.zstd.level": (_INT, -131072),
    "remote.log.copy.disable": (_BOOL, None),
    "remote.log.delete.on.disable": (_BOOL, None),
    "remote.storage.enable": (_BOOL, None),
    "follower.replication.throttled.replicas": (_REPLICAS, None),
    "leader.replication.throttled.replicas": (_REPLICAS, None),
}

#: Upper bounds where Kafka has them (``ConfigDef.Range.between``).
_MAXIMA: dict[str, int] = {"compression.lz4.level": 17, "compression.zstd.level": 22, "compression.gzip.level": 9}
_REPLICA_LIST = re.compile(r"\s*\d+\s*:\s*\d+\s*(,\s*\d+\s*:\s*\d+\s*)*")

#: Kafka's ``ConfigEntry.ConfigType`` ids (DescribeConfigs v3+ ``config_type``).
_CONFIG_TYPE_IDS = {_BOOL: 1, _STRING: 2, _INT: 3, _LONG: 5, _DOUBLE: 6, _REPLICAS: 7}


def config_type(name: str) -> int:
    """Kafka's config type id of broker or topic config ``name`` (1 boolean, 2 string, 3 int, 5 long,
    6 double, 7 list), as DescribeConfigs reports it."""
    if name in ("cleanup.policy", "log.cleanup.policy", "listeners", "advertised.listeners", "log.dirs"):
        return 7
    broker_name = TOPIC_CONFIG_TO_BROKER.get(name, name)
    return _CONFIG_TYPE_IDS[_TYPES.get(broker_name, (_STRING, None))[0]]

_CHOICES: dict[str, tuple[str, ...]] = {
    "log.cleanup.policy": ("delete", "compact", "compact,delete", "delete,compact"),
    "log.message.timestamp.type": ("CreateTime", "LogAppendTime"),
    # Kafka's BrokerCompressionType: producer keeps the producer's codec, the others recompress on append
    "compression.type": ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "ssl.client.auth": ("none", "requested", "required"),
    "ssl.keystore.type": ("JKS", "PKCS12", "PEM"),
    "ssl.truststore.type": ("JKS", "PKCS12", "PEM"),
    "ssl.principal.mapping.rules": ("DEFAULT",),
    "security.inter.broker.protocol": ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
}

#: Configs a listener may override as ``listener.name.<listener>.<config>`` (Kafka's per-listener
#: security configs); besides these, ``listener.name.<listener>.<mechanism>.sasl.jaas.config``.
LISTENER_OVERRIDABLE = frozenset(n for n in BROKER_DEFAULTS if n.startswith(("ssl.", "sasl.")) and
                                 n not in ("sasl.mechanism.inter.broker.protocol",)) | {"connections.max.reauth.ms"}
_LISTENER_PREFIXED = re.compile(r"listener\.name\.([a-z0-9_]+)\.(.+)")
_MECHANISM_JAAS = re.compile(r"[a-z0-9-]+\.sasl\.jaas\.config")


def is_sensitive(name: str) -> bool:
    """True for Kafka's PASSWORD-type configs (key store passwords, inline keys, JAAS configs):
    DescribeConfigs shows them as ``is_sensitive`` with no value, and they are never logged."""
    return name.endswith((".password", "ssl.keystore.key", "sasl.jaas.config"))


def listener_config_name(name: str) -> str | None:
    """The plain config a ``listener.name.<l>.<config>`` name overrides (``ssl.keystore.location``),
    or None when ``name`` is not a valid listener-prefixed name. Listener names are lower-case
    here, as in Kafka (``listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config``)."""
    m = _LISTENER_PREFIXED.fullmatch(name)
    if m is None:
        return None
    rest = m.group(2)
    if rest in LISTENER_OVERRIDABLE:
        return rest
    if _MECHANISM_JAAS.fullmatch(rest):
        return "sasl.jaas.config"
    return None

_INT_RANGE = (-(2**31), INT_MAX)
_LONG_RANGE = (-(2**63), LONG_MAX)


def _check_value(name: str, value: str | None, *, where: str) -> str | None:
    """Return ``value`` if it parses as ``name``'s type and range, else raise :class:`InvalidConfigError`."""
    if value is None:
        return None
    if not isinstance(value, str):
        value = str(value).lower() if isinstance(value, bool) else str(value)
    kind, low = _TYPES.get(name, (_STRING, None))
    if kind == _BOOL:
        if value.lower() not in ("true", "false"):
            raise InvalidConfigError(f"{where} {name}={value!r} is not a boolean: use true or false")
        return value.lower()
    if kind in (_INT, _LONG):
        try:
            number = int(value.strip())
        except ValueError:
            raise InvalidConfigError(f"{where} {name}={value!r} is not an integer: give a whole number") from None
        lo, hi = _INT_RANGE if kind == _INT else _LONG_RANGE
        if not lo <= number <= hi:
            raise InvalidConfigError(f"{where} {name}={value!r} is out of range for a 32/64-bit integer ({kind})")
        if low is not None and number < low:
            raise InvalidConfigError(f"{where} {name}={value!r} must be at least {low}")
        if name in _MAXIMA and number > _MAXIMA[name]:
            raise InvalidConfigError(f"{where} {name}={value!r} must be at most {_MAXIMA[name]}")
        if name == "compression.gzip.level" and number == 0:
            raise InvalidConfigError(f"{where} {name}={value!r} must be -1 (default) or 1..9")
        return str(number)
    if kind == _REPLICAS:
        if value.strip() not in ("", "*") and not _REPLICA_LIST.fullmatch(value):
            raise InvalidConfigError(f"{where} {name}={value!r}: {name} must be the literal '*' or a list of "
                                     "replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")
        return value
    if kind == _DOUBLE:
        try:
            number_f = float(value)
        except ValueError:
            raise InvalidConfigError(f"{where} {name}={value!r} is not a number") from None
        if low is not None and number_f < low:
            raise InvalidConfigError(f"{where} {name}={value!r} must be at least {low}")
        return value
    choices = _CHOICES.get(name)
    if choices is not None:
        canonical = {c.lower(): c for c in choices}.get(value.replace(" ", "").lower())
        if canonical is None:
            raise InvalidConfigError(
                f"{where} {name}={value!r} is not supported: use one of {', '.join(choices)}"
            )
        return canonical
    return value


class BrokerConfig:
    """The broker's configuration: Kafka config names over :data:`BROKER_DEFAULTS`.

    ``BrokerConfig({"log.segment.bytes": "1048576"})``. Values are strings as in
    ``server.properties`` (ints and bools are accepted and turned into strings).
    ``node.id`` and ``broker.id`` are aliases (setting one sets both);
    ``log.retention.hours``/``log.retention.minutes``/``log.roll.hours`` are rewritten to the
    ``.ms`` config unless that is set too (Kafka's precedence).

    Raises :class:`ConfigError` (INVALID_CONFIG) for an unknown name or a malformed value,
    naming the key and the fix.
    """

    def __init__(self, overrides: Mapping[str, object] | None = None) -> None:
        values: dict[str, str | None] = dict(BROKER_DEFAULTS)
        given = {str(k): v for k, v in (overrides or {}).items()}
        unit_rewrites: dict[str, tuple[int, str]] = {}
        for name, raw in given.items():
            if name in _UNIT_SYNONYMS:
                target, factor = _UNIT_SYNONYMS[name]
                try:
                    amount = int(str(raw))
                except ValueError:
                    raise ConfigError(f"broker config {name}={raw!r} is not an integer: give a whole number") from None
                # Smaller unit wins (ms > minutes > hours), as in Kafka.
                if target not in unit_rewrites or factor < unit_rewrites[target][0]:
                    unit_rewrites[target] = (factor, str(amount * factor))
                continue
            if name not in BROKER_DEFAULTS and listener_config_name(name) is None:
                if name.startswith("listener.name."):
                    raise ConfigError(
                        f"broker config {name!r} is not a per-listener config: use listener.name.<listener in "
                        "lower case>.<ssl.* or sasl.* config>, or listener.name.<listener>.<mechanism>.sasl.jaas.config"
                    )
                raise ConfigError(
                    f"unknown broker config {name!r}: use a Kafka broker config name "
                    f"(e.g. {', '.join(sorted(BROKER_DEFAULTS)[:4])}, ...; see BROKER_DEFAULTS)"
                )
        for target, (_, value) in unit_rewrites.items():
            if target not in given:
                values[target] = value
        for name, raw in given.items():
            if name in _UNIT_SYNONYMS:
                continue
            try:
                values[name] = _check_value(listener_config_name(name) or name, None if raw is None else raw,
                                            where="broker config")
            except InvalidConfigError as e:
                raise ConfigError(str(e)) from None
        for alias, other in (("node.id", "broker.id"), ("broker.id", "node.id")):
            if alias in given and other not in given:
                values[other] = values[alias]
        if "node.id" in given and "broker.id" in given and values["node.id"] != values["broker.id"]:
            raise ConfigError("broker config node.id and broker.id differ: set only one of them")
        for target in unit_rewrites:
            _check_value(target, values[target], where="broker config")
        self._values = values
        self._static = dict(values)  # without the dynamic configs (apply_dynamic)
        self._overridden = frozenset(given) | frozenset(unit_rewrites)
        self._given = frozenset(given)

    def apply_dynamic(self, values: Mapping[str, str]) -> None:
        """Make ``values`` (name -> validated value: the dynamic broker configs in force, Kafka's
        DYNAMIC_BROKER_CONFIG over DYNAMIC_DEFAULT_BROKER_CONFIG, :mod:`~pyspark_kafka.broker.dynamic_config`) the
        effective values of those names; every other name returns to its static or default value. Names this
        class does not know are ignored (the caller stores and describes them)."""
        self._values = {**self._static, **{k: v for k, v in values.items() if k in self._static}}

    def static_value(self, name: str) -> str | None:
        """The value of ``name`` given at start, else Kafka's default (a dynamic config set later aside)."""
        return self._static.get(name)

    def for_listener(self, listener: str, name: str) -> str | None:
        """``listener.name.<listener>.<name>`` when set, else ``name`` (Kafka's per-listener override)."""
        prefixed = f"listener.name.{listener.lower()}.{name}"
        if prefixed in self._values:
            return self._values[prefixed]
        return self.get(name)

    def get_if_set(self, name: str) -> str | None:
        """The value of ``name`` (also a ``listener.name.*`` config), None when neither set nor defaulted."""
        return self._values.get(name)

    def get(self, name: str) -> str | None:
        """The value of broker config ``name`` (a string, or ``None`` when unset with no default)."""
        try:
            return self._values[name]
        except KeyError:
            raise ConfigError(f"unknown broker config {name!r}: see BROKER_DEFAULTS for the names") from None

    def topic_default(self, topic_name: str) -> str | None:
        """The default of topic config ``topic_name``: its broker synonym's value, else the
        synonym's fallback (Kafka's ``KafkaConfig.logFlushIntervalMs``: ``flush.ms`` is
        ``log.flush.interval.ms``, else ``log.flush.scheduler.interval.ms``)."""
        if topic_name in TOPIC_ONLY_DEFAULTS:
            return TOPIC_ONLY_DEFAULTS[topic_name]
        broker_name = TOPIC_CONFIG_TO_BROKER[topic_name]
        value = self.get(broker_name)
        if value is None and broker_name in _BROKER_DEFAULT_FALLBACKS:
            value = self.get(_BROKER_DEFAULT_FALLBACKS[broker_name])
        return value

    def get_int(self, name: str) -> int | None:
        """``name`` as an int (``None`` when unset with no default)."""
        value = self.get(name)
        return None if value is None else int(value)

    def get_bool(self, name: str) -> bool:
        """``name`` as a bool (``true``/``false``)."""
        return (self.get(name) or "").lower() == "true"

    def is_default(self, name: str) -> bool:
        """True when ``name`` was not given in the overrides."""
        return name not in self._overridden

    def synonym_source(self, name: str) -> str | None:
        """Where broker config ``name`` itself gets a value, as a DescribeConfigs synonym of a topic
        config: "static" (given by that very name), "default" (Kafka defines a default for it),
        None (neither: Kafka lists no synonym). Kafka's ``ConfigHelper.configSynonyms`` keeps the
        synonyms from the first one named exactly like the topic config's broker config, so
        ``log.retention.hours`` (given, or its default 168) does not appear for ``retention.ms``:
        ``log.retention.ms`` and ``log.roll.ms`` have no default in Kafka (:data:`_KAFKA_UNSET_DEFAULTS`)."""
        if name in self._given:
            return "static"
        if name in _KAFKA_UNSET_DEFAULTS or self._values.get(name) is None:
            return None
        return "default"

    def items(self) -> Iterator[tuple[str, str | None, bool]]:
        """``(name, value, is_default)`` for every broker config, sorted by name (for DescribeConfigs)."""
        for name in sorted(self._values):
            yield name, self._values[name], self.is_default(name)
