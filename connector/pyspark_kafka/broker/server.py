"""The embedded broker's asyncio TCP server: framing, dispatch, zero-copy writes, timers.

One :class:`Broker` owns the :class:`~pyspark_kafka.broker.replica_manager.ReplicaManager`
(the logs) and the coordinators, and is used from one event loop thread only. Each connection
is served by one task that reads a frame (4-byte big-endian size, then the request),
dispatches it through the handler registry (:mod:`pyspark_kafka.broker.handlers`) and writes
the response before reading the next frame: like Kafka's SocketServer, which mutes a connection while a request is in
flight, pipelined requests are answered in order.

Entry points: :func:`run_broker` (foreground, used by ``pyspark-kafka broker``) and
:class:`pyspark_kafka.broker.EmbeddedBroker` (background thread).
"""

from __future__ import annotations

import asyncio
import base64
import signal
import uuid
from pathlib import Path
from typing import Any, Callable

from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker import protocol
from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.connections import CHUNK_BYTES, ConnectionQuotas, RequestMemory, read_frame_body, within
from pyspark_kafka.broker.coordinator.group import GroupCoordinator
from pyspark_kafka.broker.coordinator.internal_topics import OFFSETS_TOPIC
from pyspark_kafka.broker.coordinator.partition_writer import LogPartitionWriter
from pyspark_kafka.broker.coordinator.txn import TransactionCoordinator
from pyspark_kafka.broker.dynamic_config import DynamicConfigs
from pyspark_kafka.broker.handlers import REGISTRY, CloseConnection, RequestContext, load_handlers, now_ms
from pyspark_kafka.broker.handlers.api_versions import api_versions_body
from pyspark_kafka.broker.errors import ErrorCode, KafkaError
from pyspark_kafka.broker.forwarding import ForwardingManager
from pyspark_kafka.broker.metadata_cache import KRaftMetadataCache, MetadataCache
from pyspark_kafka.broker.replica_manager import ReplicaManager
from pyspark_kafka.broker.security import session as sec
from pyspark_kafka.broker.security.authorizer import authorizer_from_config
from pyspark_kafka.broker.security.listeners import Listener
from pyspark_kafka.broker.security.scram import SaslFailure
from pyspark_kafka.broker.security.tls import certificate_principal

log = get_logger("pyspark_kafka.broker")

