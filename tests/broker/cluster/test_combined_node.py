"""The combined node (``process.roles=broker,controller``, the default): one process running the controller on a
one-voter metadata log and the cluster broker, as Apache Kafka's combined mode.

- A data directory written by the single-node broker of earlier versions (built here from its files) is migrated
  on the combined node's first start: topics keep their ids and records, dynamic broker configs and ACLs become
  metadata records; a second start migrates nothing again. ``process.roles=broker`` without voters (that old
  single node) is refused naming the fix.
- ``meta.properties`` (Apache Kafka's storage identity: version 1, cluster.id, node.id, directory.id) is written at
  the first start and checked at every start: a moved data directory keeps its cluster id, another node's data
  directory is refused naming the fix, an older data directory without the file gets one.
- DescribeQuorum (55) answers as a one-voter quorum: this node leads, the high watermark is the metadata log's end.
- Start-up as Kafka's ``BrokerServer.startup``: ``start()`` returns once the node is unfenced (a stop right after is
  a controlled shutdown); requests are answered while the unfence's elections write their leader-epoch
  checkpoints, and no produce is taken at a new leader epoch before its checkpoint is durable.
- An acks=all produce whose partitions' high watermark already passed the records is answered at once, without an
  event-loop turn per partition (Kafka's ``DelayedProduce`` completes before it watches).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.cluster.combined import METADATA_DIR
from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.errors import ConfigError
from pyspark_kafka.broker.log.manager import LogManager
from pyspark_kafka.broker.meta_properties import MetaPropertiesError
from support.batches import make_batch
from support.records import read_all
from support.client_records import RECORDS, consume, expected, as_tuples, produce
from support.topics import create_topic
from support.waiting import wait_until


def _single_node_data_dir(data) -> uuid.UUID:
    """A data directory as the single-node broker of earlier versions left it: topic ``kept`` (2 partitions, a
    retention override, 20 records) in ``__topics.json`` and its partition directories (the log manager's
    layout, which the combined node keeps), one ACL in ``acls.json`` and a dynamic broker config in
    ``__dynamic_configs.json`` (both files as the single node wrote them: a JSON list of Kafka's 7 ACL fields,
    and ``{"broker", "default", "groups"}``). Returns the topic's id."""
    logs = LogManager(data, BrokerConfig({}))
    logs.load()
    try:
        info = logs.create_topic("kept", 2, {"retention.ms": "123456789"})
        for partition in range(2):
            logs.get_log("kept", partition).append(make_batch([b"v-%d-%d" % (partition, i) for i in range(10)],
                                                          timestamp_ms=int(time.time() * 1000)))  # within retention
    finally:
        logs.close()
    # resource TOPIC (2) "kept", LITERAL (3), principal, host, READ (3), ALLOW (3)
    (data / "acls.json").write_text(json.dumps([[2, "kept", 3, "User:alice", "*", 3, 3]]))
    (data / "__dynamic_configs.json").write_text(json.dumps(
        {"broker": {"log.cleaner.backoff.ms": "4321"}, "default": {}, "groups": {}}, indent=1, sort_keys=True))
    return info.topic_id


def test_single_node_data_dir_is_migrated_once(tmp_path, caplog):
    data = tmp_path / "data"
    old_id = _single_node_data_dir(data)
    assert not (data / METADATA_DIR).exists() and not (data / "meta.properties").exists()
    caplog.set_level(logging.INFO, logger="pyspark_kafka.controller")
    for start in range(2):
        with EmbeddedBroker(data_dir=data) as node:
            assert node.broker.controller_role is not None
            cache = node.broker.metadata_cache
            assert cache.topic_id("kept") == old_id
            assert cache.topic_configs("kept")["retention.ms"] == "123456789"
            assert node.broker.config.get("log.cleaner.backoff.ms") == "4321"
            acls = list(node.broker.lifecycle.image.acls.values())
            assert [(a.resource_name, a.principal) for a in acls] == [("kept", "User:alice")]
            got = read_all(node.bootstrap_servers, "kept", partitions=2)
            assert [(p, o, v) for p, o, _, v in got] == [(p, i, b"v-%d-%d" % (p, i)) for p in range(2) for i in range(10)]
    for name in ("__dynamic_configs.json", "acls.json"):  # read by no later start: the records are the truth
        assert not (data / name).exists() and (data / f"{name}.migrated").exists()
    assert _meta(data)[1]["node.id"] == "0"
    migrated = [r for r in caplog.records if "migrated to the metadata log" in r.getMessage()]
    assert len(migrated) == 1, [r.getMessage() for r in migrated]  # the first start only
    assert "1 acl records" in migrated[0].getMessage() and "2 partition records" in migrated[0].getMessage()


