"""Admin, ListOffsets, Fetch (long poll, errors) and auto-create against the real embedded broker.

Admin calls and produce/consume go through confluent-kafka (an independent client); the raw
wire client is used where a test needs a specific request field (max_wait_ms, isolation level).
"""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from support.topics import create_topic
from support.wire import WireClient
from support.waiting import wait_until

DEADLINE_S = 20.0


def _produce(bootstrap, topic, values, partition=0, timestamps=None):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    try:
        for i, v in enumerate(values):
            ts = timestamps[i] if timestamps else 0
            p.produce(topic, value=v, key=b"k%d" % i, partition=partition, timestamp=ts)
            p.flush(DEADLINE_S)  # one batch per record: distinct batch timestamps
        assert p.flush(DEADLINE_S) == 0
    finally:
        p.close()


def _fetch_request(topic, offset, max_wait_ms, min_bytes=1, partition=0, max_bytes=1 << 20):
    return FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0,
        session_id=0, session_epoch=-1,
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=max_bytes),)),),
        forgotten_topics_data=(), rack_id="",
    )


def _admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap})


# --- admin ----------------------------------------------------------------------------------


def test_create_topics_with_configs_default_partitions_and_validate_only(bootstrap):
    admin = _admin(bootstrap)
    name, dflt, dry = (f"adm-{uuid.uuid4().hex[:8]}-{s}" for s in ("cfg", "dflt", "dry"))
    futures = admin.create_topics([
        NewTopic(name, num_partitions=4, replication_factor=1, config={"retention.ms": "3600000"}),
        NewTopic(dflt),  # num_partitions=-1, replication_factor=-1: broker defaults
    ])
    for f in futures.values():
        f.result(DEADLINE_S)
    admin.create_topics([NewTopic(dry, 2, 1)], validate_only=True)[dry].result(DEADLINE_S)

    topics = admin.list_topics(timeout=DEADLINE_S).topics
    assert len(topics[name].partitions) == 4
    assert len(topics[dflt].partitions) == 1  # num.partitions default
    assert dry not in topics

    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([res])[res].result(DEADLINE_S)
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default
    assert configs["segment.bytes"].is_default


def test_create_topic_errors(bootstrap, make_topic):
    admin = _admin(bootstrap)
    existing = make_topic(partitions=1)
    cases = {
        existing: (NewTopic(existing, 1, 1), "TOPIC_ALREADY_EXISTS"),
        "rf3": (NewTopic(f"rf3-{uuid.uuid4().hex[:6]}", 1, 3), "INVALID_REPLICATION_FACTOR"),
        "bad": (NewTopic("bad/name", 1, 1), "TOPIC_EXCEPTION"),  # librdkafka's name for code 17
        "cfg": (NewTopic(f"cfg-{uuid.uuid4().hex[:6]}", 1, 1, config={"no.such.config": "1"}), "INVALID_CONFIG"),
    }
    for new_topic, expected in cases.values():
        fut = admin.create_topics([new_topic])[new_topic.topic]
        with pytest.raises(KafkaException) as info:
            fut.result(DEADLINE_S)
        assert info.value.args[0].name() == expected


def test_delete_topics_and_create_partitions(bootstrap, make_topic):
    admin = _admin(bootstrap)
    topic = make_topic(partitions=1)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(DEADLINE_S)
    assert len(admin.list_topics(topic, timeout=DEADLINE_S).topics[topic].partitions) == 3
    with pytest.raises(KafkaException) as info:
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(DEADLINE_S)
    assert info.value.args[0].name() == "INVALID_PARTITIONS"

    admin.delete_topics([topic])[topic].result(DEADLINE_S)
    assert topic not in admin.list_topics(timeout=DEADLINE_S).topics
    with pytest.raises(KafkaException) as info:
        admin.delete_topics([topic])[topic].result(DEADLINE_S)
    assert info.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"


def test_describe_broker_configs(bootstrap, broker):
    admin = _admin(bootstrap)
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([res])[res].result(DEADLINE_S)
    assert configs["message.max.bytes"].value == "1048588"
    assert configs["message.max.bytes"].is_default
    assert configs["auto.create.topics.enable"].value == "true"


# --- ListOffsets ----------------------------------------------------------------------------


def test_list_offsets_earliest_latest_and_by_timestamp(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    base = 1_700_000_000_000
    _produce(bootstrap, topic, [b"a", b"b", b"c"], timestamps=[base, base + 1000, base + 2000])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lo", "enable.auto.commit": False})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S) == (0, 3)
        for ts, offset in ((base, 0), (base + 500, 1), (base + 1000, 1), (base + 2000, 2)):
            got = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=DEADLINE_S)
            assert got[0].offset == offset, ts
        # After the last timestamp: -1 ("no such offset"), as Kafka answers.
        after = c.offsets_for_times([TopicPartition(topic, 0, base + 10_000)], timeout=DEADLINE_S)
        assert after[0].offset == -1
    finally:
        c.close()
    # read_committed isolation is accepted; latest = high watermark.
    with WireClient(bootstrap) as w:
        resp = w.request(ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=(ListOffsetsTopic(
            name=topic, partitions=(
                ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),
                ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-2),
                ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=base + 1000),
            )),)))
    parts = resp.topics[0].partitions
    assert [(p.error_code, p.offset) for p in parts] == [(0, 3), (0, 0), (0, 1)]
    assert parts[2].timestamp == base + 1000


# --- Fetch ----------------------------------------------------------------------------------


