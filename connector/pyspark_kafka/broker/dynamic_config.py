"""Dynamic broker configs and group configs (AlterConfigs / IncrementalAlterConfigs on a BROKER or GROUP resource).

Apache Kafka's rules (``DynamicBrokerConfig``, ``ConfigAdminManager``, ``GroupConfig``), single node:

- A broker resource named after this broker (``"0"``) holds the per-broker dynamic configs (DescribeConfigs source
  DYNAMIC_BROKER_CONFIG 2); the resource named ``""`` the cluster-wide defaults (DYNAMIC_DEFAULT_BROKER_CONFIG 3).
  Precedence: per-broker > cluster default > static (given at start) > Kafka's default.
- Only Kafka's dynamic configs (:data:`DYNAMIC_BROKER_CONFIGS`) may be set; a known static one (``log.dirs``,
  ``num.partitions``) is refused with INVALID_REQUEST "Cannot update these configs dynamically: [...]"; a name Kafka
  does not know is accepted and stored (as Kafka: custom configs), described without its value. A bad value, an SSL key store
  config without the ``listener.name.<l>.`` prefix, a per-broker config at the cluster-default level, and a thread
  count below half or above double the current one are INVALID_REQUEST too (Kafka turns its ConfigException into
  InvalidRequestException, KAFKA-13609). APPEND / SUBTRACT on a non-list config: INVALID_CONFIG.
- A group resource holds per-group configs (:data:`GROUP_CONFIG_DEFAULTS`; source GROUP_CONFIG 8); an unknown name is
  INVALID_CONFIG "Unknown group config name: ...", a value out of Kafka's bounds INVALID_CONFIG.

The values are kept in ``__dynamic_configs.json`` in the data directory (Kafka keeps them in its metadata log; a
replicated cluster does too, :meth:`DynamicConfigs.apply_record`), so they survive a restart. They take effect at once
where the broker reads the config when it uses it: the topic defaults (``log.cleanup.policy``, ``log.retention.ms``,
``message.max.bytes``, ...: every topic without an override, and new topics), and the consumer group coordinator
uses a group's ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms``. Configs read once at start
(connection limits, listeners, thread counts, Kerberos) are stored and described only.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable, Mapping

from pyspark_kafka.broker.config import (
    BROKER_DEFAULTS, TOPIC_CONFIG_TO_BROKER, BrokerConfig, _check_value, listener_config_name,
)
from pyspark_kafka.broker.errors import InvalidConfigError, InvalidRequestError
from pyspark_kafka.kafka.fsutil import atomic_write

log = logging.getLogger(__name__)

DYNAMIC_CONFIGS_FILE = "__dynamic_configs.json"
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

#: Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only per listener (``listener.name.<l>.<config>``).
_SECURITY_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.truststore.certificates"})
#: Kafka's DynamicListenerConfig.ReconfigurableConfigs.
_LISTENER_CONFIGS = frozenset({
    "advertised.listeners", "listeners", "listener.security.protocol.map", "principal.builder.class",
    "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.keystore.type",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation", "ssl.client.auth",
    "ssl.engine.factory.class", "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
    "max.connections", "max.connection.creation.rate", "num.network.threads"})
_CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})
#: Kafka's DynamicThreadPool.ReconfigurableConfigs with Kafka 4's defaults (a change may at most halve or double).
_THREAD_POOLS = {"num.io.threads": "8", "num.replica.fetchers": "1", "num.recovery.threads.per.data.dir": "2",
                 "background.threads": "10", "num.network.threads": "3", "log.cleaner.threads": "1"}

#: Every dynamic broker config of Kafka (``DynamicBrokerConfig.AllDynamicConfigs`` and the broker quota configs).
DYNAMIC_BROKER_CONFIGS = frozenset(
    _SECURITY_CONFIGS | _LISTENER_CONFIGS | set(_THREAD_POOLS) | set(TOPIC_CONFIG_TO_BROKER.values()) | {
        # LogCleaner.ReconfigurableConfigs
        "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size", "message.max.bytes", "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
        "metric.reporters",
        # SocketServer.ReconfigurableConfigs
        "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connections", "max.connection.creation.rate",
        "producer.id.expiration.ms", "transaction.partition.verification.enable",
        # DynamicRemoteLogConfig.ReconfigurableConfigs
        "remote.log.index.file.cache.total.size.bytes", "remote.fetch.max.wait.ms",
        "remote.log.manager.copy.max.bytes.per.second", "remote.log.manager.fetch.max.bytes.per.second",
        "remote.list.offsets.request.timeout.ms",
        # QuotaConfig.brokerQuotaConfigs
        "leader.replication.throttled.rate", "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second"})
_PER_BROKER_CONFIGS = (_SECURITY_CONFIGS | _LISTENER_CONFIGS) - _CLUSTER_LEVEL_LISTENER_CONFIGS

#: Kafka broker configs that are static although BROKER_DEFAULTS does not list them.
_OTHER_STATIC = frozenset({"log.dir", "log.retention.hours", "log.retention.minutes", "log.roll.hours",
                           "log.roll.jitter.hours", "zookeeper.connect", "controller.quorum.election.timeout.ms"})
STATIC_BROKER_CONFIGS = frozenset((set(BROKER_DEFAULTS) | _OTHER_STATIC) - DYNAMIC_BROKER_CONFIGS)

_INT, _LONG, _DOUBLE, _BOOL = "int", "long", "double", "bool"
#: Types, Kafka's lower bounds and defaults of the dynamic configs BROKER_DEFAULTS does not hold (described when set).
_EXTRA_TYPES: dict[str, tuple[str, float | None, str | None]] = {
    **{name: (_INT, 1, default) for name, default in _THREAD_POOLS.items()},
    "log.cleaner.threads": (_INT, 0, "1"),
    "log.cleaner.dedupe.buffer.size": (_LONG, None, "134217728"),
    "log.cleaner.io.buffer.load.factor": (_DOUBLE, None, "0.9"),
    "log.cleaner.io.buffer.size": (_INT, 0, "524288"),
    "log.cleaner.io.max.bytes.per.second": (_DOUBLE, None, "1.7976931348623157E308"),
    "max.connection.creation.rate": (_INT, 0, "2147483647"),
    "transaction.partition.verification.enable": (_BOOL, None, "true"),
    "sasl.kerberos.ticket.renew.window.factor": (_DOUBLE, None, "0.8"),
    "sasl.kerberos.ticket.renew.jitter": (_DOUBLE, None, "0.05"),
    "sasl.kerberos.min.time.before.relogin": (_LONG, None, "60000"),
    "sasl.login.refresh.window.factor": (_DOUBLE, 0.5, "0.8"),
    "sasl.login.refresh.window.jitter": (_DOUBLE, 0.0, "0.05"),
    "sasl.login.refresh.min.period.seconds": (_INT, 0, "60"),
    "sasl.login.refresh.buffer.seconds": (_INT, 0, "300"),
    "leader.replication.throttled.rate": (_LONG, 0, "9223372036854775807"),
    "follower.replication.throttled.rate": (_LONG, 0, "9223372036854775807"),
    "replica.alter.log.dirs.io.max.bytes.per.second": (_LONG, 0, "9223372036854775807"),
}
#: Broker list configs (IncrementalAlterConfigs APPEND / SUBTRACT apply).
_LIST_CONFIGS = frozenset({"log.cleanup.policy", "listeners", "advertised.listeners", "sasl.enabled.mechanisms",
                           "ssl.enabled.protocols", "ssl.cipher.suites", "metric.reporters",
                           "sasl.kerberos.principal.to.local.rules"})

#: Kafka 4.3.1's group configs and defaults (DescribeConfigs of a group without overrides) and the broker config
#: supplying the default where there is one here.
GROUP_CONFIG_DEFAULTS: dict[str, tuple[str | None, str]] = {
    "consumer.assignment.interval.ms": ("group.consumer.assignment.interval.ms", "1000"),
    "consumer.heartbeat.interval.ms": ("group.consumer.heartbeat.interval.ms", "5000"),
    "consumer.session.timeout.ms": ("group.consumer.session.timeout.ms", "45000"),
    "share.assignment.interval.ms": (None, "1000"), "share.auto.offset.reset": (None, "latest"),
    "share.delivery.count.limit": (None, "5"), "share.heartbeat.interval.ms": (None, "5000"),
    "share.isolation.level": (None, "read_uncommitted"), "share.partition.max.record.locks": (None, "2000"),
    "share.record.lock.duration.ms": (None, "30000"), "share.renew.acknowledge.enable": (None, "true"),
    "share.session.timeout.ms": (None, "45000"), "streams.assignment.interval.ms": (None, "1000"),
    "streams.heartbeat.interval.ms": (None, "5000"), "streams.initial.rebalance.delay.ms": (None, "3000"),
    "streams.num.standby.replicas": (None, "0"), "streams.session.timeout.ms": (None, "45000"),
}
_GROUP_STRINGS = {"share.auto.offset.reset": ("latest", "earliest", "by_duration"),
                  "share.isolation.level": ("read_uncommitted", "read_committed"),
                  "share.renew.acknowledge.enable": ("true", "false")}
#: Kafka's GroupCoordinatorConfig bounds of a group's consumer.* configs (group.consumer.min/max.*, Kafka's defaults).
_GROUP_BOUNDS = {"consumer.session.timeout.ms": (45000, 60000, "group.consumer.min.session.timeout.ms",
                                                 "group.consumer.max.session.timeout.ms"),
                 "consumer.heartbeat.interval.ms": (5000, 15000, "group.consumer.min.heartbeat.interval.ms",
                                                    "group.consumer.max.heartbeat.interval.ms")}


def is_dynamic(name: str) -> bool:
    """True for a broker config Kafka lets AlterConfigs change (also ``listener.name.<l>.<config>`` forms)."""
    base = listener_config_name(name) or name
    return base in DYNAMIC_BROKER_CONFIGS


def extra_dynamic_configs() -> Mapping[str, tuple[str, float | None, str | None]]:
    """Dynamic configs BROKER_DEFAULTS does not hold: name -> (type, lower bound, Kafka's default)."""
    return _EXTRA_TYPES


def _listed(names: Iterable[str]) -> str:
    return "[" + ", ".join(sorted(names)) + "]"


def _check_extra(name: str, value: str) -> str:
    kind, low, _ = _EXTRA_TYPES[name]
    try:
        number = {_INT: int, _LONG: int, _DOUBLE: float}[kind](value) if kind != _BOOL else None
    except ValueError:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Not a number of type "
                                 f"{kind.upper()}") from None
    if kind == _BOOL and value.lower() not in ("true", "false"):
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Expected value to be either true "
                                 "or false")
    if number is not None and low is not None and number < low:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Value must be at least {low}")
    return value.lower() if kind == _BOOL else value