class Broker:
    """One broker: config, advertised address, the storage seam and the coordinators.

    ``Broker(data_dir, config: dict[str, str] | None, host)``; ``port`` and ``host`` are the
    first listener's advertised address, set once the sockets are bound; ``security``
    (:class:`~pyspark_kafka.broker.security.session.Security`) holds the listeners, their TLS
    contexts, SASL mechanisms and the SCRAM credential store; ``authorizer`` the
    :class:`~pyspark_kafka.broker.security.authorizer.StandardAuthorizer` (None when
    ``authorizer.class.name`` is empty). ``replica_manager`` owns the logs (the
    handlers' only way to them); ``metadata_cache`` is the one
    :class:`~pyspark_kafka.broker.metadata_cache.MetadataCache` the handlers and the group coordinator
    ask (over the metadata image of ``lifecycle``, the broker's life in its cluster, built here too with
    ``forwarding`` and ``coordinators``: the mode is fixed at construction); ``group_coordinator`` and
    ``txn_coordinator`` are created here and load the internal partitions this broker comes to lead. Raises
    ConfigError for a bad config (also a ``process.roles`` that is neither a combined node nor a broker with
    ``controller.quorum.voters``, :func:`~pyspark_kafka.broker.cluster.combined.node_kind`);
    :class:`~pyspark_kafka.broker.meta_properties.MetaPropertiesError` when a combined node's data directory holds
    another node's ``meta.properties`` (written at the first start, checked at every start, as Kafka's).
    """

    def __init__(self, data_dir: str | Path, config: dict[str, str] | None = None, host: str = "127.0.0.1"):
        self.data_dir = Path(data_dir)
        self.config = BrokerConfig(config)
        from pyspark_kafka.broker.cluster.combined import COMBINED_DEFAULTS, CombinedController, node_kind

        combined = node_kind(self.config) == "combined"  # the mode is fixed here, by the config; nothing asks it again
        if combined:
            self.config = BrokerConfig({**COMBINED_DEFAULTS, **(config or {})})
        # A stable cluster id per data directory: derived from its path at the first start; a combined node keeps it
        # in meta.properties (as Kafka), checked before anything else touches the directory, so a moved data
        # directory keeps its id and another node's directory is refused with nothing written
        raw = uuid.uuid5(uuid.NAMESPACE_URL, str(self.data_dir.resolve())).bytes
        cluster_id = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if combined:
            from pyspark_kafka.broker import meta_properties
            from pyspark_kafka.broker.log.manager import prepare_data_dir

            prepare_data_dir(self.data_dir)  # a clear KafkaStorageError for a file or an unwritable path
            cluster_id = meta_properties.ensure(self.data_dir, self.config.get_int("node.id"), cluster_id).cluster_id
        else:  # a split cluster's broker: written once the controller names the cluster id (registration)
            from pyspark_kafka.broker import meta_properties

            meta_properties.check_node_id(self.data_dir, self.config.get_int("node.id"))  # node id checked now
        self.dynamic_configs = DynamicConfigs(self.data_dir, self.config)  # AlterConfigs on BROKER / GROUP resources
        self.dynamic_configs.load()
        self.replica_manager = ReplicaManager(self.data_dir, self.config, self._verify_transaction)
        self.dynamic_configs.listeners.append(self.replica_manager.logs.refresh_log_configs)
        self.node_id = self.config.get_int("node.id")
        # The metadata cache reads the broker lifecycle's image (built below; the coordinators get the cache now)
        self.metadata_cache: MetadataCache = KRaftMetadataCache(self._cluster_image)
        self.replica_manager.metadata_cache = self.metadata_cache  # NOT_LEADER_OR_FOLLOWER vs UNKNOWN_TOPIC_OR_PARTITION
        writer = LogPartitionWriter(self.replica_manager.logs)  # the coordinators' only way to their partitions
        self.group_coordinator = GroupCoordinator(writer, self.metadata_cache, self.config)
        self.group_coordinator.consumer.group_configs = self.dynamic_configs
        self.txn_coordinator = TransactionCoordinator(  # markers: WriteTxnMarkers to each partition's leader
            writer, self.config, self.data_dir, self.group_coordinator,
            lambda meta, commit: self.coordinators.write_markers(meta, commit))
        self.security = sec.Security(self.config, self.data_dir)
        self.authorizer = authorizer_from_config(self.config, self.data_dir)  # None: authorization off
        self.host = host
        self.port = 0
        self.cluster_id = cluster_id
        #: the controller role of a combined node (process.roles=broker,controller), None on a broker of a split
        #: cluster; :func:`serve` starts it before the broker lifecycle
        self.controller_role = (CombinedController(self.node_id, self.data_dir, self.config, self.cluster_id)
                                if combined else None)
        from pyspark_kafka.broker.cluster.broker_lifecycle import BrokerLifecycle

        #: the broker's life in its cluster (registration, metadata image, replicas, the coordinators' placement);
        #: :func:`serve` starts it once the listeners are bound
        self.lifecycle = BrokerLifecycle(self, self.controller_role)
        self.forwarding = ForwardingManager(self.lifecycle)  # controller-owned requests go to the active controller
        self.coordinators = self.lifecycle.coordinators  # FindCoordinator, the coordinators' writes, markers

    def _cluster_image(self):
        """The metadata image of this broker's lifecycle (read at each question: the lifecycle may replace it)."""
        return self.lifecycle.image

    def advertised(self, listener: str | None = None) -> tuple[str, int]:
        """``(host, port)`` advertised on ``listener`` (name; None or unknown: the first listener)."""
        for lst in self.security.listeners:
            if lst.name == listener:
                return lst.advertised()
        return self.security.listeners[0].advertised() if self.security.listeners else (self.host, self.port)

    def _verify_transaction(self, producer_id: int, producer_epoch: int, topic: str, partition: int) -> None:
        """The replica manager's check of a transactional batch (KIP-890 part 1), by the transaction coordinator."""
        self.txn_coordinator.ensure_loaded(now_ms()).check_transactional_produce(producer_id, producer_epoch,
                                                                               topic, partition)


# --- connections ----------------------------------------------------------------------------


