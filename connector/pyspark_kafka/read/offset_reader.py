"""Driver-side offset metadata of a read (Spark's ``KafkaOffsetReaderAdmin``).

:class:`OffsetReader` lists the subscribed topic-partitions and resolves
offset limits (:mod:`pyspark_kafka.offsets`) to offsets: earliest, latest,
explicit offsets and timestamps, with Spark's retry options.
"""

from __future__ import annotations

import logging
import time
from typing import Mapping

from pyspark_kafka import offsets as O
from pyspark_kafka.kafka.clients import client_params, new_admin
from pyspark_kafka.errors import OptionError, PySparkKafkaError
from pyspark_kafka.kafka.reachability import BootstrapUnreachableError, ConnectionWatch, first_metadata, wait_ms
from pyspark_kafka.read.options import ReaderOptions

log = logging.getLogger(__name__)


class OffsetReader:
    """Driver-side metadata through one confluent-kafka AdminClient (created lazily).

    Lists the subscribed topic-partitions (Metadata) and their offsets
    (ListOffsets: earliest = log start offset, latest = high watermark, or last
    stable offset under ``kafka.isolation.level=read_committed``, by timestamp).
    Each call is retried ``fetchOffset.numRetries`` times,
    ``fetchOffset.retryIntervalMs`` apart, each attempt bounded by
    ``kafka.default.api.timeout.ms``. Raises PySparkKafkaError naming the
    brokers when the cluster does not answer. ``missing_topics``: ``"error"`` (batch reads, as
    Spark's connector) or ``"warn"`` (streams) for a ``subscribe`` topic the cluster lacks. The first Metadata request goes through
    :func:`pyspark_kafka.kafka.reachability.first_metadata`: when no bootstrap address can be reached
    it raises BootstrapUnreachableError naming each address and its cause within about 1.5 s
    (a silent address: ``kafka.socket.connection.setup.timeout.ms``, default 10 s), without retries.
    Not picklable state: the admin client is dropped when pickled and on :meth:`close`.
    """

    def __init__(self, opts: ReaderOptions, missing_topics: str = "warn"):
        self._opts = opts
        self._missing_topics = missing_topics
        self._conf = client_params(opts.options)
        self._read_committed = str(self._conf.get("isolation.level", "read_uncommitted")).lower() == "read_committed"
        self._admin = None
        self._watch: ConnectionWatch | None = None
        self._contacted = False
        self._wait_ms = wait_ms(opts.options)

    def __getstate__(self):
        return {**self.__dict__, "_admin": None, "_watch": None}

    @property
    def _auth_error(self) -> str | None:
        return None if self._watch is None else self._watch.auth_error

    @property
    def _client(self):
        if self._admin is None:
            # error_cb keeps each bootstrap address's connection failure (and an authentication failure)
            self._watch = ConnectionWatch(str(self._conf.get("bootstrap.servers", "")))
            self._admin = new_admin({**self._conf, "error_cb": self._watch})
        return self._admin

    def close(self) -> None:
        """Drop the admin client (librdkafka closes it when it is released)."""
        self._admin = None

    def _list_topics(self, timeout_s: float):
        """Metadata within ``timeout_s``, asked in slices of at most 1 s so that an authentication
        failure (reported through ``error_cb``) ends the wait at once instead of after the timeout.
        The first successful contact goes through :func:`~pyspark_kafka.kafka.reachability.first_metadata`."""
        from confluent_kafka import KafkaException

        if not self._contacted:
            client = self._client
            md = first_metadata(client, self._watch, str(self._conf.get("bootstrap.servers", "")),
                                self._wait_ms, timeout_s)
            self._contacted = True
            return md
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                return self._client.list_topics(timeout=max(0.001, min(1.0, remaining)))
            except KafkaException:
                self._client.poll(0)
                if self._auth_error is not None or time.monotonic() >= deadline:
                    raise

    def _retry(self, what: str, fn):
        """Call ``fn`` up to ``fetchOffset.numRetries`` times. After a failed attempt the admin
        client is dropped and made anew (Spark's KafkaOffsetReaderAdmin ``resetAdmin``): during
        a leader change librdkafka's cached metadata keeps sending ListOffsets with a stale
        leader epoch (FENCED_LEADER_EPOCH) to the old leader, found on a 3-node Apache Kafka."""
        last = None
        for attempt in range(self._opts.fetch_attempts):
            try:
                return fn()
            except OptionError:
                raise
            except BootstrapUnreachableError:
                self.close()  # its admin client would keep reconnecting (and logging) until collected
                raise
            except Exception as exc:  # confluent-kafka raises KafkaException, futures may raise others
                last = exc
                if self._admin is not None:
                    self._admin.poll(0)  # serves error_cb: an authentication failure is reported as such
                if self._auth_error is not None:
                    # wrong credentials do not heal with retries (Kafka's clients fail at once too)
                    raise PySparkKafkaError(
                        f"could not {what}: kafka.bootstrap.servers={self._conf.get('bootstrap.servers')!r} refused "
                        f"the authentication: {self._auth_error}. Check kafka.sasl.mechanism and the user and "
                        "password in kafka.sasl.jaas.config (or the client certificate)") from None
                log.warning("attempt %d to %s failed: %s", attempt + 1, what, exc)
                self.close()
                if attempt + 1 < self._opts.fetch_attempts:
                    time.sleep(self._opts.fetch_retry_interval_ms / 1000)
        raise PySparkKafkaError(
            f"could not {what} from kafka.bootstrap.servers={self._conf.get('bootstrap.servers')!r} after "
            f"{self._opts.fetch_attempts} attempts: {last}. Check that the brokers are reachable, or raise "
            f"fetchOffset.numRetries / kafka.default.api.timeout.ms"
        )

    def topic_partitions(self) -> list:
        """The subscribed topic-partitions, sorted (re-listed on every call: new topics/partitions appear)."""
        timeout = self._opts.api_timeout_ms / 1000

        def fetch():
            md = self._list_topics(timeout)
            return {name: sorted(t.partitions) for name, t in md.topics.items() if t.partitions}

        cluster = self._retry("list topics", fetch)
        self._warn_missing(cluster)
        return self._opts.subscription.select(cluster)

    def _warn_missing(self, cluster: Mapping[str, list]) -> None:
        """A ``subscribe`` topic the cluster lacks. With ``missing_topics="error"`` (batch reads) an
        OptionError naming it: Spark's connector fails such a batch read too (differential case
        ``error_subscribe_missing_topic``). Else (streams) one warning per topic: the stream reads it
        once it is created."""
        sub = self._opts.subscription
        if sub.kind != "subscribe":
            return
        missing = [t for t in sub.topics if t not in cluster]
        if missing and self._missing_topics == "error":
            raise OptionError(f"option 'subscribe' names topic(s) {missing} that do not exist on "
                              f"kafka.bootstrap.servers={self._conf.get('bootstrap.servers')!r}; create them "
                              f"(pyspark-kafka topics create --topic {missing[0]}) or fix the option")
        warned = self.__dict__.setdefault("_warned_missing", set())
        for topic in sub.topics:
            if topic not in cluster and topic not in warned:
                warned.add(topic)
                log.warning("subscribed topic %r does not exist on kafka.bootstrap.servers=%r: it contributes no "
                            "records until it is created (check the name, or create it: pyspark-kafka topics create "
                            "--topic %s)", topic, self._conf.get("bootstrap.servers"), topic)

    def list_offsets(self, specs: Mapping) -> dict:
        """``{(topic, partition): OffsetSpec}`` → ``{(topic, partition): offset}`` (-1 when a timestamp has no match)."""
        if not specs:
            return {}
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        by_timestamp = type(OffsetSpec.for_timestamp(0))

        level = IsolationLevel.READ_COMMITTED if self._read_committed else IsolationLevel.READ_UNCOMMITTED
        timeout = self._opts.api_timeout_ms / 1000

        def fetch():
            futures = self._client.list_offsets(
                {TopicPartition(t, p): spec for (t, p), spec in specs.items()},
                isolation_level=level,
                request_timeout=timeout,
            )
            out = {}
            for tp, f in futures.items():
                offset = f.result(timeout=timeout + 5).offset
                spec = specs[(tp.topic, tp.partition)]
                if offset < -1 or (offset < 0 and not isinstance(spec, by_timestamp)):
                    # librdkafka answers OFFSET_INVALID (-1001) without an error while the
                    # partition's leader changes; never let it reach an offset log.
                    raise PySparkKafkaError(f"ListOffsets answered no offset ({offset}) for "
                                            f"{tp.topic}-{tp.partition} (its leader may be changing)")
                out[(tp.topic, tp.partition)] = offset
            return out

        return self._retry("list offsets", fetch)

    def earliest(self, tps) -> dict:
        """Log start offset of each topic-partition in ``tps``."""
        from confluent_kafka.admin import OffsetSpec

        return self.list_offsets({tp: OffsetSpec.earliest() for tp in tps})

    def latest(self, tps) -> dict:
        """Latest offset (high watermark, or last stable offset under read_committed) of each of ``tps``."""
        from confluent_kafka.admin import OffsetSpec

        return self.list_offsets({tp: OffsetSpec.latest() for tp in tps})

    def resolve(self, limit, which: str, tps: list | None = None) -> dict:
        """Resolve an offset limit (:mod:`pyspark_kafka.offsets`) to real offsets for the subscription.

        ``which`` is ``"starting"`` or ``"ending"`` (names the options in errors,
        and decides what a timestamp without match means). Raises OptionError
        when explicit offsets/timestamps do not name exactly the subscribed
        partitions, or a starting timestamp has no match under strategy ``error``.
        """
        from confluent_kafka.admin import OffsetSpec

        tps = self.topic_partitions() if tps is None else tps
        if isinstance(limit, O.EarliestLimit):
            return self.earliest(tps)
        if isinstance(limit, O.LatestLimit):
            return self.latest(tps)
        if isinstance(limit, O.SpecificOffsets):
            O.check_covers_partitions(limit.offsets, tps, f"{which}Offsets")
            wanted = dict(limit.offsets)
        else:
            if isinstance(limit, O.SpecificTimestamps):
                O.check_covers_partitions(limit.timestamps, tps, f"{which}OffsetsByTimestamp")
                stamps = dict(limit.timestamps)
            else:
                stamps = {tp: limit.timestamp for tp in tps}
            found = self.list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in stamps.items()})
            wanted = {
                tp: O.resolve_timestamp_offset(tp, found[tp], stamps[tp], which == "starting", limit.strategy)
                for tp in stamps
            }
        early = self.earliest([tp for tp, o in wanted.items() if o == O.EARLIEST])
        late = self.latest([tp for tp, o in wanted.items() if o == O.LATEST])
        return {tp: early.get(tp, late.get(tp, o)) for tp, o in wanted.items()}

