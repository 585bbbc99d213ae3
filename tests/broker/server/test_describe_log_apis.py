"""DescribeProducers (61), DescribeLogDirs (35) and OffsetForLeaderEpoch (23) against the embedded broker:
kafka-python's admin client where it has the call, the raw wire for exact fields and error codes."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer
from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic, DescribeLogDirsRequest
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)

from support.wire import WireClient

DEADLINE_S = 20.0


def _produce(bootstrap, topic, count, partition=0, config=None):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **(config or {})})
    for i in range(count):
        p.produce(topic, value=b"v%d" % i, partition=partition)
        p.flush(DEADLINE_S)
    assert p.flush(DEADLINE_S) == 0
    return p


def _request(bootstrap, request):
    with WireClient(bootstrap) as client:
        return client.request(request)


def test_describe_producers_lists_idempotent_and_transactional_producers(bootstrap, make_topic):
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition

    topic = make_topic(partitions=2)
    _produce(bootstrap, topic, 3, config={"enable.idempotence": True})
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "dp-" + uuid.uuid4().hex})
    txn.init_transactions(DEADLINE_S)
    txn.begin_transaction()
    txn.produce(topic, b"open", partition=0)
    txn.flush(DEADLINE_S)

    response = _request(bootstrap, DescribeProducersRequest(topics=(TopicRequest(name=topic,
                                                                                 partition_indexes=(0, 1, 5)),)))
    p0, p1, p5 = response.topics[0].partitions
    assert (p0.error_code, p1.error_code, p5.error_code) == (
        ErrorCode.none, ErrorCode.none, ErrorCode.unknown_topic_or_partition)
    assert p1.active_producers == ()
    idempotent, transactional = sorted(p0.active_producers, key=lambda s: s.current_txn_start_offset)
    assert (idempotent.producer_epoch, idempotent.last_sequence, idempotent.current_txn_start_offset) == (0, 2, -1)
    assert idempotent.last_timestamp > 0 and idempotent.coordinator_epoch == -1
    assert (transactional.last_sequence, transactional.current_txn_start_offset) == (0, 3)

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        states = admin.describe_producers([TopicPartition(topic, 0)])
    finally:
        admin.close()
    described = states[TopicPartition(topic, 0)]
    listed = described.active_producers if hasattr(described, "active_producers") else described
    assert len(listed) == 2, described
    txn.commit_transaction(DEADLINE_S)
    response = _request(bootstrap, DescribeProducersRequest(topics=(TopicRequest(name=topic, partition_indexes=(0,)),)))
    assert {s.current_txn_start_offset for s in response.topics[0].partitions[0].active_producers} == {-1}
    # the commit marker's coordinator epoch (0: __transaction_state's first leader epoch) is the
    # transactional producer's from now on, as Kafka 4.3.1 reports it; the idempotent one has none
    epochs = {s.producer_id == transactional.producer_id: s.coordinator_epoch
              for s in response.topics[0].partitions[0].active_producers}
    assert epochs == {True: 0, False: -1}


def test_describe_log_dirs_reports_partition_sizes(bootstrap, broker, make_topic):
    from kafka import KafkaAdminClient

    topic = make_topic(partitions=2)
    _produce(bootstrap, topic, 4, partition=1)
    response = _request(bootstrap, DescribeLogDirsRequest(topics=(DescribableLogDirTopic(topic=topic,
                                                                                      partitions=(0, 1, 9)),)))
    assert response.error_code == ErrorCode.none
    (result,) = response.results
    assert result.error_code == ErrorCode.none and result.log_dir == str(broker.data_dir.absolute())
    assert result.total_bytes >= result.usable_bytes > 0
    (described,) = result.topics
    sizes = {p.partition_index: (p.partition_size, p.offset_lag, p.is_future_key) for p in described.partitions}
    on_disk = sum(f.stat().st_size for f in (broker.data_dir / f"{topic}-1").glob("*.log"))
    assert sizes == {0: (0, 0, False), 1: (on_disk, 0, False)} and on_disk > 0

    everything = _request(bootstrap, DescribeLogDirsRequest(topics=None)).results[0].topics
    assert topic in {t.name for t in everything}

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        dirs = admin.describe_log_dirs(topic_partitions={topic: [0, 1]})
    finally:
        admin.close()
    assert topic in repr(dirs)


def _epoch_end(bootstrap, topic, partition=0, current=-1, epoch=0):
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=(OffsetForLeaderTopic(topic=topic, partitions=(
        OffsetForLeaderPartition(partition=partition, current_leader_epoch=current, leader_epoch=epoch),)),))
    p = _request(bootstrap, request).topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


def test_offset_for_leader_epoch(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    assert _epoch_end(bootstrap, topic) == (ErrorCode.none, 0, 0)
    _produce(bootstrap, topic, 5)
    assert _epoch_end(bootstrap, topic) == (ErrorCode.none, 0, 5)
    assert _epoch_end(bootstrap, topic, current=0) == (ErrorCode.none, 0, 5)
    assert _epoch_end(bootstrap, topic, epoch=3) == (ErrorCode.none, -1, -1)  # no such epoch: undefined
    assert _epoch_end(bootstrap, topic, epoch=-1) == (ErrorCode.none, -1, -1)
    assert _epoch_end(bootstrap, topic, current=1) == (ErrorCode.unknown_leader_epoch, -1, -1)
    assert _epoch_end(bootstrap, topic, current=-3) == (ErrorCode.fenced_leader_epoch, -1, -1)
    assert _epoch_end(bootstrap, topic, partition=4) == (ErrorCode.unknown_topic_or_partition, -1, -1)
    assert _epoch_end(bootstrap, "no-such-" + uuid.uuid4().hex) == (ErrorCode.unknown_topic_or_partition, -1, -1)
