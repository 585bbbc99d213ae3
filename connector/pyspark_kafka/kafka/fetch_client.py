"""A blocking Kafka-protocol client for executors' columnar reads: Metadata, Fetch and ListOffsets on kio.

:class:`FetchClient` talks to the brokers of one configuration (:class:`FetchConfig`): it finds a
partition's leader with Metadata, sends Fetch requests to that leader (raw record batches, decoded
by :mod:`pyspark_kafka.read.record_decoder`) and asks ListOffsets for log start / end offsets. One
connection per broker, opened on first use and negotiated once (ApiVersions, then TLS and SASL as
configured); a connection that fails is closed and reopened by the next request. Clients are
pooled per worker process like the consumers (:func:`pooled_fetch_client`).

:func:`columnar_config` decides whether this client can serve an executor configuration (the
librdkafka settings of :func:`pyspark_kafka.read.partition_reader.executor_conf`): PLAINTEXT, SSL,
SASL_PLAINTEXT and SASL_SSL with PLAIN or SCRAM-SHA-256/512, TLS from PEM files or in-memory CA
certificates. Anything else (GSSAPI, OAUTHBEARER, a client key held only in memory or in a PKCS12
key store, a setting it does not know) is reported as a reason, and the reader falls back to the
confluent-kafka consumer.

Wire rules (Kafka's ``NetworkClient``): requests carry header v1, or v2 for flexible versions;
responses header v0, or v1 for flexible versions, except ApiVersions, always v0.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import hmac
import importlib
import os
import socket
import ssl
import struct
from contextlib import contextmanager
from typing import Iterator, Mapping

from pyspark_kafka.kafka import wire_header
from pyspark_kafka.kafka.clients import ClientPool

FETCH_VERSIONS = (4, 12)
"""Fetch versions used, inclusive: v4 is the first with isolation levels and aborted transactions
(RecordBatch v2); v12 the last that names topics (v13 uses topic ids)."""
METADATA_VERSIONS = (1, 9)
LIST_OFFSETS_VERSIONS = (1, 7)
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# Settings of executor_conf that only steer librdkafka's consumer (or that this client applies
# the same way): harmless to the columnar path. Anything else makes columnar_config refuse.
_IGNORED = {
    "group.id", "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset", "enable.partition.eof",
    "fetch.wait.max.ms", "fetch.queue.backoff.ms", "isolation.level", "client.id", "session.timeout.ms",
    "heartbeat.interval.ms", "max.poll.interval.ms", "queued.min.messages", "queued.max.messages.kbytes",
    "fetch.min.bytes", "fetch.max.bytes", "fetch.error.backoff.ms", "check.crcs", "auto.commit.interval.ms",
    "partition.assignment.strategy", "socket.keepalive.enable", "reconnect.backoff.ms",
    "reconnect.backoff.max.ms", "retry.backoff.ms", "metadata.max.age.ms", "topic.metadata.refresh.interval.ms",
    "socket.connection.setup.timeout.ms", "connections.max.idle.ms", "statistics.interval.ms", "debug", "log_level",
    "api.version.request", "broker.address.family", "client.rack", "group.instance.id", "message.max.bytes",
    "receive.message.max.bytes", "socket.receive.buffer.bytes", "socket.send.buffer.bytes",
    "request.timeout.ms", "socket.timeout.ms", "max.partition.fetch.bytes", "bootstrap.servers",
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification",
}


class FetchClientError(ConnectionError):
    """A broker could not be reached, or a connection failed or timed out (retriable)."""


class AuthenticationError(Exception):
    """TLS or SASL authentication failed (not retriable): the message names the broker and the cause."""


@dataclasses.dataclass(frozen=True)
class FetchConfig:
    """What :class:`FetchClient` needs from an executor configuration.

    ``bootstrap``: ``[(host, port)]``; ``security``: one of :data:`SECURITY_PROTOCOLS`;
    ``mechanism``/``username``/``password``: SASL; ``ssl_*``: TLS trust (CA file or PEM text),
    client certificate and key files, and whether the host name is checked; ``client_id``;
    ``partition_max_bytes``: Fetch's per-partition byte limit; ``request_timeout_s``.
    """

    bootstrap: tuple
    security: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ssl_ca_location: str | None = None
    ssl_ca_pem: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = None
    ssl_check_hostname: bool = True
    ssl_verify: bool = True
    client_id: str = "pyspark-kafka-columnar"
    partition_max_bytes: int = 4 * 1024 * 1024
    request_timeout_s: float = 30.0


def columnar_config(conf: Mapping[str, object]) -> tuple[FetchConfig | None, str | None]:
    """``(FetchConfig, None)`` when the columnar client can serve librdkafka configuration ``conf``,
    else ``(None, reason)`` (a sentence naming the setting; secrets never appear)."""
    unknown = sorted(k for k in conf if k not in _IGNORED)
    if unknown:
        return None, f"setting(s) {', '.join(unknown)} are not understood by the columnar fetch client"
    security = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    if security not in SECURITY_PROTOCOLS:
        return None, f"security.protocol={security} is not served by the columnar fetch client"
    mechanism = None
    if security.startswith("SASL"):
        mechanism = str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI"))).upper()
        if mechanism not in SASL_MECHANISMS:
            return None, f"SASL mechanism {mechanism} is not served by the columnar fetch client"
        if conf.get("sasl.username") is None or conf.get("sasl.password") is None:
            return None, "SASL without sasl.username/sasl.password (or a JAAS config giving them)"
    if str(conf.get("enable.ssl.certificate.verification", "true")).lower() == "false" and security.endswith("SSL"):
        verify = False
    else:
        verify = True
    if (conf.get("ssl.key.location") is None) != (conf.get("ssl.certificate.location") is None):
        return None, "ssl.certificate.location and ssl.key.location must be given together for the columnar client"
    servers = []
    for item in str(conf.get("bootstrap.servers", "")).split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            return None, f"bootstrap server {item!r} is not host:port"
        servers.append((host.strip("[]"), int(port)))
    if not servers:
        return None, "no bootstrap.servers"
    algorithm = str(conf.get("ssl.endpoint.identification.algorithm", "https")).lower()
    return FetchConfig(
        bootstrap=tuple(servers), security=security, mechanism=mechanism,
        username=_opt_str(conf.get("sasl.username")), password=_opt_str(conf.get("sasl.password")),
        ssl_ca_location=_opt_str(conf.get("ssl.ca.location")), ssl_ca_pem=_opt_str(conf.get("ssl.ca.pem")),
        ssl_certificate_location=_opt_str(conf.get("ssl.certificate.location")),
        ssl_key_location=_opt_str(conf.get("ssl.key.location")),
        ssl_key_password=_opt_str(conf.get("ssl.key.password")),
        ssl_check_hostname=algorithm == "https" and verify, ssl_verify=verify,
        client_id=str(conf.get("client.id", "pyspark-kafka-columnar")),
        partition_max_bytes=int(conf.get("max.partition.fetch.bytes", 4 * 1024 * 1024)),
        request_timeout_s=int(conf.get("request.timeout.ms", 30_000)) / 1000,
    ), None


def _opt_str(value) -> str | None:
    return None if value is None else str(value)


def schema(api: str, kind: str, version: int):
    """kio's ``kio.schema.<api>.v<version>.<kind>`` module (``kind``: request or response)."""
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


