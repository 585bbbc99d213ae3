"""Exactly-once writes against the real embedded broker, checked with independent confluent-kafka clients.

Task-level tests call :func:`pyspark_kafka.write.write_transactional` directly (what each Spark
task runs, with the scope Spark's TaskContext would give); Spark tests go through
``df.write`` / ``df.writeStream`` with ``deliveryGuarantee=exactly-once``.
"""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from support.eos_check import committed_marker, end_offsets, read_topic, values
from support.waiting import wait_until
from pyspark.sql.types import StringType, StructField, StructType
from pyspark_kafka.errors import DeliveryError, RecordError
from pyspark_kafka.write.transactions import (
    FencedError,
    MarkerNotStoredError,
    Fingerprint,
    Marker,
    ReplayMismatchError,
    TaskScope,
    TaskTransaction,
    parse_marker,
)
from pyspark_kafka.write import WriteSpec, write_transactional

KEY_VALUE = StructType([StructField("key", StringType()), StructField("value", StringType())])
TOPIC_VALUE = StructType([StructField("topic", StringType()), StructField("value", StringType())])


def spec_for(bootstrap, schema=KEY_VALUE, **options) -> WriteSpec:
    return WriteSpec.from_options({"kafka.bootstrap.servers": bootstrap, "deliveryGuarantee": "exactly-once",
                                   **options}, schema)


def rows(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array([f"k{i}" for i in range(start, start + n)]),
                            pa.array([f"v{i}" for i in range(start, start + n)])], ["key", "value"])


def expected(start: int, n: int) -> list[bytes]:
    return sorted(f"v{i}".encode() for i in range(start, start + n))


def test_a_task_commits_its_rows_and_its_marker_together(bootstrap, make_topic):
    topic = make_topic(partitions=2)
    spec = spec_for(bootstrap, topic=topic)
    message = write_transactional(spec, TaskScope("t1-q-0", 0), [rows(0, 30), rows(30, 20)])
    assert (message.transactional_id, message.skipped, sum(message.counts.values())) == ("t1-q-0", False, 50)
    assert values(bootstrap, topic) == expected(0, 50)
    marker = Marker(0, Fingerprint(50, sum(len(f"k{i}") for i in range(50)), sum(len(f"v{i}") for i in range(50))))
    assert committed_marker(bootstrap, "t1-q-0") == [(topic, 0, 1, marker.metadata())]


def test_a_replayed_batch_writes_nothing_and_a_later_one_writes_once(bootstrap, make_topic):
    topic = make_topic(partitions=2)
    spec = spec_for(bootstrap, topic=topic)
    write_transactional(spec, TaskScope("t2-q-0", 4), [rows(0, 40)])
    high = end_offsets(bootstrap, topic, "read_uncommitted")
    again = write_transactional(spec, TaskScope("t2-q-0", 4), [rows(0, 40)])
    assert (again.skipped, again.counts) == (True, {})
    assert end_offsets(bootstrap, topic, "read_uncommitted") == high  # not even an aborted record was sent
    write_transactional(spec, TaskScope("t2-q-0", 5), [rows(40, 10)])
    assert values(bootstrap, topic) == expected(0, 50)
    assert committed_marker(bootstrap, "t2-q-0")[0][2] == 6


