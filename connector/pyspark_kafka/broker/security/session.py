"""Per-broker security setup (:class:`Security`) and per-connection state (:class:`Session`).

A SASL listener's connection is a small state machine, as Kafka's ``SaslServerAuthenticator``:

- ``HANDSHAKE``: only ApiVersions and SaslHandshake are served; any other request closes the
  connection (Kafka: IllegalSaslStateException, no response).
- SaslHandshake v1 with an enabled mechanism → ``AUTHENTICATE`` (tokens in SaslAuthenticate
  requests); v0 → ``RAW`` (size-prefixed tokens with no Kafka header, as Kafka's oldest clients).
  A mechanism that is not enabled is answered UNSUPPORTED_SASL_MECHANISM with the enabled list,
  then the connection is closed.
- a completed exchange → ``AUTHENTICATED`` with ``principal`` ``User:<name>``; a failed one is
  answered SASL_AUTHENTICATION_FAILED (Kafka's text) and the connection is closed.
- KIP-368: with ``connections.max.reauth.ms`` > 0 the session lifetime goes to the client in
  SaslAuthenticate v1+; a request other than SaslHandshake after the session expired closes the
  connection; a new SaslHandshake on an authenticated connection re-authenticates (the principal
  may not change).

PLAINTEXT and SSL connections start ``AUTHENTICATED`` as ``User:ANONYMOUS``, or on SSL with a
verified client certificate as ``User:<subject DN>``.
"""

from __future__ import annotations

import time

from pyspark_kafka.broker.errors import ConfigError
from pyspark_kafka.broker.security import jaas, tls
from pyspark_kafka.broker.security.credentials import MetadataCredentials
from pyspark_kafka.broker.security.listeners import Listener, parse_listeners
from pyspark_kafka.broker.security.plain import PlainServer
from pyspark_kafka.broker.security.scram import SaslFailure, ScramServer

ANONYMOUS = "User:ANONYMOUS"
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

HANDSHAKE, AUTHENTICATE, RAW, AUTHENTICATED = "HANDSHAKE", "AUTHENTICATE", "RAW", "AUTHENTICATED"


