"""First contact with a cluster: fail fast, naming each bootstrap address and what happened to it.

librdkafka retries an unreachable bootstrap server until the request's timeout (60 s per
attempt for the reader's ``kafka.default.api.timeout.ms``, 120 s of ``delivery.timeout.ms``
for a write) and then reports only ``Local: Broker transport failure``. The driver's first
metadata request of a read, a write or a sink goes through :func:`first_metadata` instead:

- every connection failure librdkafka reports (its ``error_cb``: connection refused, name not
  resolved, TLS handshake failed, authentication failed, not a Kafka listener) is kept per
  bootstrap address by a :class:`ConnectionWatch`;
- once *every* bootstrap address has failed, the call raises :class:`BootstrapUnreachableError`
  at once (about 1 s for a closed port or an unknown host; for a closed port Spark 4.2.0's connector
  logs a warning a second and fails after about 184 s, three attempts of 60 s, measured with
  ``tools/error_output_compare.py``);
- an address that reports nothing (a host that drops packets, a port that accepts but does not
  speak Kafka) is waited on for at most :data:`WAIT_OPTION` (default :data:`DEFAULT_WAIT_MS`, the
  Java client's default of ``socket.connection.setup.timeout.ms``), then probed with a TCP
  connect and named with what happened.

After the first answer the normal timeouts and retries apply (``fetchOffset.numRetries``,
``kafka.default.api.timeout.ms``), so a cluster that was once reached is waited for.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Mapping

from pyspark_kafka.errors import OptionError, PySparkKafkaError

WAIT_OPTION = "kafka.socket.connection.setup.timeout.ms"
"""The option bounding the first contact's wait for a silent address (also passed to librdkafka)."""

DEFAULT_WAIT_MS = 10_000
"""Default of :data:`WAIT_OPTION`: the Java client's ``socket.connection.setup.timeout.ms``."""

SLICE_S = 0.5
"""Metadata is asked in slices this long so that failures end the wait early."""

GRACE_S = 1.5
"""Failures of every address must last this long before the first contact gives up (a broker that
is restarting gets this much time)."""


class BootstrapUnreachableError(PySparkKafkaError):
    """No bootstrap server of ``kafka.bootstrap.servers`` could be reached on first contact.

    The first line of the message names the cause per address and the fix; the lines after
    it carry librdkafka's own report for each address. ``failures`` maps each address
    (``host:port``) to a short cause (``connection refused``, ``name not resolved``, ...).
    """

    def __init__(self, message: str, failures: Mapping[str, str]):
        super().__init__(message)
        self.failures = dict(failures)


def bootstrap_addresses(servers: str) -> list[str]:
    """``host:port`` entries of a ``bootstrap.servers`` string, without a ``PROTOCOL://`` prefix."""
    out = []
    for entry in str(servers or "").split(","):
        entry = entry.strip()
        if "://" in entry:
            entry = entry.split("://", 1)[1]
        if entry:
            out.append(entry)
    return out


def classify(code_name: str, text: str) -> str:
    """A short cause for one librdkafka connection error (``KafkaError.name()`` and its text)."""
    low = text.lower()
    if code_name == "_RESOLVE" or "failed to resolve" in low:
        return "name not resolved"
    if code_name == "_AUTHENTICATION" or "authentication" in low:
        return "authentication failed"
    if code_name == "_SSL" or "ssl handshake failed" in low or "ssl" in low:
        return "TLS handshake failed"
    if "connection refused" in low:
        return "connection refused"
    if "timed out" in low:
        return "connection timed out"
    if code_name == "_BAD_MSG" or "invalid response size" in low:
        return "answered, but not as a Kafka broker (wrong port, or a TLS/HTTP listener?)"
    if "disconnected" in low:
        return "closed the connection (a TLS listener reached with PLAINTEXT, or the broker refused us?)"
    return "connection failed"


class ConnectionWatch:
    """A librdkafka ``error_cb`` that keeps the last connection failure of each bootstrap address.

    Pass the instance as ``error_cb`` of the client; :meth:`failures` answers
    ``{address: (short cause, librdkafka's text)}``. Thread-safe (librdkafka calls it from
    ``poll``). ``auth_error`` is the text of the last authentication failure, or ``None``.
    """

    def __init__(self, servers: str):
        self.addresses = bootstrap_addresses(servers)
        self._failures: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self.auth_error: str | None = None

    def __call__(self, err) -> None:
        text = err.str()
        name = err.name()
        if name == "_AUTHENTICATION":
            self.auth_error = text
        # "host:port/bootstrap: Connect to ipv4#... failed: ..." (or "host:port/<node id>: ...")
        head, sep, rest = text.partition(": ")
        address = head.rsplit("/", 1)[0] if sep and "/" in head else None
        if address is None:
            return
        address = address.split("://", 1)[-1]  # "ssl://host:port/bootstrap" under TLS
        with self._lock:
            self._failures[address] = (classify(name, rest), rest.split(" (after ")[0])

    def failures(self) -> dict[str, tuple[str, str]]:
        """``{address: (cause, detail)}`` of the bootstrap addresses that failed (a copy)."""
        with self._lock:
            return {a: f for a, f in self._failures.items() if a in self.addresses}

    def all_failed(self) -> bool:
        """Every bootstrap address reported a failure."""
        return bool(self.addresses) and len(self.failures()) == len(self.addresses)


