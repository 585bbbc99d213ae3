"""A classic group's generation becomes Stable only once its record is replicated, on a 2-broker cluster.

Kafka 4.4's ``GroupMetadataManager.classicGroupSyncToClassicGroup`` appends the group's metadata record at the
leader's SyncGroup and keeps the group CompletingRebalance until that write's future completes (the
``CoordinatorRuntime`` completes it once the high watermark passes the record, i.e. the ISR has it). A member
that joins meanwhile starts a rebalance, which answers every waiting SyncGroup, the leader's too,
REBALANCE_IN_PROGRESS (``resetAndPropagateAssignmentWithError``); the write completing later changes nothing.
The embedded cluster made the group Stable at the append and answered the leader's SyncGroup with its
assignment once the ISR had the record, even when another member had joined in between: librdkafka's test
0118 then saw a rebalance 3 s later than on Apache Kafka (docs/compatibility-tests.md).

The follower of the group's ``__consumer_offsets`` partition is paused (SIGSTOP) so that the write waits; the
test checks with DescribeLogDirs that the record was appended before the second member joins, and resumes
the follower before reading the answers (no sleep; bounded polls). Processes are stopped by pid by the
``with`` block, also when the test fails.
"""

from __future__ import annotations

import datetime
import io
import time

import pytest
from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic, DescribeLogDirsRequest
from kio.schema.heartbeat.v3.request import HeartbeatRequest
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.serial import entity_writer

from pyspark_kafka.broker.cluster import EmbeddedCluster
from pyspark_kafka.broker.errors import ErrorCode
from support.groups import wait_for_group_coordinator
from support.wire import WireClient

OFFSETS = "__consumer_offsets"
CONFIG = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1",
          "offsets.topic.replication.factor": "2", "replica.lag.time.max.ms": "10000",
          "broker.session.timeout.ms": "6000", "replica.fetch.backoff.ms": "100", "offsets.commit.timeout.ms": "2000"}
"""One ``__consumer_offsets`` partition on both brokers; a paused follower stays in the ISR for a test's length
(``replica.lag.time.max.ms``) and registered (``broker.session.timeout.ms``), so a group write waits for it until
``offsets.commit.timeout.ms`` (then COORDINATOR_NOT_AVAILABLE)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(2, data_dir=tmp_path_factory.mktemp("group-sync"), config=CONFIG) as c:
        wait_for_group_coordinator(c.address(0))  # creates __consumer_offsets
        yield c


def _subscription(topic: str) -> bytes:
    buf = io.BytesIO()
    buf.write(b"\x00\x00")  # consumer protocol version 0
    entity_writer(ConsumerProtocolSubscription)(buf, ConsumerProtocolSubscription(topics=(topic,), user_data=None))
    return buf.getvalue()


def _join(group: str, member_id: str = "") -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group, session_timeout=datetime.timedelta(milliseconds=10_000),
        rebalance_timeout=datetime.timedelta(milliseconds=20_000), member_id=member_id, group_instance_id=None,
        protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=_subscription("t")),))


def _sync(group: str, generation: int, member_id: str, assignments: dict[str, bytes]) -> SyncGroupRequest:
    return SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
                            assignments=tuple(SyncGroupRequestAssignment(member_id=m, assignment=a)
                                              for m, a in assignments.items()))


def _member_id(client: WireClient, group: str) -> str:
    """KIP-394's first step: JoinGroup with no member id answers MEMBER_ID_REQUIRED and the id to use."""
    first = client.request(_join(group))
    assert first.error_code == ErrorCode.member_id_required and first.member_id
    return first.member_id


def _log_size(client: WireClient) -> int:
    """The bytes of ``__consumer_offsets``-0 in the coordinator's log (DescribeLogDirs): grows with each append."""
    answer = client.request(DescribeLogDirsRequest(topics=(DescribableLogDirTopic(topic=OFFSETS, partitions=(0,)),)))
    return sum(p.partition_size for r in answer.results for t in r.topics if t.name == OFFSETS for p in t.partitions)


def _coordinator(cluster: EmbeddedCluster) -> int:
    """The leader of ``__consumer_offsets``-0 (every group's coordinator here), once the follower is in sync."""
    cluster.wait_for(lambda: len(cluster.isr(OFFSETS, 0)) == 2, 30, f"{OFFSETS}-0 with both brokers in sync")
    return cluster.leader(OFFSETS, 0)