async def _dispatch(broker: Broker, frame: bytes, client_host: str = "", session=None) -> list | None:
    """Decode ``frame``, run its handler and return the encoded response chunks (None: no response).

    ``client_host`` is the peer as Kafka shows it (``/127.0.0.1``); ``session`` the
    connection's :class:`~pyspark_kafka.broker.security.session.Session` (None: anonymous).

    Raises ProtocolError or CloseConnection when the connection must be closed.
    """
    api_key, version, correlation_id = protocol.peek_header(frame)
    api = REGISTRY.get(api_key)
    if api is None:
        raise protocol.ProtocolError(f"unknown or unsupported api key {api_key} (version {version})")
    if not api.min_version <= version <= api.max_version:
        if api_key == protocol.API_VERSIONS_KEY:
            # KIP-511: answer with a v0 response listing our ranges so the client can retry.
            body = api_versions_body(ErrorCode.unsupported_version)
            return protocol.encode_response(api_key, 0, correlation_id, body)
        chunks = protocol.encode_error_response(api_key, version, correlation_id, ErrorCode.unsupported_version)
        if chunks is None:
            raise protocol.ProtocolError(
                f"api key {api_key} version {version} is not supported (supported {api.min_version}..{api.max_version})"
            )
        return chunks
    header, request = protocol.decode_request(frame, api_key, version)
    ctx = RequestContext(broker, api_key, version, correlation_id, header.client_id, client_host, session)
    try:
        result = await api.handler(ctx, request)
    except (CloseConnection, protocol.ProtocolError):
        raise
    except Exception:
        log.exception("handler for api key %s v%s failed", api_key, version)
        chunks = protocol.encode_error_response(api_key, version, correlation_id, ErrorCode.unknown_server_error)
        if chunks is None:
            raise CloseConnection() from None
        return chunks
    if result is None:
        return None
    try:
        return protocol.encode_response(api_key, version, correlation_id, result)
    except Exception:  # a handler produced a value its response schema does not allow: a broker bug
        log.exception("handler for api key %s v%s built a response that cannot be encoded", api_key, version)
        chunks = protocol.encode_error_response(api_key, version, correlation_id, ErrorCode.unknown_server_error)
        if chunks is None:
            raise CloseConnection() from None
        return chunks


def _open_file_chunks(chunks: list) -> list:
    """Open every file slice now (before any await), so retention cannot delete it under us.

    Returns the chunks with FileChunks replaced by ``(file object, position, length)``.
    """
    out = []
    for chunk in chunks:
        if isinstance(chunk, protocol.FileChunk):
            s = chunk.slice
            out.append((open(s.path, "rb"), s.position, s.length))
        else:
            out.append(chunk)
    return out


async def _write_chunks(writer: asyncio.StreamWriter, chunks: list) -> None:
    """Write bytes chunks and ``(file, position, length)`` slices in order.

    File slices go with ``loop.sendfile`` (os.sendfile on the raw socket: zero copy) and
    fall back to read+write where the transport does not allow it.
    """
    loop = asyncio.get_running_loop()
    try:
        for chunk in chunks:
            if isinstance(chunk, bytes):
                writer.write(chunk)
                continue
            f, position, length = chunk
            await writer.drain()
            sent = await loop.sendfile(writer.transport, f, position, length, fallback=True)
            if sent != length:
                # The file shrank under us: the frame size is now wrong, close the connection.
                raise ConnectionError(f"sent {sent} of {length} bytes of a fetched log segment slice")
        await writer.drain()
    finally:
        for chunk in chunks:
            if not isinstance(chunk, bytes):
                chunk[0].close()


#: Requests served before a SASL connection has authenticated (Kafka's SaslServerAuthenticator):
#: ApiVersions and SaslHandshake; SaslAuthenticate only once a handshake chose a mechanism.
_SASL_HANDSHAKE_KEY = 17
_SASL_AUTHENTICATE_KEY = 36
_PRE_AUTH_KEYS = frozenset({protocol.API_VERSIONS_KEY, _SASL_HANDSHAKE_KEY})


def _gate(session, frame: bytes, peer) -> None:
    """Close (ProtocolError) a connection whose request is not allowed in its SASL state."""
    if session is None:
        return
    api_key = int.from_bytes(frame[:2], "big", signed=True)
    if not session.authenticated and api_key not in _PRE_AUTH_KEYS and not (
            api_key == _SASL_AUTHENTICATE_KEY and session.state == sec.AUTHENTICATE):
        # Kafka: IllegalSaslStateException "Unexpected Kafka request of type ... during SASL handshake"
        raise protocol.ProtocolError(f"unexpected request with api key {api_key} during SASL handshake "
                                     f"(ILLEGAL_SASL_STATE): authenticate first")
    if session.expired() and api_key != _SASL_HANDSHAKE_KEY:
        raise protocol.ProtocolError("the SASL session expired (connections.max.reauth.ms, KIP-368) and the "
                                     "client did not re-authenticate")


