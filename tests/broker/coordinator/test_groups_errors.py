"""Group protocol rules and bad input, at the wire level: Kafka's error codes, and no damage to other groups.

A raw kio client (``wire.WireClient``) sends exact versions and fields real clients would not
send; the coordinator's pure rules are checked table-driven.
"""

from __future__ import annotations

import datetime
import io
import uuid

import pytest
from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.heartbeat.v3.request import HeartbeatRequest
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v3.request import LeaveGroupRequest, MemberIdentity
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.offset_commit.v7.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.serial import entity_writer

from support.topics import create_topic
from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.coordinator import classic_group as g
from pyspark_kafka.broker.errors import ErrorCode
from support.groups import wait_for_group_coordinator
from pyspark_kafka.broker.coordinator.internal_topics import java_string_hash, partition_for
from pyspark_kafka.broker.coordinator.offsets import (
    OffsetAndMetadata,
    is_expired,
    offset_value,
    parse_offset_value,
)
from support.wire import WireClient

BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
                 "message.max.bytes": "10000"}


@pytest.fixture(scope="module")
def wbroker(tmp_path_factory):
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("groups-wire"), config=BROKER_CONFIG) as b:
        wait_for_group_coordinator(b.bootstrap_servers)  # as clients do first
        yield b


@pytest.fixture(scope="module")
def topic(wbroker):
    return create_topic(wbroker.bootstrap_servers, "wire-groups", 3)


def subscription(*topics: str) -> bytes:
    buf = io.BytesIO()
    buf.write(b"\x00\x00")  # consumer protocol version 0
    entity_writer(ConsumerProtocolSubscription)(buf, ConsumerProtocolSubscription(topics=topics, user_data=None))
    return buf.getvalue()


def join(group, member_id="", instance=None, session_ms=6000, protocol_type="consumer", metadata=b"m"):
    return JoinGroupRequest(
        group_id=group, session_timeout=datetime.timedelta(milliseconds=session_ms),
        rebalance_timeout=datetime.timedelta(milliseconds=10_000), member_id=member_id,
        group_instance_id=instance, protocol_type=protocol_type,
        protocols=(JoinGroupRequestProtocol(name="range", metadata=metadata),))


def sync(group, generation, member_id, assignments=(), instance=None):
    return SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id,
                            group_instance_id=instance, assignments=tuple(
                                SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments))


def hb(group, generation, member_id, instance=None):
    return HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                            group_instance_id=instance)


def commit(group, topic, partitions, generation=-1, member_id="", instance=None):
    """OffsetCommit v7 of ``{partition: (offset, metadata)}``; returns ``{partition: error}``."""
    return OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=instance,
        topics=(OffsetCommitRequestTopic(name=topic, partitions=tuple(
            OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_metadata=m)
            for p, (o, m) in partitions.items())),))


def commit_errors(client, request) -> dict[int, int]:
    response = client.request(request)
    return {p.partition_index: int(p.error_code) for t in response.topics for p in t.partitions}


def fetched(client, group, topic, partitions=(0, 1, 2)) -> dict[int, tuple[int, str]]:
    response = client.request(OffsetFetchRequest(group_id=group, topics=(
        OffsetFetchRequestTopic(name=topic, partition_indexes=tuple(partitions)),)))
    return {p.partition_index: (p.committed_offset, p.metadata) for t in response.topics for p in t.partitions}


def new_group() -> str:
    return f"wire-{uuid.uuid4().hex[:8]}"


def joined_member(client, group, **kw):
    """Join with the KIP-394 two-step; returns the JoinGroup response."""
    first = client.request(join(group, **kw))
    assert int(first.error_code) == ErrorCode.member_id_required and first.member_id
    response = client.request(join(group, member_id=first.member_id, **kw))
    assert int(response.error_code) == ErrorCode.none
    return response