def test_a_zombie_of_an_older_batch_writes_nothing(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    spec = spec_for(bootstrap, topic=topic)
    write_transactional(spec, TaskScope("t3-q-1", 7), [rows(0, 5)])
    late = write_transactional(spec, TaskScope("t3-q-1", 6), [rows(100, 5)])  # batch 6's attempt arrives late
    assert late.skipped
    assert values(bootstrap, topic) == expected(0, 5)


def test_a_replay_with_different_rows_fails_and_writes_nothing(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    spec = spec_for(bootstrap, topic=topic)
    write_transactional(spec, TaskScope("t4-q-0", 0), [rows(0, 10)])
    with pytest.raises(ReplayMismatchError, match=r"different input \(10 rows.*\) than this replay has \(6 rows"):
        write_transactional(spec, TaskScope("t4-q-0", 0), [rows(0, 6)])
    assert values(bootstrap, topic, "read_uncommitted") == expected(0, 10)


def test_a_failed_attempt_is_aborted_and_its_retry_writes_once(bootstrap, make_topic):
    topic = make_topic(partitions=2)
    spec = spec_for(bootstrap, topic=topic)

    def failing():
        yield rows(0, 20)
        yield rows(20, 1)
        wait_until(lambda: sum(end_offsets(bootstrap, topic, "read_uncommitted").values()) >= 21)  # in the log
        raise RuntimeError("executor lost its input")

    with pytest.raises(RuntimeError, match="executor lost its input"):
        write_transactional(spec, TaskScope("t5-q-0", 0), failing())
    assert values(bootstrap, topic) == []
    assert values(bootstrap, topic, "read_uncommitted") == expected(0, 21)  # written, then aborted
    assert [o for *_, o, _ in committed_marker(bootstrap, "t5-q-0")] == [0]  # only the storage probe: no marker
    write_transactional(spec, TaskScope("t5-q-0", 0), [rows(0, 20)])
    assert values(bootstrap, topic) == expected(0, 20)


def test_a_bad_row_aborts_the_transaction(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    spec = spec_for(bootstrap, TOPIC_VALUE)
    good = pa.record_batch([pa.array([topic] * 3), pa.array(["a", "b", "c"])], ["topic", "value"])
    bad = pa.record_batch([pa.array([topic, None]), pa.array(["d", "e"])], ["topic", "value"])
    def batches():
        yield good
        wait_until(lambda: sum(end_offsets(bootstrap, topic, "read_uncommitted").values()) >= 3)  # in the log
        yield bad

    with pytest.raises(RecordError, match="has a null 'topic'"):
        write_transactional(spec, TaskScope("t6-q-0", 0), batches())
    assert values(bootstrap, topic) == []
    assert values(bootstrap, topic, "read_uncommitted") == [b"a", b"b", b"c"]  # written, then aborted


def test_marker_lives_on_the_first_rows_topic_when_topics_come_from_a_column(bootstrap, make_topic):
    first, second = make_topic(partitions=1), make_topic(partitions=2)
    spec = spec_for(bootstrap, TOPIC_VALUE)
    batch = pa.record_batch([pa.array([first, second, second]), pa.array(["a", "b", "c"])], ["topic", "value"])
    message = write_transactional(spec, TaskScope("t7-q-0", 3), [batch])
    assert sum(message.counts.values()) == 3
    assert [(t, p, o) for t, p, o, _ in committed_marker(bootstrap, "t7-q-0")] == [(first, 0, 4)]
    assert write_transactional(spec, TaskScope("t7-q-0", 3), [batch]).skipped
    assert values(bootstrap, first) == [b"a"] and values(bootstrap, second) == [b"b", b"c"]


def test_a_task_without_rows_opens_no_transaction(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    empty = rows(0, 0)
    message = write_transactional(spec_for(bootstrap, topic=topic), TaskScope("t8-q-0", 0), [empty, empty])
    assert (message.counts, message.skipped) == ({}, False)
    assert committed_marker(bootstrap, "t8-q-0") == []


def test_a_newer_producer_with_the_same_transactional_id_fences_the_old_one(bootstrap, make_topic):
    """Zombie fencing (KIP-98): the old attempt's commit fails; only the new attempt's rows are visible."""
    topic = make_topic(partitions=1)
    spec = spec_for(bootstrap, topic=topic)
    scope = TaskScope("t9-q-0", 0)
    old = TaskTransaction(spec.producer, spec.consumer, scope, topic, spec.timeout_ms)
    try:
        assert old.init() is None
        old.begin()
        for i in range(5):
            old.producer.produce(topic, f"zombie{i}".encode(), partition=0)
        assert old.producer.flush(30) == 0
        write_transactional(spec, scope, [rows(0, 3)])  # the new attempt: init_transactions fences `old`
        with pytest.raises(FencedError, match=r"transactional.id 't9-q-0' was taken over by a newer producer"):
            old.commit(Marker(0))
    finally:
        old.close()
    assert values(bootstrap, topic) == expected(0, 3)
    assert committed_marker(bootstrap, "t9-q-0")[0][2] == 1


def test_an_open_transaction_of_a_killed_attempt_is_aborted_by_the_next_attempt(bootstrap, make_topic):
    """A crashed task leaves its transaction open (read_committed readers wait at the last stable
    offset); the next attempt's init_transactions aborts it at once."""
    topic = make_topic(partitions=1)
    spec = spec_for(bootstrap, topic=topic)
    crashed = Producer({**spec.producer, "transactional.id": "t10-q-0"})
    crashed.init_transactions(30)
    crashed.begin_transaction()
    crashed.produce(topic, b"lost", partition=0)
    assert crashed.flush(30) == 0  # then nothing: no commit, no abort (the producer object is just dropped)
    assert end_offsets(bootstrap, topic, "read_committed") == {0: 0}
    write_transactional(spec, TaskScope("t10-q-0", 0), [rows(0, 2)])
    assert values(bootstrap, topic) == expected(0, 2)
    assert b"lost" in values(bootstrap, topic, "read_uncommitted")
    crashed.purge()
    del crashed


def test_a_task_longer_than_the_transaction_timeout_is_fenced_with_the_fix(tmp_path):
    """The coordinator aborts a transaction older than transaction.timeout.ms and bumps the epoch."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark_kafka.broker import EmbeddedBroker

    config = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
    with EmbeddedBroker(data_dir=tmp_path / "broker", config=config) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("slow", num_partitions=1, replication_factor=1)])["slow"].result(timeout=20)
        del admin  # the FencedError's traceback keeps this frame: it must not keep a client alive
        spec = spec_for(bootstrap, topic="slow", **{"kafka.transaction.timeout.ms": "1000"})

        def slow_input():
            yield rows(0, 2)
            # 2 records + the abort marker the coordinator writes when the transaction times out
            wait_until(lambda: end_offsets(bootstrap, "slow", "read_committed") == {0: 3})
            yield rows(2, 1)

        with pytest.raises(FencedError, match=r"transaction.timeout.ms=1000 ms.*raise kafka.transaction.timeout.ms"):
            write_transactional(spec, TaskScope("t12-q-0", 0), slow_input())
        assert values(bootstrap, "slow") == []
        assert [o for *_, o, _ in committed_marker(bootstrap, "t12-q-0")] == [0]  # only the storage probe


def test_unreachable_cluster_fails_with_the_transactional_id(make_topic):
    spec = WriteSpec.from_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t",
                                   "deliveryGuarantee": "exactly-once", "kafka.transaction.timeout.ms": "3000"},
                                  KEY_VALUE)
    with pytest.raises(DeliveryError, match=r"cannot initialise the transactional producer for transactional.id "
                                            r"'t11-q-0'.*Nothing of this attempt is visible"):
        write_transactional(spec, TaskScope("t11-q-0", 0), [rows(0, 1)])


# -- through Spark -------------------------------------------------------------------------------

def produce_input(bootstrap, topic, partitions, per_partition):
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(per_partition):
        for part in range(partitions):
            p.produce(topic, value=f"{part}:{i}".encode(), key=f"k{i}".encode(), partition=part)
    assert p.flush(30) == 0


def drop_last_commit(checkpoint: str) -> int:
    """Delete the checkpoint's last commit entry: as if the driver died after the tasks committed
    and before Spark recorded the micro-batch as done. Returns the batch id Spark will replay."""
    commits = os.path.join(checkpoint, "commits")
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    for name in (str(last), f".{last}.crc"):
        if os.path.exists(os.path.join(commits, name)):
            os.remove(os.path.join(commits, name))
    return last


@pytest.mark.slow
def test_streaming_query_writes_once_and_a_replayed_micro_batch_adds_nothing(spark, bootstrap, make_topic,
                                                                              checkpoint_dir):
    source, sink = make_topic(partitions=3), make_topic(partitions=2)
    produce_input(bootstrap, source, 3, 40)

    def run():
        query = (spark.readStream.format("pykafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", source).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", "60").option("minPartitions", "3").load()  # a writer task per partition
                 .selectExpr("key", "value")
                 .writeStream.format("pykafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("topic", sink).option("deliveryGuarantee", "exactly-once")
                 .option("transactionalIdPrefix", "eos-test")
                 .option("checkpointLocation", checkpoint_dir).trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(180)
            assert query.exception() is None
            return query.id, [p for p in query.recentProgress if p["numInputRows"] > 0]
        finally:
            query.stop()

    query_id, batches = run()
    assert len(batches) == 2
    want = sorted(f"{p}:{i}".encode() for p in range(3) for i in range(40))
    assert values(bootstrap, sink) == want
    last = batches[-1]["batchId"]
    markers = {p: committed_marker(bootstrap, f"eos-test-{query_id}-{p}") for p in range(3)}
    assert {p: [o for _, _, o, _ in m] for p, m in markers.items()} == {p: [last + 1] for p in range(3)}

    high = end_offsets(bootstrap, sink, "read_uncommitted")
    assert drop_last_commit(checkpoint_dir) == last
    replay_id, replayed = run()
    assert replay_id == query_id and [b["batchId"] for b in replayed] == [last]
    assert end_offsets(bootstrap, sink, "read_uncommitted") == high  # every task found its marker
    assert values(bootstrap, sink) == want


def test_batch_write_with_exactly_once(spark, bootstrap, make_topic):
    topic = make_topic(partitions=2)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(60)], "key string, value string").repartition(3)
    (df.write.format("pykafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .option("deliveryGuarantee", "exactly-once").mode("append").save())
    records = read_topic(bootstrap, topic)
    assert sorted(v for *_, v in records) == expected(0, 60)
    assert not [v for v, n in Counter(v for *_, v in records).items() if n > 1]


# -- brokers that do not store transactional offsets ----------------------------------------------

@pytest.fixture(scope="module")
def mock_cluster():
    """librdkafka's in-process mock cluster (3 brokers): it answers TxnOffsetCommit with success
    and never stores the offsets. Lives as long as the Producer that created it."""
    creator = Producer({"test.mock.num.brokers": 3})
    brokers = creator.list_topics(timeout=10).brokers.values()
    yield ",".join(f"{b.host}:{b.port}" for b in brokers)
    creator.flush(5)
    del creator


def test_brokers_that_do_not_store_transactional_offsets_are_refused_before_any_write(mock_cluster):
    spec = spec_for(mock_cluster, topic="mock-out")
    creator = Producer({"bootstrap.servers": mock_cluster})  # the mock creates topics on first use
    creator.produce("mock-out", b"create")
    assert creator.flush(10) == 0
    with pytest.raises(MarkerNotStoredError, match=r"(?s)brokers at 127.0.0.1:\d+.* do not.*TxnOffsetCommit"
                                                   r".*return offset -1001.*written twice.*Nothing of this task "
                                                   r"was written.*deliveryGuarantee=at-least-once"):
        write_transactional(spec, TaskScope("mock-q-0", 0), [rows(0, 5)])
    # not even an aborted record: nothing was produced
    assert [v for v in values(mock_cluster, "mock-out", "read_uncommitted") if v != b"create"] == []
    with pytest.raises(MarkerNotStoredError):  # a replay (a retried task) is refused again
        write_transactional(spec, TaskScope("mock-q-1", 0), [rows(0, 5)])


def test_marker_storage_is_checked_once_per_query_in_a_process(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    spec = spec_for(bootstrap, topic=topic)

    def failing():
        yield rows(0, 2)
        raise RuntimeError("executor lost its input")

    write_transactional(spec, TaskScope("t13-q-0", 0), [rows(0, 3)])  # the query's first write: probed
    with pytest.raises(RuntimeError, match="executor lost its input"):
        write_transactional(spec, TaskScope("t13-q-1", 0), failing())  # same query: not probed again
    assert committed_marker(bootstrap, "t13-q-1") == []
    with pytest.raises(RuntimeError, match="executor lost its input"):
        write_transactional(spec, TaskScope("t13-r-0", 0), failing())  # another query: probed
    [(_, _, offset, metadata)] = committed_marker(bootstrap, "t13-r-0")
    assert offset == 0 and parse_marker(offset, metadata) is None and '"probe"' in metadata  # reads as "no marker"
    assert values(bootstrap, topic) == expected(0, 3)