def merge(current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]],
          default_of) -> dict[str, str]:
    """``current`` after IncrementalAlterConfigs' ``(name, op, value)`` changes (KIP-339); APPEND / SUBTRACT start
    from the stored value, else ``default_of(name)`` (Kafka's ``prepareIncrementalConfigs``). Raises
    InvalidConfigError for APPEND / SUBTRACT on a non-list config or an unknown operation."""
    props = dict(current)
    for name, op, value in ops:
        if op == OP_SET:
            props[name] = value
        elif op == OP_DELETE:
            props.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if name not in _LIST_CONFIGS:
                raise InvalidConfigError(f"Config value append is not allowed for config key: {name}" if op == OP_APPEND
                                         else f"Config value subtract is not allowed for config key: {name}")
            old = [v for v in (props.get(name) or default_of(name) or "").split(",") if v]
            items = [v for v in (value or "").split(",") if v]
            new = old + [v for v in items if v not in old] if op == OP_APPEND else [v for v in old if v not in items]
            props[name] = ",".join(new)
        else:
            raise InvalidRequestError(f"Unknown operations type {op}")
    return props


class DynamicConfigs:
    """This broker's dynamic broker configs and per-group configs, kept in ``<data_dir>/__dynamic_configs.json``.

    ``DynamicConfigs(data_dir, config)``, then :meth:`load` (applies the stored values to ``config``). ``per_broker``
    and ``cluster_default`` map names to values; ``groups`` maps a group id to its configs. Used from the broker's
    asyncio thread; no locking.
    """

    def __init__(self, data_dir: Path, config: BrokerConfig) -> None:
        self.path = Path(data_dir) / DYNAMIC_CONFIGS_FILE
        self.config = config
        self.per_broker: dict[str, str] = {}
        self.cluster_default: dict[str, str] = {}
        self.groups: dict[str, dict[str, str]] = {}
        self.listeners: list = []  # callables run after a broker config change (e.g. the log manager's refresh)

    def load(self) -> None:
        """Read the stored configs (none when the file is missing) and apply them; a stored value this version
        refuses is logged and left out."""
        if self.path.exists():
            doc = json.loads(self.path.read_text())
            self.per_broker = dict(doc.get("broker", {}))
            self.cluster_default = dict(doc.get("default", {}))
            self.groups = {g: dict(c) for g, c in doc.get("groups", {}).items()}
        for level in (self.per_broker, self.cluster_default):
            for name, value in list(level.items()):
                try:
                    level[name] = self._check_value(name, value)
                except InvalidConfigError as e:
                    log.error("stored dynamic broker config %s is invalid (%s): ignored", name, e)
                    del level[name]
        self.config.apply_dynamic(self.effective())

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"broker": self.per_broker, "default": self.cluster_default,
               "groups": {g: c for g, c in self.groups.items() if c}}
        atomic_write(self.path, json.dumps(doc, indent=1, sort_keys=True).encode())

    def effective(self) -> dict[str, str]:
        """The dynamic values in force: per-broker over cluster default."""
        return {**self.cluster_default, **self.per_broker}

    def source(self, name: str) -> list[tuple[str, int]]:
        """``(value, source)`` of the dynamic levels that set ``name``, highest precedence first (2, then 3)."""
        found = []
        if name in self.per_broker:
            found.append((self.per_broker[name], 2))
        if name in self.cluster_default:
            found.append((self.cluster_default[name], 3))
        return found

    def current(self, name: str) -> str | None:
        """The value of broker config ``name`` in force (dynamic, static or Kafka's default)."""
        dynamic = self.effective()
        if name in dynamic:
            return dynamic[name]
        if name in _EXTRA_TYPES:
            return _EXTRA_TYPES[name][2]
        return self.config.get_if_set(name)

    def _check_value(self, name: str, value: str | None) -> str | None:
        base = listener_config_name(name) or name
        if value is None or base not in DYNAMIC_BROKER_CONFIGS:
            return value  # a custom config: stored as given
        if base in _EXTRA_TYPES and base not in BROKER_DEFAULTS:
            return _check_extra(base, value)
        return _check_value(base, value, where="broker config")

    def alter_broker(self, per_broker: bool, ops: list[tuple[str, int, str | None]] | None,
                     replace: Mapping[str, str] | None, validate_only: bool) -> dict[str, str]:
        """Change the per-broker (``per_broker``) or cluster-default dynamic configs: ``ops`` (IncrementalAlterConfigs)
        or ``replace`` (AlterConfigs: the new full set). Validates the resulting set as Kafka's
        ``DynamicBrokerConfig.validate`` (InvalidRequestError, see the module docstring), then stores and applies it
        unless ``validate_only``. Returns the new set."""
        level = self.per_broker if per_broker else self.cluster_default
        props = dict(replace) if replace is not None else merge(level, ops or (), self._kafka_default)
        static = sorted(n for n in props if n in STATIC_BROKER_CONFIGS)
        if static:
            raise InvalidRequestError(f"Cannot update these configs dynamically: {_listed(static)}")
        unprefixed = sorted(n for n in props if n in _SECURITY_CONFIGS)
        if unprefixed:
            raise InvalidRequestError("These security configs can be dynamically updated only per-listener using the "
                                      f"listener prefix: {_listed(unprefixed)}")
        checked = {}
        for name, value in props.items():
            try:
                checked[name] = self._check_value(name, value)
            except InvalidConfigError as e:
                raise InvalidRequestError(str(e)) from None
        if not per_broker:
            per = sorted(n for n in props if n in _PER_BROKER_CONFIGS or (
                listener_config_name(n) is not None and listener_config_name(n) not in _CLUSTER_LEVEL_LISTENER_CONFIGS))
            if per:
                raise InvalidRequestError("Cannot update these configs at default cluster level, broker id must be "
                                          f"specified: {_listed(per)}")
        for name, default in _THREAD_POOLS.items():
            if name in checked and checked[name] != self.current(name):
                old, new = int(self.current(name) or default), int(checked[name])
                prefix = f"Dynamic thread count update validation failed for {name}={new}"
                if new < old / 2:
                    raise InvalidRequestError(f"{prefix}, value should be at least half the current value {old}")
                if new > old * 2:
                    raise InvalidRequestError(f"{prefix}, value should not be greater than double the current value "
                                              f"{old}")
        if not validate_only:
            level.clear()
            level.update(checked)
            self._save()
            self._applied()
        return checked

    def _applied(self) -> None:
        self.config.apply_dynamic(self.effective())
        for listener in self.listeners:
            listener()

    def apply_record(self, resource: str, name: str, configs: Mapping[str, str], node_id: int) -> None:
        """A replicated cluster's ``dynamic_config`` metadata record (validated by the broker that took the request):
        the group's configs, the cluster default (``name`` ""), or this broker's own (``name`` its id); another
        broker's are ignored. Not written to the file: the metadata log is replayed at start."""
        if resource == "group":
            self.groups[name] = dict(configs)
            return
        if name not in ("", str(node_id)):
            return
        level = self.per_broker if name else self.cluster_default
        level.clear()
        level.update(configs)
        self._applied()

    @staticmethod
    def _kafka_default(name: str) -> str | None:
        if name in _EXTRA_TYPES:
            return _EXTRA_TYPES[name][2]
        return BROKER_DEFAULTS.get(listener_config_name(name) or name)

    # -- groups ---------------------------------------------------------------------------------
    def group_value(self, group_id: str, name: str) -> str:
        """Group config ``name`` of ``group_id``: the group's own value, else the broker-wide default."""
        value = self.groups.get(group_id, {}).get(name)
        if value is not None:
            return value
        broker_name, default = GROUP_CONFIG_DEFAULTS[name]
        return self.config.get(broker_name) if broker_name else default

    def alter_group(self, group_id: str, ops: list[tuple[str, int, str | None]] | None,
                    replace: Mapping[str, str] | None, validate_only: bool) -> dict[str, str]:
        """Change ``group_id``'s configs (``ops`` or the full ``replace`` set). Raises InvalidConfigError as Kafka's
        ``GroupConfig.validate``: an unknown name, a value of the wrong type or out of its bounds. Returns the new
        set."""
        unknown = [n for n in ([n for n, _, _ in ops or ()] if replace is None else list(replace))
                   if n not in GROUP_CONFIG_DEFAULTS]
        if unknown:
            raise InvalidConfigError(f"Unknown group config name: {unknown[0]}")
        props = dict(replace) if replace is not None else merge(self.groups.get(group_id, {}), ops or (),
                                                                lambda n: None)
        for name, value in props.items():
            choices = _GROUP_STRINGS.get(name)
            if choices is not None:
                if value.lower() not in choices:
                    raise InvalidConfigError(f"Invalid value {value} for configuration {name}: String must be one of: "
                                             f"{', '.join(choices)}")
                continue
            try:
                int(value)
            except ValueError:
                raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Not a number of type "
                                         "INT") from None
        values = {n: int(props.get(n, self.config.get(GROUP_CONFIG_DEFAULTS[n][0]))) for n in _GROUP_BOUNDS}
        for name, (low, high, low_name, high_name) in _GROUP_BOUNDS.items():
            if name not in props:  # the broker-wide default is the operator's choice, also outside Kafka's bounds
                continue
            if values[name] < low:
                raise InvalidConfigError(f"{name} must be greater than or equal to {low_name}")
            if values[name] > high:
                raise InvalidConfigError(f"{name} must be less than or equal to {high_name}")
        if values["consumer.session.timeout.ms"] <= values["consumer.heartbeat.interval.ms"]:
            raise InvalidConfigError("consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
        if not validate_only:
            self.groups[group_id] = props
            self._save()
        return props