def test_join_sync_heartbeat_and_their_errors(wbroker, topic):
    group = new_group()
    with WireClient(wbroker.bootstrap_servers) as a, WireClient(wbroker.bootstrap_servers) as b:
        ja = joined_member(a, group)
        m1 = ja.member_id
        assert (ja.generation_id, ja.leader, [m.member_id for m in ja.members]) == (1, m1, [m1])
        assert int(a.request(sync(group, 7, m1)).error_code) == ErrorCode.illegal_generation
        assert a.request(sync(group, 1, m1, [(m1, b"A1")])).assignment == b"A1"
        assert int(a.request(hb(group, 1, m1)).error_code) == ErrorCode.none
        assert int(a.request(hb(group, 0, m1)).error_code) == ErrorCode.illegal_generation
        assert int(a.request(hb(group, 1, "nobody")).error_code) == ErrorCode.unknown_member_id
        assert int(a.request(hb("no-such-group", 1, m1)).error_code) == ErrorCode.unknown_member_id

        # A second member: the first learns of the rebalance through its heartbeat.
        m2 = b.request(join(group)).member_id
        b.send(join(group, member_id=m2))
        assert int(a.request(hb(group, 1, m1)).error_code) == ErrorCode.rebalance_in_progress
        # Commits of the current generation are allowed while preparing (the revoke callback case).
        assert commit_errors(a, commit(group, topic, {0: (3, "")}, 1, m1)) == {0: ErrorCode.none}
        a.send(join(group, member_id=m1))
        _, jb = b.receive(JoinGroupRequest)
        _, ja = a.receive(JoinGroupRequest)
        assert (ja.generation_id, jb.generation_id, ja.leader) == (2, 2, m1)
        assert len(ja.members) == 2 and jb.members == ()
        b.send(sync(group, 2, m2))  # waits for the leader's assignment
        assert commit_errors(a, commit(group, topic, {0: (4, "")}, 2, m1)) == {0: ErrorCode.rebalance_in_progress}
        assert a.request(sync(group, 2, m1, [(m1, b"A"), (m2, b"B")])).assignment == b"A"
        _, sb = b.receive(SyncGroupRequest)
        assert sb.assignment == b"B"
        assert commit_errors(a, commit(group, topic, {0: (5, "")}, 1, m1)) == {0: ErrorCode.illegal_generation}
        assert fetched(a, group, topic)[0] == (3, "")


def test_join_rejects_bad_session_timeout_and_other_protocols(wbroker):
    group = new_group()
    with WireClient(wbroker.bootstrap_servers) as c:
        assert int(c.request(join(group, session_ms=10)).error_code) == ErrorCode.invalid_session_timeout
        assert int(c.request(join("", session_ms=6000)).error_code) == ErrorCode.invalid_group_id
        joined_member(c, group)
        assert int(c.request(join(group, protocol_type="connect")).error_code) == ErrorCode.inconsistent_group_protocol
        assert int(c.request(join(group, member_id="made-up")).error_code) == ErrorCode.unknown_member_id


def test_bad_commits_get_kafka_errors_and_never_touch_other_groups(wbroker, topic):
    good, bad = new_group(), new_group()
    with WireClient(wbroker.bootstrap_servers) as c:
        assert commit_errors(c, commit(good, topic, {0: (5, "a"), 1: (6, "b")})) == {0: 0, 1: 0}
        before = fetched(c, good, topic)
        assert before == {0: (5, "a"), 1: (6, "b"), 2: (-1, "")}
        # A missing partition and oversized metadata fail alone; the good partition is kept.
        errors = commit_errors(c, commit(bad, topic, {0: (1, ""), 9: (1, ""), 2: (1, "x" * 5000)}))
        assert errors == {0: ErrorCode.none, 9: ErrorCode.unknown_topic_or_partition, 2: ErrorCode.offset_metadata_too_large}
        assert commit_errors(c, commit(bad, "no-such-topic", {0: (1, "")})) == {0: ErrorCode.unknown_topic_or_partition}
        # A generation for a group that does not exist, and a stranger's commit to an existing group.
        assert commit_errors(c, commit(new_group(), topic, {0: (1, "")}, 3, "m")) == {0: ErrorCode.illegal_generation}
        assert commit_errors(c, commit(good, topic, {0: (99, "")}, 4, "intruder")) == {0: ErrorCode.unknown_member_id}
        # More than the offsets topic's max.message.bytes (10000 here): rejected as a whole.
        request = commit(good, topic, {p: (1, "z" * 4000) for p in range(3)})
        assert set(commit_errors(c, request).values()) == {28}  # INVALID_COMMIT_OFFSET_SIZE
        assert fetched(c, good, topic) == before
        assert fetched(c, bad, topic) == {0: (1, ""), 1: (-1, ""), 2: (-1, "")}


def test_static_member_rejoins_without_rebalance_and_fences_the_old_id(wbroker):
    group = new_group()
    with WireClient(wbroker.bootstrap_servers) as c:
        first = c.request(join(group, instance="host-1"))  # static members get their id at once
        assert int(first.error_code) == ErrorCode.none and first.generation_id == 1
        old = first.member_id
        assert c.request(sync(group, 1, old, [(old, b"mine")], instance="host-1")).assignment == b"mine"
        again = c.request(join(group, instance="host-1"))  # restarted: new member id, same generation
        assert int(again.error_code) == ErrorCode.none and again.generation_id == 1 and again.member_id != old
        assert c.request(sync(group, 1, again.member_id, instance="host-1")).assignment == b"mine"
        assert int(c.request(hb(group, 1, old, instance="host-1")).error_code) == ErrorCode.fenced_instance_id
        left = c.request(LeaveGroupRequest(group_id=group, members=(MemberIdentity(member_id="",
                                                                                   group_instance_id="host-1"),)))
        assert [int(m.error_code) for m in left.members] == [ErrorCode.none]
        described = c.request(DescribeGroupsRequest(groups=(group,), include_authorized_operations=False))
        assert described.groups[0].group_state == "Empty"


