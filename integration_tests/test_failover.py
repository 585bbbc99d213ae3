"""Failover on a three-node cluster (Apache Kafka's, and our replicated embedded one): the leader of
the partitions in use is killed (SIGKILL) and restarted, twice (``KILLS``, ``EMBEDDED_KILLS``), while a streaming query runs; afterwards nothing is lost
and nothing is duplicated.

Each scenario: a feeder thread produces numbered records (idempotent, ``acks=all``) into the
query's source topic for as long as the kills last; the query copies them to its sink; after
the last restart the feeder stops, the test waits (bounded) until the sink holds every fed
record, then compares exactly. A query that fails is restarted from its checkpoint (as an
operator would); its error is kept and must name a Kafka cause. Between kills the test waits
until the restarted node is back in every partition's ISR (min.insync.replicas=2 would
otherwise refuse acks=all writes after a second kill), and until the query made progress, so
every kill lands on a running query.

- (a) streaming read with ``maxOffsetsPerTrigger`` from the cluster into ``foreachBatch``;
- (b) streaming write with ``kafka.acks=all`` from the embedded broker into the cluster;
- (c) the exactly-once SQL sink (``pykafka-sql``) reading from the cluster;
- (d) an exactly-once Kafka write (``deliveryGuarantee=exactly-once``) into the cluster,
  checked with a read_committed consumer;
- (e) Kafka's Java client (``RideThrough.java``): an idempotent ``acks=all`` producer and an assigned
  consumer ride through two leader kills; every acknowledged record read back once, in order;
- (f) after a leader change, a follower answers a stale leader epoch with FENCED_LEADER_EPOCH (raw ListOffsets).

Every scenario runs on Apache Kafka's three-node cluster and on the replicated embedded cluster
(``failover_cluster``, the same assertions; on ours (b), (c) and (d) with :data:`EMBEDDED_KILLS` kills for
CI time). On ours (d) runs on transactions whose coordinator moves with its ``__transaction_state``
partition (docs/replication.md).
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from integration_tests import clusters
from integration_tests.helpers import consume_all, read_stream

pytestmark = pytest.mark.slow

KILLS = 2
"""Leader kills of a scenario on Apache Kafka's cluster (was 5: 75-90 s a scenario there, about a
quarter of the whole suite's Apache Kafka time; then 3, 30-53 s a scenario, 2026-11-26; two still move
the leadership twice and restart each killed JVM while the query runs, as on the embedded cluster)."""
EMBEDDED_KILLS = 2
"""Kills of the streaming-write and SQL-sink scenarios on the embedded cluster (CI time: 23 s and 34 s
with three kills there, 30-37 s with five)."""
STEP_TIMEOUT_S = 60.0
"""Bound of each wait (new leader, node back in the ISR, query progress, sink complete)."""
FEED_INTERVAL_S = 0.05
"""Pause between two fed records: about 20 records/s, below what a query with maxOffsetsPerTrigger=40 drains."""


def _wait(condition, what: str, timeout_s: float = STEP_TIMEOUT_S, poll_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout_s:g} s")
        time.sleep(poll_s)


def _metadata(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)


def _leader(bootstrap: str, topic: str, partition: int = 0) -> int:
    p = _metadata(bootstrap).topics[topic].partitions.get(partition)
    return p.leader if p is not None and p.error is None else -1


def _every_isr_full(bootstrap: str, nodes: int = 3) -> bool:
    """Every partition of every topic (the internal ones included) has all replicas in sync."""
    md = _metadata(bootstrap)
    return len(md.brokers) == nodes and all(
        p.leader >= 0 and len(p.isrs) == len(p.replicas)
        for t in md.topics.values() for p in t.partitions.values())


class Feeder(threading.Thread):
    """Produce ``b"<n>"`` (n = 0, 1, ...) round-robin to the partitions of ``topic`` until
    :meth:`finish`; ``fed`` are the values the cluster acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        super().__init__(daemon=True, name=f"feeder-{topic}")
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5})
        self.topic, self.partitions = topic, partitions
        self.fed: list[bytes] = []
        self.errors: list = []
        self._stop_feeding = threading.Event()

    def run(self) -> None:
        n = 0
        while not self._stop_feeding.is_set():
            self.producer.produce(self.topic, value=b"%d" % n, partition=n % self.partitions, on_delivery=self._report)
            self.producer.poll(0)
            n += 1
            self._stop_feeding.wait(FEED_INTERVAL_S)

    def _report(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.fed.append(msg.value())

    def finish(self) -> list[bytes]:
        self._stop_feeding.set()
        self.join(STEP_TIMEOUT_S)
        assert self.producer.flush(STEP_TIMEOUT_S) == 0 and self.errors == [], f"feeding failed: {self.errors}"
        return self.fed


class Supervised:
    """A streaming query started by ``start()`` (a callable returning a StreamingQuery) and
    restarted from its checkpoint when it fails; ``errors`` keeps each failure's message."""

    def __init__(self, start):
        self._start = start
        self.query = start()
        self.errors: list[str] = []

    def check(self) -> None:
        """Restart the query if it died (its error kept)."""
        if not self.query.isActive:
            error = self.query.exception()
            assert error is not None, "the query stopped without an error"
            self.errors.append(str(error.desc if hasattr(error, "desc") else error)[:2000])
            assert len(self.errors) <= KILLS * 2, f"the query keeps failing: {self.errors[-1]}"
            self.query = self._start()

    def stop(self) -> None:
        self.query.stop()


def _progressed(query: Supervised, count) -> callable:
    """A condition: the sink's ``count()`` grew past what it was now (restarting a dead query)."""
    before = count()

    def grew() -> bool:
        query.check()
        return count() > before

    return grew


def _run_with_kills(kafka_cluster, source_bootstrap: str, source: str, start_query, sink_count,
                    kills: int = KILLS) -> tuple[list, list]:
    """Feed ``source``, start the query, kill the leader of ``kafka_cluster``'s partition 0 of
    the topic in use ``kills`` times; return (fed values, query errors) once the sink has them all."""
    kafka, bootstrap = kafka_cluster.kafka, kafka_cluster.bootstrap
    watched = source if source_bootstrap == bootstrap else None
    feeder = Feeder(source_bootstrap, source, 2)
    feeder.start()
    query = Supervised(start_query)
    t0 = time.monotonic()

    def mark(what: str) -> None:
        print(f"failover {time.monotonic() - t0:6.1f} s: {what}", flush=True)  # shown with -s / on failure

    try:
        for i in range(kills):
            _wait(_progressed(query, sink_count), "the query wrote to its sink")
            topic = watched or start_query.sink_topic
            # a 1-tuple: node id 0 (the embedded cluster's first broker) is a leader too, though falsy
            leader, = _wait(lambda: (lambda n: (n,) if n >= 0 else None)(_leader(bootstrap, topic)),
                            f"a leader for {topic}-0")
            mark(f"kill {i + 1}: node {leader} (leader of {topic}-0)")
            kafka.kill(leader)
            _wait(lambda: _leader(bootstrap, topic) not in (-1, leader), f"a new leader for {topic}-0")
            mark("new leader elected")
            kafka.restart(leader)
            mark(f"node {leader} restarted")
            _wait(lambda: _every_isr_full(bootstrap), f"node {leader} back in every ISR")
            mark("every ISR full")
        fed = feeder.finish()
        _wait(lambda: (query.check(), sink_count() >= len(fed))[1], f"the sink holding all {len(fed)} fed records",
              timeout_s=2 * STEP_TIMEOUT_S)
        mark(f"sink complete: {len(fed)} records, query errors: {query.errors}")
        return fed, query.errors
    finally:
        feeder._stop_feeding.set()
        query.stop()


class BatchRows:
    """``foreachBatch`` keeping rows ``(partition, offset, value)`` by batch id (a batch rerun
    after a restart replaces its earlier rows, as an idempotent sink would)."""

    def __init__(self):
        self.by_batch: dict[int, list[tuple]] = {}
        self._lock = threading.Lock()

    def __call__(self, df, batch_id):
        rows = [(r.partition, r.offset, r.value) for r in df.select("partition", "offset", "value").collect()]
        with self._lock:
            self.by_batch[batch_id] = rows

    @property
    def rows(self) -> list[tuple]:
        with self._lock:
            return [r for b in self.by_batch.values() for r in b]


def _kills(cluster) -> int:
    """Leader kills of a scenario on ``cluster``: :data:`KILLS` on Apache Kafka's, :data:`EMBEDDED_KILLS` on ours."""
    return EMBEDDED_KILLS if cluster.name == "embedded-cluster" else KILLS


def _assert_kafka_causes(errors: list[str]) -> None:
    """A query that failed during a leader change must name a Kafka cause, and never claim data
    loss (a leader change loses nothing with acks=all and min.insync.replicas=2)."""
    for e in errors:
        assert "DataLossError" not in e and "failOnDataLoss" not in e, e
        assert any(word in e for word in ("Kafka", "kafka", "Broker", "broker", "leader", "LEADER", "timed out")), e


@pytest.fixture(scope="module", params=["apache-kafka-cluster", "embedded-cluster"])
def failover_cluster(request, tmp_path_factory):
    """The three-node cluster whose leaders are killed: Apache Kafka's, or the replicated embedded cluster
    (docs/replication.md; the same scenarios must give the same outcomes)."""
    if request.param == "apache-kafka-cluster":
        yield request.getfixturevalue("apache_kafka_cluster")
        return
    with clusters.start("embedded-cluster", tmp_path_factory.mktemp("replicated")) as cluster:
        yield cluster


def test_streaming_read_with_max_offsets_per_trigger_survives_leader_kills(spark, failover_cluster, tmp_path, read_path):
    cluster = failover_cluster
    if read_path == "consumer" and cluster.name != "embedded-cluster":
        # the fallback path's leader changes are librdkafka's own; ours (the columnar fetch client) is killed under
        # on both clusters. The consumer path on Apache Kafka took 35-47 s of the suite and passed in every run.
        pytest.skip("the consumer read path's failover runs on the embedded cluster only (time budget)")
    topic = cluster.create_topic(2)
    sink = BatchRows()

    def start():
        return (read_stream(spark, cluster.bootstrap, subscribe=topic, startingOffsets="earliest",
                            maxOffsetsPerTrigger="40")
                .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "chk")).start())

    fed, errors = _run_with_kills(cluster, cluster.bootstrap, topic, start, lambda: len(sink.rows))
    rows = sink.rows
    assert len({(p, o) for p, o, _ in rows}) == len(rows), "a record was read twice"
    assert sorted(v for *_, v in rows) == sorted(fed)
    assert max(len(b) for b in sink.by_batch.values()) <= 40
    _assert_kafka_causes(errors)


