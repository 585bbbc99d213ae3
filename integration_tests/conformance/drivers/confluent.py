"""confluent-kafka (librdkafka) driver of the conformance scenarios."""

from __future__ import annotations

import contextlib
import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from integration_tests.conformance.drivers import Driver, GroupMember
from integration_tests.conformance.scenarios import WAIT_S, Fetched, Metadata, Rec, confluent_kwargs, from_confluent


def _poll_until(consumer: Consumer, count: int, what: str) -> list[Fetched]:
    out, deadline = [], time.monotonic() + WAIT_S
    while len(out) < count:
        assert time.monotonic() < deadline, f"{what}: got {len(out)} of {count} records in {WAIT_S:g} s"
        m = consumer.poll(0.2)
        if m is None:
            continue
        if m.error() is not None:
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            continue
        out.append(from_confluent(m))
    return out


class _Member(GroupMember):
    def __init__(self, consumer: Consumer):
        self.consumer = consumer

    def assignment(self) -> set[int]:
        self.consumer.poll(0.1)  # serves rebalance callbacks
        return {tp.partition for tp in self.consumer.assignment()}


class ConfluentDriver(Driver):
    name = "confluent-kafka"

    def version(self) -> str:
        import confluent_kafka

        return f"confluent-kafka {confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"

    def _conf(self, **extra) -> dict:
        return {"bootstrap.servers": self.bootstrap, **extra}

    def metadata(self, topic: str) -> Metadata:
        md = AdminClient(self._conf()).list_topics(topic, timeout=10)
        tm = md.topics[topic]
        assert tm.error is None, tm.error
        return Metadata({b.id: f"{b.host}:{b.port}" for b in md.brokers.values()},
                        {p.id: p.leader for p in tm.partitions.values()})

    def produce(self, topic: str, records: list[Rec], codec: str = "none", idempotent: bool = False) -> None:
        producer = Producer(self._conf(**{"compression.type": codec, "enable.idempotence": idempotent,
                                          "acks": "all", "linger.ms": 5}))
        errors = []
        for r in records:
            producer.produce(topic, **confluent_kwargs(r), on_delivery=lambda e, m: e and errors.append(e))
        assert producer.flush(WAIT_S) == 0, "not every record was acknowledged in time"
        assert not errors, f"delivery errors: {errors}"

    def transactions(self, topic: str, steps: list[tuple[list[bytes], bool]]) -> None:
        producer = Producer(self._conf(**{"transactional.id": f"conformance-{uuid.uuid4()}"}))
        producer.init_transactions(WAIT_S)
        for values, commit in steps:
            producer.begin_transaction()
            for v in values:
                producer.produce(topic, value=v, partition=0)
            assert producer.flush(WAIT_S) == 0  # in the log before the outcome (abort purges unsent records)
            producer.commit_transaction(WAIT_S) if commit else producer.abort_transaction(WAIT_S)

    def fetch(self, topic: str, start: dict[int, int], count: int,
              isolation: str = "read_uncommitted") -> list[Fetched]:
        consumer = Consumer(self._conf(**{"group.id": f"unused-{uuid.uuid4()}", "enable.auto.commit": False,
                                          "isolation.level": isolation}))
        try:
            consumer.assign([TopicPartition(topic, p, o) for p, o in start.items()])
            return _poll_until(consumer, count, f"fetch {topic}")
        finally:
            consumer.close()

    def offsets_for_times(self, topic: str, times: dict[int, int]) -> dict[int, int | None]:
        consumer = Consumer(self._conf(**{"group.id": f"unused-{uuid.uuid4()}"}))
        try:
            found = consumer.offsets_for_times([TopicPartition(topic, p, ts) for p, ts in times.items()], timeout=10)
            return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}
        finally:
            consumer.close()

    def group_consume(self, topic: str, group: str, count: int) -> list[Fetched]:
        consumer = Consumer(self._conf(**{"group.id": group, "enable.auto.commit": False,
                                          "auto.offset.reset": "earliest"}))
        try:
            consumer.subscribe([topic])
            got = _poll_until(consumer, count, f"group {group} consume")
            consumer.commit(asynchronous=False)
            return got
        finally:
            consumer.close()

    @contextlib.contextmanager
    def group_member(self, topic: str, group: str):
        consumer = Consumer(self._conf(**{"group.id": group, "enable.auto.commit": False,
                                          "auto.offset.reset": "earliest", "session.timeout.ms": 10000}))
        try:
            consumer.subscribe([topic])
            yield _Member(consumer)
        finally:
            consumer.close()
