"""Broker fixes found by the differential run against Apache Kafka (integration_tests/test_differential.py)."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource

from pyspark_kafka.broker.config import LONG_MAX, BrokerConfig
from pyspark_kafka.broker.topic_config import LogConfig
from pyspark_kafka.broker.log.partition_log import PartitionLog
from support.batches import GZIP, make_batch

T0 = 1_700_000_000_000


def open_log(path, **topic_configs) -> PartitionLog:
    config = LogConfig.from_configs(BrokerConfig(), {k.replace("_", "."): str(v) for k, v in topic_configs.items()})
    return PartitionLog("events", 0, path / "events-0", config)


def test_max_timestamp_of_a_log_append_time_batch_is_its_first_record(tmp_path):
    # Kafka 4 (KAFKA-16310) answers ListOffsets -3 with the first record holding the max
    # timestamp; every record of a LogAppendTime batch has the batch's append time.
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    log.append(make_batch(3), now_ms=T0)
    log.append(make_batch(4), now_ms=T0 + 10)
    log.append(make_batch(2), now_ms=T0 + 5)
    assert log.max_timestamp_offset() == (3, T0 + 10)


def test_max_timestamp_in_a_compressed_batch_is_the_first_record_with_it(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch(6, timestamps=[T0, T0 + 1, T0 + 5, T0 + 2, T0 + 5, T0 + 3], compression=GZIP))
    assert log.max_timestamp_offset() == (2, T0 + 5)
    log.append(make_batch(3, timestamps=[T0 + 9, T0 + 7, T0 + 9], compression=GZIP))
    assert log.max_timestamp_offset() == (6, T0 + 9)


def test_max_timestamp_below_the_log_start_offset_moves_to_it(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    log.append(make_batch(5), now_ms=T0)
    log.log_start_offset = 2  # as DeleteRecords would leave it
    assert log.max_timestamp_offset() == (2, T0)


def test_flush_ms_default_is_the_flush_scheduler_interval():
    # log.flush.interval.ms has no default; Kafka's topic default of flush.ms falls back to
    # log.flush.scheduler.interval.ms (Long.MAX_VALUE), as DescribeConfigs shows.
    assert BrokerConfig().get("log.flush.interval.ms") is None
    assert BrokerConfig().topic_default("flush.ms") == str(LONG_MAX)
    assert BrokerConfig({"log.flush.interval.ms": "1000"}).topic_default("flush.ms") == "1000"
    assert BrokerConfig().topic_default("retention.ms") == "604800000"


def test_describe_configs_shows_flush_ms(bootstrap, make_topic):
    topic = make_topic(1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("TOPIC", topic)
    entries = admin.describe_configs([resource], request_timeout=15)[resource].result(30)
    assert entries["flush.ms"].value == str(LONG_MAX)
    assert entries["flush.messages"].value == str(LONG_MAX)


def test_produce_never_creates_a_topic(bootstrap):
    # Kafka creates topics only from Metadata (allow_auto_topic_creation); a Produce request
    # for an unknown topic is UNKNOWN_TOPIC_OR_PARTITION and creates nothing.
    import datetime
    import uuid

    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kio.schema.produce.v8.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from support.wire import WireClient

    topic = f"never-created-{uuid.uuid4().hex[:8]}"
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, timestamp=T0, key=None, value=b"x", headers=[])
    request = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=bytes(builder.build())),)),))
    with WireClient(bootstrap) as w:
        response = w.request(request)
    assert [int(p.error_code) for t in response.responses for p in t.partition_responses] == [3]
    assert topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
