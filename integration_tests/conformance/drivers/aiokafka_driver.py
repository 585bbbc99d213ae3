"""aiokafka driver of the conformance scenarios (asyncio client).

aiokafka runs group membership (heartbeats, rebalances) as tasks of its event loop, so the
driver keeps one loop running in a daemon thread and submits each primitive to it
(:meth:`AiokafkaDriver._run`, bounded by a timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from integration_tests.conformance.drivers import Driver, GroupMember
from integration_tests.conformance.scenarios import WAIT_S, Fetched, Metadata, Rec

TIMEOUT_MS = int(WAIT_S * 1000)


def _fetched(r) -> Fetched:
    return Fetched(r.partition, r.offset, r.key, r.value, tuple((k, v) for k, v in (r.headers or ())), r.timestamp)


async def _consume_until(consumer: AIOKafkaConsumer, count: int, what: str) -> list[Fetched]:
    out, deadline = [], time.monotonic() + WAIT_S
    while len(out) < count:
        assert time.monotonic() < deadline, f"{what}: got {len(out)} of {count} records in {WAIT_S:g} s"
        for records in (await consumer.getmany(timeout_ms=200, max_records=count - len(out))).values():
            out.extend(_fetched(r) for r in records)
    return out


class _Member(GroupMember):
    def __init__(self, driver: "AiokafkaDriver", consumer: AIOKafkaConsumer):
        self.driver, self.consumer = driver, consumer

    def assignment(self) -> set[int]:
        async def poll():
            await self.consumer.getmany(timeout_ms=100)
            return {tp.partition for tp in self.consumer.assignment()}

        return self.driver._run(poll())


class AiokafkaDriver(Driver):
    name = "aiokafka"

    def __init__(self, bootstrap: str):
        super().__init__(bootstrap)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="aiokafka-driver", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the driver's event loop thread."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(WAIT_S)
        if not self._thread.is_alive():
            self._loop.close()

    def _run(self, coro, timeout_s: float = 2 * WAIT_S):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def version(self) -> str:
        import aiokafka

        return f"aiokafka {aiokafka.__version__}"

    def _consumer(self, **extra) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(bootstrap_servers=self.bootstrap, request_timeout_ms=TIMEOUT_MS, **extra)

    def _producer(self, **extra) -> AIOKafkaProducer:
        return AIOKafkaProducer(bootstrap_servers=self.bootstrap, request_timeout_ms=TIMEOUT_MS, **extra)

    def metadata(self, topic: str) -> Metadata:
        async def run():
            consumer = self._consumer()
            await consumer.start()
            try:
                # consumer.topics() sends the same Metadata request but returns only the names
                cluster = await consumer._client.fetch_all_metadata()
                partitions = cluster.partitions_for_topic(topic)
                return Metadata({b.nodeId: f"{b.host}:{b.port}" for b in cluster.brokers()},
                                {p: cluster.leader_for_partition(TopicPartition(topic, p)) for p in partitions or ()})
            finally:
                await consumer.stop()

        return self._run(run())

    def produce(self, topic: str, records: list[Rec], codec: str = "none", idempotent: bool = False) -> None:
        async def run():
            producer = self._producer(compression_type=None if codec == "none" else codec, acks="all",
                                      enable_idempotence=idempotent, linger_ms=5)
            await producer.start()
            try:
                futures = [await producer.send(topic, value=r.value, key=r.key, partition=r.partition,
                                               timestamp_ms=r.timestamp, headers=list(r.headers) or None)
                           for r in records]
                await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)  # raises a delivery error
            finally:
                await producer.stop()

        self._run(run())

    def transactions(self, topic: str, steps: list[tuple[list[bytes], bool]]) -> None:
        async def run():
            producer = self._producer(transactional_id=f"conformance-{uuid.uuid4()}")
            await producer.start()  # start() runs InitProducerId for a transactional producer
            try:
                for values, commit in steps:
                    await producer.begin_transaction()
                    for v in values:
                        await producer.send_and_wait(topic, value=v, partition=0)
                    await (producer.commit_transaction() if commit else producer.abort_transaction())
            finally:
                await producer.stop()

        self._run(run())

    def fetch(self, topic: str, start: dict[int, int], count: int,
              isolation: str = "read_uncommitted") -> list[Fetched]:
        async def run():
            consumer = self._consumer(enable_auto_commit=False, isolation_level=isolation)
            await consumer.start()
            try:
                consumer.assign([TopicPartition(topic, p) for p in start])
                for p, offset in start.items():
                    consumer.seek(TopicPartition(topic, p), offset)
                return await _consume_until(consumer, count, f"fetch {topic}")
            finally:
                await consumer.stop()

        return self._run(run())

    def offsets_for_times(self, topic: str, times: dict[int, int]) -> dict[int, int | None]:
        async def run():
            consumer = self._consumer()
            await consumer.start()
            try:
                found = await consumer.offsets_for_times({TopicPartition(topic, p): ts for p, ts in times.items()})
                return {tp.partition: (None if o is None else o.offset) for tp, o in found.items()}
            finally:
                await consumer.stop()

        return self._run(run())

    def _group_consumer(self, group: str) -> AIOKafkaConsumer:
        return self._consumer(group_id=group, enable_auto_commit=False, auto_offset_reset="earliest",
                              session_timeout_ms=10000, heartbeat_interval_ms=1000)

    def group_consume(self, topic: str, group: str, count: int) -> list[Fetched]:
        async def run():
            consumer = self._group_consumer(group)
            await consumer.start()
            try:
                consumer.subscribe([topic])
                got = await _consume_until(consumer, count, f"group {group} consume")
                await consumer.commit()
                return got
            finally:
                await consumer.stop()

        return self._run(run())

    @contextlib.contextmanager
    def group_member(self, topic: str, group: str):
        async def start():
            consumer = self._group_consumer(group)
            await consumer.start()
            consumer.subscribe([topic])
            return consumer

        consumer = self._run(start())
        try:
            yield _Member(self, consumer)
        finally:
            self._run(consumer.stop())