@pytest.mark.parametrize("config, says", [
    ({"process.roles": "broker"}, "use the default process.roles=broker,controller"),
    ({"process.roles": "controller"}, "process.roles=controller runs no broker"),
    ({"process.roles": "broker,controller", "controller.quorum.voters": "1@127.0.0.1:9093"},
     "the node id 0 must be included in the set of voters"),
], ids=["broker-without-voters", "controller-only", "combined-not-a-voter"])
def test_a_node_of_no_kind_is_refused_naming_the_fix(tmp_path, config, says):
    """The old single node (process.roles=broker without voters) is gone: such a config is refused at
    construction, before anything is written, as Kafka's KafkaConfig refuses it."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        EmbeddedBroker(data_dir=tmp_path / "data", config=config).start()
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


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


# Apache Kafka 4.4.0's meta.properties of a formatted KRaft log directory (pyspark_kafka.testing.apache_kafka, read
# from a real node's log dir): two comment lines, then these keys in this order
KAFKA_META_KEYS = ["node.id", "directory.id", "version", "cluster.id"]
KAFKA_UUID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{21}$")  # Kafka's Uuid.toString: 22 URL-safe base64 characters


def _meta(data) -> tuple[list[str], dict[str, str]]:
    lines = (data / "meta.properties").read_text().splitlines()
    pairs = [line.split("=", 1) for line in lines if not line.startswith("#")]
    return lines, dict(pairs) | {"_order": [k for k, _ in pairs]}


def test_meta_properties_written_at_first_start_and_kept_when_the_data_dir_moves(tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data, config={"node.id": "3"}) as node:
        cluster_id = node.broker.cluster_id
        produce(node.bootstrap_servers, "before-move", RECORDS[:1])  # a started node (a stop at once can take 2 s)
    lines, meta = _meta(data)
    assert lines[0] == "#" and lines[1].startswith("#") and meta.pop("_order") == KAFKA_META_KEYS
    assert meta["version"] == "1" and meta["node.id"] == "3" and meta["cluster.id"] == cluster_id
    assert KAFKA_UUID.match(meta["cluster.id"]) and KAFKA_UUID.match(meta["directory.id"])
    moved = tmp_path / "moved"
    data.rename(moved)  # the path-derived id would change; the stored one holds
    with EmbeddedBroker(data_dir=moved, config={"node.id": "3"}) as node:
        assert node.broker.cluster_id == cluster_id
        produce(node.bootstrap_servers, "after-move", RECORDS[:2])
    assert _meta(moved)[1] == meta | {"_order": KAFKA_META_KEYS}  # same directory id: not rewritten


def test_another_nodes_data_dir_is_refused_naming_the_fix(tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as node:  # node.id 0
        produce(node.bootstrap_servers, "kept", RECORDS[:1])
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in data.rglob("*")}
    with pytest.raises(MetaPropertiesError) as refused:
        with EmbeddedBroker(data_dir=data, config={"node.id": "5"}):
            pass
    text = str(refused.value)
    assert "Stored node id 0 doesn't match previous node id 5" in text and str(data / "meta.properties") in text
    assert "set node.id=0" in text
    assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in data.rglob("*")} == before  # nothing written


def test_a_data_dir_without_meta_properties_gets_one(tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as node:
        produce(node.bootstrap_servers, "old", RECORDS[:3])
        cluster_id = node.broker.cluster_id
    (data / "meta.properties").unlink()  # as written before this file existed
    with EmbeddedBroker(data_dir=data) as node:
        assert node.broker.cluster_id == cluster_id
        assert as_tuples(consume(node.bootstrap_servers, "old", 3)) == expected(RECORDS[:3])
    assert _meta(data)[1]["cluster.id"] == cluster_id


def test_restart_applies_each_partition_once_after_the_replay(tmp_path, monkeypatch):
    """A start replays the whole metadata log; the replicas take only each partition's last state (Kafka's
    MetadataLoader publishes one delta after its initial catch-up). Two starts after unclean stops (the clean-shutdown
    marker removed: each takes the leaderships away at the registration and elects again at the unfence, as Kafka)
    leave five records per partition: a per-record apply made five or more calls per partition on the next start,
    where one is right (the replay's; that clean start elects nothing, a one-node cluster). After the replay the
    state is the log's last: leaders, leader epochs, the epoch checkpoint files (written together at the end of a
    metadata batch), a topic deleted and created again under its name (its records kept, the old topic's extra
    partition gone). A start after a stop without controlled shutdown but with its logs closed cleanly elects
    nothing either: only the replay opens the partitions."""
    from pyspark_kafka.broker.cluster.broker_lifecycle import BrokerLifecycle
    from pyspark_kafka.broker.cluster.leader_epoch import LeaderEpochCache

    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as node:
        create_topic(node.bootstrap_servers, "a", partitions=3)
        produce(node.bootstrap_servers, "a", RECORDS[:12])
        create_topic(node.bootstrap_servers, "b", partitions=2)
        produce(node.bootstrap_servers, "b", RECORDS[:5])
        admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})
        admin.delete_topics(["b"])["b"].result(10)
        create_topic(node.bootstrap_servers, "b", partitions=1)
        produce(node.bootstrap_servers, "b", RECORDS[5:8])
        new_b = node.broker.metadata_cache.topic_id("b")
    from pyspark_kafka.broker.log.manager import CLEAN_SHUTDOWN_FILE

    for _ in range(2):
        (data / CLEAN_SHUTDOWN_FILE).unlink()  # as after a crash: the start gets new leader epochs (+2)
        with EmbeddedBroker(data_dir=data) as node:
            AdminClient({"bootstrap.servers": node.bootstrap_servers}).list_topics(timeout=10)

    calls: dict[tuple[str, int], int] = {}
    real = BrokerLifecycle._apply_partition

    def counted(self, topic, index):
        calls[(topic, index)] = calls.get((topic, index), 0) + 1
        return real(self, topic, index)

    monkeypatch.setattr(BrokerLifecycle, "_apply_partition", counted)
    with EmbeddedBroker(data_dir=data) as node:
        AdminClient({"bootstrap.servers": node.bootstrap_servers}).list_topics(timeout=10)  # served once unfenced
        lifecycle = node.broker.lifecycle
        wait_until(lambda: not lifecycle.elections_pending(), "the unfence's elections", 10, 0.01)
        assert node.broker.metadata_cache.topic_id("b") == new_b
        for key in [("a", 0), ("a", 1), ("a", 2), ("b", 0)]:
            state = lifecycle.image.partition(*key)
            part = lifecycle.replica_manager.partitions[key]
            assert (state.leader, state.leader_epoch) == (0, 4), (key, state)  # +2 an unclean restart, as Kafka
            assert part.state == state
            assert part.epochs.latest_epoch() == state.leader_epoch
            assert LeaderEpochCache(part.log.dir).latest_epoch() == state.leader_epoch  # the file, read again
        assert ("b", 1) not in lifecycle.replica_manager.partitions
        assert sorted(as_tuples(consume(node.bootstrap_servers, "a", 12))) == sorted(expected(RECORDS[:12]))
        assert sorted(as_tuples(consume(node.bootstrap_servers, "b", 3))) == sorted(expected(RECORDS[5:8]))
        lifecycle.broker_epoch = -1  # the stop sends no controlled shutdown (as a crash): nothing is fenced
    # one apply, the replay's (a clean restart of a one-node cluster elects nothing)
    assert calls and max(calls.values()) == 1, {k: v for k, v in calls.items() if v > 1}
    calls.clear()
    with EmbeddedBroker(data_dir=data) as node:  # leaders unchanged: only the replay applies the partitions
        AdminClient({"bootstrap.servers": node.bootstrap_servers}).list_topics(timeout=10)
        assert {("a", 0), ("a", 1), ("a", 2), ("b", 0)} <= set(calls)
        assert ("b", 1) not in node.broker.lifecycle.replica_manager.partitions
        assert sorted(as_tuples(consume(node.bootstrap_servers, "a", 12))) == sorted(expected(RECORDS[:12]))


def _stop_and_restart_epochs(data) -> dict[tuple[str, int], int]:
    """The leader epoch of each partition in the metadata log of the stopped node at ``data``."""
    import asyncio

    from pyspark_kafka.broker.controller.image import ClusterImage, decode
    from pyspark_kafka.broker.controller.single_voter_log import SingleVoterMetadataLog

    image, metadata_log = ClusterImage(), SingleVoterMetadataLog(0, data, 0)
    asyncio.run(metadata_log.start())
    metadata_log.subscribe(lambda offset, raw: image.apply(offset, decode(raw)))
    asyncio.run(metadata_log.stop())
    return {(name, p): s.leader_epoch for name, t in image.topics.items() for p, s in t.partitions.items()}


def _metadata_records(data) -> list[dict]:
    """Every record of the metadata log of the stopped node at ``data``."""
    import asyncio

    from pyspark_kafka.broker.controller.image import decode
    from pyspark_kafka.broker.controller.single_voter_log import SingleVoterMetadataLog

    records, metadata_log = [], SingleVoterMetadataLog(0, data, 0)
    asyncio.run(metadata_log.start())
    metadata_log.subscribe(lambda offset, raw: records.append(decode(raw)))
    asyncio.run(metadata_log.stop())
    return records


def test_start_returns_unfenced_so_a_stop_at_once_is_a_controlled_shutdown(tmp_path, monkeypatch):
    """Kafka's BrokerServer.startup returns once the broker is unfenced (it waits for
    BrokerLifecycleManager.setReadyToUnfence's future). start() does the same: right after it the node is unfenced,
    and a stop at once is a controlled shutdown: the metadata log ends with the unfence and then the fence of that
    registration (a fenced broker's stop fences nothing). Every leader epoch is kept (a one-node cluster's clean
    restart). The registration is held back 0.3 s so that a start() returning before the unfence is seen."""
    import asyncio

    from pyspark_kafka.broker.cluster.broker_lifecycle import BrokerLifecycle

    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as node:
        create_topic(node.bootstrap_servers, "u", partitions=2)
    before = _stop_and_restart_epochs(data)
    real_loop = BrokerLifecycle._heartbeat_loop

    async def late_heartbeats(self):
        await asyncio.sleep(0.3)
        await real_loop(self)

    monkeypatch.setattr(BrokerLifecycle, "_heartbeat_loop", late_heartbeats)
    node = EmbeddedBroker(data_dir=data).start()
    try:
        assert node.broker.lifecycle.unfenced.is_set()
    finally:
        node.stop()
    after = _stop_and_restart_epochs(data)
    assert after == before
    fences = [r for r in _metadata_records(data) if r["type"] in ("broker", "unfence", "fence")]
    assert [r["type"] for r in fences[-3:]] == ["broker", "unfence", "fence"]
    assert len({r["epoch"] for r in fences[-3:]}) == 1  # the same registration


def test_requests_are_answered_while_the_unfences_elections_write_their_checkpoints(tmp_path, monkeypatch):
    """A restart after an unclean stop (logs not closed cleanly) elects this node again for every partition (a new
    leader epoch each, as Kafka; a clean restart of a one-node cluster elects nothing); the new epoch's
    leader-epoch checkpoint is written and fsynced first (Kafka's Partition.makeLeader under the partition's lock).
    While those writes are held back: start() has returned, Metadata is answered and names this node the leader
    (Kafka's metadata cache is set before ReplicaManager.applyDelta), but a produce is not taken at the new epoch:
    one that waits longer than its timeout is answered NOT_LEADER_OR_FOLLOWER (6, retriable), one sent with a
    longer timeout waits for the election and is appended once the checkpoint is durable."""
    import select
    import threading

    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.produce.v11 import request as produce11
    from kio.static.primitive import i16, i32, i32Timedelta

    import datetime
    from pyspark_kafka.broker.cluster import leader_epoch
    from pyspark_kafka.broker.cluster.leader_epoch import LeaderEpochCache
    from support.batches import make_batch
    from support.wire import WireClient

    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as node:
        create_topic(node.bootstrap_servers, "e", partitions=2)
        produce(node.bootstrap_servers, "e", RECORDS[:4])
    release = threading.Event()
    real_write = leader_epoch._write_file

    def held_back(path, body, if_dir_exists=False):
        if path.parent.name.startswith("e-"):
            assert release.wait(20), "the test never released the checkpoint writes"
        return real_write(path, body, if_dir_exists)

    monkeypatch.setattr(leader_epoch, "_write_file", held_back)
    from pyspark_kafka.broker.log.manager import CLEAN_SHUTDOWN_FILE

    (data / CLEAN_SHUTDOWN_FILE).unlink()  # as after a crash: the start elects again

    def produce_request(timeout_ms: int):
        return produce11.ProduceRequest(
            transactional_id=None, acks=i16(1),
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
            topic_data=(produce11.TopicProduceData(name="e", partition_data=(
                produce11.PartitionProduceData(index=i32(0), records=make_batch(1)),)),))

    node = EmbeddedBroker(data_dir=data).start()  # returns although the elections' writes are held back
    try:
        lifecycle = node.broker.lifecycle
        assert lifecycle.elections_pending()
        epoch = lifecycle.image.partition("e", 0).leader_epoch
        with WireClient(node.bootstrap_servers) as client:
            topic = client.request(MetadataRequest(topics=(MetadataRequestTopic(name="e", topic_id=None),),
                                                   allow_auto_topic_creation=False,
                                                   include_topic_authorized_operations=False)).topics[0]
            assert sorted((int(p.partition_index), int(p.leader_id), int(p.leader_epoch)) for p in topic.partitions) \
                == [(0, 0, epoch), (1, 0, epoch)]
            refused = client.request(produce_request(200)).responses[0].partition_responses[0]
            assert int(refused.error_code) == 6, refused  # NOT_LEADER_OR_FOLLOWER: not taken at the new epoch
            part = lifecycle.replica_manager.partitions[("e", 0)]
            assert LeaderEpochCache(part.log.dir).latest_epoch() < epoch
            end = part.log.log_end_offset
            cid = client.send(produce_request(10_000))
            assert select.select([client.sock], [], [], 0.3)[0] == []  # waiting for the election, not answered
            release.set()
            got, answer = client.receive(produce11.ProduceRequest)
            assert got == cid
            taken = answer.responses[0].partition_responses[0]
            assert (int(taken.error_code), int(taken.base_offset)) == (0, end), taken
        assert LeaderEpochCache(part.log.dir).latest_epoch() == epoch == part.state.leader_epoch
    finally:
        release.set()
        node.stop()


def _metadata_log_length(data) -> int:
    import asyncio

    from pyspark_kafka.broker.controller.single_voter_log import SingleVoterMetadataLog

    metadata_log = SingleVoterMetadataLog(0, data, 0)
    asyncio.run(metadata_log.start())
    asyncio.run(metadata_log.stop())
    return metadata_log.committed_offset()


def test_a_start_decodes_each_metadata_record_once(tmp_path, monkeypatch):
    """The snapshot keeper, the controller and the broker each replay the metadata log at start, and each takes
    every record appended while the node runs: one JSON decode per record serves all three (the replay's
    records and each appended one are decoded once, then shared)."""
    from pyspark_kafka.broker.controller import image

    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as node:
        create_topic(node.bootstrap_servers, "d", partitions=4)
    decoded = []

    real_decoder = image._DECODER

    class CountingDecoder:
        @staticmethod
        def decode(text):
            decoded.append(text)
            return real_decoder.decode(text)

    monkeypatch.setattr(image, "_DECODER", CountingDecoder)
    with EmbeddedBroker(data_dir=data) as node:
        AdminClient({"bootstrap.servers": node.bootstrap_servers}).list_topics(timeout=10)
        wait_until(lambda: not node.broker.lifecycle.elections_pending(), "the unfence's elections", 10, 0.01)
    monkeypatch.undo()
    assert len(decoded) == _metadata_log_length(data)  # read back after the stop: every record, once


def test_an_acks_all_produce_already_replicated_is_answered_without_waiting(tmp_path):
    """acks=all on a partition whose ISR is this leader alone: the high watermark passed the records at the append,
    so the wait completes at once, without an event-loop turn (Kafka's ``DelayedProduce``: ``tryCompleteElseWatch``
    completes before watching). A partition whose high watermark is behind still waits, and its error is still
    reported (NOT_LEADER_OR_FOLLOWER for a partition this broker does not lead)."""
    import asyncio

    from pyspark_kafka.broker.errors import NotLeaderOrFollowerError

    with EmbeddedBroker(data_dir=tmp_path / "data") as b:
        create_topic(b.bootstrap_servers, "acks", partitions=2)
        produce(b.bootstrap_servers, "acks", RECORDS[:10])
        rm = b.broker.replica_manager

        def at_once(keys) -> tuple[bool, dict]:
            """Run one wait_for_acks step on the loop: (finished without suspending, its errors)."""
            coro = rm.wait_for_acks(keys, -1, 1000)
            try:
                coro.send(None)
            except StopIteration as done:
                return True, done.value
            coro.close()
            return False, {}

        async def check():
            done, errors = at_once([("acks", 0), ("acks", 1)])
            assert done and errors == {}
            part = rm.partitions[("acks", 1)]
            hw, part.log.high_watermark = part.log.high_watermark, part.log.high_watermark - 1
            try:
                assert at_once([("acks", 0), ("acks", 1)])[0] is False  # behind: it waits
            finally:
                part.log.high_watermark = hw
            done, errors = at_once([("acks", 0), ("nosuch", 0)])
            assert done and isinstance(errors[("nosuch", 0)], NotLeaderOrFollowerError) and ("acks", 0) not in errors

        asyncio.run_coroutine_threadsafe(check(), b._loop).result(10)


def test_the_broker_and_its_controller_share_one_image(tmp_path, monkeypatch):
    """A combined node's broker and controller read one image, the metadata log's snapshot keeper's: each record is
    applied to it once, at the start's replay and while the node runs, before the broker's listener hears of it; it
    equals the image a fresh replay of the log builds (brokers, topics, partitions, offset)."""
    from pyspark_kafka.broker.cluster.broker_lifecycle import BrokerLifecycle
    from pyspark_kafka.broker.controller.image import ClusterImage

    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as node:
        create_topic(node.bootstrap_servers, "s", partitions=3)
    applied: dict[int, list[int]] = {}
    real_apply = ClusterImage.apply

    def counting_apply(self, offset, record):
        applied.setdefault(id(self), []).append(offset)
        return real_apply(self, offset, record)

    heard: list[tuple[int, int]] = []  # (record offset, image offset) as the broker's listener is called
    real_on_record = BrokerLifecycle._on_record

    def on_record(self, offset, raw):
        heard.append((offset, self.image.offset))
        return real_on_record(self, offset, raw)

    monkeypatch.setattr(ClusterImage, "apply", counting_apply)
    monkeypatch.setattr(BrokerLifecycle, "_on_record", on_record)
    with EmbeddedBroker(data_dir=data) as node:
        started = len(heard)
        create_topic(node.bootstrap_servers, "t", partitions=2)  # records appended while it runs
        lifecycle = node.broker.lifecycle
        controller = node.broker.controller_role.controller
        assert lifecycle.image is controller.image is node.broker.controller_role.metadata_log.snapshots.state.image
        assert len(heard) > started and all(offset == at for offset, at in heard[started:])  # applied before
        mine = applied[id(controller.image)]
        assert mine == sorted(set(mine)) and len(mine) == lifecycle.image.offset + 1  # each offset once
        fresh = _replayed_image(data, upto=lifecycle.image.offset)
        assert lifecycle.image.same_as(fresh)
        assert lifecycle.image.partition("t", 1).leader == 0


def _replayed_image(data, upto: int):
    """The image a fresh replay of the metadata log file at ``data`` builds up to offset ``upto`` (read-only: the
    node may be running)."""
    import zlib

    from pyspark_kafka.broker.controller.image import ClusterImage, decode
    from pyspark_kafka.broker.controller.single_voter_log import _HEAD

    image, raw, position, offset = ClusterImage(), (data / METADATA_DIR / "metadata.log").read_bytes(), 0, 0
    while offset <= upto:
        size, crc = _HEAD.unpack_from(raw, position)
        body = raw[position + _HEAD.size: position + _HEAD.size + size]
        assert zlib.crc32(body) == crc
        image.apply(offset, decode(body))
        position, offset = position + _HEAD.size + size, offset + 1
    return image
