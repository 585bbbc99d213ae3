"""The conformance scenario script: one list of scenarios, run the same way by every client.

A scenario is a function ``(ctx, driver) -> None`` that raises on failure. It sets up data
with the *reference* client (confluent-kafka, through :class:`Context`) where the client
under test is not the subject, drives the client under test only through the small
:class:`~integration_tests.conformance.drivers.Driver` interface, and checks the outcome,
where possible independently of it: the reference client (watermarks, committed offsets,
read_committed) and the stored batch headers (codec, producer id, transaction flags). Each scenario names the Kafka APIs the broker must serve for it
(:attr:`Scenario.apis`); the matrix reports a scenario as ``unsupported`` on a broker that
does not advertise them.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from integration_tests import clusters as C
from integration_tests import helpers

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
"""Kafka's compression codecs (``compression.type``), each a produce scenario."""
BASE_TS = 1_700_000_000_000
"""Base CreateTime (ms) of the timestamp scenario's records."""
WAIT_S = 30.0
"""Bound of every wait in a scenario (records to arrive, a rebalance to settle)."""


class Unsupported(Exception):
    """The client under test has no way to do what the scenario needs; the message says why."""


@dataclass(frozen=True)
class Rec:
    """A record to produce: ``value``/``key`` bytes or None, ``headers`` ((str, bytes), ...),
    ``partition`` (None: the client's partitioner), ``timestamp`` ms (None: now)."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple = ()
    partition: int | None = None
    timestamp: int | None = None


@dataclass(frozen=True)
class Fetched:
    """A consumed record, normalized across clients; ``headers`` is ((str, bytes), ...)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()
    timestamp: int = -1


@dataclass(frozen=True)
class Metadata:
    """What a client learned from Metadata: ``brokers`` {node id: "host:port"}, ``partitions``
    {partition: leader node id} of one topic."""

    brokers: dict
    partitions: dict


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S, every_s: float = 0.1) -> None:
    """Call ``condition`` until it is true; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


@dataclass
class Context:
    """The cluster and the reference client (confluent-kafka) a scenario uses around the client under test."""

    cluster: C.Cluster

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def topic(self, partitions: int, config: dict | None = None) -> str:
        """A fresh topic with ``partitions`` partitions and topic ``config`` (Kafka's names)."""
        return self.cluster.create_topic(partitions, config=config, prefix="conformance")

    def produce(self, topic: str, records: list[Rec]) -> None:
        """Produce ``records`` in order with the reference producer; raise unless all are acknowledged."""
        helpers.produce(self.bootstrap, topic, [confluent_kwargs(r) for r in records])

    def transactions(self, topic: str, steps: list[tuple[list[bytes], bool]]) -> None:
        """One transaction per step with the reference transactional producer: produce the
        values to partition 0, then commit (True) or abort (False)."""
        helpers.transactions(self.bootstrap, topic, steps)

    def read_all(self, topic: str, isolation: str = "read_uncommitted") -> list[Fetched]:
        """Every record of ``topic`` up to the end of each partition, with the reference consumer."""
        return [from_confluent(m) for m in helpers.consume_all(self.bootstrap, topic, isolation)]

    def batches(self, topic: str, partition: int) -> list[C.BatchHeader]:
        """Headers of the record batches stored in one partition, as the broker returns them."""
        return C.batch_headers(self.bootstrap, topic, partition)

    def committed(self, topic: str, group: str, partitions: int) -> dict[int, int]:
        """The group's committed offsets ``{partition: offset}`` (OffsetFetch by the reference client)."""
        return helpers.committed_offsets(self.bootstrap, group, topic, partitions)


def confluent_kwargs(r: Rec) -> dict:
    """Keyword arguments of confluent-kafka's ``Producer.produce`` for ``r`` (unset fields left out)."""
    kwargs = {"value": r.value, "key": r.key}
    if r.headers:
        kwargs["headers"] = list(r.headers)
    if r.partition is not None:
        kwargs["partition"] = r.partition
    if r.timestamp is not None:
        kwargs["timestamp"] = r.timestamp
    return kwargs


def from_confluent(m) -> Fetched:
    """A confluent-kafka Message as :class:`Fetched`."""
    return Fetched(m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1])


# --------------------------------------------------------------------------- the scenarios


