"""Kafka's listener configs: ``listeners``, ``advertised.listeners``, ``listener.security.protocol.map``.

Rules as in Kafka's ``KafkaConfig`` / ``CoreUtils.listenerListToEndPoints``:

- ``listeners`` is a comma-separated list of ``NAME://host:port`` (host empty = all
  interfaces; ``[::1]`` for IPv6); names are unique and upper-case letters, digits and ``_``.
- a name's security protocol comes from ``listener.security.protocol.map``
  (``NAME:PROTOCOL,...``); its default maps each protocol name to itself, so ``SSL://...``
  needs no map entry while ``EXTERNAL://...`` does.
- ``advertised.listeners`` defaults to ``listeners``; each advertised name must be a listener.
  Port 0 in ``listeners`` binds a free port, which is then advertised (a broker for tests).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark_kafka.broker.errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_ENTRY = re.compile(r"([A-Za-z0-9_]+)://(\[[0-9a-fA-F:.]+\]|[^:\[\]/]*):(-?\d+)")


@dataclass
class Listener:
    """One listener: ``name`` (``PLAINTEXT``, ``SASL_SSL``, ``EXTERNAL``...), ``protocol`` (one of
    :data:`PROTOCOLS`), the bind ``host``/``port`` and the advertised ``advertised_host``/
    ``advertised_port`` (port 0 until the socket is bound)."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def tls(self) -> bool:
        """True for SSL and SASL_SSL."""
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        """True for SASL_PLAINTEXT and SASL_SSL."""
        return self.protocol.startswith("SASL_")

    def advertised(self) -> tuple[str, int]:
        """``(host, port)`` clients are told to use (Metadata, FindCoordinator)."""
        host = self.advertised_host or self.host or "127.0.0.1"
        port = self.advertised_port if self.advertised_port else self.port
        return host, port


def parse_protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map`` → ``{NAME: PROTOCOL}``. Raises ConfigError naming the bad entry."""
    out: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map entry {entry!r} is invalid: use NAME:PROTOCOL with "
                              f"PROTOCOL one of {', '.join(PROTOCOLS)}")
        out[name] = protocol
    return out


def parse_listener_list(config_name: str, text: str) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` → ``[(NAME, host, port)]``; names unique (ConfigError otherwise)."""
    out: list[tuple[str, str, int]] = []
    for entry in (e.strip() for e in (text or "").split(",") if e.strip()):
        m = _ENTRY.fullmatch(entry)
        if m is None:
            raise ConfigError(f"{config_name} entry {entry!r} is invalid: use NAME://host:port "
                              "(e.g. PLAINTEXT://127.0.0.1:9092, SASL_SSL://:9093)")
        name, host, port = m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"{config_name} entry {entry!r}: port {port} is outside 0..65535")
        if any(name == n for n, _, _ in out):
            raise ConfigError(f"{config_name} has the listener name {name} twice: each listener needs its own name")
        out.append((name, host, port))
    return out


def parse_listeners(config) -> list[Listener]:
    """The listeners of a :class:`~pyspark_kafka.broker.config.BrokerConfig`, advertised addresses filled.

    Raises ConfigError for a malformed entry, a name without a security protocol, an advertised
    listener that is not a listener, or a duplicate port.
    """
    protocols = parse_protocol_map(config.get("listener.security.protocol.map") or "")
    listeners = []
    for name, host, port in parse_listener_list("listeners", config.get("listeners")):
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(f"listeners entry {name}: no security protocol is defined for listener {name}: add "
                              f"{name}:<PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL> to listener.security.protocol.map")
        listeners.append(Listener(name, protocol, host, port))
    if not listeners:
        raise ConfigError("listeners is empty: give at least one NAME://host:port")
    ports = [lst.port for lst in listeners if lst.port]
    if len(ports) != len(set(ports)):
        raise ConfigError(f"listeners {config.get('listeners')!r} use one port twice: give each listener its own port")
    by_name = {lst.name: lst for lst in listeners}
    for name, host, port in parse_listener_list("advertised.listeners", config.get("advertised.listeners") or ""):
        if name not in by_name:
            raise ConfigError(f"advertised.listeners names listener {name}, which is not in listeners "
                              f"({', '.join(by_name)}): advertise only listeners the broker has")
        by_name[name].advertised_host, by_name[name].advertised_port = host or None, port or None
    inter = config.get("inter.broker.listener.name")
    if inter is not None and not config.is_default("security.inter.broker.protocol"):
        raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol should be set "
                          "(Kafka's rule): remove one")
    if inter is not None and inter.upper() not in by_name:
        raise ConfigError(f"inter.broker.listener.name={inter!r} is not a listener ({', '.join(by_name)})")
    return listeners