def _copy_into(spark, source_bootstrap, source, cluster, sink_topic, checkpoint, **options):
    def start():
        return (read_stream(spark, source_bootstrap, subscribe=source, startingOffsets="earliest",
                            maxOffsetsPerTrigger="40")
                .select("value").writeStream.format("pykafka").option("kafka.bootstrap.servers", cluster.bootstrap)
                .option("topic", sink_topic).option("checkpointLocation", checkpoint).options(**options).start())

    start.sink_topic = sink_topic
    return start


def _count(bootstrap, topic, isolation="read_uncommitted") -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4().hex}",
                         "isolation.level": isolation})
    try:
        total = 0
        for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


def test_streaming_write_with_acks_all_survives_leader_kills(spark, failover_cluster, embedded_cluster, tmp_path):
    cluster = failover_cluster
    source, sink_topic = embedded_cluster.create_topic(2), cluster.create_topic(2)
    start = _copy_into(spark, embedded_cluster.bootstrap, source, cluster, sink_topic, str(tmp_path / "chk"),
                       **{"kafka.acks": "all"})
    fed, errors = _run_with_kills(cluster, embedded_cluster.bootstrap, source, start,
                                  lambda: _count(cluster.bootstrap, sink_topic), kills=_kills(cluster))
    written = [m.value() for m in consume_all(cluster.bootstrap, sink_topic)]
    assert sorted(written) == sorted(fed), f"lost {len(set(fed) - set(written))}, duplicated {len(written) - len(set(written))}"
    _assert_kafka_causes(errors)