@dataclass(frozen=True)
class Scenario:
    """``id`` (stable, used in results), ``title`` (docs), ``apis`` (Kafka API keys the broker
    must serve), ``run(ctx, driver)``."""

    id: str
    title: str
    apis: tuple
    run: Callable = field(repr=False, compare=False)


def metadata(ctx: Context, d) -> None:
    topic = ctx.topic(3)
    md = d.metadata(topic)
    assert sorted(md.partitions) == [0, 1, 2], f"partitions of {topic}: {sorted(md.partitions)}"
    assert md.brokers, "no broker in the metadata"
    assert all(leader in md.brokers for leader in md.partitions.values()), f"leaders {md.partitions} not in {md.brokers}"


def _produce_scenario(codec: str) -> Callable:
    def run(ctx: Context, d) -> None:
        topic = ctx.topic(3)
        pad = b"-" + b"x" * 100  # compressible, so that every codec really compresses
        keyed = [Rec(b"keyed-%d" % i + pad, b"k%d" % (i % 5), (("h", b"keyed"), ("trace", b"%d" % (i % 5))))
                 for i in range(10)]
        unkeyed = [Rec(b"unkeyed-%d" % i + pad, None, (("h", b"unkeyed"),)) for i in range(10)]
        d.produce(topic, keyed, codec=codec)
        d.produce(topic, unkeyed, codec=codec)
        got = d.fetch(topic, {p: 0 for p in range(3)}, 20)
        sent = sorted(((r.key or b"", r.value, r.headers) for r in keyed + unkeyed), key=repr)
        read = sorted(((f.key or b"", f.value, f.headers) for f in got), key=repr)
        assert read == sent, f"records read back differ from those sent: {read} != {sent}"
        assert all(f.key is None for f in got if f.value.startswith(b"unkeyed")), "a null key came back non-null"
        by_key = {}
        for f in got:
            if f.key is not None:
                by_key.setdefault(f.key, set()).add(f.partition)
        assert all(len(ps) == 1 for ps in by_key.values()), f"one key in several partitions: {by_key}"
        for p in range(3):
            offsets = sorted(f.offset for f in got if f.partition == p)
            assert offsets == list(range(len(offsets))), f"partition {p} offsets {offsets} are not 0..n-1"
        assert len(ctx.read_all(topic)) == 20, "the reference consumer does not see exactly the 20 records"
        stored = {h.codec for p in range(3) for h in ctx.batches(topic, p)}
        assert stored == {codec}, f"the broker stores batches compressed with {stored}, expected {codec}"

    return run


def fetch_from_offset(ctx: Context, d) -> None:
    topic = ctx.topic(1)
    ctx.produce(topic, [Rec(b"v%d" % i, partition=0) for i in range(20)])
    got = d.fetch(topic, {0: 7}, 13)
    assert [(f.offset, f.value) for f in got] == [(i, b"v%d" % i) for i in range(7, 20)]


def fetch_by_timestamp(ctx: Context, d) -> None:
    # BASE_TS is in 2023: with the default retention.ms (7 days) the broker's next retention
    # check deletes these records (Kafka's UnifiedLog does too), racing the fetch below.
    topic = ctx.topic(1, config={"retention.ms": "-1"})
    ctx.produce(topic, [Rec(b"v%d" % i, partition=0, timestamp=BASE_TS + i * 1000) for i in range(10)])
    found = d.offsets_for_times(topic, {0: BASE_TS + 4500})
    assert found == {0: 5}, f"first offset with timestamp >= ts: {found}, expected {{0: 5}}"
    assert d.offsets_for_times(topic, {0: BASE_TS + 99_000}) == {0: None}, "a timestamp after the last record"
    got = d.fetch(topic, {0: 5}, 5)
    assert [(f.offset, f.timestamp) for f in got] == [(i, BASE_TS + i * 1000) for i in range(5, 10)]


def group_commit(ctx: Context, d) -> None:
    topic, group = ctx.topic(2), f"conformance-{uuid.uuid4().hex[:8]}"
    first = [Rec(b"a%d" % i, partition=i % 2) for i in range(10)]
    ctx.produce(topic, first)
    got = d.group_consume(topic, group, 10)
    assert sorted(f.value for f in got) == sorted(r.value for r in first)
    assert ctx.committed(topic, group, 2) == {0: 5, 1: 5}, "committed offsets after the first run"
    second = [Rec(b"b%d" % i, partition=i % 2) for i in range(4)]
    ctx.produce(topic, second)
    resumed = d.group_consume(topic, group, 4)
    assert sorted(f.value for f in resumed) == sorted(r.value for r in second), "a new member must resume at the commit"
    assert ctx.committed(topic, group, 2) == {0: 7, 1: 7}, "committed offsets after the second run"


