"""A restart of a one-node cluster (the combined node) changes no partition: a deliberate difference from Kafka.

Kafka 4.4's controller fences a broker at its controlled shutdown by moving each of its leaderships to -1 (a
partition record per partition) and elects it again at the next start's unfence (a new leader epoch and a fsynced
leader-epoch checkpoint per partition): about 600 records and 300 checkpoint writes a restart for 300 partitions,
with no other broker to lead. Here, when the controller is the combined node's and its image has that one broker
only, a clean restart writes the registration and the fence / unfence records and nothing else; a restart whose
logs were not closed cleanly gets Kafka's new leader epochs (its recovery may have truncated records written at
the old ones). Split clusters, even of one broker, keep Kafka's behaviour (``QuorumController.one_node_cluster``).
"""

from __future__ import annotations

import asyncio
import datetime
from collections import Counter

from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.cluster.embedded_cluster import CONTROLLER_ID, EmbeddedCluster
from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.controller.image import ClusterImage, decode
from pyspark_kafka.broker.controller.quorum_controller import QuorumController
from pyspark_kafka.broker.controller.single_voter_log import SingleVoterMetadataLog
from pyspark_kafka.broker.log.manager import CLEAN_SHUTDOWN_FILE
from support.client_records import RECORDS, as_tuples, consume, expected, produce
from support.topics import create_topic

PARTITIONS = 30


def _stopped_log(data) -> tuple[ClusterImage, list[dict]]:
    """The image and every record of the metadata log of the stopped combined node at ``data``."""
    image, records, metadata_log = ClusterImage(), [], SingleVoterMetadataLog(0, data, 0)
    asyncio.run(metadata_log.start())

    def take(offset, raw):
        record = decode(raw)
        records.append(record)
        image.apply(offset, record)

    metadata_log.subscribe(take)
    asyncio.run(metadata_log.stop())
    return image, records


def _epochs(image: ClusterImage, topic: str) -> dict[int, tuple[int, int]]:
    return {p: (s.leader, s.leader_epoch) for p, s in image.topics[topic].partitions.items()}


def _checkpoints(data, topic: str) -> dict[int, tuple[str, int]]:
    """Each partition's leader-epoch-checkpoint: (content, mtime in ns)."""
    out = {}
    for p in range(PARTITIONS):
        path = data / f"{topic}-{p}" / "leader-epoch-checkpoint"
        out[p] = (path.read_text(), path.stat().st_mtime_ns)
    return out