class Security:
    """The broker's listeners with their TLS contexts, enabled SASL mechanisms and credentials.

    ``Security(config: BrokerConfig, data_dir)``. Raises ConfigError for a bad listener,
    TLS or SASL config (GSSAPI and OAUTHBEARER are not supported), KafkaStorageError for an
    unreadable credential store. SCRAM users in a listener's SCRAM JAAS config
    (``user_<name>="<password>"``, our extension) are :attr:`scram_seeds`.

    The credentials are the metadata image's (:class:`~pyspark_kafka.broker.security.credentials.MetadataCredentials`,
    set by the broker lifecycle with :meth:`use_metadata`; Kafka's ``ScramImage``); the data dir's old credentials
    file is neither read nor written here (a combined node migrates it at its first start), and the seeds become
    records through the controller at registration (the lifecycle).
    """

    def __init__(self, config, data_dir):
        self.config = config
        self.listeners: list[Listener] = parse_listeners(config)
        self.credentials = MetadataCredentials({})
        #: (user, mechanism) -> password of the SCRAM JAAS users (our extension): the broker lifecycle writes them as
        #: records at registration when its image lacks them or holds another password
        self.scram_seeds: dict[tuple[str, str], str] = {}
        self.ssl_contexts = {}
        self.mechanisms: dict[str, tuple[str, ...]] = {}
        self.plain_users: dict[str, dict[str, str]] = {}
        seeds = {}
        for lst in self.listeners:
            if lst.tls:
                self.ssl_contexts[lst.name] = tls.server_context(config, lst.name)
            if not lst.sasl:
                continue
            enabled = tuple(m.strip().upper() for m in (config.for_listener(lst.name, "sasl.enabled.mechanisms") or "")
                            .split(",") if m.strip())
            unsupported = [m for m in enabled if m not in SUPPORTED_MECHANISMS]
            if unsupported or not enabled:
                raise ConfigError(f"listener {lst.name}: sasl.enabled.mechanisms={','.join(enabled) or '(empty)'}: "
                                  f"{', '.join(unsupported) or 'nothing'} is not supported here; enable some of "
                                  f"{', '.join(SUPPORTED_MECHANISMS)}")
            self.mechanisms[lst.name] = enabled
            for mech in enabled:
                options = self._jaas_options(lst.name, mech)
                if mech == "PLAIN":
                    self.plain_users[lst.name] = jaas.users(options)
                else:
                    for user, password in jaas.users(options).items():
                        seeds[(user, mech)] = password
        self.scram_seeds = seeds

    def use_metadata(self, scram: dict) -> None:
        """Authenticate SASL/SCRAM clients and answer DescribeUserScramCredentials from ``scram``, a metadata
        image's ``{(user, mechanism): credential}`` dict (Kafka's ``ScramImage``), from now on."""
        self.credentials = MetadataCredentials(scram)

    def _jaas_options(self, listener: str, mechanism: str) -> dict[str, str]:
        """Options of the JAAS config for ``mechanism`` on ``listener``: Kafka's lookup order is
        ``listener.name.<l>.<mechanism>.sasl.jaas.config``, ``listener.name.<l>.sasl.jaas.config``,
        ``sasl.jaas.config``."""
        name, text = "sasl.jaas.config", None
        for candidate in (f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config",
                          f"listener.name.{listener.lower()}.sasl.jaas.config", "sasl.jaas.config"):
            text = self.config.get_if_set(candidate)
            if text is not None:
                name = candidate
                break
        if text is None:
            if mechanism == "PLAIN":
                raise ConfigError(f"listener {listener}: SASL/PLAIN needs its users: set listener.name.{listener.lower()}"
                                  ".plain.sasl.jaas.config (or sasl.jaas.config) to org.apache.kafka.common.security."
                                  "plain.PlainLoginModule required user_<name>=\"<password>\" ...;")
            return {}
        return jaas.parse_jaas(name, text)[1]

    def mechanism_server(self, listener: str, mechanism: str):
        """A fresh server for one exchange of ``mechanism`` on ``listener``."""
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users.get(listener, {}))
        return ScramServer(mechanism, lambda user: self.credentials.get(user, mechanism))


class Session:
    """One connection's security state: ``listener``, ``state``, ``principal`` (``User:...``),
    ``mechanism``; ``close_after_response`` set by the SASL handlers when Kafka closes the
    connection after answering; ``expires_at`` (monotonic s, KIP-368) or None."""

    def __init__(self, listener: Listener, principal: str | None = None):
        self.listener = listener
        self.state = HANDSHAKE if listener.sasl else AUTHENTICATED
        self.principal = principal or ANONYMOUS
        self.mechanism: str | None = None
        self.server = None
        self.close_after_response = False
        self.expires_at: float | None = None
        self.reauthenticating = False

    @property
    def authenticated(self) -> bool:
        """True once requests other than ApiVersions/SaslHandshake/SaslAuthenticate may be served."""
        return self.state == AUTHENTICATED

    def expired(self) -> bool:
        """True when the KIP-368 session lifetime has passed."""
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def begin(self, security: Security, mechanism: str, raw: bool) -> None:
        """Start an exchange of ``mechanism`` (after SaslHandshake)."""
        self.reauthenticating = self.state == AUTHENTICATED
        self.mechanism = mechanism
        self.server = security.mechanism_server(self.listener.name, mechanism)
        self.state = RAW if raw else AUTHENTICATE

    def evaluate(self, token: bytes, reauth_ms: int) -> bytes:
        """One client token → the server's token; on completion the session is authenticated.

        Raises SaslFailure (the caller answers and closes the connection).
        """
        answer = self.server.evaluate(token)
        if self.server.complete:
            principal = "User:" + self.server.username
            if self.reauthenticating and principal != self.principal:
                raise SaslFailure("Cannot change principals during re-authentication")
            self.principal, self.state, self.server = principal, AUTHENTICATED, None
            self.expires_at = time.monotonic() + reauth_ms / 1000 if reauth_ms > 0 else None
        return answer