def group_rebalance(ctx: Context, d) -> None:
    topic, group = ctx.topic(4), f"conformance-{uuid.uuid4().hex[:8]}"
    everything = {0, 1, 2, 3}
    with d.group_member(topic, group) as a:
        wait_until(lambda: a.assignment() == everything, "the first member to own all 4 partitions")
        with d.group_member(topic, group) as b:
            def split() -> bool:
                pa, pb = a.assignment(), b.assignment()
                return bool(pa) and bool(pb) and not (pa & pb) and (pa | pb) == everything
            wait_until(split, "a rebalance that splits the partitions between the two members")
        wait_until(lambda: a.assignment() == everything, "the first member to get all partitions back after the second left")


def produce_idempotent(ctx: Context, d) -> None:
    topic = ctx.topic(1)
    records = [Rec(b"v%d" % i, b"k", partition=0) for i in range(50)]
    d.produce(topic, records, idempotent=True)
    assert [f.value for f in ctx.read_all(topic)] == [r.value for r in records], "lost, duplicated or reordered"
    assert all(h.producer_id >= 0 for h in ctx.batches(topic, 0)), "a batch without a producer id (not idempotent)"


def produce_transactional(ctx: Context, d) -> None:
    topic = ctx.topic(1)
    d.transactions(topic, [([b"a1", b"a2"], True), ([b"b1"], False), ([b"c1"], True)])
    committed = [f.value for f in ctx.read_all(topic, "read_committed")]
    assert committed == [b"a1", b"a2", b"c1"], f"read_committed sees {committed}"
    everything = [f.value for f in ctx.read_all(topic)]
    assert everything == [b"a1", b"a2", b"b1", b"c1"], f"read_uncommitted sees {everything}"
    headers = ctx.batches(topic, 0)
    assert all(h.transactional for h in headers), "a batch of the transactional producer lacks the flag"
    assert sum(h.control for h in headers) == 3, "expected 3 transaction markers (commit, abort, commit)"



def read_committed(ctx: Context, d) -> None:
    topic = ctx.topic(1)
    ctx.transactions(topic, [([b"a1"], True), ([b"b1", b"b2"], False), ([b"c1"], True)])
    got = d.fetch(topic, {0: 0}, 2, isolation="read_committed")
    assert [f.value for f in got] == [b"a1", b"c1"], "read_committed must skip the aborted records"
    assert [f.value for f in d.fetch(topic, {0: 0}, 4)] == [b"a1", b"b1", b"b2", b"c1"], "read_uncommitted sees all"


_DATA = (C.PRODUCE, C.FETCH, C.LIST_OFFSETS, C.METADATA)
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("metadata", "Metadata: brokers, partitions and leaders of a topic", (C.METADATA,), metadata),
    *(Scenario(f"produce.{codec}", f"Produce keyed and unkeyed records with headers, {codec}; fetch them back",
               _DATA, _produce_scenario(codec)) for codec in CODECS),
    Scenario("fetch.offset", "Fetch from a given offset", _DATA, fetch_from_offset),
    Scenario("fetch.timestamp", "Offset for a timestamp (ListOffsets), fetch from it", _DATA, fetch_by_timestamp),
    Scenario("group.commit", "Join a group, consume, commit; a new member resumes at the commit",
             _DATA + C.GROUP_APIS, group_commit),
    Scenario("group.rebalance", "Second member joins (partitions split) and leaves (all back)",
             _DATA + C.GROUP_APIS, group_rebalance),
    Scenario("produce.idempotent", "Idempotent producer (KIP-98): in order, no duplicates",
             _DATA + C.IDEMPOTENCE_APIS, produce_idempotent),
    Scenario("produce.transactional", "Transactional producer: commit, abort, commit",
             _DATA + C.TRANSACTION_APIS, produce_transactional),
    Scenario("read_committed", "read_committed consumer skips aborted transactions",
             _DATA + C.TRANSACTION_APIS, read_committed),
)