def probe(address: str, timeout_s: float) -> tuple[str, str] | None:
    """Resolve and TCP-connect to ``host:port`` within ``timeout_s``; ``None`` when it connects,
    else ``(cause, detail)``."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, ValueError) as e:
        return "name not resolved", f"cannot resolve {host!r}: {e}"
    last = None
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as s:
                s.settimeout(timeout_s)
                s.connect(sockaddr)
                return None
        except socket.timeout:
            last = ("connection timed out", f"no answer to a TCP connect within {timeout_s:g} s")
        except OSError as e:
            last = (classify("", e.strerror or str(e)), e.strerror or str(e))
    return last


def wait_ms(options: Mapping[str, str]) -> int:
    """:data:`WAIT_OPTION` from the data source options (default :data:`DEFAULT_WAIT_MS`)."""
    raw = next((v for k, v in options.items() if k.lower() == WAIT_OPTION), None)
    if raw is None:
        return DEFAULT_WAIT_MS
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise OptionError(f"option '{WAIT_OPTION}' = {raw!r}: must be a positive number of milliseconds")
    return value


SILENT_CAUSES = frozenset({"connection timed out", "accepted a TCP connection but gave no Kafka answer"})
"""Causes after which the first contact waited :data:`WAIT_OPTION`; only then does the message name it."""


def unreachable_error(servers: str, failures: Mapping[str, tuple[str, str]], waited_s: float,
                      wait_option_ms: int) -> BootstrapUnreachableError:
    """The error for a cluster none of whose bootstrap addresses answered: cause and fix on line 1, and
    :data:`WAIT_OPTION` when an address stayed silent (a refused or unresolved address fails at once,
    so naming the wait would only lengthen the line a user reads first); librdkafka's report per address
    on the lines after it."""
    causes = "; ".join(f"{a}: {c}" for a, (c, _) in failures.items())
    kinds = {c for c, _ in failures.values()}
    if "authentication failed" in kinds:
        fix = ("check kafka.security.protocol, kafka.sasl.mechanism and the user and password in "
               "kafka.sasl.jaas.config (or the client certificate)")
    elif "TLS handshake failed" in kinds:
        fix = ("check kafka.security.protocol and the trust store (kafka.ssl.truststore.location) and that the "
               "address is the broker's TLS listener")
    else:
        fix = "check kafka.bootstrap.servers and that the brokers are running and reachable from the driver"
    if "authentication failed" in kinds:
        head = f"kafka.bootstrap.servers={servers!r} refused the authentication ({causes})"
    else:
        head = f"cannot reach any Kafka broker of kafka.bootstrap.servers={servers!r} ({causes}) within {waited_s:.1f} s"
    message = f"{head}; {fix}"
    if kinds & SILENT_CAUSES:  # the wait mattered: say which option sets it (a refused port is not waited on)
        message += f". A silent address is waited on for {WAIT_OPTION}={wait_option_ms} ms: raise it for a slow network"
    details = "\n".join(f"  {a}: {d}" for a, (_, d) in failures.items())
    return BootstrapUnreachableError(f"{message}\n{details}", {a: c for a, (c, _) in failures.items()})


def first_metadata(client, watch: ConnectionWatch, servers: str, wait_option_ms: int, timeout_s: float,
                   topic: str | None = None):
    """Cluster metadata from ``client`` (a confluent-kafka client built with ``error_cb=watch``).

    Raises :class:`BootstrapUnreachableError` once every bootstrap address has failed for
    :data:`GRACE_S`, at once on an authentication failure, and after ``wait_option_ms`` without
    metadata (each silent address then probed with a TCP connect and named with the outcome).
    Re-raises librdkafka's ``KafkaException`` at ``timeout_s`` when that comes first.
    """
    from confluent_kafka import KafkaException

    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            if topic is None:
                return client.list_topics(timeout=max(0.001, min(SLICE_S, remaining)))
            return client.list_topics(topic=topic, timeout=max(0.001, min(SLICE_S, remaining)))
        except KafkaException:
            client.poll(0)  # serves error_cb
            now = time.monotonic()
            if watch.auth_error is not None or (watch.all_failed() and now - start >= GRACE_S):
                raise unreachable_error(servers, watch.failures(), now - start, wait_option_ms) from None
            if now - start >= wait_option_ms / 1000:
                # some address stayed silent for the whole wait: probe it, and give up either way
                failures = watch.failures()
                for address in watch.addresses:
                    if address not in failures:
                        failures[address] = probe(address, 1.0) or (
                            "accepted a TCP connection but gave no Kafka answer",
                            f"TCP connect succeeded, no Kafka Metadata answer within {wait_option_ms} ms "
                            "(not a Kafka listener, a TLS listener reached with PLAINTEXT, or an overloaded broker)")
                raise unreachable_error(servers, failures, time.monotonic() - start, wait_option_ms) from None
            if now >= deadline:
                raise


def require_reachable(conf: Mapping[str, object], options: Mapping[str, str], topic: str | None = None):
    """Driver-side pre-flight of a write or a sink: one Metadata request through a fresh admin client
    made from the librdkafka settings ``conf``.

    Returns the metadata, or ``None`` when a bootstrap address connects but the cluster is slow to
    answer (the write's own timeouts then apply). Raises :class:`BootstrapUnreachableError` as
    :func:`first_metadata` does, OptionError for a bad setting.
    """
    from confluent_kafka import KafkaException

    from pyspark_kafka.kafka.clients import new_admin

    servers = str(conf.get("bootstrap.servers", ""))
    wait = wait_ms(options)
    watch = ConnectionWatch(servers)
    admin = new_admin({**{k: v for k, v in conf.items() if not callable(v)}, "error_cb": watch})
    try:
        return first_metadata(admin, watch, servers, wait, wait / 1000 + 3.0, topic=topic)
    except KafkaException:
        return None