def test_exactly_once_sql_sink_survives_leader_kills(spark, failover_cluster, tmp_path):
    import sqlalchemy as sa

    cluster = failover_cluster
    topic = cluster.create_topic(2)
    url = f"sqlite:///{tmp_path}/sink.db"
    engine = sa.create_engine(url)

    def start():
        return (read_stream(spark, cluster.bootstrap, subscribe=topic, startingOffsets="earliest",
                            maxOffsetsPerTrigger="40")
                .selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS v")
                .writeStream.format("pykafka-sql").option("url", url).option("table", "events")
                .option("checkpointLocation", str(tmp_path / "chk")).start())

    def stored():
        try:
            with engine.connect() as conn:
                return conn.exec_driver_sql('SELECT "partition", "offset", v FROM events').fetchall()
        except sa.exc.OperationalError:  # the sink creates its table with the first batch
            return []

    try:
        fed, errors = _run_with_kills(cluster, cluster.bootstrap, topic, start, lambda: len(stored()),
                                      kills=_kills(cluster))
        rows = stored()
    finally:
        engine.dispose()
    assert len({(p, o) for p, o, _ in rows}) == len(rows), "a record was stored twice"
    assert sorted(v.encode() for *_, v in rows) == sorted(fed)
    _assert_kafka_causes(errors)


