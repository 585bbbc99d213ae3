"""One Spark task's write (Spark's ``KafkaWriteTask`` / ``KafkaRowWriter``): :class:`KafkaWriteTask`.

Per Arrow batch: check every row (topic, partition range, timestamps, headers), route the
rows with :class:`~pyspark_kafka.write.routing.Router` (partition metadata cached per task), hand
them to the producer in row order, serve delivery reports; at the end flush within
``delivery.timeout.ms`` and count the acknowledged records per topic-partition
(:class:`~pyspark_kafka.write.commit_message.KafkaCommitMessage`). Errors are
:class:`~pyspark_kafka.errors.RecordError` (a row that cannot become a record) and
:class:`~pyspark_kafka.errors.DeliveryError` (records not acknowledged, cluster unreachable).
What happens around a task (producer pool, transaction) is in
:mod:`~pyspark_kafka.write.data_writer` and :mod:`~pyspark_kafka.write.exactly_once`.
"""

from __future__ import annotations

import collections
import itertools
import operator
import time
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyspark_kafka.kafka.clients import close_quietly
from pyspark_kafka.errors import DeliveryError, RecordError
from pyspark_kafka.kafka.client_config import redact
from pyspark_kafka.write.routing import Router, load_partitioner
from pyspark_kafka.write.commit_message import KafkaCommitMessage
from pyspark_kafka.write.delivery import error_hint
from pyspark_kafka.write.options import WriteSpec
from pyspark_kafka.write.producer_pool import PooledProducer, acquire
from pyspark_kafka.write.record_columns import as_bytes_list, headers_list, timestamps_ms

FLUSH_MARGIN_S = 10.0
"""Seconds a task waits for delivery reports beyond ``delivery.timeout.ms`` before giving up."""