def _read_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple]:
    """``(key, value)`` of the first ``count`` records of every partition of ``topic`` (bounded: 20 s)."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-all", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out, deadline = [], time.monotonic() + 20
        while len(out) < count and time.monotonic() < deadline:
            for msg in c.consume(num_messages=count - len(out), timeout=0.1):
                assert msg.error() is None, msg.error()
                out.append((msg.key(), msg.value()))
        return out
    finally:
        c.close()


def _produce_at_once(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """One acks=all Produce per partition on a raw connection opened right after start(): the error codes."""
    from kio.schema.produce.v11 import request as produce11
    from kio.static.primitive import i16, i32, i32Timedelta

    from support.batches import make_batch
    from support.wire import WireClient

    request = produce11.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(produce11.TopicProduceData(name=topic, partition_data=tuple(
            produce11.PartitionProduceData(index=i32(p), records=make_batch(1)) for p in range(partitions))),))
    with WireClient(bootstrap) as client:
        answer = client.request(request)
    return sorted(int(p.error_code) for t in answer.responses for p in t.partition_responses)


def test_a_clean_restart_keeps_every_leader_epoch_and_checkpoint(tmp_path):
    """Two clean restarts of a combined node with 30 partitions: every partition keeps its leader and leader epoch,
    no leader-epoch-checkpoint is rewritten (content and mtime), the metadata log grows by the registration, unfence
    and fence records only (fewer than 10 a restart, whatever the partition count), every record written before is
    read back, and a produce to every partition sent right after start() is taken (no election to wait for)."""
    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as node:
        create_topic(node.bootstrap_servers, "r", partitions=PARTITIONS)
        produce(node.bootstrap_servers, "r", RECORDS[:60])
        assert len(_read_all(node.bootstrap_servers, "r", PARTITIONS, 60)) == 60  # (__consumer_offsets made now)
    image, records = _stopped_log(data)
    before_epochs, before_files, length = _epochs(image, "r"), _checkpoints(data, "r"), len(records)
    assert {leader for leader, _ in before_epochs.values()} == {0}
    for restart in range(2):
        node = EmbeddedBroker(data_dir=data).start()
        try:
            assert _produce_at_once(node.bootstrap_servers, "r", PARTITIONS) == [0] * PARTITIONS
            got = _read_all(node.bootstrap_servers, "r", PARTITIONS, 60 + PARTITIONS * (restart + 1))
            assert len(got) == 60 + PARTITIONS * (restart + 1)
            assert not Counter((k, v) for k, v, _, _ in RECORDS[:60]) - Counter(got)  # every one read back
        finally:
            node.stop()
        image, records = _stopped_log(data)
        assert _epochs(image, "r") == before_epochs
        assert _checkpoints(data, "r") == before_files
        grown = records[length:]
        assert len(grown) < 10 and not any(r["type"] == "partition" for r in grown), grown
        assert [r["type"] for r in grown if r["type"] in ("broker", "fence", "unfence")] == \
            ["broker", "unfence", "fence"]  # registered, unfenced, fenced at the controlled shutdown
        length = len(records)


def test_a_restart_after_an_unclean_stop_gets_new_leader_epochs_as_kafka(tmp_path):
    """A stop without controlled shutdown whose logs were not closed cleanly (as SIGKILL leaves them: the
    clean-shutdown marker absent) gets Kafka 4.4's new incarnation handling: the registration takes every leadership
    away (leader -1, ClusterControlManager.registerBroker → ReplicationControlManager.handleBrokerShutdown) and the
    unfence elects the node again, so each partition's leader epoch grows by 2 and its checkpoint names the new one;
    every record is still read back."""
    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as node:
        create_topic(node.bootstrap_servers, "u", partitions=3)
        produce(node.bootstrap_servers, "u", RECORDS[:9])
        node.broker.lifecycle.broker_epoch = -1  # the stop sends no controlled shutdown (as a crash)
    (data / CLEAN_SHUTDOWN_FILE).unlink()  # and the logs count as not closed cleanly
    before = _epochs(_stopped_log(data)[0], "u")
    with EmbeddedBroker(data_dir=data) as node:
        assert sorted(as_tuples(consume(node.bootstrap_servers, "u", 9))) == sorted(expected(RECORDS[:9]))
    image, _ = _stopped_log(data)
    assert {p: e - before[p][1] for p, (_, e) in _epochs(image, "u").items()} == {0: 2, 1: 2, 2: 2}
    for p, (_, epoch) in _epochs(image, "u").items():
        assert (data / f"u-{p}" / "leader-epoch-checkpoint").read_text().splitlines()[-1].split()[0] == str(epoch)


def _controller_with(tmp_path, combined_node, brokers):
    async def build():
        metadata_log = SingleVoterMetadataLog(0, tmp_path, 0)
        await metadata_log.start()
        c = QuorumController(metadata_log, BrokerConfig({"broker.session.timeout.ms": "100000"}),
                             combined_node=combined_node)
        epochs = {}
        for b in brokers:
            epochs[b] = (await c.handle({"op": "register", "node_id": b, "host": "h", "port": 9000 + b}))["broker_epoch"]
            await c.handle({"op": "heartbeat", "node_id": b, "broker_epoch": epochs[b], "want_fence": False,
                            "caught_up_offset": c.image.offset})
        await c.handle({"op": "create_topics", "topics": [{"name": "t", "partitions": 2, "replication_factor": 1,
                                                           "assignments": None}]})
        return metadata_log, c, epochs
    return build


def test_the_rule_needs_the_combined_nodes_controller_and_one_broker(tmp_path):
    """In-process controller: a controller of a split cluster (no combined node) with one broker, and a combined
    node's controller whose image has a second broker, both move the shut-down broker's leaderships to -1 at a new
    leader epoch, as Kafka; only the combined node alone keeps them."""
    async def scenario(path, combined_node, brokers):
        metadata_log, c, epochs = await _controller_with(path, combined_node, brokers)()
        before = {p: s for p, s in c.image.topics["t"].partitions.items() if s.leader == 0}
        await c.handle({"op": "shutdown", "node_id": 0, "broker_epoch": epochs[0]})
        after = {p: c.image.partition("t", p) for p in before}
        await metadata_log.stop()
        return before, after

    for name, combined_node, brokers in (("split", None, [0]), ("two", 0, [0, 1])):
        path = tmp_path / name
        path.mkdir()
        before, after = asyncio.run(scenario(path, combined_node, brokers))
        assert before, "broker 0 leads no partition"
        for p, st in after.items():
            assert (st.leader, st.leader_epoch) == (-1, before[p].leader_epoch + 1), (name, p, st)
    path = tmp_path / "alone"
    path.mkdir()
    before, after = asyncio.run(scenario(path, 0, [0]))
    assert {p: (s.leader, s.leader_epoch) for p, s in after.items()} == \
        {p: (s.leader, s.leader_epoch) for p, s in before.items()}


def test_a_split_one_broker_cluster_still_fences_its_leaders_at_controlled_shutdown(tmp_path):
    """A split cluster of one broker and one controller (separate processes): the broker's SIGTERM is a controlled
    shutdown, and the controller writes the fence and a partition record per partition with leader -1 at a new
    leader epoch, as Kafka 4.4 does; the restarted broker leads again at one more."""
    config = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "200"}
    with EmbeddedCluster(1, data_dir=tmp_path / "c", config=config) as cluster:
        create_topic(cluster.bootstrap_servers, "s", partitions=2)
        cluster.wait_for(lambda: all(cluster.leader("s", p) == 0 for p in range(2)), 10, "leaders")
        epochs = {p: int(cluster.partition_metadata("s", p).leader_epoch) for p in range(2)}
        start = cluster.controller_call(CONTROLLER_ID, {"op": "fetch_metadata", "offset": 0, "max_records": 100000})
        proc = cluster.procs[0]
        proc.terminate()
        assert proc.wait(30) == 0
        answer = cluster.controller_call(CONTROLLER_ID, {"op": "fetch_metadata", "offset": start["end_offset"],
                                                         "max_records": 100000})
        records = [decode(r.encode()) for r in answer["records"]]
        assert [r["type"] for r in records if r["type"] in ("fence", "partition")] == ["fence", "partition",
                                                                                       "partition"]
        fenced = {r["partition"]: (r["leader"], r["leader_epoch"]) for r in records if r["type"] == "partition"}
        assert fenced == {p: (-1, e + 1) for p, e in epochs.items()}
        cluster.restart(0)
        cluster.wait_for(lambda: all(cluster.leader("s", p) == 0 for p in range(2)), 10, "leaders again")
        assert {p: int(cluster.partition_metadata("s", p).leader_epoch) for p in range(2)} == \
            {p: e + 2 for p, e in epochs.items()}
