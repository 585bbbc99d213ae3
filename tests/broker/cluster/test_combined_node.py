"""The combined node (``process.roles=broker,controller``, the default): one process running the controller on a
one-voter metadata log and the cluster broker, as Apache Kafka's combined mode.

- A data directory written by the single-node broker (``process.roles=broker`` without voters, the layout of
  earlier versions) is migrated on the combined node's first start: topics keep their ids and records, dynamic
  broker configs and ACLs become metadata records; a second start migrates nothing again.
- DescribeQuorum (55) answers as a one-voter quorum: this node leads, the high watermark is the metadata log's end.
"""

from __future__ import annotations

import logging

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.cluster.combined import METADATA_DIR
from support.client_records import RECORDS, consume, expected, as_tuples, produce
from support.topics import create_topic


def test_single_node_data_dir_is_migrated_once(tmp_path, caplog):
    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data, config={"process.roles": "broker"}) as old:  # the single-node layout
        create_topic(old.bootstrap_servers, "kept", partitions=2, config={"retention.ms": "123456789"})
        produce(old.bootstrap_servers, "kept", RECORDS[:20])
        admin = AdminClient({"bootstrap.servers": old.bootstrap_servers})
        res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
            ConfigEntry("log.cleaner.backoff.ms", "4321", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(10)
        old_id = old.broker.metadata_cache.topic_id("kept")
    assert not (data / METADATA_DIR).exists()
    assert (data / "__dynamic_configs.json").exists()
    caplog.set_level(logging.INFO, logger="pyspark_kafka.controller")
    for start in range(2):
        with EmbeddedBroker(data_dir=data) as node:
            assert node.broker.controller_role is not None
            cache = node.broker.metadata_cache
            assert cache.topic_id("kept") == old_id
            assert cache.topic_configs("kept")["retention.ms"] == "123456789"
            assert node.broker.config.get("log.cleaner.backoff.ms") == "4321"
            got = consume(node.bootstrap_servers, "kept", 20)
            assert sorted(as_tuples(got)) == sorted(expected(RECORDS[:20]))
    assert not (data / "__dynamic_configs.json").exists()  # read by no later start: the records are the truth
    assert (data / "__dynamic_configs.json.migrated").exists()
    migrated = [r for r in caplog.records if "migrated to the metadata log" in r.getMessage()]
    assert len(migrated) == 1, [r.getMessage() for r in migrated]  # the first start only


def test_describe_quorum_one_voter():
    from support.raft import describe_quorum

    with EmbeddedBroker() as node:
        host, port = node.bootstrap_servers.rsplit(":", 1)
        answer = describe_quorum(host, int(port), timeout_s=5)
        end = node.broker.controller_role.metadata_log.committed_offset()
    assert answer is not None and answer.error_code == 0
    assert (answer.leader_id, answer.leader_epoch) == (0, 1)
    assert answer.high_watermark == end > 0
    assert [(v.replica_id, v.log_end_offset) for v in answer.current_voters] == [(0, end)]
    assert list(answer.observers) == []