def test_a_join_while_the_leaders_sync_is_being_written_rebalances_the_generation(cluster):
    """Kafka's rule (module docstring): the leader's SyncGroup gets REBALANCE_IN_PROGRESS when a member joins
    before the generation's record is replicated; both members then share the next generation. About 1 s with
    the cluster's start."""
    group = "sync-while-writing"
    leader_node = _coordinator(cluster)
    follower = next(n for n in cluster.broker_ids if n != leader_node)
    with WireClient(cluster.address(leader_node)) as a, WireClient(cluster.address(leader_node)) as b, \
            WireClient(cluster.address(leader_node)) as probe:
        a_id = _member_id(a, group)
        first = a.request(_join(group, a_id))  # alone: generation 1 when the initial delay (0 ms) ends
        assert (first.error_code, first.generation_id, first.leader) == (ErrorCode.none, 1, a_id)
        b_id = _member_id(b, group)
        size = _log_size(probe)
        cluster.pause(follower)
        try:
            sync_id = a.send(_sync(group, 1, a_id, {a_id: b"partitions 0-3"}))
            deadline = time.monotonic() + 10
            while _log_size(probe) == size:  # the generation's record is appended, not yet replicated
                assert time.monotonic() < deadline, "the leader's SyncGroup wrote no group record"
                time.sleep(0.01)
            b.send(_join(group, b_id))  # answered at the next generation's end
        finally:
            cluster.resume(follower)
        got, synced = a.receive(SyncGroupRequest)
        assert got == sync_id
        assert (synced.error_code, synced.assignment) == (ErrorCode.rebalance_in_progress, b""), \
            "the leader's SyncGroup must not complete a generation another member joined before it was written"

        rejoined = a.request(_join(group, a_id))
        _, b_joined = b.receive(JoinGroupRequest)
        assert {rejoined.generation_id, b_joined.generation_id} == {2}
        assert (rejoined.error_code, b_joined.error_code, rejoined.leader) == (ErrorCode.none, ErrorCode.none,
                                                                                a_id)
        assert sorted(m.member_id for m in rejoined.members) == sorted([a_id, b_id])
        b_sync = b.send(_sync(group, 2, b_id, {}))
        a_synced = a.request(_sync(group, 2, a_id, {a_id: b"0-1", b_id: b"2-3"}))
        assert (a_synced.error_code, a_synced.assignment) == (ErrorCode.none, b"0-1")
        got, b_synced = b.receive(SyncGroupRequest)
        assert (got, b_synced.error_code, b_synced.assignment) == (b_sync, ErrorCode.none, b"2-3")
        described = probe.request(DescribeGroupsRequest(groups=(group,), include_authorized_operations=False))
        assert described.groups[0].group_state == "Stable"
        assert len(described.groups[0].members) == 2


def test_a_sync_whose_record_is_not_replicated_in_time_fails_and_rebalances(cluster):
    """The generation's record does not reach the ISR within ``offsets.commit.timeout.ms``: the leader's SyncGroup
    gets COORDINATOR_NOT_AVAILABLE and the group rebalances (Kafka: ``resetAndPropagateAssignmentWithError`` with
    ``appendGroupMetadataErrorToResponseError``'s code, then ``maybePrepareRebalanceOrCompleteJoin``), so the
    member's Heartbeat answers REBALANCE_IN_PROGRESS, not a Stable generation nobody wrote; its rejoin forms the
    next generation once the follower is back. About 2.5 s."""
    group = "sync-not-written"
    leader_node = _coordinator(cluster)
    follower = next(n for n in cluster.broker_ids if n != leader_node)
    with WireClient(cluster.address(leader_node)) as a:
        a_id = _member_id(a, group)
        assert a.request(_join(group, a_id)).generation_id == 1
        cluster.pause(follower)
        try:
            synced = a.request(_sync(group, 1, a_id, {a_id: b"partitions 0-3"}))  # waits offsets.commit.timeout.ms
            assert (synced.error_code, synced.assignment) == (ErrorCode.coordinator_not_available, b"")
            beat = a.request(HeartbeatRequest(group_id=group, generation_id=1, member_id=a_id, group_instance_id=None))
            assert beat.error_code == ErrorCode.rebalance_in_progress
        finally:
            cluster.resume(follower)
        cluster.wait_for(lambda: len(cluster.isr(OFFSETS, 0)) == 2, 30, "the follower back in the ISR")
        rejoined = a.request(_join(group, a_id))
        assert (rejoined.error_code, rejoined.generation_id) == (ErrorCode.none, 2)
        synced = a.request(_sync(group, 2, a_id, {a_id: b"partitions 0-3"}))
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"partitions 0-3")