def test_admin_apis_list_describe_delete(wbroker, topic):
    active, idle = new_group(), new_group()
    with WireClient(wbroker.bootstrap_servers) as c:
        member = joined_member(c, active, metadata=subscription(topic)).member_id
        c.request(sync(active, 1, member, [(member, b"x")]))
        c.request(commit(active, topic, {0: (1, "")}, 1, member))
        c.request(commit(idle, topic, {0: (2, ""), 1: (2, "")}))
        listed = {x.group_id: (x.group_state, x.protocol_type) for x in c.request(ListGroupsRequest()).groups}
        assert listed[active] == ("Stable", "consumer") and listed[idle] == ("Empty", "")
        stable = c.request(ListGroupsRequest(states_filter=("stable",))).groups
        assert active in {x.group_id for x in stable} and idle not in {x.group_id for x in stable}
        d = c.request(DescribeGroupsRequest(groups=(active, "never-seen"), include_authorized_operations=False))
        assert d.groups[0].protocol_data == "range" and d.groups[0].members[0].member_assignment == b"x"
        assert d.groups[0].members[0].client_host == "/127.0.0.1"  # the member's address, as Kafka shows it
        assert d.groups[1].group_state == "Dead"
        deleted = c.request(OffsetDeleteRequest(group_id=active, topics=(OffsetDeleteRequestTopic(
            name=topic, partitions=(OffsetDeleteRequestPartition(partition_index=0),)),)))
        assert int(deleted.topics[0].partitions[0].error_code) == ErrorCode.group_subscribed_to_topic
        deleted = c.request(OffsetDeleteRequest(group_id=idle, topics=(OffsetDeleteRequestTopic(
            name=topic, partitions=(OffsetDeleteRequestPartition(partition_index=1),)),)))
        assert int(deleted.error_code) == 0 and fetched(c, idle, topic)[1] == (-1, "")
        results = c.request(DeleteGroupsRequest(groups_names=(active, idle, "never-seen"))).results
        assert [int(r.error_code) for r in results] == [ErrorCode.non_empty_group, ErrorCode.none, ErrorCode.group_id_not_found]
        assert fetched(c, idle, topic) == {0: (-1, ""), 1: (-1, ""), 2: (-1, "")}
        assert fetched(c, active, topic)[0] == (1, "")


@pytest.mark.parametrize("preferences,chosen", [
    ([["range"]], "range"),
    ([["range", "roundrobin"], ["roundrobin", "range"], ["roundrobin"]], "roundrobin"),
    ([["cooperative-sticky", "range"], ["cooperative-sticky", "range"]], "cooperative-sticky"),
    ([["a", "b"], ["b", "a"]], "a"),
])
def test_protocol_selection_by_vote(preferences, chosen):
    assert g.select_protocol(preferences) == chosen


def test_protocol_selection_without_a_common_protocol():
    with pytest.raises(ValueError):
        g.select_protocol([["range"], ["roundrobin"]])


def test_partition_for_matches_kafka():
    assert java_string_hash("hello") == 99162322  # Java: "hello".hashCode()
    assert java_string_hash("") == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert 0 <= partition_for("\u00e9t\u00e9-group", 50) < 50


@pytest.mark.parametrize("value", [OffsetAndMetadata(42, 3, "meta", 1000), OffsetAndMetadata(7, -1, "", 5, 900)])
def test_offset_value_round_trip(value):
    assert parse_offset_value(offset_value(value)) == value


@pytest.mark.parametrize("value,now,retention,empty_since,expired", [
    (OffsetAndMetadata(1, commit_timestamp_ms=100), 1100, 1000, 0, True),
    (OffsetAndMetadata(1, commit_timestamp_ms=100), 1099, 1000, 0, False),
    (OffsetAndMetadata(1, commit_timestamp_ms=100), 1100, 1000, 500, False),  # empty since 500
    (OffsetAndMetadata(1, commit_timestamp_ms=100, expire_timestamp_ms=200), 200, 10**9, 0, True),
])
def test_offset_expiry_rule(value, now, retention, empty_since, expired):
    assert is_expired(value, now, retention, empty_since) is expired