def make(cls, **fields):
    """``cls(**fields)`` keeping only the fields ``cls`` has at its version (kio dataclasses differ by version)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


class BrokerConnection:
    """One negotiated connection to one broker: ``send(request)`` then ``receive(response_type)``.

    Requests may be pipelined (Kafka answers in order on a connection). Raises FetchClientError
    on connection failure or timeout (the connection is then closed), AuthenticationError when TLS
    or SASL is refused. ``versions``: ``{api_key: (min, max)}`` from ApiVersions.
    """

    def __init__(self, host: str, port: int, config: FetchConfig):
        self.address = (host, port)
        self.config = config
        self._correlation = 0
        self._pending: list[int] = []
        try:
            sock = socket.create_connection((host, port), timeout=config.request_timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise FetchClientError(f"cannot connect to broker {host}:{port}: {exc}") from None
        if config.security.endswith("SSL"):
            try:
                sock = _tls_context(config).wrap_socket(sock, server_hostname=host)
            except (ssl.SSLError, OSError) as exc:
                sock.close()
                raise AuthenticationError(f"TLS handshake with broker {host}:{port} failed: {exc}") from None
        self._sock = sock
        self._reader = sock.makefile("rb", buffering=256 * 1024)
        try:
            self.versions = self._api_versions()
            if config.security.startswith("SASL"):
                self._sasl()
        except BaseException:
            self.close()
            raise

    def version(self, api_key: int, wanted: tuple[int, int]) -> int | None:
        """Highest version of ``api_key`` in ``wanted`` (inclusive) the broker serves, or None."""
        lo, hi = self.versions.get(api_key, (None, None))
        if lo is None:
            return None
        best = min(hi, wanted[1])
        return best if best >= max(lo, wanted[0]) else None

    def send(self, request) -> None:
        """Write ``request`` (a kio request dataclass) with its header; its answer is read by :meth:`receive`."""
        self._correlation += 1
        frame = wire_header.encode_request(request, self._correlation, self.config.client_id)
        try:
            self._sock.sendall(frame)
        except OSError as exc:
            self.close()
            raise FetchClientError(f"broker {self._where()} failed: {exc!r}") from None
        self._pending.append(self._correlation)

    def receive(self, response_type):
        """The next pending answer decoded as ``response_type`` (kio response dataclass; its header by
        :func:`pyspark_kafka.kafka.wire_header.decode_response`)."""
        frame = self.receive_frame()
        _, response = wire_header.decode_response(frame, response_type.__api_key__, response_type)
        return response

    def receive_frame(self) -> bytes:
        """The next pending answer's raw frame (header included); checks its correlation id."""
        try:
            size_bytes = self._reader.read(4)
            if len(size_bytes) < 4:
                raise EOFError("connection closed by the broker")
            size = struct.unpack(">i", size_bytes)[0]
            frame = self._reader.read(size)
            if len(frame) < size:
                raise EOFError("connection closed by the broker")
        except (OSError, EOFError) as exc:
            self.close()
            raise FetchClientError(f"broker {self._where()} failed: {exc!r}") from None
        expected = self._pending.pop(0)
        got = struct.unpack_from(">i", frame, 0)[0]
        if got != expected:
            self.close()
            raise FetchClientError(f"broker {self._where()} answered correlation id {got}, expected {expected}")
        return frame

    def request(self, request, response_type):
        """:meth:`send` then :meth:`receive` (nothing else may be pending)."""
        self.send(request)
        return self.receive(response_type)

    def _where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def _api_versions(self) -> dict:
        mod = schema("api_versions", "request", 0)
        resp_mod = schema("api_versions", "response", 0)
        response = self.request(mod.ApiVersionsRequest(), resp_mod.ApiVersionsResponse)
        if response.error_code != 0:
            raise FetchClientError(f"broker {self._where()} refused ApiVersions v0 (error {int(response.error_code)})")
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}

    def _sasl(self) -> None:
        cfg = self.config
        hs = schema("sasl_handshake", "request", 1)
        hs_resp = schema("sasl_handshake", "response", 1)
        response = self.request(hs.SaslHandshakeRequest(mechanism=cfg.mechanism), hs_resp.SaslHandshakeResponse)
        if response.error_code != 0:
            raise AuthenticationError(f"broker {self._where()} does not enable SASL mechanism {cfg.mechanism} "
                                      f"(it enables {list(response.mechanisms)}); fix kafka.sasl.mechanism")
        version = self.version(36, (0, 2))
        if version is None:
            raise AuthenticationError(f"broker {self._where()} has no SaslAuthenticate")
        if cfg.mechanism == "PLAIN":
            self._authenticate(version, b"\0" + cfg.username.encode() + b"\0" + cfg.password.encode())
            return
        _scram(self, version, cfg)

    def _authenticate(self, version: int, auth_bytes: bytes) -> bytes:
        req = schema("sasl_authenticate", "request", version)
        resp = schema("sasl_authenticate", "response", version)
        response = self.request(req.SaslAuthenticateRequest(auth_bytes=auth_bytes), resp.SaslAuthenticateResponse)
        if response.error_code != 0:
            raise AuthenticationError(f"SASL {self.config.mechanism} authentication with broker {self._where()} "
                                      f"failed: {response.error_message or int(response.error_code)}; check "
                                      "the user name and password (kafka.sasl.jaas.config)")
        return response.auth_bytes

    def close(self) -> None:
        """Close the socket (idempotent)."""
        sock, self._sock = getattr(self, "_sock", None), None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    @property
    def closed(self) -> bool:
        return self._sock is None