async def _raw_token(broker: Broker, session, reader, writer, size: int, idle_s: float) -> None:
    """A SaslHandshake v0 token: ``size`` bytes with no Kafka header; answered size-prefixed.

    A failure closes the connection with no answer (Kafka does the same for v0 clients).
    """
    token = await within(idle_s, reader.readexactly(size))
    try:
        answer = session.evaluate(token, broker.config.get_int("connections.max.reauth.ms"))
    except SaslFailure as exc:
        raise protocol.ProtocolError(f"SASL authentication failed ({session.mechanism}, handshake v0): {exc}") from None
    writer.write(len(answer).to_bytes(4, "big") + answer)
    await writer.drain()


async def serve_connection(broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           session=None) -> None:
    """Serve one client connection until it closes, idles, or sends something unparseable.

    Limits (:mod:`~pyspark_kafka.broker.connections`): a frame over ``socket.request.max.bytes``
    closes the connection; its body is read in chunks reserved in ``queued.max.request.bytes``;
    at most ``queued.max.requests`` requests are handled at once (others wait); no complete
    request for ``connections.max.idle.ms`` closes the connection. ``session`` (None:
    PLAINTEXT as ``User:ANONYMOUS``) carries the listener and the SASL state: before
    authentication only ApiVersions/SaslHandshake/SaslAuthenticate of at most
    ``sasl.server.max.receive.size`` bytes are
    served, anything else closes the connection (:mod:`~pyspark_kafka.broker.security.session`).
    """
    peer = writer.get_extra_info("peername")
    client_host = f"/{peer[0]}" if peer else ""
    max_request = broker.config.get_int("socket.request.max.bytes")
    max_sasl = broker.config.get_int("sasl.server.max.receive.size")
    idle_s = broker.config.get_int("connections.max.idle.ms") / 1000
    try:
        while True:
            try:
                size = int.from_bytes(await within(idle_s, reader.readexactly(4)), "big", signed=True)
            except asyncio.TimeoutError:
                log.info("closing connection from %s: idle for connections.max.idle.ms=%d", peer, idle_s * 1000)
                return
            if session is not None and session.state == sec.RAW:
                if not 0 <= size <= max_sasl:
                    log.warning("closing connection from %s: SASL token size %d is outside 0..%d "
                                "(sasl.server.max.receive.size)", peer, size, max_sasl)
                    return
                await _raw_token(broker, session, reader, writer, size, idle_s)
                continue
            limit = max_request if session is None or session.authenticated else max_sasl
            if size < 8 or size > limit:
                log.warning(
                    "closing connection from %s: request size %d is outside 8..%d (%s)",
                    peer, size, limit, "socket.request.max.bytes" if limit == max_request else
                    "sasl.server.max.receive.size, before SASL authentication",
                )
                return
            try:
                frame, reserved = await read_frame_body(reader, size, broker.request_memory, idle_s)
            except asyncio.TimeoutError:
                log.info("closing connection from %s: a %d-byte request stalled for connections.max.idle.ms=%d",
                         peer, size, idle_s * 1000)
                return
            try:
                _gate(session, frame, peer)
                async with broker.request_slots:
                    chunks = await _dispatch(broker, frame, client_host, session)
                del frame
                if chunks is not None:
                    await _write_chunks(writer, _open_file_chunks(chunks))
                if session is not None and session.close_after_response:
                    return
            finally:
                await broker.request_memory.release(reserved)
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
        pass
    except protocol.ProtocolError as exc:
        log.warning("closing connection from %s: %s", peer, exc)
    except CloseConnection:
        pass
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("closing connection from %s after an unexpected error", peer)
    finally:
        writer.close()


# --- timers -----------------------------------------------------------------------------------

DEFAULT_FLUSH_CHECK_MS = 1000
LONG_MAX = 2**63 - 1


