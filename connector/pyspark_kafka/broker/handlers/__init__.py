"""Registry of request handlers, one entry per Kafka API key.

A handler module registers itself with :func:`register`; the server imports every module of
this package at start (:func:`load_handlers`), so a new API (consumer groups, transactions)
is a new module here and needs no edit of the server core::

    from pyspark_kafka.broker.handlers import RequestContext, register

    @register(api_key=10, min_version=0, max_version=4)   # FindCoordinator
    async def find_coordinator(ctx: RequestContext, request) -> dict:
        return {"throttle_time": 0, "error_code": ErrorCode.none, ...}

A handler receives the kio request entity of the negotiated version and returns a ``dict``
of plain values (see :func:`pyspark_kafka.broker.protocol.build`; keys a version lacks are
ignored), a kio response entity, or ``None`` for no response (Produce with acks=0).
Handlers reach the logs only through ``ctx.broker.replica_manager``
(:class:`~pyspark_kafka.broker.replica_manager.ReplicaManager`).
Raising :class:`~pyspark_kafka.broker.errors.KafkaError` is fine only where the caller
can map it; handlers normally put per-partition error codes into their response.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from pyspark_kafka.broker.clock import now_ms  # noqa: F401 - handlers take the clock from here

Handler = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True)
class Api:
    """One served API: key, inclusive version range advertised in ApiVersions, handler."""

    key: int
    min_version: int
    max_version: int
    handler: Handler


@dataclass(frozen=True)
class RequestContext:
    """What a handler knows about a request: the broker, the api version, the header and the peer.

    ``broker`` is the :class:`pyspark_kafka.broker.server.Broker` (typed ``Any``: the server imports this
    package, so this package does not import the server back): config, advertised
    host/port, ``replica_manager`` (the handlers' only way to the logs: appends, reads, offsets,
    append notifications, topic catalog) and the ``group_coordinator`` and ``txn_coordinator``;
    ``client_host`` is the client's address as Kafka shows it (``/127.0.0.1``; empty when unknown).
    ``session`` is the connection's :class:`~pyspark_kafka.broker.security.session.Session`
    (listener, SASL state); :attr:`principal` is who the connection authenticated as
    (``User:<name>``, ``User:ANONYMOUS``, ``User:CN=...``); :meth:`authorized` asks the broker's
    authorizer (:mod:`pyspark_kafka.broker.security.authorizer`) whether it may act on a resource.
    """

    broker: Any
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str = ""
    session: Any = None

    @property
    def principal(self) -> str:
        """The authenticated principal (``User:ANONYMOUS`` when the connection has no session)."""
        return self.session.principal if self.session is not None else "User:ANONYMOUS"

    @property
    def host(self) -> str:
        """The client's IP address as ACLs name it (``127.0.0.1``; empty when unknown)."""
        return self.client_host[1:] if self.client_host.startswith("/") else self.client_host

    def authorized(self, operation, resource_type, name: str) -> bool:
        """True when the principal may do ``operation`` (an ``AclOperation``) on the resource
        (``ResourceType``, name): always without an authorizer (``authorizer.class.name`` empty),
        else :meth:`StandardAuthorizer.authorize <pyspark_kafka.broker.security.authorizer.StandardAuthorizer.authorize>`.
        Every handler's check goes through here or :meth:`authorized_by_type`."""
        authorizer = getattr(self.broker, "authorizer", None)
        return authorizer is None or authorizer.authorize(self.principal, self.host, operation, resource_type, name)

    def authorized_by_type(self, operation, resource_type) -> bool:
        """True when the principal may do ``operation`` on some resource of ``resource_type``
        (Kafka's ``authorizeByResourceType``, KIP-679); always without an authorizer."""
        authorizer = getattr(self.broker, "authorizer", None)
        return authorizer is None or authorizer.authorize_by_resource_type(self.principal, self.host, operation,
                                                                           resource_type)

    def authorized_operations(self, resource_type, name: str) -> int:
        """The bitfield of operations the principal may do on the resource (Metadata's and
        DescribeCluster's ``*_authorized_operations`` when asked for); every supported operation
        without an authorizer, as Kafka answers."""
        from pyspark_kafka.broker.security.authorizer import all_operations
        authorizer = getattr(self.broker, "authorizer", None)
        if authorizer is None:
            return all_operations(resource_type)
        return authorizer.authorized_operations(self.principal, self.host, resource_type, name)

    @property
    def listener(self) -> str | None:
        """The name of the listener the request came in on (``PLAINTEXT``, ``SASL_SSL``...), None when unknown."""
        return self.session.listener.name if self.session is not None else None


class CloseConnection(Exception):
    """Raised by a handler to close the client's connection without a response.

    Kafka does this for a failed acks=0 produce, so the client refreshes its metadata.
    """


REGISTRY: dict[int, Api] = {}


def register(api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    """Decorator: serve ``api_key`` at versions ``min_version..max_version`` with the function.

    The version range must exist in kio (its schemas) and be fully implemented by the handler:
    it is advertised as-is in ApiVersions. Raises ValueError when the key is already taken.
    """

    def decorate(fn: Handler) -> Handler:
        existing = REGISTRY.get(api_key)
        if existing is not None and existing.handler is not fn:
            raise ValueError(f"api key {api_key} is already served by {existing.handler.__qualname__}")
        REGISTRY[api_key] = Api(api_key, min_version, max_version, fn)
        return fn

    return decorate


def load_handlers() -> dict[int, Api]:
    """Import every module of this package (registering their handlers) and return the registry."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    return REGISTRY
