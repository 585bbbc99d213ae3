"""Transactions on the embedded broker (KIP-98) with confluent-kafka, checked with independent readers:
commit / abort visibility under read_committed and read_uncommitted, the last stable offset, fencing
by a second producer with the same transactional.id, the transaction timeout, offsets committed in
a transaction, DescribeTransactions / ListTransactions, and kafka-python reading the same results."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest

from support.topics import create_topic
from pyspark_kafka.broker import EmbeddedBroker
from support.records import read_all, values
from support.wire import WireClient
from support.transactions import DEADLINE_S, describe, list_offset, new_id, produce_txn, txn_producer
from support.waiting import wait_until

INVALID_TRANSACTION_TIMEOUT = 50
TRANSACTIONAL_ID_NOT_FOUND = 105


def test_commit_is_visible_abort_is_not(bootstrap, make_topic):
    topic = make_topic(partitions=2)
    p = txn_producer(bootstrap)
    committed = [b"c1-%d" % i for i in range(10)]
    aborted = [b"ab-%d" % i for i in range(10)]
    later = [b"c2-%d" % i for i in range(6)]
    produce_txn(p, topic, committed, 2, commit=True)
    produce_txn(p, topic, aborted, 2, commit=False)
    produce_txn(p, topic, later, 2, commit=True)

    rc = read_all(bootstrap, topic, 2, "read_committed")
    assert sorted(values(rc)) == sorted(committed + later)
    ru = read_all(bootstrap, topic, 2, "read_uncommitted")
    assert sorted(values(ru)) == sorted(committed + aborted + later)
    # offsets keep their gaps: one commit/abort marker per partition per transaction
    p0 = [offset for partition, offset, _, _ in ru if partition == 0]
    assert p0 == [*range(0, 5), *range(6, 11), *range(12, 15)]
    assert list_offset(bootstrap, topic, 0, 1) == list_offset(bootstrap, topic, 0, 0) == 16


def test_kafka_python_reads_the_same_committed_records(bootstrap, make_topic):
    kafka = pytest.importorskip("kafka")
    topic = make_topic(partitions=2)
    p = txn_producer(bootstrap)
    produce_txn(p, topic, [b"keep-%d" % i for i in range(8)], 2, commit=True)
    produce_txn(p, topic, [b"drop-%d" % i for i in range(8)], 2, commit=False)
    produce_txn(p, topic, [b"keep2-%d" % i for i in range(4)], 2, commit=True)
    expected = sorted(values(read_all(bootstrap, topic, 2, "read_committed")))
    assert len(expected) == 12

    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                   enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        tps = [kafka.TopicPartition(topic, i) for i in range(2)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < len(expected) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        ends = consumer.end_offsets(tps)  # read_committed: the LSO, here the HW (nothing open)
    finally:
        consumer.close()
    assert sorted(got) == expected
    assert ends == {tps[0]: 13, tps[1]: 13}


def test_open_transaction_holds_back_read_committed(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        plain.produce(topic, value=b"plain-%d" % i, partition=0)
    assert plain.flush(DEADLINE_S) == 0
    txn_id = new_id()
    p = txn_producer(bootstrap, txn_id)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=b"open-%d" % i, partition=0)
    assert p.flush(DEADLINE_S) == 0
    # records after the open transaction's first offset are not stable yet
    plain.produce(topic, value=b"after", partition=0)
    assert plain.flush(DEADLINE_S) == 0

    assert list_offset(bootstrap, topic, 0, 0) == 9
    assert list_offset(bootstrap, topic, 0, 1) == 3  # the last stable offset
    assert values(read_all(bootstrap, topic, 1, "read_committed")) == [b"plain-0", b"plain-1", b"plain-2"]
    state = describe(bootstrap, txn_id)
    assert state.transaction_state == "Ongoing"
    assert [(t.topic, tuple(t.partitions)) for t in state.topics] == [(topic, (0,))]

    p.commit_transaction(DEADLINE_S)
    assert list_offset(bootstrap, topic, 0, 1) == list_offset(bootstrap, topic, 0, 0) == 10
    assert values(read_all(bootstrap, topic, 1, "read_committed")) == [
        b"plain-0", b"plain-1", b"plain-2", *(b"open-%d" % i for i in range(5)), b"after"]
    assert describe(bootstrap, txn_id).transaction_state == "CompleteCommit"


def test_second_producer_fences_the_first(bootstrap, make_topic):
    topic = make_topic(partitions=2)
    txn_id = f"fence-{uuid.uuid4().hex}"
    first = txn_producer(bootstrap, txn_id)
    first.begin_transaction()
    for i in range(6):
        first.produce(topic, value=b"zombie-%d" % i, partition=i % 2)
    assert first.flush(DEADLINE_S) == 0
    epoch_before = describe(bootstrap, txn_id).producer_epoch

    second = txn_producer(bootstrap, txn_id)  # aborts the first one's open transaction
    state = describe(bootstrap, txn_id)
    assert state.producer_epoch >= epoch_before + 2 and state.transaction_state == "Empty"
    with pytest.raises(KafkaException) as caught:
        first.commit_transaction(DEADLINE_S)
    error = caught.value.args[0]
    assert error.fatal() and "fenced" in error.str().lower(), error
    del first, caught  # destroy the fenced producer now (its close() would raise its fatal error again)

    produce_txn(second, topic, [b"live-%d" % i for i in range(4)], 2, commit=True)
    second.close()
    assert sorted(values(read_all(bootstrap, topic, 2, "read_committed"))) == sorted(b"live-%d" % i for i in range(4))
    assert len(read_all(bootstrap, topic, 2, "read_uncommitted")) == 10


def test_transaction_timeout_is_rejected_above_the_broker_maximum(bootstrap):
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"big-{uuid.uuid4().hex}",
                  "transaction.timeout.ms": 900_001})
    with pytest.raises(KafkaException) as caught:
        p.init_transactions(DEADLINE_S)
    assert caught.value.args[0].code() == INVALID_TRANSACTION_TIMEOUT
    del p, caught  # destroy the failed producer now (its close() would raise its fatal error again)


def test_offsets_in_a_transaction_are_visible_only_after_commit(bootstrap, make_topic):
    source = make_topic(partitions=1)
    sink = make_topic(partitions=1)
    group = f"g-{uuid.uuid4().hex}"
    p = txn_producer(bootstrap)
    # read_uncommitted: OffsetFetch without require_stable (KIP-447) answers at once while offsets are pending
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted"})
    try:
        metadata = consumer.consumer_group_metadata()
        tp = TopicPartition(source, 0)

        def committed() -> int:
            return consumer.committed([tp], DEADLINE_S)[0].offset

        def offsets_txn(offset: int, commit: bool) -> None:
            p.begin_transaction()
            p.produce(sink, value=b"out-%d" % offset, partition=0)
            p.send_offsets_to_transaction([TopicPartition(source, 0, offset)], metadata, DEADLINE_S)
            if commit:
                p.commit_transaction(DEADLINE_S)
            else:
                p.abort_transaction(DEADLINE_S)

        offsets_txn(5, commit=False)
        assert committed() < 0  # nothing committed (OFFSET_INVALID)
        offsets_txn(7, commit=True)
        assert committed() == 7
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(source, 0, 9)], metadata, DEADLINE_S)
        assert committed() == 7  # pending until the commit
        p.commit_transaction(DEADLINE_S)
        assert committed() == 9
    finally:
        consumer.close()
    assert values(read_all(bootstrap, sink, 1, "read_committed")) == [b"out-7"]


def test_list_and_describe_transactions(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    txn_id = new_id()
    p = txn_producer(bootstrap, txn_id)
    p.begin_transaction()
    p.produce(topic, value=b"x", partition=0)
    assert p.flush(DEADLINE_S) == 0
    with WireClient(bootstrap) as client:
        ongoing = client.request(ListTransactionsRequest(state_filters=("Ongoing", "Bogus"), producer_id_filters=(),
                                                         duration_filter=-1))
        assert txn_id in [t.transactional_id for t in ongoing.transaction_states]
        assert ongoing.unknown_state_filters == ("Bogus",)
        missing = client.request(DescribeTransactionsRequest(transactional_ids=("no-such-id",)))
        assert missing.transaction_states[0].error_code == TRANSACTIONAL_ID_NOT_FOUND
    state = describe(bootstrap, txn_id)
    assert state.transaction_timeout == datetime.timedelta(milliseconds=60000)
    assert state.transaction_start_time.year >= 2024
    p.abort_transaction(DEADLINE_S)
    with WireClient(bootstrap) as client:
        done = client.request(ListTransactionsRequest(state_filters=("CompleteAbort",), producer_id_filters=(),
                                                      duration_filter=-1))
    assert [t.producer_id for t in done.transaction_states if t.transactional_id == txn_id] == [state.producer_id]


def test_coordinator_aborts_a_timed_out_transaction(tmp_path):
    config = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"}
    with EmbeddedBroker(data_dir=tmp_path / "data", config=config) as b:
        bootstrap = b.bootstrap_servers
        topic = create_topic(bootstrap, "slowpoke", partitions=1)
        txn_id = "slow-producer"
        p = txn_producer(bootstrap, txn_id, **{"transaction.timeout.ms": 1500, "message.timeout.ms": 1500})
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, value=b"late-%d" % i, partition=0)
        assert p.flush(DEADLINE_S) == 0
        assert list_offset(bootstrap, topic, 0, 1) == 0
        wait_until(lambda: describe(bootstrap, txn_id).transaction_state == "CompleteAbort", "the timeout abort",
                   DEADLINE_S)
        assert list_offset(bootstrap, topic, 0, 1) == list_offset(bootstrap, topic, 0, 0) == 4
        assert read_all(bootstrap, topic, 1, "read_committed") == []
        with pytest.raises(KafkaException):
            p.commit_transaction(DEADLINE_S)  # its epoch was bumped: the producer is fenced
        del p  # destroyed before its broker stops (close() would raise the fatal error again)


def test_interleaved_transactions_in_one_partition(bootstrap, make_topic):
    """An aborted transaction whose records sit between a committed one's: readers drop exactly its records."""
    kafka = pytest.importorskip("kafka")
    topic = make_topic(partitions=1)
    keep, drop = txn_producer(bootstrap), txn_producer(bootstrap)
    keep.begin_transaction()
    drop.begin_transaction()
    for i in range(4):  # alternate: keep-0, drop-0, keep-1, drop-1, ...
        keep.produce(topic, value=b"keep-%d" % i, partition=0)
        assert keep.flush(DEADLINE_S) == 0
        drop.produce(topic, value=b"drop-%d" % i, partition=0)
        assert drop.flush(DEADLINE_S) == 0
    drop.abort_transaction(DEADLINE_S)
    assert list_offset(bootstrap, topic, 0, 1) == 0  # keep's transaction is still open
    keep.commit_transaction(DEADLINE_S)
    expected = [b"keep-%d" % i for i in range(4)]
    assert values(read_all(bootstrap, topic, 1, "read_committed")) == expected

    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                   enable_auto_commit=False)
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while consumer.position(tp) < 10 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
    finally:
        consumer.close()
    assert got == expected
