"""Idempotent producers on the embedded broker (KIP-98): InitProducerId, duplicate batches acknowledged
without a second copy, OUT_OF_ORDER_SEQUENCE_NUMBER / INVALID_PRODUCER_EPOCH, producer state that
survives a restart (snapshot, or rebuilt from the log)."""

from __future__ import annotations

import datetime
import time

import pytest
from confluent_kafka import Producer
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.topic_config import LogConfig
from pyspark_kafka.broker.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from pyspark_kafka.broker.log.partition_log import PartitionLog
from support.batches import make_batch, transactional
from support.kafka_proxy import KafkaProxy
from support.records import read_all, values
from support.wire import WireClient

DEADLINE_S = 30.0
NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def produce_request(topic: str, batch: bytes, partition: int = 0, transactional_id: str | None = None):
    return ProduceRequest(transactional_id=transactional_id, acks=-1, timeout=datetime.timedelta(seconds=10),
                          topic_data=(TopicProduceData(name=topic, partition_data=(
                              PartitionProduceData(index=partition, records=batch),)),))


def partition_response(response):
    return response.responses[0].partition_responses[0]


def init_producer_id(client: WireClient, transactional_id: str | None = None, timeout_ms: int = 60000):
    response = client.request(InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
        producer_id=-1, producer_epoch=-1))
    assert response.error_code == NONE, response
    return response.producer_id, response.producer_epoch


# --- real clients ------------------------------------------------------------------------------------


