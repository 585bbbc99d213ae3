"""Metadata log snapshots on a real cluster run (KIP-630): every node (controllers and brokers) writes snapshots of
its image, and the image loaded from each snapshot plus the log after it equals the image replayed from offset 0.

The run makes every kind of metadata record: broker registrations, fencing (a broker killed) and unfencing (its
restart, which loads its own snapshot), topics with configs, topic config changes, dynamic broker configs, ACLs
created and deleted, added partitions, ISR changes, a deleted topic, producer id blocks. Snapshots are made small
(``metadata.log.max.record.bytes.between.snapshots=1500``) so several are written during the run.
"""

from __future__ import annotations

import re

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, AlterConfigOpType, ConfigEntry,
    ConfigResource, NewPartitions, NewTopic, ResourcePatternType, ResourceType,
)

from pyspark_kafka.broker.cluster import EmbeddedCluster
from pyspark_kafka.broker.controller.image import ClusterImage, decode
from pyspark_kafka.broker.controller.metadata_snapshot import image_from_snapshot
from pyspark_kafka.broker.controller.snapshots import SnapshotStore, decode_snapshot
from pyspark_kafka.broker.raft.storage import MetadataLogStorage
from pyspark_kafka.broker.security.authorizer import STANDARD_AUTHORIZER

CONFIG = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "200",
          "replica.fetch.backoff.ms": "100", "authorizer.class.name": STANDARD_AUTHORIZER,
          "allow.everyone.if.no.acl.found": "true", "metadata.log.max.record.bytes.between.snapshots": "1500"}


def _make_history(cluster: EmbeddedCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for f in admin.create_topics([NewTopic("a", 2, 2, config={"cleanup.policy": "compact"}),
                                  NewTopic("b", 1, 2), NewTopic("gone", 1, 1)]).values():
        f.result(30)
    resource = ConfigResource(ResourceType.TOPIC, "a",
                              incremental_configs=[ConfigEntry("retention.ms", "60000",
                                                               incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    broker = ConfigResource(ResourceType.BROKER, "0",
                            incremental_configs=[ConfigEntry("log.retention.ms", "7200000",
                                                             incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([broker]).values():
        f.result(30)
    acls = [AclBinding(ResourceType.TOPIC, f"t{i}", ResourcePatternType.LITERAL, f"User:u{i}", "*",
                       AclOperation.READ, AclPermissionType.ALLOW) for i in range(6)]
    for f in admin.create_acls(acls).values():
        f.result(30)
    gone = AclBindingFilter(ResourceType.TOPIC, "t0", ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
                            AclPermissionType.ANY)
    admin.delete_acls([gone])[gone].result(30)
    for f in admin.create_partitions([NewPartitions("b", 3)]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
    for i in range(20):
        producer.produce("a", str(i).encode(), key=str(i).encode())
    assert producer.flush(30) == 0
    for f in admin.delete_topics(["gone"]).values():
        f.result(30)
    victim = cluster.leader("a", 0)
    cluster.kill(victim)  # fenced after the session timeout, its partitions get new leaders and ISRs
    cluster.wait_for(lambda: cluster.leader("a", 0) not in (-1, victim), 30, "a new leader of a-0")
    cluster.restart(victim)  # unfenced again, after loading its own snapshot
    cluster.wait_for(lambda: len(cluster.isr("a", 0)) == 2, 30, "a-0's ISR back to 2")
    return victim


def _replay(records: list[tuple[int, bytes]], image: ClusterImage | None = None, start: int = 0,
            end: int = 1 << 62) -> ClusterImage:
    image = image or ClusterImage()
    for offset, raw in records:
        if start <= offset < end:
            image.apply(offset, decode(raw))
    return image


def _check_node(directory, log_records: list[tuple[int, bytes]] | None) -> int:
    """Every snapshot in ``directory``: its image equals the replay of the log below its end offset, and with the
    records after it applied, the replay of the whole log. Returns how many snapshots were checked.
    ``log_records`` None: read the Raft log copy beside the snapshots; else the controller's whole log.

    Offsets: in a Raft log a LeaderChange control batch takes an offset but is no image record, so an image
    rebuilt from a snapshot sits at ``end - 1`` while the replay sits at the last data record below it."""
    if log_records is None:
        storage = MetadataLogStorage(directory.parent)
        log_records = list(storage.records(0, storage.end_offset))
        storage.close()
    full = _replay(log_records)
    kinds = {decode(raw)["type"] for _, raw in log_records}
    assert kinds >= {"broker", "fence", "unfence", "topic", "partition", "config", "dynamic_config", "acl",
                     "remove_acl", "producer_ids", "remove_topic"}, kinds
    paths = SnapshotStore(directory).paths()
    for path in paths:
        end, _, records = decode_snapshot(path.read_bytes(), str(path))
        image = image_from_snapshot(end, records)
        prefix = _replay(log_records, end=end)
        assert prefix.offset <= end - 1
        prefix.offset = end - 1
        assert image.same_as(prefix), path
        _replay(log_records, image, start=end)
        last = full.offset  # with no data record after the snapshot, its image stays at end - 1
        full.offset = max(last, end - 1)
        assert image.same_as(full), path
        full.offset = last
    return len(paths)


def _one_voter_log(path) -> list[tuple[int, bytes]]:
    data, position, out = path.read_bytes(), 0, []
    while position < len(data):
        size = int.from_bytes(data[position:position + 4], "big")
        out.append((len(out), data[position + 8:position + 8 + size]))
        position += 8 + size
    return out


@pytest.mark.slow
@pytest.mark.parametrize("controllers", [1, 3])
def test_snapshot_plus_tail_equals_full_replay_on_every_node(tmp_path, controllers):
    with EmbeddedCluster(3, data_dir=tmp_path / "cluster", config=CONFIG, controllers=controllers) as cluster:
        victim = _make_history(cluster)
    checked = {}
    root = tmp_path / "cluster"
    controller_log = None
    for c in cluster.controller_ids:
        directory = root / f"node-{c}" / "__cluster_metadata-0"
        if controllers == 1:
            controller_log = _one_voter_log(directory / "metadata.log")
        checked[c] = _check_node(directory, controller_log)
    for b in cluster.broker_ids:
        checked[b] = _check_node(root / f"node-{b}.metadata" / "__cluster_metadata-0", controller_log)
    assert all(checked.values()), checked  # every node wrote snapshots (two kept)
    print("snapshots checked per node:", checked)
    # the killed broker restarted from its own snapshot, replaying only the log after it
    assert re.search(r"metadata snapshot \S+ loaded", (root / f"node-{victim}" / "node.log").read_text())