def test_exactly_once_kafka_write_survives_leader_kills(spark, failover_cluster, embedded_cluster, tmp_path):
    cluster = failover_cluster
    source, sink_topic = embedded_cluster.create_topic(2), cluster.create_topic(2)
    start = _copy_into(spark, embedded_cluster.bootstrap, source, cluster, sink_topic, str(tmp_path / "chk"),
                       deliveryGuarantee="exactly-once")

    def committed() -> int:
        return len(consume_all(cluster.bootstrap, sink_topic, "read_committed"))

    fed, errors = _run_with_kills(cluster, embedded_cluster.bootstrap, source, start, committed,
                                  kills=_kills(cluster))
    written = [m.value() for m in consume_all(cluster.bootstrap, sink_topic, "read_committed")]
    assert sorted(written) == sorted(fed), f"lost {len(set(fed) - set(written))}, duplicated {len(written) - len(set(written))}"
    _assert_kafka_causes(errors)


JAVA_KILLS = 2
"""Leader kills under Kafka's Java client (each kill about 5-10 s on the embedded cluster)."""


def test_java_client_rides_through_leader_kills(failover_cluster, tmp_path):
    """Kafka's Java client (kafka-clients of the ``apache-kafka`` backend's version, ``RideThrough.java``):
    an idempotent ``acks=all`` producer and an assigned consumer in one JVM keep working while the
    leader of partition 0 is SIGKILLed and restarted; every acknowledged record is read back exactly
    once, at the offset its acknowledgement named, in send order within its partition, offsets
    contiguous from 0; no delivery fails."""
    import subprocess

    from integration_tests.conformance.drivers import java_client

    why = java_client.unavailable()
    if why:
        pytest.skip(f"Kafka's Java client cannot run here: {why}")
    cluster = failover_cluster
    cp = java_client.classpath(java_client.SOURCE.with_name("RideThrough.java"))
    topic = cluster.create_topic(2)
    lines: list[str] = []
    stderr = open(tmp_path / "java.stderr", "w")
    proc = subprocess.Popen(["java", *java_client.JVM, "-cp", cp, "RideThrough", cluster.bootstrap, topic, "2", "20"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    kafka, t0 = cluster.kafka, time.monotonic()

    def count(kind: str) -> int:
        return sum(1 for line in list(lines) if line.startswith(kind + " "))

    try:
        for i in range(JAVA_KILLS):
            acked, read = count("ack"), count("read")
            _wait(lambda: count("ack") > acked + 20 and count("read") > read + 20,
                  "the Java producer and consumer made progress")
            leader, = _wait(lambda: (lambda n: (n,) if n >= 0 else None)(_leader(cluster.bootstrap, topic)),
                            f"a leader for {topic}-0")
            kafka.kill(leader)
            _wait(lambda: _leader(cluster.bootstrap, topic) not in (-1, leader), f"a new leader for {topic}-0")
            kafka.restart(leader)
            _wait(lambda: _every_isr_full(cluster.bootstrap), f"node {leader} back in every ISR")
            print(f"java ride-through {time.monotonic() - t0:6.1f} s: kill {i + 1} of node {leader} done", flush=True)
        acked = count("ack")
        _wait(lambda: count("ack") > acked + 20, "the Java producer made progress after the last restart")
        proc.stdin.close()  # the producer stops, flushes; the consumer reads up to the end offsets
        # RideThrough bounds its own wait for the end offsets (120 s)
        assert proc.wait(2 * STEP_TIMEOUT_S + 30) == 0, f"the Java client failed: {[x for x in lines if x.startswith('error')]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.close()
        reader.join(10)
    out = [line.split() for line in lines if line.strip()]
    assert out and out[-1][0] == "done", (out[-5:], (tmp_path / "java.stderr").read_text()[-2000:])
    assert [line for line in lines if line.startswith("nack")] == [], "a delivery failed"
    acks = {(int(p), int(o)): v for kind, p, o, v in (x for x in out if x[0] == "ack")}
    reads = [(int(p), int(o), v) for kind, p, o, v in (x for x in out if x[0] == "read")]
    assert len({(p, o) for p, o, _ in reads}) == len(reads), "a record was read twice"
    assert {(p, o): v for p, o, v in reads} == acks, "the records read are not the acknowledged ones"
    for partition in (0, 1):
        mine = [(o, int(v)) for p, o, v in reads if p == partition]
        assert [o for o, _ in mine] == list(range(len(mine))), f"offsets of partition {partition} not contiguous"
        assert [v for _, v in mine] == sorted(v for _, v in mine), f"partition {partition} out of send order"
    print(f"java ride-through on {cluster.name}: {len(acks)} acknowledged, {len(reads)} read, "
          f"{time.monotonic() - t0:.1f} s", flush=True)


def _partition_state(cluster, topic: str) -> tuple[int, int, list[int]]:
    """(leader, leader epoch, replicas) of ``topic``-0 from a raw Metadata v12 (confluent-kafka hides the epoch)."""
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse

    from integration_tests.clusters import send_request

    response = send_request(cluster.bootstrap, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=topic),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), MetadataResponse)
    p = [p for t in response.topics for p in t.partitions if p.partition_index == 0][0]
    return int(p.leader_id), int(p.leader_epoch), [int(r) for r in p.replica_nodes]