def _tls_context(cfg: FetchConfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_location, cadata=cfg.ssl_ca_pem)
    if cfg.ssl_ca_location is None and cfg.ssl_ca_pem is None:
        ctx.load_default_certs()
    ctx.check_hostname = cfg.ssl_check_hostname
    if not cfg.ssl_verify:
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.ssl_certificate_location:
        ctx.load_cert_chain(cfg.ssl_certificate_location, cfg.ssl_key_location, cfg.ssl_key_password)
    return ctx


def _scram(conn: BrokerConnection, version: int, cfg: FetchConfig) -> None:
    """SCRAM-SHA-256/512 (RFC 5802/7677, as Kafka's ``ScramSaslClient``): client-first, server-first,
    client-final with the proof, then the server's signature is checked."""
    algorithm = "sha256" if cfg.mechanism == "SCRAM-SHA-256" else "sha512"
    user = cfg.username.replace("=", "=3D").replace(",", "=2C")
    nonce = base64.b64encode(os.urandom(24)).decode()
    first_bare = f"n={user},r={nonce}"
    server_first = conn._authenticate(version, ("n,," + first_bare).encode()).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    if not fields.get("r", "").startswith(nonce):
        raise AuthenticationError(f"SCRAM: broker {conn._where()} answered a nonce that does not extend ours")
    salted = hashlib.pbkdf2_hmac(algorithm, cfg.password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.digest(salted, b"Client Key", algorithm)
    stored_key = hashlib.new(algorithm, client_key).digest()
    final_bare = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{final_bare}".encode()
    signature = hmac.digest(stored_key, auth_message, algorithm)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    server_final = conn._authenticate(version, f"{final_bare},p={proof}".encode()).decode()
    server_key = hmac.digest(salted, b"Server Key", algorithm)
    expected = base64.b64encode(hmac.digest(server_key, auth_message, algorithm)).decode()
    final = dict(item.split("=", 1) for item in server_final.split(","))
    if "e" in final or final.get("v") != expected:
        raise AuthenticationError(f"SCRAM: broker {conn._where()} did not prove it knows the password "
                                  f"({final.get('e', 'wrong server signature')})")


class FetchClient:
    """Connections to the brokers of one :class:`FetchConfig`, and the leader of each partition.

    :meth:`leader` (Metadata, cached until :meth:`refresh`), :meth:`connection` (to a broker id),
    :meth:`fetch_request` (a Fetch request for one partition at the leader's best version),
    :meth:`list_offset` (ListOffsets at the leader). Errors: FetchClientError (retriable),
    AuthenticationError, and ``KeyError``-free lookups: an unknown partition gives leader None.
    """

    def __init__(self, config: FetchConfig):
        self.config = config
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._conns: dict[object, BrokerConnection] = {}

    def connection(self, node) -> BrokerConnection:
        """The open connection to broker id ``node`` (or ``("bootstrap", i)``), opened when needed."""
        conn = self._conns.get(node)
        if conn is None or conn.closed:
            host, port = self._brokers[node] if isinstance(node, int) else self.config.bootstrap[node[1]]
            conn = self._conns[node] = BrokerConnection(host, port, self.config)
        return conn

    def _any_connection(self) -> BrokerConnection:
        errors = []
        for node in [*self._brokers, *(("bootstrap", i) for i in range(len(self.config.bootstrap)))]:
            try:
                return self.connection(node)
            except FetchClientError as exc:
                errors.append(str(exc))
        raise FetchClientError("no broker reachable: " + "; ".join(errors))

    def refresh(self, topic: str) -> None:
        """Ask Metadata for ``topic``: brokers and partition leaders (a leader of -1 is forgotten)."""
        conn = self._any_connection()
        version = conn.version(3, METADATA_VERSIONS)
        if version is None:
            raise FetchClientError(f"broker {conn._where()} serves no Metadata version in {METADATA_VERSIONS}")
        req, resp = schema("metadata", "request", version), schema("metadata", "response", version)
        request = make(req.MetadataRequest, topics=(make(req.MetadataRequestTopic, name=topic),),
                       allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                       include_topic_authorized_operations=False)
        response = conn.request(request, resp.MetadataResponse)
        self._brokers.update({int(b.node_id): (b.host, int(b.port)) for b in response.brokers})
        for t in response.topics:
            for p in t.partitions:
                key = (t.name, int(p.partition_index))
                if p.error_code == 0 and p.leader_id >= 0:
                    self._leaders[key] = int(p.leader_id)
                else:
                    self._leaders.pop(key, None)

    def leader(self, topic: str, partition: int) -> int | None:
        """The leader's broker id of ``topic``-``partition`` (Metadata asked when unknown), or None."""
        key = (topic, partition)
        if key not in self._leaders:
            self.refresh(topic)
        return self._leaders.get(key)

    def forget(self, topic: str, partition: int, node: int | None = None) -> None:
        """Forget the partition's leader (and close the connection to ``node``) after a failure."""
        self._leaders.pop((topic, partition), None)
        if node is not None and node in self._conns:
            self._conns.pop(node).close()

    def fetch_request(self, conn: BrokerConnection, topic: str, partition: int, offset: int,
                      isolation_level: int, max_wait_ms: int):
        """``(request, response_type)`` of a Fetch of one partition from ``offset`` at ``conn``'s best version."""
        version = conn.version(1, FETCH_VERSIONS)
        if version is None:
            raise FetchClientError(f"broker {conn._where()} serves no Fetch version in {FETCH_VERSIONS}")
        req, resp = schema("fetch", "request", version), schema("fetch", "response", version)
        max_bytes = self.config.partition_max_bytes
        part = make(req.FetchPartition, partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes,
                    current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1)
        request = make(req.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                       min_bytes=1, max_bytes=max_bytes, isolation_level=isolation_level, session_id=0,
                       session_epoch=-1, topics=(make(req.FetchTopic, topic=topic, partitions=(part,)),),
                       forgotten_topics_data=(), rack_id="")
        return request, resp.FetchResponse

    def list_offset(self, topic: str, partition: int, timestamp: int, isolation_level: int) -> tuple[int, int]:
        """``(error_code, offset)`` of ListOffsets at the leader: ``timestamp`` -2 earliest, -1 latest."""
        node = self.leader(topic, partition)
        if node is None:
            return 6, -1  # NOT_LEADER_OR_FOLLOWER: no leader known
        conn = self.connection(node)
        version = conn.version(2, LIST_OFFSETS_VERSIONS)
        if version is None:
            raise FetchClientError(f"broker {conn._where()} serves no ListOffsets version in {LIST_OFFSETS_VERSIONS}")
        req, resp = schema("list_offsets", "request", version), schema("list_offsets", "response", version)
        request = make(req.ListOffsetsRequest, replica_id=-1, isolation_level=isolation_level, topics=(
            make(req.ListOffsetsTopic, name=topic, partitions=(
                make(req.ListOffsetsPartition, partition_index=partition, current_leader_epoch=-1,
                     timestamp=timestamp),)),))
        response = conn.request(request, resp.ListOffsetsResponse)
        p = response.topics[0].partitions[0]
        return int(p.error_code), int(p.offset)

    def close(self) -> None:
        """Close every connection."""
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


def _close_client(client: FetchClient) -> None:
    try:
        client.close()
    except Exception:  # closing is best effort; the client is discarded either way
        pass


FETCH_CLIENTS = ClientPool(8, _close_client)
"""This process's idle columnar fetch clients (:func:`pooled_fetch_client`)."""


@contextmanager
def pooled_fetch_client(config: FetchConfig) -> Iterator[FetchClient]:
    """Borrow a :class:`FetchClient` for ``config`` from this process's pool (like
    :func:`pyspark_kafka.kafka.clients.pooled_consumer`): back to the pool on normal exit, closed when
    the block raises or is abandoned."""
    key = ("fetch", config)  # a frozen dataclass: compared field by field, no per-task conversion
    client = FETCH_CLIENTS.take(key) or FetchClient(config)
    ok = False
    try:
        yield client
        ok = True
    finally:
        if ok:
            FETCH_CLIENTS.put(key, client)
        else:
            _close_client(client)