class KafkaWriteTask:
    """One task's producer, partition metadata cache, router and delivery accounting.

    ``pooled``: the producer to use (a transactional one); by default one from this worker's pool.
    """

    def __init__(self, spec: WriteSpec, pooled: PooledProducer | None = None):
        self.spec = spec
        self.router = Router(load_partitioner(spec.partitioner))
        self.routed: Counter = Counter()  # (topic, partition) -> records handed to the producer
        self._metadata: dict[str, tuple[int, list[int]]] = {}
        self.pooled = pooled or acquire(spec.producer)
        self.producer = self.pooled.producer
        self.failures = self.pooled.failures

    # -- metadata -----------------------------------------------------------------
    def partitions_of(self, topic: str, refresh: bool = False) -> tuple[int, list[int]]:
        """``(partition count, partitions with a leader)`` of ``topic``, cached per task."""
        if refresh or topic not in self._metadata:
            self._metadata[topic] = self._fetch_metadata(topic)
        return self._metadata[topic]

    def _fetch_metadata(self, topic: str) -> tuple[int, list[int]]:
        from confluent_kafka import KafkaError, KafkaException

        deadline = time.monotonic() + self.spec.timeout_ms / 1000
        last = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                md = self.producer.list_topics(topic, timeout=remaining)
            except KafkaException as e:
                last = e.args[0]
                break
            tm = md.topics.get(topic)
            last = tm.error if tm is not None else None
            if tm is not None and tm.error is None and tm.partitions:
                available = sorted(p for p, pm in tm.partitions.items() if pm.leader >= 0)
                return len(tm.partitions), available
            if last is not None and last.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise RecordError(
                    f"topic '{topic}' does not exist on {self._servers()}; create it first "
                    "(e.g. AdminClient.create_topics or `pyspark-kafka topics create`), or enable "
                    "auto.create.topics.enable on the brokers"
                )
            time.sleep(min(0.1, max(remaining, 0)))  # topic being created: back off, bounded by deadline
        raise DeliveryError(
            f"cannot fetch metadata of topic '{topic}' from {self._servers()} within "
            f"{self.spec.timeout_ms} ms (kafka.delivery.timeout.ms): {last}. Check "
            "kafka.bootstrap.servers and that the brokers are reachable; nothing was written by this task"
        )

    def _servers(self) -> str:
        return str(redact(self.spec.producer).get("bootstrap.servers"))

    # -- routing and checks -------------------------------------------------------
    def send(self, batch: pa.RecordBatch) -> None:
        """Check one Arrow batch, route its rows and hand them to the producer.

        All checks of the batch (topic, partition range, timestamps, headers) run
        before any of its rows is produced.
        """
        n = batch.num_rows
        if n == 0:
            return
        cols = self.spec.columns
        keys = batch.column("key") if "key" in cols else None
        explicit = batch.column("partition") if "partition" in cols else None
        if explicit is not None and explicit.null_count == n:
            explicit = None
        if self.spec.topic is not None:
            topic = self.spec.topic
            partitions = self._route(topic, n, keys, explicit)
        else:
            topic, partitions = self._route_by_topic_column(batch, keys, explicit)
        timestamps = timestamps_ms(batch.column("timestamp")) if "timestamp" in cols else None
        headers = headers_list(batch.column("headers")) if "headers" in cols else None
        self._produce(
            topic,
            as_bytes_list(batch.column("value")),
            as_bytes_list(keys) if keys is not None else None,
            partitions.tolist(),
            timestamps,
            headers,
        )
        self.producer.poll(0)
        self._raise_on_failures()

    def _route_by_topic_column(self, batch, keys, explicit) -> tuple[str | list, np.ndarray]:
        """Route rows topic by topic; returns the single topic (or the per-row list) and partitions."""
        topics = self._topics(batch)
        encoded = pc.dictionary_encode(topics)
        names = encoded.dictionary.to_pylist()
        if len(names) == 1:
            return names[0], self._route(names[0], len(topics), keys, explicit)
        partitions = np.empty(len(topics), dtype=np.int64)
        idx = encoded.indices.to_numpy(zero_copy_only=False)
        for i, name in enumerate(names):
            rows = np.nonzero(idx == i)[0]
            take = pa.array(rows)
            partitions[rows] = self._route(
                name,
                len(rows),
                keys.take(take) if keys is not None else None,
                explicit.take(take) if explicit is not None else None,
            )
        return topics.to_pylist(), partitions

    def _topics(self, batch: pa.RecordBatch) -> pa.Array:
        topics = batch.column("topic")
        if topics.null_count:
            row = topics.is_null().to_numpy(zero_copy_only=False).argmax()
            raise RecordError(
                f"row {row} of this task's batch has a null 'topic'; fill the column or set option "
                "'topic' (.option('topic', 'name')), which then applies to every row"
            )
        return topics

    def _route(self, topic: str, n: int, keys, explicit) -> np.ndarray:
        num, available = self.partitions_of(topic)
        if explicit is not None:
            num, available = self._check_explicit(topic, explicit, num, available)
        partitions = self.router.assign(topic, n, num, keys, explicit, available)
        values, counts = np.unique(partitions, return_counts=True)
        self.routed.update({(topic, int(p)): int(c) for p, c in zip(values, counts)})
        return partitions

    def _check_explicit(self, topic, explicit, num, available):
        lo, hi = pc.min_max(explicit).values()
        lo, hi = lo.as_py(), hi.as_py()
        if lo is not None and (lo < 0 or hi >= num):
            num, available = self.partitions_of(topic, refresh=True)  # partitions may have been added
            if lo < 0 or hi >= num:
                bad = lo if lo < 0 else hi
                raise RecordError(
                    f"partition {bad} is out of range for topic '{topic}', which has {num} partitions "
                    f"(0..{num - 1}); fix the 'partition' column or add partitions to the topic"
                )
        return num, available

    # -- producing ----------------------------------------------------------------
    def _produce(self, topic, values, keys, partitions, timestamps, headers) -> None:
        """Enqueue records; ``topic`` is one name or a per-row list, the rest per-row lists.

        Rows go to librdkafka in row order. Without timestamps and headers the rows are
        handed over by ``map`` driven from C (no Python bytecode per row); a full local
        queue (``BufferError``) serves delivery reports and resumes at the refused row.
        Raises DeliveryError when librdkafka refuses a record outright (record larger
        than ``message.max.bytes``, fatal producer error such as a broker without
        idempotent-producer support).
        """
        from confluent_kafka import KafkaException

        n = len(values)
        if len(partitions) != n or (keys is not None and len(keys) != n) or (
                isinstance(topic, list) and len(topic) != n):
            raise ValueError("values, keys, partitions and topics must have one entry per row")
        values_left = iter(values)
        try:
            if timestamps is None and headers is None:
                self._produce_plain(topic, values, values_left, keys, partitions)
            else:
                self._produce_with_options(topic, values_left, keys, partitions, timestamps, headers)
        except KafkaException as e:
            err = e.args[0]
            row = n - operator.length_hint(values_left) - 1
            t = topic[row] if isinstance(topic, list) else topic
            cause = self._fatal_cause(err)
            raise DeliveryError(
                f"the producer refused a record for topic '{t}' partition {partitions[row]}: {err.str()} "
                f"({err.name()})" + cause + error_hint(err)
            ) from None

    def _fatal_cause(self, err) -> str:
        """For a ``_FATAL`` refusal, the fatal error behind it, which confluent-kafka raises from
        the next ``poll`` (e.g. the InitProducerId of an idempotent producer denied
        CLUSTER_AUTHORIZATION_FAILED when the principal may WRITE no topic: KIP-679); else ""."""
        from confluent_kafka import KafkaError, KafkaException

        if err.code() != KafkaError._FATAL:
            return ""
        try:
            self.producer.poll(0)
        except KafkaException as e:
            first = e.args[0]
        except SystemError as e:  # see data_writer.write_batches: the fatal KafkaException is its cause
            if not isinstance(e.__cause__, KafkaException):
                return ""
            first = e.__cause__.args[0]
        else:
            return ""
        return f"; cause: {first.str()} ({first.name()})" + error_hint(first)

    def _produce_plain(self, topic, values, values_left, keys, partitions) -> None:
        """Rows without timestamp and headers: ``produce(topic, value, key, partition)`` per row, from C.

        ``values_left`` is the iterator over ``values`` the rows are taken from (its remaining
        length tells which row was refused).
        """
        produce = self.producer.produce
        n = len(partitions)
        topics = iter(topic) if isinstance(topic, list) else itertools.repeat(topic)
        keys_left = iter(keys) if keys is not None else itertools.repeat(None)
        parts_left = iter(partitions)
        while True:
            try:
                # map takes one row's arguments from every iterator, then calls produce
                collections.deque(map(produce, topics, values_left, keys_left, parts_left), maxlen=0)
                return
            except BufferError:  # the refused row's arguments are taken: retry it, then go on
                row = n - operator.length_hint(values_left) - 1
                t = topic[row] if isinstance(topic, list) else topic
                k = keys[row] if keys is not None else None
                v, p = values[row], partitions[row]
                self._when_queue_has_room(lambda: produce(t, v, k, p))

    def _produce_with_options(self, topic, values_left, keys, partitions, timestamps, headers) -> None:
        """Rows with a timestamp or headers: one keyword ``produce`` call per row."""
        produce = self.producer.produce
        n = len(partitions)
        topics = topic if isinstance(topic, list) else itertools.repeat(topic, n)
        keys = keys if keys is not None else itertools.repeat(None, n)
        timestamps = timestamps if timestamps is not None else itertools.repeat(0, n)
        headers = headers if headers is not None else itertools.repeat(None, n)
        for t, v, k, p, ts, h in zip(topics, values_left, keys, partitions, timestamps, headers):
            try:
                produce(t, v, k, partition=p, timestamp=ts, headers=h)
            except BufferError:
                self._when_queue_has_room(lambda: produce(t, v, k, partition=p, timestamp=ts, headers=h))

    def _when_queue_has_room(self, enqueue) -> None:
        """librdkafka's local queue is full: serve delivery reports until ``enqueue()`` fits.

        Bounded by ``delivery.timeout.ms``; raises DeliveryError after that.
        """
        deadline = time.monotonic() + self.spec.timeout_ms / 1000
        while time.monotonic() < deadline:
            self.producer.poll(0.05)
            self._raise_on_failures()
            try:
                enqueue()
                return
            except BufferError:
                continue
        raise DeliveryError(
            f"the producer queue stayed full for {self.spec.timeout_ms} ms (kafka.delivery.timeout.ms): "
            f"{self._servers()} is not taking records; check the brokers"
        )

    def _raise_on_failures(self) -> None:
        if self.failures.count:
            raise DeliveryError(
                f"Kafka did not acknowledge {self.failures.count} record(s) of this task: "
                f"{'; '.join(self.failures.reasons)}. "
                "The task fails so that nothing is lost; Spark may retry it "
                + ("(its transaction is aborted)" if self.spec.exactly_once else "(at-least-once)")
            )

    def finish(self) -> KafkaCommitMessage:
        """Flush (bounded by ``delivery.timeout.ms`` + margin) and check the delivery reports.

        Returns the acknowledged counts per ``(topic, partition)``: all routed records, since
        none failed and none is left in the queue (else DeliveryError).
        """
        left = self.producer.flush(self.spec.timeout_ms / 1000 + FLUSH_MARGIN_S)
        self._raise_on_failures()
        if left:
            raise DeliveryError(
                f"{left} of {sum(self.routed.values())} records were not acknowledged by {self._servers()} "
                f"within {self.spec.timeout_ms} ms (kafka.delivery.timeout.ms); the task fails so that "
                "nothing is lost"
            )
        return KafkaCommitMessage(dict(self.routed))

    def abandon(self) -> None:
        """After a failure: drop queued records so a failed task writes nothing more, and
        close the producer (its state is unknown, it is not reused)."""
        try:
            self.producer.purge()
            self.producer.poll(0)
        except Exception:  # best effort: the task is failing with the original error
            pass
        close_quietly(self.producer)