def _list_offsets_error(address: str, topic: str, current_leader_epoch: int) -> int:
    """Error code of a ListOffsets v5 LATEST for ``topic``-0 sent to the broker at ``address``."""
    from kio.schema.list_offsets.v5.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
    from kio.schema.list_offsets.v5.response import ListOffsetsResponse

    from integration_tests.clusters import send_request

    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(name=topic, partitions=(
        ListOffsetsPartition(partition_index=0, current_leader_epoch=current_leader_epoch, timestamp=-1),)),))
    response = send_request(address, request, ListOffsetsResponse)
    return int([p for t in response.topics for p in t.partitions][0].error_code)


def test_a_follower_checks_the_leader_epoch_before_the_leadership(failover_cluster):
    """After a leader change, a client still holding the old leader epoch that asks a follower (e.g. the
    restarted old leader) learns FENCED_LEADER_EPOCH, not NOT_LEADER_OR_FOLLOWER; a newer epoch is
    UNKNOWN_LEADER_EPOCH; the current one NOT_LEADER_OR_FOLLOWER (Kafka's ``Partition.getLocalLog``: the
    epoch is checked first, KIP-320). Found comparing the clients' retries on both clusters."""
    cluster = failover_cluster
    topic = cluster.create_topic(1)
    _wait(lambda: _every_isr_full(cluster.bootstrap), "a full ISR")
    leader, epoch, _ = _partition_state(cluster, topic)
    cluster.kafka.kill(leader)
    _wait(lambda: _leader(cluster.bootstrap, topic) not in (-1, leader), f"a new leader for {topic}-0")
    cluster.kafka.restart(leader)
    _wait(lambda: _every_isr_full(cluster.bootstrap), f"node {leader} back in every ISR")
    new_leader, new_epoch, _ = _partition_state(cluster, topic)
    assert new_epoch > epoch and new_leader != leader
    follower = cluster.kafka.address(leader)  # the old leader, now a follower of the new epoch
    codes = {e: _list_offsets_error(follower, topic, e) for e in (new_epoch - 1, new_epoch, new_epoch + 1, -1)}
    assert codes == {new_epoch - 1: 74, new_epoch: 6, new_epoch + 1: 75, -1: 6}, codes  # FENCED, NOT_LEADER, UNKNOWN
    assert _list_offsets_error(cluster.kafka.address(new_leader), topic, new_epoch) == 0
    assert _list_offsets_error(cluster.kafka.address(new_leader), topic, new_epoch - 1) == 74
