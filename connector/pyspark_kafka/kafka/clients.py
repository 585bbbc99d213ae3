"""confluent-kafka client construction and a per-worker consumer cache.

Client settings come from the ``kafka.*`` data source options (prefix removed,
as Spark's Kafka connector does). Kafka Java client names are translated to
librdkafka's (:mod:`pyspark_kafka.kafka.javaconfig`: JAAS, key stores, renamed settings);
a setting neither client knows makes client creation fail with an
:class:`~pyspark_kafka.errors.OptionError` naming it. Secrets never appear in
messages (:func:`pyspark_kafka.kafka.client_config.redact`). librdkafka's log lines go through Python
``logging`` (:mod:`pyspark_kafka.kafka.librdkafka_log`), each distinct line once a minute.

Consumers and producers on Spark executors are expensive to create (connection,
metadata, fetch sessions, InitProducerId), so a :class:`ClientPool` keeps idle ones per
Python worker process, keyed by their full configuration, and hands each out to one
task at a time (Spark's ``KafkaDataConsumer`` pool and producer cache do the same on the
JVM): :func:`pooled_consumer` here, the writer's producers in :mod:`pyspark_kafka.write.producer_pool`.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping

from pyspark_kafka.errors import OptionError
from pyspark_kafka.kafka.javaconfig import to_librdkafka
from pyspark_kafka.kafka.librdkafka_log import with_logger
from pyspark_kafka.kafka.client_config import KAFKA_PREFIX, kafka_params, redact

# Java client settings that librdkafka lacks; the reader interprets the first one itself.
DRIVER_ONLY_SETTINGS = ("default.api.timeout.ms",)

MAX_IDLE_CONSUMERS = 8
"""Idle consumers kept per worker process; the least recently returned beyond this are closed."""


class ClientPool:
    """Idle clients of this process, keyed by configuration (:func:`config_key`).

    :meth:`take` hands out the most recently returned idle client with that key (or ``None``);
    :meth:`put` returns one and closes the least recently returned beyond ``max_idle``;
    :meth:`close_all` closes every idle one. ``close(client)`` closes a client without raising.
    Thread-safe; a client is in the pool only while nobody uses it.
    """

    def __init__(self, max_idle: int, close: Callable[[object], None]):
        self.max_idle = max_idle
        self._close = close
        self._idle: list[tuple[tuple, object]] = []  # most recently returned last
        self._lock = threading.Lock()

    def take(self, key: tuple):
        with self._lock:
            for i in range(len(self._idle) - 1, -1, -1):
                if self._idle[i][0] == key:
                    return self._idle.pop(i)[1]
        return None

    def put(self, key: tuple, client) -> None:
        with self._lock:
            self._idle.append((key, client))
            evicted = self._idle[:-self.max_idle] if len(self._idle) > self.max_idle else []
            del self._idle[: len(evicted)]
        for _, c in evicted:
            self._close(c)

    def close_all(self) -> None:
        with self._lock:
            idle = list(self._idle)
            self._idle.clear()
        for _, c in idle:
            self._close(c)

    def idle(self) -> list[tuple[tuple, object]]:
        """``(key, client)`` of the idle clients, least recently returned first (a copy)."""
        with self._lock:
            return list(self._idle)

    def __len__(self) -> int:
        with self._lock:
            return len(self._idle)


def client_params(options: Mapping[str, str]) -> dict:
    """The ``kafka.*`` options as librdkafka settings (Java client names translated, see
    :func:`~pyspark_kafka.kafka.javaconfig.to_librdkafka`), minus :data:`DRIVER_ONLY_SETTINGS`.
    Raises OptionError for a setting that cannot be honoured."""
    params = to_librdkafka(kafka_params(options))
    for k in DRIVER_ONLY_SETTINGS:
        params.pop(k, None)
    return params


def consumer_config(options: Mapping[str, str], group_id: str, **overrides) -> dict:
    """Consumer configuration from data source options.

    ``options``: the data source options (``kafka.*`` are passed through);
    ``group_id``: used unless ``kafka.group.id`` is set; ``overrides``: settings
    that win over the options (keys with dots written as in librdkafka, passed
    as a dict expansion, e.g. ``**{"enable.auto.commit": False}``).
    The isolation level defaults to ``read_uncommitted`` as in the Java client
    (librdkafka's own default is ``read_committed``).
    """
    conf = {"isolation.level": "read_uncommitted", **client_params(options)}
    conf.setdefault("group.id", group_id)
    conf.update(overrides)
    return conf


def producer_config(options: Mapping[str, str], **overrides) -> dict:
    """Producer configuration from data source options: ``kafka.*`` settings, then ``overrides``."""
    conf = client_params(options)
    conf.update(overrides)
    return conf


def _client_error(kind: str, conf: Mapping[str, object], exc: Exception) -> OptionError:
    return OptionError(
        f"cannot create a Kafka {kind} from the '{KAFKA_PREFIX}*' options: {exc}. "
        f"Settings are librdkafka (confluent-kafka) names, see librdkafka's CONFIGURATION.md; "
        f"remove or rename Java-only settings. Settings given: {redact(conf)}"
    )


def new_consumer(conf: Mapping[str, object]):
    """A ``confluent_kafka.Consumer``; raises OptionError naming a bad setting (secrets redacted)."""
    from confluent_kafka import Consumer, KafkaException

    try:
        return Consumer(with_logger(dict(conf)))
    except (KafkaException, ValueError, TypeError) as exc:
        raise _client_error("consumer", conf, exc) from None


def check_consumer_config(conf: Mapping[str, object]) -> None:
    """Create and close a consumer with ``conf`` so a bad setting fails on the driver, not in every task.

    Raises OptionError naming the setting (secrets redacted).
    """
    new_consumer(conf).close()


ADMIN_DEFAULTS = {"reconnect.backoff.ms": 50, "enable.sparse.connections": False}
"""Admin client settings that differ from librdkafka's defaults unless the ``kafka.*`` options set them.

A streaming query makes a new admin client per query (in its source runner), and a batch read one per
read, so the wait before its first Metadata answer is on every query's path. librdkafka (2.16) drops
the bootstrap connection after the first Metadata answer and connects again to the broker by its id,
and with sparse connections (its default) it spaces such connection attempts by half of
``reconnect.backoff.ms``: ``debug=broker`` shows "still suppressed for 47ms", and the first
``list_topics`` took 54 ms (librdkafka's defaults), 30 ms with ``reconnect.backoff.ms`` 50 (the Java
client's default), 2.4 ms with ``enable.sparse.connections`` false (medians of 9, a three-node Apache
Kafka 4.4.0 on loopback, docs/benchmark-analysis.md). Without sparse connections the admin client
connects to every broker of the cluster at once, as a query's ListOffsets needs the leader of every
subscribed partition each trigger anyway; set ``kafka.enable.sparse.connections=true`` to connect
only where needed. Executors' consumers keep librdkafka's defaults."""


def admin_config(conf: Mapping[str, object]) -> dict:
    """The settings of an admin client made from client settings ``conf``: consumer-only settings
    dropped, :data:`ADMIN_DEFAULTS` added for what ``conf`` leaves unset: ``reconnect.backoff.ms``
    when ``conf`` sets no ``reconnect.backoff.*`` (librdkafka refuses ``reconnect.backoff.max.ms``
    below ``reconnect.backoff.ms``, so a user's own maximum keeps librdkafka's defaults), and
    ``enable.sparse.connections``."""
    admin_conf = {k: v for k, v in conf.items() if k not in _CONSUMER_ONLY}
    defaults = dict(ADMIN_DEFAULTS)
    if any(str(k).startswith("reconnect.backoff") for k in admin_conf):
        del defaults["reconnect.backoff.ms"]
    return {**defaults, **admin_conf}


def new_admin(conf: Mapping[str, object]):
    """A ``confluent_kafka.admin.AdminClient`` with :func:`admin_config` of ``conf``; raises
    OptionError naming a bad setting."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin_conf = admin_config(conf)
    try:
        return AdminClient(with_logger(admin_conf))
    except (KafkaException, ValueError, TypeError) as exc:
        raise _client_error("admin client", admin_conf, exc) from None


# librdkafka warns (or fails) when an admin client gets consumer-only settings.
_CONSUMER_ONLY = {
    "group.id", "group.instance.id", "isolation.level", "auto.offset.reset", "enable.auto.commit",
    "enable.partition.eof", "enable.auto.offset.store", "fetch.min.bytes", "fetch.max.bytes",
    "fetch.wait.max.ms", "max.partition.fetch.bytes", "queued.max.messages.kbytes",
    "queued.min.messages", "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
    "check.crcs", "partition.assignment.strategy", "auto.commit.interval.ms", "fetch.error.backoff.ms",
}


def config_key(conf: Mapping[str, object]) -> tuple:
    """Hashable pool key of a client configuration: its ``(name, value)`` pairs as strings, sorted."""
    return tuple(sorted((str(k), str(v)) for k, v in conf.items()))


@contextmanager
def pooled_consumer(conf: Mapping[str, object]) -> Iterator:
    """Borrow a consumer with configuration ``conf`` from this process's pool.

    The caller owns it until the ``with`` block ends; it must leave the consumer
    unassigned. On normal exit the consumer goes back to the pool (at most
    :data:`MAX_IDLE_CONSUMERS` idle ones are kept, older ones are closed); when
    the block raises (or a generator using it is closed early) the consumer is
    closed, since its state is unknown.
    """
    key = config_key(conf)
    consumer = CONSUMERS.take(key)
    if consumer is None:
        consumer = new_consumer(conf)
    ok = False
    try:
        yield consumer
        ok = True
    finally:
        if ok:
            CONSUMERS.put(key, consumer)
        else:
            close_quietly(consumer)


def close_quietly(client) -> None:
    """Close a consumer or producer being discarded; an error while closing is ignored (best effort)."""
    try:
        client.close()
    except Exception:  # closing is best effort; the client is discarded either way
        pass


CONSUMERS = ClientPool(MAX_IDLE_CONSUMERS, close_quietly)
"""This process's idle consumers (:func:`pooled_consumer`)."""


def close_pooled_consumers() -> None:
    """Close every idle pooled consumer of this process (tests, benchmarks, shutdown)."""
    CONSUMERS.close_all()


def idle_consumer_count() -> int:
    """Number of idle consumers in this process's pool."""
    return len(CONSUMERS)


def new_producer(conf: Mapping[str, object]):
    """A ``confluent_kafka.Producer``; raises OptionError naming a bad setting (secrets redacted)."""
    from confluent_kafka import KafkaException, Producer

    try:
        return Producer(with_logger(dict(conf)))
    except (KafkaException, ValueError, TypeError) as exc:
        raise _client_error("producer", {k: v for k, v in conf.items() if not callable(v)}, exc) from None