def test_replayed_produce_requests_leave_exactly_one_copy(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    with KafkaProxy(bootstrap, duplicate_produce=3) as proxy:
        p = Producer({"bootstrap.servers": proxy.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        try:
            for round_ in range(4):
                for i in range(50):
                    p.produce(topic, value=b"r%d-%03d" % (round_, i), partition=0)
                assert p.flush(DEADLINE_S) == 0
        finally:
            p.close()
        assert len(proxy.duplicate_answers) == 3
    for first, second in proxy.duplicate_answers:
        a, b = partition_response(first), partition_response(second)
        assert (a.error_code, b.error_code) == (NONE, NONE)
        assert a.base_offset == b.base_offset  # the retry is answered with the original offsets
    got = read_all(bootstrap, topic)
    assert values(got) == [b"r%d-%03d" % (r, i) for r in range(4) for i in range(50)]
    assert [r[1] for r in got] == list(range(200))


def test_kafka_python_idempotent_producer(bootstrap, make_topic):
    kafka = pytest.importorskip("kafka")
    topic = make_topic(partitions=2)
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    try:
        futures = [producer.send(topic, value=b"kp-%d" % i, partition=i % 2) for i in range(40)]
        producer.flush(DEADLINE_S)
        offsets = sorted((f.get(DEADLINE_S).partition, f.get(DEADLINE_S).offset) for f in futures)
    finally:
        producer.close(DEADLINE_S)
    assert offsets == sorted((p, o) for p in range(2) for o in range(20))
    assert sorted(values(read_all(bootstrap, topic, 2))) == sorted(b"kp-%d" % i for i in range(40))


# --- the rules, on the wire ------------------------------------------------------------------------------


def test_sequence_rules_on_the_wire(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    with WireClient(bootstrap) as client:
        pid, epoch = init_producer_id(client)
        other_pid, _ = init_producer_id(client)
        assert other_pid != pid and epoch == 0

        def send(values_, seq, producer_epoch=epoch, producer_id=pid):
            batch = make_batch(values_, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=seq)
            return partition_response(client.request(produce_request(topic, batch)))

        assert (send(3, 0).error_code, send(2, 3).base_offset) == (NONE, 3)
        # an older batch among the last five is a duplicate: same offsets, nothing appended
        dup = send(3, 0)
        assert (dup.error_code, dup.base_offset) == (NONE, 0)
        gap = send(1, 9)
        assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert "expected 5" in gap.error_message
        assert send(1, 3).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps, not a retained batch
        assert send(1, 1, producer_epoch=1).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER  # new epoch starts at 0
        assert send(1, 0, producer_epoch=1).base_offset == 5
        stale = send(1, 6, producer_epoch=0)
        assert stale.error_code == INVALID_PRODUCER_EPOCH and "older than its current epoch 1" in stale.error_message
        # an unknown producer id may start anywhere (its state may have been deleted, KIP-360)
        assert send(1, 77, producer_id=other_pid).base_offset == 6
        # clients may not write transaction markers or transactional batches without a transactional id:
        # Kafka 4.3.1 answers both with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, authorizer or not
        # (``handleProduceRequest``: ``hasTransactionalRecords`` and a null transactional id; checked by a
        # raw probe against Apache Kafka)
        from pyspark_kafka.broker.log.records import control_batch

        marker = partition_response(client.request(produce_request(topic, control_batch(pid, 1, True, 0, 1))))
        assert marker.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        txn_batch = bytearray(make_batch(1, producer_id=pid, producer_epoch=1, base_sequence=1))
        txn = partition_response(client.request(produce_request(topic, transactional(txn_batch))))
        assert txn.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert len(read_all(bootstrap, topic)) == 7


# --- producer state across restarts ---------------------------------------------------------------


def _open(path) -> PartitionLog:
    return PartitionLog("t", 0, path, LogConfig.from_configs(BrokerConfig({}), {"segment.bytes": "600"}))


def _fill(log: PartitionLog, pid: int = 7, timestamp_ms: int | None = None) -> None:
    ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
    for seq in range(0, 40, 4):
        log.append(make_batch(4, producer_id=pid, producer_epoch=2, base_sequence=seq, timestamp_ms=ts))


@pytest.mark.parametrize("restart", ["clean close (snapshot at LEO)", "no snapshot (rebuilt from the log)",
                                     "crash after a roll (snapshot + replay)"])
def test_producer_state_survives_restart(tmp_path, restart):
    log = _open(tmp_path)
    _fill(log)
    assert len(log.segments) > 1  # rolled: snapshots exist
    leo = log.log_end_offset
    if restart.startswith("clean"):
        log.close()
    elif restart.startswith("no snapshot"):
        log.close()
        for snapshot in tmp_path.glob("*.snapshot"):
            snapshot.unlink()
    else:
        for segment in log.segments:
            segment.close()  # no close(): the last snapshot is the one of the last roll
    reopened = _open(tmp_path)
    try:
        assert reopened.log_end_offset == leo
        duplicate = reopened.append(make_batch(4, producer_id=7, producer_epoch=2, base_sequence=36))
        assert (duplicate.base_offset, duplicate.record_count, reopened.log_end_offset) == (36, 0, leo)
        with pytest.raises(OutOfOrderSequenceError):
            reopened.append(make_batch(1, producer_id=7, producer_epoch=2, base_sequence=41))
        with pytest.raises(InvalidProducerEpochError):
            reopened.append(make_batch(1, producer_id=7, producer_epoch=1, base_sequence=40))
        assert reopened.append(make_batch(1, producer_id=7, producer_epoch=2, base_sequence=40)).base_offset == leo
    finally:
        reopened.close()


def test_truncation_rebuilds_producer_state_and_drops_newer_snapshots(tmp_path):
    """A log cut back (as after a crash that lost its tail) must not keep state of the lost batches."""
    log = _open(tmp_path)
    _fill(log)
    log.truncate_to(20)
    try:
        assert log.log_end_offset == 20
        assert all(int(p.name.split(".")[0]) <= 20 for p in tmp_path.glob("*.snapshot"))
        # sequence 20 follows the last batch kept (16..19); with stale state it would be out of order
        assert log.append(make_batch(4, producer_id=7, producer_epoch=2, base_sequence=20)).base_offset == 20
    finally:
        log.close()


def test_idle_producers_expire_after_producer_id_expiration_ms(tmp_path):
    log = _open(tmp_path)
    day_ago = int(time.time() * 1000) - 86_400_000 - 60_000
    _fill(log, pid=7, timestamp_ms=day_ago)
    _fill(log, pid=8)
    log.close()  # expires idle producers, then snapshots
    reopened = _open(tmp_path)
    try:
        assert set(reopened.producer_state.producers) == {8}
        # producer 7 is unknown now: any sequence is accepted (KIP-360), producer 8 is still checked
        assert reopened.append(make_batch(1, producer_id=7, producer_epoch=2, base_sequence=99)).record_count == 1
        with pytest.raises(OutOfOrderSequenceError):
            reopened.append(make_batch(1, producer_id=8, producer_epoch=2, base_sequence=99))
    finally:
        reopened.close()


def test_clients_cannot_write_internal_topics(bootstrap):
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "message.timeout.ms": 5000})
    errors = []
    p.produce("__transaction_state", value=b"garbage", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(DEADLINE_S)
    assert errors and errors[0] is not None and errors[0].code() == 17  # INVALID_TOPIC_EXCEPTION


def test_marker_coordinator_epoch_is_kept_and_survives_a_restart(tmp_path):
    # Kafka's ProducerStateEntry.coordinatorEpoch: the epoch carried by the producer's last marker
    from pyspark_kafka.broker.topic_config import LogConfig
    from pyspark_kafka.broker.log.partition_log import PartitionLog
    from pyspark_kafka.broker.log.record_batch import TRANSACTIONAL_BIT
    from pyspark_kafka.broker.log.records import encode_batch

    import time

    now = int(time.time() * 1000)  # close() expires producers older than producer.id.expiration.ms
    plog = PartitionLog("ce", 0, tmp_path / "ce-0", LogConfig())
    txn = bytearray(encode_batch([(b"k", b"v")], now, producer_id=9, producer_epoch=0,
                                 attributes=TRANSACTIONAL_BIT))
    txn[53:57] = (0).to_bytes(4, "big")  # base sequence 0
    from pyspark_kafka.broker.log.record_batch import batch_crc
    txn[17:21] = batch_crc(txn, 0, len(txn)).to_bytes(4, "big")
    plog.append(bytes(txn), now_ms=now)
    assert plog.producer_state.producers[9].coordinator_epoch == -1
    plog.append_marker(9, 0, commit=True, coordinator_epoch=3, now_ms=now + 1)
    assert plog.producer_state.producers[9].coordinator_epoch == 3
    plog.close()  # snapshot at the log end offset
    reopened = PartitionLog("ce", 0, tmp_path / "ce-0", LogConfig(), clean_shutdown=True)
    assert reopened.producer_state.producers[9].coordinator_epoch == 3
    reopened.close()
    for snapshot in (tmp_path / "ce-0").glob("*.snapshot"):
        snapshot.unlink()  # rebuilt from the log: the marker's value carries the epoch
    rebuilt = PartitionLog("ce", 0, tmp_path / "ce-0", LogConfig())
    assert rebuilt.producer_state.producers[9].coordinator_epoch == 3
    rebuilt.close()
