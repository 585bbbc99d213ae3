"""KIP-848 consumer groups at the wire level: epochs, the revocation step, fencing, leaving, static
members, regex subscriptions, new partitions, the shared APIs (offsets, ListGroups, DescribeGroups,
DeleteGroups, JoinGroup) and Kafka's error codes for bad requests, over a raw kio client
(:class:`support.consumer_groups.Member`), which lets a test choose epochs and owned partitions.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest as HeartbeatV0
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest as DescribeGroupsV5
from kio.schema.describe_groups.v6.request import DescribeGroupsRequest as DescribeGroupsV6
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.offset_commit.v8.request import OffsetCommitRequest as CommitV8
from kio.schema.offset_commit.v8.request import OffsetCommitRequestPartition as PartV8
from kio.schema.offset_commit.v8.request import OffsetCommitRequestTopic as TopicV8
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest, OffsetFetchRequestGroup

from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.errors import ErrorCode
from support.groups import wait_for_group_coordinator
from support.consumer_groups import Member, describe
from support.topics import create_topic
from support.waiting import wait_until
from support.wire import WireClient

# every heartbeat may compute a new target assignment (Kafka 4.3's default interval is 1 s; see
# test_the_assignment_interval_holds_the_group_in_assigning for it)
CONFIG = {"group.consumer.heartbeat.interval.ms": "500", "group.consumer.session.timeout.ms": "45000",
          "group.consumer.assignment.interval.ms": "0",
          "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


@pytest.fixture(scope="module")
def cbroker(tmp_path_factory):
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("kip848-wire"), config=CONFIG) as b:
        wait_for_group_coordinator(b.bootstrap_servers)  # as clients do first
        yield b


@pytest.fixture
def client(cbroker):
    with WireClient(cbroker.bootstrap_servers) as c:
        yield c


@pytest.fixture
def topic(cbroker):
    return create_topic(cbroker.bootstrap_servers, f"k-{uuid.uuid4().hex[:8]}", 4)


def group_name() -> str:
    return f"cg-{uuid.uuid4().hex[:8]}"


def test_join_gets_every_partition_and_the_heartbeat_interval(client, topic):
    group = group_name()
    m = Member(client, group, (topic,))
    r = m.join()
    # as Kafka 4.3.1: the first member of a new group lands at epoch 2
    assert (r.error_code, r.member_id, r.member_epoch) == (0, m.member_id, 2)
    assert r.heartbeat_interval == datetime.timedelta(milliseconds=500)
    assert m.assigned == {(topic, p) for p in range(4)}
    # a heartbeat without changes: same epoch, no assignment sent
    r = m.beat()
    assert (r.error_code, r.member_epoch, r.assignment) == (0, 2, None)
    (g,) = describe(client, group)
    assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (
        0, "Stable", 2, 2, "uniform")
    assert [(x.member_id, x.member_epoch, x.subscribed_topic_names, x.member_type) for x in g.members] == [
        (m.member_id, 2, (topic,), 1)]


def test_a_partition_moves_only_after_its_owner_revoked_it(client, topic):
    group = group_name()
    m1, m2 = Member(client, group, (topic,)), Member(client, group, (topic,))
    m1.join()
    r = m2.join()
    # group epoch 3: m2 is at epoch 3 but gets nothing yet, every partition is still m1's
    assert (r.error_code, r.member_epoch, m2.assigned) == (0, 3, set())
    (g,) = describe(client, group)
    assert (g.group_state, g.group_epoch, g.assignment_epoch) == ("Reconciling", 3, 3)
    targets = {x.member_id: {p for t in x.target_assignment.topic_partitions for p in t.partitions} for x in g.members}
    assert sorted(len(v) for v in targets.values()) == [2, 2] and targets[m1.member_id] | targets[m2.member_id] == set(range(4))
    # m1 is told to keep only its target; its epoch stays 2 until it revoked the rest
    owned_before = set(m1.assigned)
    r = m1.beat(owned=owned_before)
    assert (r.member_epoch, len(m1.assigned)) == (2, 2)
    revoked = owned_before - m1.assigned
    # m2 still gets nothing while m1 reports owning the revoked partitions
    assert m2.beat().assignment is None and m2.assigned == set()
    m1.beat(owned=owned_before)
    assert m2.beat().assignment is None
    # m1 reports the revocation done: it moves to epoch 3, and then m2 receives the freed partitions
    r = m1.beat(owned=m1.assigned)
    assert r.member_epoch == 3
    r = m2.beat()
    assert m2.assigned == revoked and r.member_epoch == 3
    m1.beat(), m2.beat()
    (g,) = describe(client, group)
    assert g.group_state == "Stable"


def test_epoch_checks_fence_stale_and_future_epochs(client, topic):
    group = group_name()
    m = Member(client, group, (topic,))
    m.join()
    assert m.beat(epoch=5).error_code == ErrorCode.fenced_member_epoch
    assert m.beat(epoch=0, owned=set()).error_code == ErrorCode.invalid_request  # a rejoin needs its subscription
    # the previous epoch with owned partitions within the assignment is accepted (a lost response)
    other = Member(client, group, (topic,))
    other.join()
    m.beat()  # revoke step
    m.beat(owned=m.assigned)  # now at epoch 3, previous epoch 2
    assert m.epoch == 3
    assert m.beat(epoch=2, owned=m.assigned).error_code == 0
    assert m.beat(epoch=2, owned={(topic, p) for p in range(4)}).error_code == ErrorCode.fenced_member_epoch
    stranger = Member(client, group, (topic,))
    assert stranger.beat(epoch=3, owned=set()).error_code == ErrorCode.unknown_member_id
    assert Member(client, group_name(), (topic,)).beat(epoch=1, owned=set()).error_code == ErrorCode.group_id_not_found


def test_leave_gives_the_partitions_to_the_others(client, topic):
    group = group_name()
    m1, m2 = Member(client, group, (topic,)), Member(client, group, (topic,))
    m1.join(), m2.join()
    for _ in range(3):
        m1.beat(), m2.beat()
    assert len(m1.assigned) == len(m2.assigned) == 2
    r = m2.leave()
    assert (r.error_code, r.member_epoch, r.member_id) == (0, -1, m2.member_id)
    r = m1.beat()
    assert m1.assigned == {(topic, p) for p in range(4)} and r.member_epoch == 4
    assert m2.leave().error_code == ErrorCode.unknown_member_id


def test_static_member_leaves_temporarily_and_comes_back_with_its_assignment(client, topic):
    group = group_name()
    s = Member(client, group, (topic,), instance_id="instance-a")
    d = Member(client, group, (topic,))
    s.join(), d.join()
    for _ in range(3):
        s.beat(), d.beat()
    kept = set(s.assigned)
    assert s.leave(epoch=-2).member_epoch == -2
    # the instance id is held: another member id may take it only after the -2 leave
    back = Member(client, group, (topic,), instance_id="instance-a")
    r = back.join()
    assert r.error_code == 0 and back.assigned == kept
    again = Member(client, group, (topic,), instance_id="instance-a")
    assert again.join().error_code == ErrorCode.unreleased_instance_id
    assert s.beat().error_code == ErrorCode.fenced_instance_id  # the old member id is fenced
    (g,) = describe(client, group)
    assert {x.member_id for x in g.members} == {back.member_id, d.member_id}
    assert Member(client, group, (topic,), instance_id="nobody").leave(epoch=-2).error_code == \
        ErrorCode.unknown_member_id


def test_range_assignor_regex_subscription_and_new_partitions(cbroker, client):
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    a = create_topic(cbroker.bootstrap_servers, f"{prefix}-a", 2)
    group = group_name()
    m = Member(client, group, None, regex=f"{prefix}-.*", assignor="range")
    m.join()
    assert m.assigned == {(a, 0), (a, 1)}
    (g,) = describe(client, group)
    assert (g.assignor_name, g.members[0].subscribed_topic_regex) == ("range", f"{prefix}-.*")
    # a new topic matching the regex and new partitions each trigger a new group epoch
    b = create_topic(cbroker.bootstrap_servers, f"{prefix}-b", 1)
    r = m.beat()
    assert r.member_epoch == 3 and m.assigned == {(a, 0), (a, 1), (b, 0)}
    admin = AdminClient({"bootstrap.servers": cbroker.bootstrap_servers})
    admin.create_partitions([NewPartitions(a, 3)])[a].result(20)
    r = m.beat()
    assert r.member_epoch == 4 and (a, 2) in m.assigned


@pytest.mark.parametrize("fields,epoch,error,message", [
    ({"group_id": ""}, 0, ErrorCode.invalid_request, "GroupId can't be empty."),
    ({"member_id": ""}, 0, ErrorCode.invalid_request, "MemberId can't be empty."),
    ({"instance_id": ""}, 0, ErrorCode.invalid_request, "InstanceId can't be empty."),
    ({"rack_id": ""}, 0, ErrorCode.invalid_request, "RackId can't be empty."),
    ({"rebalance_timeout": datetime.timedelta(milliseconds=-1)}, 0, ErrorCode.invalid_request,
     "RebalanceTimeoutMs must be provided in first request."),
    ({"topic_partitions": None}, 0, ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining."),
    ({"subscribed_topic_names": None}, 0, ErrorCode.invalid_request,
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    ({}, -2, ErrorCode.invalid_request, "InstanceId can't be null."),
    ({}, -3, ErrorCode.invalid_request, "MemberEpoch is invalid."),
    ({"server_assignor": "sticky"}, 0, ErrorCode.unsupported_assignor,
     "ServerAssignor sticky is not supported. Supported assignors: uniform, range."),
    ({"subscribed_topic_regex": "a(b"}, 0, ErrorCode.invalid_regular_expression,
     "SubscribedTopicRegex 'a(b' is not a valid RE2 regular expression: missing ): a(b"),
    ({"subscribed_topic_regex": r"(a)\1"}, 0, ErrorCode.invalid_regular_expression, None),  # no backreferences
])
def test_bad_heartbeats_get_kafkas_errors_and_change_nothing(client, topic, fields, epoch, error, message):
    group = group_name()
    m = Member(client, group, (topic,))
    r = m.request(epoch, set(), first=True, **fields)
    assert r.error_code == error
    if message:
        assert r.error_message == message
    assert (r.member_epoch, r.assignment) == (0, None)
    (g,) = describe(client, group)
    assert g.error_code == ErrorCode.group_id_not_found  # nothing was created


def test_a_backtracking_regex_cannot_stall_the_broker(cbroker, client):
    # (a+)+b over a 249-character name of a's takes exponential time in a backtracking engine;
    # RE2 (as Kafka's RE2J) answers in linear time; a stalled broker fails the client's 20 s socket timeout
    create_topic(cbroker.bootstrap_servers, "a" * 249, 1)
    m = Member(client, group_name(), None, regex="(a+)+b")
    assert m.join().error_code == 0 and m.assigned == set()
    other = Member(client, group_name(), None, regex="a+")
    assert other.join().error_code == 0 and other.assigned == {("a" * 249, 0)}


def test_v0_generates_the_member_id(client, topic):
    r = client.request(HeartbeatV0(group_id=group_name(), member_id="", member_epoch=0, instance_id=None,
                                   rack_id=None, rebalance_timeout=datetime.timedelta(seconds=30),
                                   subscribed_topic_names=(topic,), server_assignor=None, topic_partitions=()))
    assert r.error_code == 0 and r.member_id and r.member_epoch == 2


def _commit(client, group, topic, epoch, member_id, request=OffsetCommitRequest, part=OffsetCommitRequestPartition,
            top=OffsetCommitRequestTopic):
    r = client.request(request(group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
                               group_instance_id=None, topics=(top(name=topic, partitions=(
                                   part(partition_index=0, committed_offset=7, committed_leader_epoch=-1,
                                        committed_metadata="m"),)),)))
    return r.topics[0].partitions[0].error_code


def _fetch(client, group, member_id=None, epoch=-1):
    (g,) = client.request(OffsetFetchRequest(groups=(OffsetFetchRequestGroup(
        group_id=group, member_id=member_id, member_epoch=epoch, topics=None),), require_stable=False)).groups
    return g.error_code, {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}


def test_offsets_use_the_member_epoch(client, topic):
    group = group_name()
    m = Member(client, group, (topic,))
    m.join()
    assert _commit(client, group, topic, m.epoch, m.member_id) == 0
    assert _commit(client, group, topic, m.epoch - 1, m.member_id) == ErrorCode.stale_member_epoch
    assert _commit(client, group, topic, m.epoch + 1, m.member_id) == ErrorCode.stale_member_epoch
    assert _commit(client, group, topic, m.epoch, "nobody") == ErrorCode.unknown_member_id
    assert _commit(client, group, topic, -1, "") == ErrorCode.unknown_member_id  # the group has members
    assert _commit(client, group, topic, m.epoch, m.member_id, CommitV8, PartV8, TopicV8) == \
        ErrorCode.unsupported_version
    assert _fetch(client, group) == (0, {(topic, 0): 7})
    assert _fetch(client, group, m.member_id, m.epoch) == (0, {(topic, 0): 7})
    assert _fetch(client, group, m.member_id, m.epoch + 1)[0] == ErrorCode.stale_member_epoch
    assert _fetch(client, group, "nobody", 0)[0] == ErrorCode.unknown_member_id
    m.leave()
    assert _commit(client, group, topic, -1, "") == 0  # an empty group takes admin commits


def test_an_older_epoch_commits_only_partitions_owned_since_then(client, topic):
    """KIP-1251 (Kafka 4.3): a commit with an older member epoch is accepted per partition when the member
    has owned the partition since that epoch; partitions it got later get STALE_MEMBER_EPOCH."""
    group = group_name()
    m1, m2 = Member(client, group, (topic,)), Member(client, group, (topic,))
    m1.join()
    m2.join()
    owned = set(m1.assigned)
    m1.beat(owned=owned)  # told to revoke
    m1.beat(owned=m1.assigned)  # revoked: epoch 3, keeps 2 partitions it has had since epoch 2
    m2.beat()  # m2 gets the freed partitions at epoch 3
    assert (m1.epoch, m2.epoch, len(m2.assigned)) == (3, 3, 2)
    kept, given = min(p for _, p in m1.assigned), min(p for _, p in m2.assigned)

    def commit(member, epoch, partition):
        r = client.request(OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=epoch, member_id=member.member_id, group_instance_id=None,
            topics=(OffsetCommitRequestTopic(name=topic, partitions=tuple(OffsetCommitRequestPartition(
                partition_index=p, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")
                for p in partition)),)))
        return [p.error_code for p in r.topics[0].partitions]

    assert commit(m1, 2, [kept]) == [0]
    assert commit(m2, 2, [given]) == [ErrorCode.stale_member_epoch]
    assert commit(m1, 2, [kept, given]) == [0, ErrorCode.stale_member_epoch]  # per partition
    assert commit(m1, 1, [kept]) == [ErrorCode.stale_member_epoch]
    assert _fetch(client, group)[1] == {(topic, kept): 1}


def test_shared_group_apis(client, topic):
    group = group_name()
    m = Member(client, group, (topic,))
    m.join()
    listed = client.request(ListGroupsRequest(states_filter=(), types_filter=("consumer",))).groups
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed if g.group_id == group] == [
        (group, "consumer", "Stable", "consumer")]
    assert group not in {g.group_id for g in client.request(
        ListGroupsRequest(states_filter=(), types_filter=("classic",))).groups}
    (d5,) = client.request(DescribeGroupsV5(groups=(group,), include_authorized_operations=False)).groups
    assert (d5.error_code, d5.group_state) == (0, "Dead")
    (d6,) = client.request(DescribeGroupsV6(groups=(group,), include_authorized_operations=False)).groups
    assert (d6.error_code, d6.error_message) == (ErrorCode.group_id_not_found, f"Group {group} is not a classic group.")
    join = client.request(JoinGroupRequest(
        group_id=group, session_timeout=datetime.timedelta(seconds=10), rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="", group_instance_id=None, protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"),)))
    assert join.error_code == ErrorCode.inconsistent_group_protocol
    (res,) = client.request(DeleteGroupsRequest(groups_names=(group,))).results
    assert res.error_code == ErrorCode.non_empty_group
    _commit(client, group, topic, m.epoch, m.member_id)
    delete = OffsetDeleteRequest(group_id=group, topics=(OffsetDeleteRequestTopic(
        name=topic, partitions=(OffsetDeleteRequestPartition(partition_index=0),)),))
    r = client.request(delete)
    assert (r.error_code, r.topics[0].partitions[0].error_code) == (0, ErrorCode.group_subscribed_to_topic)
    m.leave()
    (g,) = describe(client, group)
    assert (g.group_state, g.members) == ("Empty", ())
    (res,) = client.request(DeleteGroupsRequest(groups_names=(group,))).results
    assert res.error_code == 0
    assert describe(client, group)[0].error_code == ErrorCode.group_id_not_found
    assert _fetch(client, group) == (0, {})
    (miss,) = describe(client, "")
    assert miss.error_code == ErrorCode.invalid_group_id


def test_a_classic_group_with_members_is_not_a_consumer_group(client, topic):
    group = group_name()
    join = JoinGroupRequest(
        group_id=group, session_timeout=datetime.timedelta(seconds=10), rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="", group_instance_id=None, protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),))
    first = client.request(join)
    assert first.error_code == ErrorCode.member_id_required
    assert client.request(dataclasses.replace(join, member_id=first.member_id)).error_code == 0
    r = Member(client, group, (topic,)).join()
    assert (r.error_code, r.error_message) == (ErrorCode.group_id_not_found, f"Group {group} is not a consumer group.")
    (g,) = describe(client, group)
    assert (g.error_code, g.error_message) == (ErrorCode.group_id_not_found, f"Group {group} is not a consumer group.")


def test_an_empty_classic_group_becomes_a_consumer_group_and_keeps_its_offsets(client, topic):
    group = group_name()
    assert _commit(client, group, topic, -1, "") == 0  # a classic group with offsets only
    m = Member(client, group, (topic,))
    assert m.join().error_code == 0
    assert _fetch(client, group, m.member_id, m.epoch) == (0, {(topic, 0): 7})


def test_session_timeout_fences_a_silent_member(tmp_path, topic):
    with EmbeddedBroker(data_dir=tmp_path, config={**CONFIG, "group.consumer.session.timeout.ms": "1000"}) as b:
        wait_for_group_coordinator(b.bootstrap_servers)  # as clients do first
        t = create_topic(b.bootstrap_servers, "expiring", 2)
        with WireClient(b.bootstrap_servers) as c:
            group = group_name()
            m = Member(c, group, (t,))
            m.join()
            wait_until(lambda: describe(c, group)[0].group_state == "Empty", "the silent member expired", 15)
            (g,) = describe(c, group)
            assert g.group_epoch == 3 and g.members == ()
            assert m.beat().error_code == ErrorCode.unknown_member_id


def test_restart_keeps_members_epochs_and_offsets(tmp_path):
    with EmbeddedBroker(data_dir=tmp_path, config=CONFIG) as b:
        wait_for_group_coordinator(b.bootstrap_servers)  # as clients do first
        t = create_topic(b.bootstrap_servers, "durable", 2)
        with WireClient(b.bootstrap_servers) as c:
            group = group_name()
            m = Member(c, group, (t,))
            m.join()
            assert _commit(c, group, t, m.epoch, m.member_id) == 0
            member_id, assigned = m.member_id, set(m.assigned)
    with EmbeddedBroker(data_dir=tmp_path, config=CONFIG) as b:
        wait_for_group_coordinator(b.bootstrap_servers)  # as clients do first
        with WireClient(b.bootstrap_servers) as c:
            (g,) = describe(c, group)
            assert (g.group_state, g.group_epoch, [x.member_id for x in g.members]) == ("Stable", 2, [member_id])
            m.client = c
            r = m.beat()
            assert (r.error_code, r.member_epoch) == (0, 2) and m.assigned == assigned
            assert _fetch(c, group, m.member_id, m.epoch) == (0, {(t, 0): 7})


def test_the_assignment_interval_holds_the_group_in_assigning(tmp_path):
    """KIP-1263 (Kafka 4.3): a new target assignment at most once per group.consumer.assignment.interval.ms."""
    with EmbeddedBroker(data_dir=tmp_path, config={**CONFIG, "group.consumer.assignment.interval.ms": "600000"}) as b:
        wait_for_group_coordinator(b.bootstrap_servers)  # as clients do first
        t = create_topic(b.bootstrap_servers, "paced", 2)
        with WireClient(b.bootstrap_servers) as c:
            group = group_name()
            m1, m2 = Member(c, group, (t,)), Member(c, group, (t,))
            assert m1.join().member_epoch == 2 and len(m1.assigned) == 2  # the first assignment is at once
            r = m2.join()
            # the second member waits at the current assignment epoch with nothing; m1 keeps everything
            assert (r.error_code, r.member_epoch, m2.assigned) == (0, 2, set())
            assert m1.beat().assignment is None and len(m1.assigned) == 2
            (g,) = describe(c, group)
            assert (g.group_state, g.group_epoch, g.assignment_epoch) == ("Assigning", 3, 2)