def test_fetch_long_poll_returns_when_data_arrives(bootstrap, broker, make_topic):
    topic = make_topic(partitions=1)
    with WireClient(bootstrap, timeout_s=DEADLINE_S) as w:
        # max_wait far beyond the socket timeout: only an append can make it return in time.
        w.send(_fetch_request(topic, 0, max_wait_ms=120_000))
        wait_until(lambda: broker.broker.replica_manager.waiting_fetches(topic, 0) == 1, "the fetch to park",
                   DEADLINE_S, interval_s=0.01)
        _produce(bootstrap, topic, [b"wake-up"])
        cid, resp = w.receive(FetchRequest)
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0
    assert part.high_watermark == 1
    assert b"wake-up" in part.records
    assert broker.broker.replica_manager.waiting_fetches(topic, 0) == 0


def test_fetch_long_poll_times_out_empty_at_max_wait(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    with WireClient(bootstrap) as w:
        resp = w.request(_fetch_request(topic, 0, max_wait_ms=100))
    part = resp.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark, part.records) == (0, 0, b"")


def test_fetch_offset_out_of_range_and_unknown_partition(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    _produce(bootstrap, topic, [b"x", b"y"])
    with WireClient(bootstrap) as w:
        above = w.request(_fetch_request(topic, 3, max_wait_ms=100)).responses[0].partitions[0]
        at_leo = w.request(_fetch_request(topic, 2, max_wait_ms=0)).responses[0].partitions[0]
        missing = w.request(_fetch_request(topic, 0, max_wait_ms=0, partition=7)).responses[0].partitions[0]
    assert above.error_code == 1  # OFFSET_OUT_OF_RANGE
    assert above.high_watermark == 2 and above.log_start_offset == 0
    assert (at_leo.error_code, at_leo.records) == (0, b"")
    assert missing.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_respects_max_bytes_but_returns_one_whole_batch(bootstrap, make_topic):
    """KIP-74: a batch larger than max_bytes still comes back whole, alone."""
    topic = make_topic(partitions=1)
    _produce(bootstrap, topic, [b"1" * 5000, b"2" * 5000])
    with WireClient(bootstrap) as w:
        part = w.request(_fetch_request(topic, 0, max_wait_ms=0, max_bytes=100)).responses[0].partitions[0]
    assert b"1" * 5000 in part.records
    assert b"2" * 5000 not in part.records


# --- auto-create ----------------------------------------------------------------------------


def test_metadata_auto_creates_only_when_allowed(bootstrap):
    allowed, refused = f"auto-{uuid.uuid4().hex[:8]}", f"noauto-{uuid.uuid4().hex[:8]}"

    def metadata(name, allow):
        with WireClient(bootstrap) as w:
            return w.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=name),),
                                             allow_auto_topic_creation=allow,
                                             include_topic_authorized_operations=False)).topics[0]

    created = metadata(allowed, True)
    # the first answer may be LEADER_NOT_AVAILABLE (5) while the controller creates it, as Kafka's
    # AutoTopicCreationManager answers; the client asks again
    deadline = time.monotonic() + DEADLINE_S
    while created.error_code == 5 and time.monotonic() < deadline:
        created = metadata(allowed, True)
    assert created.error_code == 0 and len(created.partitions) == 1
    assert created.topic_id is not None
    assert metadata(refused, False).error_code == 3
    assert refused not in _admin(bootstrap).list_topics(timeout=DEADLINE_S).topics
    assert metadata("bad..name/", True).error_code == 17  # INVALID_TOPIC_EXCEPTION


def test_produce_auto_creates_topic(bootstrap):
    topic = f"auto-produce-{uuid.uuid4().hex[:8]}"
    _produce(bootstrap, topic, [b"first"])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ac", "enable.auto.commit": False})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S) == (0, 1)
    finally:
        c.close()


# --- timers ---------------------------------------------------------------------------------


def test_retention_check_runs_on_its_interval(tmp_path):
    """Old segments are deleted by the periodic retention check (log.retention.check.interval.ms)."""
    from pyspark_kafka.broker import EmbeddedBroker

    with EmbeddedBroker(data_dir=tmp_path / "data", config={"log.retention.check.interval.ms": "50"}) as b:
        topic = create_topic(b.bootstrap_servers, "retained", 1, {"segment.bytes": "1024", "retention.ms": "1000"})
        old = int(time.time() * 1000) - 60_000  # CreateTime a minute ago: past retention.ms
        _produce(b.bootstrap_servers, topic, [b"x" * 600] * 6, timestamps=[old] * 6)
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "ret"})
        try:
            wait_until(lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S)[0] > 0,
                       "retention to move the log start offset", DEADLINE_S, interval_s=0.01)
            low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S)
        finally:
            c.close()
        assert high == 6 and 0 < low <= 6


def test_log_append_time_topic_reports_the_broker_timestamp(bootstrap, make_topic):
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    from support.wire import record_batch

    topic = make_topic(partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    with WireClient(bootstrap) as w:
        resp = w.request(ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=10),
                                        topic_data=(TopicProduceData(name=topic, partition_data=(
                                            PartitionProduceData(index=0, records=record_batch(
                                                [b"a", b"b"], timestamp_ms=1_000)),)),)))
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0 and part.base_offset == 0 and part.log_start_offset == 0
    append_ms = int(part.log_append_time.timestamp() * 1000)
    assert append_ms > 1_000
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        msgs = []
        for _ in range(200):
            msgs += [m for m in c.consume(2, timeout=0.1) if m.error() is None]
            if len(msgs) == 2:
                break
    finally:
        c.close()
    assert [m.timestamp() for m in msgs] == [(TIMESTAMP_LOG_APPEND_TIME, append_ms)] * 2
