"""LogManager: topic metadata (persisted atomically), partitions, configs, retention, checkpoints."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaStorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from pyspark_kafka.broker.log.manager import (
    LOG_START_OFFSET_CHECKPOINT,
    TOPICS_FILE,
    LogManager,
)
from support.batches import make_batch

T0 = 1_700_000_000_000


def open_manager(data_dir: Path, **broker) -> LogManager:
    manager = LogManager(data_dir, BrokerConfig({k.replace("_", "."): v for k, v in broker.items()}))
    manager.load()
    return manager


def test_create_topic_makes_partition_dirs_and_metadata_survives_restart(tmp_path):
    manager = open_manager(tmp_path)
    info = manager.create_topic("clicks", 3, {"retention.ms": "60000"})
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["clicks-0", "clicks-1", "clicks-2"]
    manager.get_log("clicks", 2).append(make_batch(4))
    manager.close()
    again = open_manager(tmp_path)
    restored = again.topic("clicks")
    assert restored == info and isinstance(restored.topic_id, uuid.UUID)
    assert again.log_config("clicks").retention_ms == 60000
    assert again.get_log("clicks", 2).log_end_offset == 4 and again.get_log("clicks", 3) is None
    assert again.topic_by_id(info.topic_id) == info
    doc = json.loads((tmp_path / TOPICS_FILE).read_text())
    assert doc["topics"]["clicks"]["partitions"] == 3


def test_default_partition_count_and_internal_topics(tmp_path):
    manager = open_manager(tmp_path, num_partitions="2")
    assert manager.create_topic("plain", -1).num_partitions == 2
    assert manager.create_topic("__consumer_offsets", 1, {"cleanup.policy": "compact"}).num_partitions == 1


@pytest.mark.parametrize("name", ["../escape", "/etc", "a/../../b", "..", ".", "", "x" * 250, "sp ace"])
def test_illegal_names_create_nothing(tmp_path, name):
    data_dir = tmp_path / "data"
    manager = open_manager(data_dir)
    with pytest.raises(InvalidTopicError):
        manager.create_topic(name, 1)
    assert sorted(os.listdir(tmp_path)) == ["data"]
    assert not [p for p in data_dir.iterdir() if p.is_dir()]


def test_create_topic_errors(tmp_path):
    manager = open_manager(tmp_path)
    manager.create_topic("a.b", 1)
    with pytest.raises(TopicExistsError):
        manager.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        manager.create_topic("a_b", 1)
    with pytest.raises(InvalidPartitionsError):
        manager.create_topic("zero", 0)
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 1"):
        manager.create_topic("rf3", 1, replication_factor=3)
    with pytest.raises(InvalidConfigError, match="Unknown topic config name"):
        manager.create_topic("badcfg", 1, {"retention.msec": "1"})
    assert set(manager.topics()) == {"a.b"}


def test_validate_only_creates_nothing(tmp_path):
    manager = open_manager(tmp_path)
    info = manager.create_topic("dry", 4, {"segment.bytes": "4096"}, validate_only=True)
    assert info.num_partitions == 4 and manager.topic("dry") is None
    assert not (tmp_path / "dry-0").exists()


def test_delete_topic_removes_data_and_name_can_be_reused(tmp_path):
    manager = open_manager(tmp_path)
    manager.create_topic("gone", 2)
    manager.get_log("gone", 0).append(make_batch(5))
    manager.delete_topic("gone")
    assert manager.topic("gone") is None and manager.get_log("gone", 0) is None
    assert not list(tmp_path.glob("gone-*"))
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.delete_topic("gone")
    manager.create_topic("gone", 1)
    assert manager.get_log("gone", 0).log_end_offset == 0
    manager.close()
    assert open_manager(tmp_path).get_log("gone", 0).log_end_offset == 0


def test_stale_directory_of_deleted_topic_is_removed_on_load(tmp_path):
    data_dir = tmp_path / "data"
    manager = open_manager(data_dir)
    manager.create_topic("old", 1)
    manager.get_log("old", 0).append(make_batch(3))
    manager.close()
    aside = tmp_path / "aside"
    shutil.copytree(data_dir / "old-0", aside)
    manager = open_manager(data_dir)
    manager.delete_topic("old")
    manager.create_topic("old", 1)
    manager.close()
    # a crash between the metadata write and the directory removal leaves the old directory behind
    shutil.rmtree(data_dir / "old-0")
    shutil.copytree(aside, data_dir / "old-0")
    manager = open_manager(data_dir)
    assert manager.get_log("old", 0).log_end_offset == 0  # not the deleted topic's 3 records


def test_corrupt_metadata_refuses_to_start_and_keeps_data(tmp_path):
    manager = open_manager(tmp_path)
    manager.create_topic("keep", 1)
    manager.get_log("keep", 0).append(make_batch(2))
    manager.close()
    (tmp_path / TOPICS_FILE).write_text("{not json")
    with pytest.raises(KafkaStorageError, match="cannot read topic metadata"):
        open_manager(tmp_path)
    assert (tmp_path / "keep-0" / f"{0:020d}.log").stat().st_size > 0


def test_create_partitions_only_grows(tmp_path):
    manager = open_manager(tmp_path)
    manager.create_topic("grow", 2)
    manager.get_log("grow", 0).append(make_batch(2))
    assert manager.create_partitions("grow", 5).num_partitions == 5
    assert manager.get_log("grow", 4) is not None and manager.get_log("grow", 0).log_end_offset == 2
    with pytest.raises(InvalidPartitionsError, match="already has 5"):
        manager.create_partitions("grow", 5)
    with pytest.raises(InvalidPartitionsError, match="higher than the requested 3"):
        manager.create_partitions("grow", 3)
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.create_partitions("nope", 3)
    manager.close()
    assert open_manager(tmp_path).topic("grow").num_partitions == 5


def test_alter_topic_configs_reaches_open_logs_and_survives_a_restart(tmp_path):
    """The broker lifecycle applies a replayed ``config`` record with ``alter_topic_configs`` (AlterConfigs'
    replace semantics): the open logs take the new config at once, a bad value changes nothing."""
    manager = open_manager(tmp_path, log_retention_ms="5000")
    manager.create_topic("cfg", 2, {"segment.bytes": "2048"})
    assert manager.get_log("cfg", 1).config.segment_bytes == 2048
    manager.alter_topic_configs("cfg", {"retention.ms": "100", "cleanup.policy": "delete,compact"})
    config = manager.get_log("cfg", 1).config
    assert (config.retention_ms, config.segment_bytes, config.cleanup_policy) == (100, 1073741824, "delete,compact")
    manager.alter_topic_configs("cfg", {"max.message.bytes": "100"})
    assert manager.topic("cfg").configs == {"max.message.bytes": "100"}
    with pytest.raises(InvalidConfigError):
        manager.alter_topic_configs("cfg", {"retention.ms": "x"})
    assert manager.topic("cfg").configs == {"max.message.bytes": "100"}
    manager.close()
    assert open_manager(tmp_path).log_config("cfg").max_message_bytes == 100


def test_run_retention_advances_and_checkpoints_log_start_offset(tmp_path):
    manager = open_manager(tmp_path)
    manager.create_topic("ret", 1, {"segment.bytes": "500", "retention.ms": "1000"})
    log = manager.get_log("ret", 0)
    for i in range(20):
        log.append(make_batch(2, timestamp_ms=T0 + i * 100))
    log.update_high_watermark(log.log_end_offset)  # retention deletes only below the high watermark
    assert manager.run_retention(now_ms=T0 + 2500) > 0
    start = log.log_start_offset
    assert start > 0
    assert f"ret 0 {start}" in (tmp_path / LOG_START_OFFSET_CHECKPOINT).read_text()
    manager.close()
    assert open_manager(tmp_path).get_log("ret", 0).log_start_offset == start


def test_retention_deletes_an_expired_active_segment_after_rolling_as_kafka_does(tmp_path):
    """Kafka's UnifiedLog.deletableSegments takes the non-empty active segment too (rolling a new
    one first); found by running the integration suite on Apache Kafka 4.3.1."""
    manager = open_manager(tmp_path)
    manager.create_topic("old", 1, {"retention.ms": "1000"})  # one big segment
    log = manager.get_log("old", 0)
    for i in range(3):
        log.append(make_batch(2, timestamp_ms=T0 + i))
    log.high_watermark = 4  # not yet replicated past 4: the segment reaches 6, so it stays
    assert manager.run_retention(now_ms=T0 + 5000) == 0 and log.log_start_offset == 0
    log.high_watermark = log.log_end_offset
    assert manager.run_retention(now_ms=T0 + 1001) == 0  # not expired yet
    assert manager.run_retention(now_ms=T0 + 5000) == 1
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (6, 6, 1)
    assert log.active_segment.base_offset == 6 and log.active_segment.size == 0
    log.append(make_batch(1, timestamp_ms=T0 + 6000))
    assert log.log_end_offset == 7 and manager.run_retention(now_ms=T0 + 6500) == 0


def test_flush_due_uses_flush_ms(tmp_path):
    manager = open_manager(tmp_path)
    manager.create_topic("f", 1, {"flush.ms": "1000"})
    log = manager.get_log("f", 0)
    log.append(make_batch(2), now_ms=log.last_flush_ms)
    assert log.recovery_point == 0
    assert manager.flush_due(now_ms=log.last_flush_ms + 1001) == 1
    assert log.recovery_point == 2
