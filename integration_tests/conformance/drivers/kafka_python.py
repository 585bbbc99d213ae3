"""kafka-python driver of the conformance scenarios (pure-Python client, its own protocol code)."""

from __future__ import annotations

import contextlib
import time
import uuid

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from integration_tests.conformance.drivers import Driver, GroupMember
from integration_tests.conformance.scenarios import WAIT_S, Fetched, Metadata, Rec
from support.kafka_python_member import PolledMember

TIMEOUT_MS = int(WAIT_S * 1000)


def _fetched(r) -> Fetched:
    return Fetched(r.partition, r.offset, r.key, r.value, tuple((k, v) for k, v in (r.headers or ())), r.timestamp)


def _poll_until(consumer: KafkaConsumer, count: int, what: str) -> list[Fetched]:
    out, deadline = [], time.monotonic() + WAIT_S
    while len(out) < count:
        assert time.monotonic() < deadline, f"{what}: got {len(out)} of {count} records in {WAIT_S:g} s"
        for records in consumer.poll(timeout_ms=200, max_records=count - len(out)).values():
            out.extend(_fetched(r) for r in records)
    return out


class _Member(GroupMember):
    """A member polled without pause by its own thread: kafka-python drops a join that finishes
    between two polls and joins again (support/kafka_python_member.py), on Apache Kafka too."""

    def __init__(self, consumer: KafkaConsumer):
        self.polled = PolledMember(consumer, "conformance-kafka-python-member", autocommit=False)

    def assignment(self) -> set[int]:
        return self.polled.assignment()


class KafkaPythonDriver(Driver):
    name = "kafka-python"

    def version(self) -> str:
        import kafka

        return f"kafka-python {kafka.__version__}"

    def metadata(self, topic: str) -> Metadata:
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, request_timeout_ms=TIMEOUT_MS)
        try:
            partitions = consumer.partitions_for_topic(topic) or set()
            cluster = consumer._client.cluster  # the client's metadata cache (no public accessor)
            return Metadata({b.node_id: f"{b.host}:{b.port}" for b in cluster.brokers()},
                            {p: cluster.leader_for_partition(TopicPartition(topic, p)) for p in partitions})
        finally:
            consumer.close()

    def _producer(self, **extra) -> KafkaProducer:
        return KafkaProducer(bootstrap_servers=self.bootstrap, request_timeout_ms=TIMEOUT_MS, **extra)

    def produce(self, topic: str, records: list[Rec], codec: str = "none", idempotent: bool = False) -> None:
        producer = self._producer(compression_type=None if codec == "none" else codec, acks="all",
                                  enable_idempotence=idempotent, linger_ms=5)
        try:
            futures = [producer.send(topic, value=r.value, key=r.key, headers=list(r.headers) or None,
                                     partition=r.partition, timestamp_ms=r.timestamp) for r in records]
            producer.flush(timeout=WAIT_S)
            for f in futures:
                f.get(timeout=WAIT_S)  # raises the delivery error, if any
        finally:
            producer.close(timeout=WAIT_S)

    def transactions(self, topic: str, steps: list[tuple[list[bytes], bool]]) -> None:
        producer = self._producer(transactional_id=f"conformance-{uuid.uuid4()}")
        try:
            producer.init_transactions()
            for values, commit in steps:
                producer.begin_transaction()
                for v in values:
                    producer.send(topic, value=v, partition=0)
                producer.flush(timeout=WAIT_S)  # in the log before the outcome
                producer.commit_transaction() if commit else producer.abort_transaction()
        finally:
            producer.close(timeout=WAIT_S)

    def fetch(self, topic: str, start: dict[int, int], count: int,
              isolation: str = "read_uncommitted") -> list[Fetched]:
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                 isolation_level=isolation, request_timeout_ms=TIMEOUT_MS)
        try:
            consumer.assign([TopicPartition(topic, p) for p in start])
            for p, offset in start.items():
                consumer.seek(TopicPartition(topic, p), offset)
            return _poll_until(consumer, count, f"fetch {topic}")
        finally:
            consumer.close()

    def offsets_for_times(self, topic: str, times: dict[int, int]) -> dict[int, int | None]:
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, request_timeout_ms=TIMEOUT_MS)
        try:
            found = consumer.offsets_for_times({TopicPartition(topic, p): ts for p, ts in times.items()},
                                               timeout_ms=TIMEOUT_MS)
            return {tp.partition: (None if o is None else o.offset) for tp, o in found.items()}
        finally:
            consumer.close()

    def _group_consumer(self, topic: str, group: str) -> KafkaConsumer:
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=group, enable_auto_commit=False,
                                 auto_offset_reset="earliest", request_timeout_ms=TIMEOUT_MS,
                                 session_timeout_ms=10000, heartbeat_interval_ms=1000)
        consumer.subscribe([topic])
        return consumer

    def group_consume(self, topic: str, group: str, count: int) -> list[Fetched]:
        consumer = self._group_consumer(topic, group)
        try:
            got = _poll_until(consumer, count, f"group {group} consume")
            consumer.commit(timeout_ms=TIMEOUT_MS)
            return got
        finally:
            consumer.close(autocommit=False)

    @contextlib.contextmanager
    def group_member(self, topic: str, group: str):
        member = _Member(self._group_consumer(topic, group))
        try:
            yield member
        finally:
            member.polled.close()