def flush_check_interval_ms(config: BrokerConfig) -> int:
    """How often the time-based flush policy (``flush.ms`` / ``log.flush.interval.ms``) is checked, in ms.

    ``log.flush.scheduler.interval.ms`` when set (Kafka's name for this period), else
    ``log.flush.interval.ms`` when set, else 1000 ms (topics may set ``flush.ms``).
    """
    scheduler = config.get_int("log.flush.scheduler.interval.ms")
    if scheduler is not None and scheduler < LONG_MAX:
        return max(1, scheduler)
    flush_ms = config.get_int("log.flush.interval.ms")
    if flush_ms is not None and flush_ms > 0:
        return min(flush_ms, DEFAULT_FLUSH_CHECK_MS)
    return DEFAULT_FLUSH_CHECK_MS


async def _every(interval_ms: int, action: Callable[[], Any], what: str) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            action()
        except Exception:
            log.exception("%s failed", what)


# --- the server -------------------------------------------------------------------------------


async def _first_of(*events: asyncio.Event) -> None:
    """Wait until one of ``events`` is set."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


async def _serve_when(ready: asyncio.Event, serving: asyncio.Event) -> None:
    await ready.wait()
    serving.set()


async def serve(broker: Broker, port: int, stop: asyncio.Event, ready: Callable[[str], None] | None = None) -> None:
    """Load the logs, listen until ``stop`` is set, then close the logs.

    Listens on every listener of the ``listeners`` config (TLS on SSL/SASL_SSL ones); when
    ``listeners`` is not configured, on one PLAINTEXT listener ``broker.host:port``.
    ``ready("host:port")`` (the first listener, advertised) is called once listening (port 0 →
    the bound port) and, for a cluster broker or a combined node, unfenced (requests are read from then on, as
    Kafka's ``BrokerServer.startup``). The retention check runs every ``log.retention.check.interval.ms``, the log
    cleaner (when ``log.cleaner.enable``) every ``log.cleaner.backoff.ms``; logs whose ``flush.ms`` has passed
    are flushed on the period of :func:`flush_check_interval_ms`.

    A split cluster's broker that does not register with the controllers within
    ``initial.broker.registration.timeout.ms`` (e.g. its data directory belongs to another cluster: the controller
    answers INCONSISTENT_CLUSTER_ID) stops and raises
    :class:`~pyspark_kafka.broker.cluster.broker_lifecycle.BrokerRegistrationError` (Kafka's broker shuts down).
    """
    load_handlers()
    logs = broker.replica_manager.logs
    logs.load()
    broker.request_memory = RequestMemory(broker.config.get_int("queued.max.request.bytes"))
    broker.request_slots = asyncio.Semaphore(broker.config.get_int("queued.max.requests"))
    connections: set[asyncio.Task] = set()

    quotas = ConnectionQuotas(broker.config)
    security = broker.security
    if broker.config.is_default("listeners"):
        # No listeners config: one PLAINTEXT listener on host:port (port 0 = a free port), as before.
        plain = Listener("PLAINTEXT", "PLAINTEXT", broker.host, port)
        for lst in security.listeners:
            if lst.name == "PLAINTEXT":
                plain.advertised_host, plain.advertised_port = lst.advertised_host, lst.advertised_port
        security.listeners = [plain]

    async def on_connect(reader, writer, listener: Listener):
        peer = writer.get_extra_info("peername")
        ip = peer[0] if peer else ""
        refused = quotas.admit(ip, len(logs.open_partitions()))
        if refused is not None:
            log.warning("closing connection from %s: %s", peer, refused)
            writer.close()
            return
        task = asyncio.current_task()
        connections.add(task)
        principal = certificate_principal(writer.get_extra_info("ssl_object")) if listener.tls else None
        if principal is not None:
            log.debug("TLS client %s on listener %s authenticated as %s", peer, listener.name, principal)
        try:
            # a cluster broker reads no request before its metadata caught up and it is unfenced (Kafka enables request
            # processing only after initialCatchUpFuture and setReadyToUnfence): a restarted broker never answers
            # from an old image, and a first Metadata answer lists at least this broker
            await serving.wait()
            await serve_connection(broker, reader, writer, sec.Session(listener, principal))
        except asyncio.CancelledError:
            pass  # broker shutting down: the connection is closed by serve_connection
        finally:
            connections.discard(task)
            quotas.release(ip)

    serving = asyncio.Event()
    servers = []
    try:
        for lst in security.listeners:
            # limit: asyncio pauses reading a connection whose unread bytes pass 2 x limit
            server = await asyncio.start_server(
                lambda r, w, lst=lst: on_connect(r, w, lst), lst.host or None, lst.port, limit=CHUNK_BYTES,
                ssl=security.ssl_contexts.get(lst.name))
            servers.append(server)
            lst.port = server.sockets[0].getsockname()[1]
    except BaseException:
        for server in servers:
            server.close()
        raise
    first = security.listeners[0]
    broker.host, broker.port = first.advertised()
    timers = [
        asyncio.create_task(
            _every(broker.config.get_int("log.retention.check.interval.ms"), lambda: logs.run_retention(now_ms()), "retention check")
        )
    ]
    timers.append(asyncio.create_task(
        _every(flush_check_interval_ms(broker.config), lambda: logs.flush_due(now_ms()), "log flush")
    ))
    if broker.config.get_bool("log.cleaner.enable"):  # Kafka's cleaner thread: look, clean, back off
        timers.append(asyncio.create_task(
            _every(broker.config.get_int("log.cleaner.backoff.ms"), lambda: logs.run_cleaner(now_ms()), "log cleaner")
        ))
    if broker.controller_role is not None:  # a combined node: its controller first, on the same event loop
        broker.controller_role.advertise(broker.host, broker.port)
        await broker.controller_role.start()
    # the coordinators load only the internal partitions this broker leads, as the lifecycle elects it
    try:
        broker.group_coordinator.ensure_loaded()  # replays __consumer_offsets: groups and committed offsets
    except KafkaError:
        log.exception("cannot load %s now: group requests answer COORDINATOR_NOT_AVAILABLE and retry the load",
                      OFFSETS_TOPIC)
    txn = broker.txn_coordinator.ensure_loaded(now_ms())  # loads __transaction_state, completes transactions a crash interrupted
    timers.append(asyncio.create_task(_every(
        broker.config.get_int("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
        lambda: txn.abort_timed_out(now_ms()), "transaction timeout check",
    )))
    await broker.lifecycle.start()
    timers.append(asyncio.create_task(_serve_when(broker.lifecycle.unfenced, serving)))
    bootstrap = f"{broker.host}:{broker.port}"
    log.info("pyspark-kafka broker listening on %s (data dir %s)", bootstrap, broker.data_dir)
    for lst in security.listeners:
        log.info("listener %s (%s) on %s:%d, advertised as %s:%d", lst.name, lst.protocol, lst.host or "0.0.0.0",
                 lst.port, *lst.advertised())
    try:
        if ready is not None:
            # Kafka's BrokerServer.startup returns once the broker is unfenced (it waits for
            # BrokerLifecycleManager.setReadyToUnfence's future, then enables request processing): a caller told
            # "ready" gets answers at once, and a stop right after sends a controlled shutdown
            if not serving.is_set():
                await _first_of(serving, stop)
            ready(bootstrap)
        # until stopped, or until the broker must shut down (not registered in time: Kafka's RegistrationTimeoutEvent)
        waits = [asyncio.create_task(stop.wait()), asyncio.create_task(broker.lifecycle.failed.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
    finally:
        await broker.lifecycle.stop()  # controlled shutdown: leaderships move before the sockets close
        for server in servers:
            server.close()
        for task in [*timers, *connections]:
            task.cancel()
        await asyncio.gather(*timers, *connections, return_exceptions=True)
        for server in servers:
            await server.wait_closed()
        if broker.group_coordinator.loaded:
            broker.group_coordinator.offsets.write_snapshots()  # the next start replays nothing before this point
        logs.close()
        if broker.controller_role is not None:
            await broker.controller_role.stop()
        log.info("pyspark-kafka broker on %s stopped; logs closed", bootstrap)
    if broker.lifecycle.failure is not None:
        raise broker.lifecycle.failure


def run_broker(
    data_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 9092,
    config: dict[str, str] | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Run the broker in the foreground until SIGINT or SIGTERM, then close the logs cleanly.

    ``data_dir`` holds the logs (created if missing); ``port`` 0 picks a free port;
    ``config`` uses Kafka's broker config names (``{"log.segment.bytes": "1048576"}``);
    ``ready("host:port")`` is called once the broker accepts connections.
    Raises ConfigError for an unknown or malformed config, OSError when the port is taken.
    """
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    broker = Broker(data_dir, config, host)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(broker, port, stop, ready)

    asyncio.run(main())
