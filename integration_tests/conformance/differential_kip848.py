"""The differential observation of KIP-848 consumer groups (registered in ``differential.OBSERVATIONS``).

One deterministic script on a cluster, with raw ConsumerGroupHeartbeat / ConsumerGroupDescribe
requests (``support.consumer_groups.Member``: exact epochs and owned partitions) and Kafka's Java
client with ``group.protocol=consumer``. What it returns is free of run noise: member ids become
"m1"/"m2", topic names are left out, uniform assignments become their sizes (which partitions
go where may legitimately differ; the invariants — every partition once, balance within one — are
returned as booleans).

Needs the test tree on ``sys.path`` (``support``: pytest's ``pythonpath = tests``).
"""

from __future__ import annotations

import datetime
import time
import uuid

from integration_tests import clusters as C

WAIT_S = 30.0


def _invariants(assignments: list[set], partitions: set) -> dict:
    sizes = sorted(len(a) for a in assignments)
    union = set().union(*assignments)
    return {"every_partition_once": union == partitions and sum(sizes) == len(partitions),
            "balanced_within_one": sizes[-1] - sizes[0] <= 1, "sizes": sizes}


def _wait_coordinator(client, *groups: str) -> None:
    """FindCoordinator for ``groups`` (Kafka creates ``__consumer_offsets`` on the first one), then wait
    (bounded) until ConsumerGroupDescribe stops answering NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
    COORDINATOR_NOT_AVAILABLE for each."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from support.consumer_groups import describe

    deadline = time.monotonic() + WAIT_S
    for group in groups:
        while True:
            client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=(group,)))
            if describe(client, group)[0].error_code not in (14, 15, 16):
                break
            assert time.monotonic() < deadline, f"the coordinator of {group} did not become ready"
            time.sleep(0.2)


def _java_rebalance(cluster: C.Cluster, java) -> dict:
    """Two Java members (``group.protocol=consumer``) of a 4-partition topic: the first owns all, the two
    split them, the first gets all back when the second leaves; the split's invariants."""
    from integration_tests.conformance.scenarios import wait_until
    from support.wire import WireClient

    topic, group, everything = cluster.create_topic(4, prefix="differential"), f"differential-{uuid.uuid4().hex[:8]}", {0, 1, 2, 3}
    with WireClient(cluster.bootstrap) as c:
        _wait_coordinator(c, group)
    split: dict = {}
    with java.group_member(topic, group) as a:
        wait_until(lambda: a.assignment() == everything, "the first Java member to own all 4 partitions", WAIT_S)
        with java.group_member(topic, group) as b:
            def settled() -> bool:
                pa, pb = a.assignment(), b.assignment()
                return bool(pa) and bool(pb) and (pa | pb) == everything and not (pa & pb)
            wait_until(settled, "the two Java members to split the partitions", WAIT_S)
            split = _invariants([{(topic, p) for p in a.assignment()}, {(topic, p) for p in b.assignment()}],
                                {(topic, p) for p in everything})
        wait_until(lambda: a.assignment() == everything, "the first Java member to get all back", WAIT_S)
    return {"split": split, "all_back": True}


def consumer_groups(cluster: C.Cluster) -> dict:
    """Epochs, states, the revocation step, fencing, leave, static leave, offsets by member epoch, the
    shared group APIs on a consumer group, bad heartbeats' errors, and Java client consumption."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest as DescribeV5
    from kio.schema.describe_groups.v6.request import DescribeGroupsRequest as DescribeV6
    from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.list_groups.v5.request import ListGroupsRequest
    from kio.schema.offset_commit.v8 import request as commit_v8
    from kio.schema.offset_commit.v9 import request as commit_v9
    from kio.schema.offset_fetch.v9.request import OffsetFetchRequest, OffsetFetchRequestGroup
    from support.consumer_groups import Member, describe
    from support.wire import WireClient

    topic = cluster.create_topic(4, prefix="differential")
    everything = {(topic, p) for p in range(4)}
    out: dict = {}
    with WireClient(cluster.bootstrap) as c:
        versions = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1")).api_keys
        out["api_versions"] = {str(k.api_key): [k.min_version, k.max_version] for k in versions
                               if k.api_key in (68, 69)}

        def state(group: str) -> list:
            (g,) = describe(c, group)
            return [g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name,
                    sorted(len({p for t in m.target_assignment.topic_partitions for p in t.partitions})
                           for m in g.members)]

        def hb(member, r) -> list:
            return [r.error_code, r.member_epoch, None if r.assignment is None else len(member.assigned)]

        group = f"differential-{uuid.uuid4().hex[:8]}"
        static_group = f"differential-{uuid.uuid4().hex[:8]}"
        other_groups = [f"differential-{uuid.uuid4().hex[:8]}" for _ in range(14)]
        _wait_coordinator(c, group, static_group, *other_groups)
        m1, m2 = Member(c, group, (topic,)), Member(c, group, (topic,))
        r = m1.join()
        steps = {"m1_join": [r.error_code, r.member_epoch]}
        # the first answer may carry the assignment or not yet (Apache Kafka 4.4.0 under load answered epoch 2
        # with no partitions, then gave all 4 in a later heartbeat): heartbeat until m1 owns all, bounded
        deadline = time.monotonic() + WAIT_S
        while len(m1.assigned) < 4:
            m1.beat()
            assert time.monotonic() < deadline, "the first member was never assigned the 4 partitions"
            time.sleep(0.1)
        # the epoch that brings the assignment is relative: under load Apache Kafka bumped the group epoch
        # once more (its coordinator saw the new topic's partitions after m1's join: epoch 3, not 2)
        r = m1.beat()
        steps["m1_beat"] = [r.error_code, r.member_epoch == m1.epoch, r.assignment is None]
        g = state(group)
        steps["after_m1"] = g[:2] + [g[2] == g[3] == m1.epoch] + g[4:]
        owned = set(m1.assigned)
        r = m2.join()
        # the target assignment may wait for group.consumer.assignment.interval.ms (1 s, KIP-1263):
        # heartbeat (m1 still owning everything) until m1 is told to revoke, bounded
        steps["m2_join"] = [r.error_code, len(m2.assigned)]
        deadline = time.monotonic() + WAIT_S
        while True:
            epoch_before = m1.epoch
            r = m1.beat(owned=owned)
            if m1.assigned != owned:
                break
            m2.beat()
            assert time.monotonic() < deadline, "the second member's target assignment was never computed"
            time.sleep(0.1)
        steps["m1_told_to_revoke"] = [r.error_code, r.member_epoch == epoch_before, len(m1.assigned)]
        steps["reconciling"] = state(group)[1]
        steps["m2_waits"] = [hb(m2, m2.beat())[0], len(m2.assigned)]
        steps["m1_still_owns"] = [hb(m1, m1.beat(owned=owned))[0], m1.epoch == epoch_before]
        steps["m2_still_waits"] = [hb(m2, m2.beat())[0], len(m2.assigned)]
        r = m1.beat(owned=m1.assigned)
        steps["m1_revoked"] = [r.error_code, r.member_epoch == epoch_before + 1]
        r = m2.beat()
        steps["m2_gets_freed"] = [r.error_code, r.member_epoch == m1.epoch, m2.assigned == owned - m1.assigned]
        steps["m1_stable"], steps["m2_stable"] = hb(m1, m1.beat())[::2], hb(m2, m2.beat())[::2]
        steps["stable"] = state(group)[:2] + [state(group)[2] == state(group)[3] == m1.epoch] + state(group)[4:]
        steps["split"] = _invariants([m1.assigned, m2.assigned], everything)
        steps["fenced_ahead"] = m1.beat(epoch=m1.epoch + 5).error_code
        steps["fenced_behind"] = m1.beat(epoch=m1.epoch - 1, owned=everything).error_code
        steps["unknown_member"] = Member(c, group, (topic,)).beat(epoch=1, owned=set()).error_code
        steps["unknown_group"] = Member(c, other_groups[0], (topic,)).beat(
            epoch=1, owned=set()).error_code

        def commit(epoch, member_id, module=commit_v9, partition=0) -> int:
            r = c.request(module.OffsetCommitRequest(
                group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id, group_instance_id=None,
                topics=(module.OffsetCommitRequestTopic(name=topic, partitions=(module.OffsetCommitRequestPartition(
                    partition_index=partition, committed_offset=3, committed_leader_epoch=-1,
                    committed_metadata=""),)),)))
            return r.topics[0].partitions[0].error_code

        def fetch(member_id, epoch) -> list:
            (g,) = c.request(OffsetFetchRequest(groups=(OffsetFetchRequestGroup(
                group_id=group, member_id=member_id, member_epoch=epoch, topics=None),), require_stable=False)).groups
            return [g.error_code, sorted([p.partition_index, p.committed_offset] for t in g.topics for p in t.partitions)]

        kept_by_m1, given_to_m2 = min(p for _, p in m1.assigned), min(p for _, p in m2.assigned)
        steps["commit"] = commit(m1.epoch, m1.member_id)
        # KIP-1251 (Kafka 4.3): an older epoch may commit the partitions the member held at that epoch
        steps["commit_older_epoch_kept_partition"] = commit(m1.epoch - 1, m1.member_id, partition=kept_by_m1)
        steps["commit_older_epoch_new_partition"] = commit(m2.epoch - 1, m2.member_id, partition=given_to_m2)
        steps["commit_ahead"] = commit(m1.epoch + 1, m1.member_id)
        steps["commit_unknown_member"] = commit(m1.epoch, "nobody")
        steps["commit_no_member"] = commit(-1, "")
        steps["commit_v8"] = commit(m1.epoch, m1.member_id, commit_v8)
        steps["fetch"] = fetch(m1.member_id, m1.epoch)
        steps["fetch_ahead"] = fetch(m1.member_id, m1.epoch + 1)[0]
        steps["fetch_older"] = fetch(m1.member_id, m1.epoch - 1)[0]
        steps["fetch_admin"] = fetch(None, -1)
        listed = c.request(ListGroupsRequest(states_filter=(), types_filter=("consumer",))).groups
        steps["listed"] = [[g.protocol_type, g.group_state, g.group_type] for g in listed if g.group_id == group]
        (d5,) = c.request(DescribeV5(groups=(group,), include_authorized_operations=False)).groups
        steps["describe_groups_v5"] = [d5.error_code, d5.group_state, d5.protocol_type, len(d5.members)]
        (d6,) = c.request(DescribeV6(groups=(group,), include_authorized_operations=False)).groups
        steps["describe_groups_v6"] = [d6.error_code, (d6.error_message or "").replace(group, "G")]
        steps["delete_non_empty"] = c.request(DeleteGroupsRequest(groups_names=(group,))).results[0].error_code
        steps["classic_join"] = c.request(JoinGroupRequest(
            group_id=group, session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
            protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),))).error_code
        steps["foreign_protocol_join"] = c.request(JoinGroupRequest(
            group_id=group, session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
            protocol_type="connect", protocols=(JoinGroupRequestProtocol(name="x", metadata=b""),))).error_code
        steps["m2_leave"] = [m2.leave().error_code]
        deadline = time.monotonic() + WAIT_S
        while len(m1.assigned) < 4:  # bounded: the next assignment may wait for the interval
            m1.beat()
            assert time.monotonic() < deadline, "the partitions of the member that left were never reassigned"
            time.sleep(0.1)
        steps["after_leave"] = state(group)[:2] + state(group)[4:]
        m1.leave()
        steps["empty"] = [state(group)[1], state(group)[5]]
        steps["delete_empty"] = c.request(DeleteGroupsRequest(groups_names=(group,))).results[0].error_code
        steps["deleted"] = state(group)[0]
        out["two_members"] = steps

        s = Member(c, static_group, (topic,), instance_id="instance-a", assignor="range")
        d = Member(c, static_group, (topic,))
        s.join(), d.join()
        deadline = time.monotonic() + WAIT_S
        while state(static_group)[1] != "Stable":  # bounded: the second member's assignment may wait 1 s
            s.beat(), d.beat()
            assert time.monotonic() < deadline, "the static group never became Stable"
            time.sleep(0.1)
        kept = set(s.assigned)
        static = {"range": state(static_group)[:2] + state(static_group)[4:],
                  "leave_static": [s.leave(epoch=-2).member_epoch]}
        back = Member(c, static_group, (topic,), instance_id="instance-a")
        r = back.join()
        static["rejoin"] = [r.error_code, r.member_epoch == s.epoch, back.assigned == kept]
        static["old_member_id"] = s.beat().error_code
        static["unreleased"] = Member(c, static_group, (topic,), instance_id="instance-a").join().error_code
        static["after"] = state(static_group)[:2] + state(static_group)[4:]
        (gd,) = describe(c, static_group)
        static["members"] = sorted(([x.member_type, x.client_id, x.client_host, len(x.subscribed_topic_names),
                                     x.subscribed_topic_regex, x.rack_id, x.instance_id] for x in gd.members),
                                   key=lambda row: str(row))
        back.leave(), d.leave()
        out["static"] = static

        bad = {}
        for i, (name, fields, epoch) in enumerate((
            ("no_rebalance_timeout", {"rebalance_timeout": datetime.timedelta(milliseconds=-1)}, 0),
            ("owned_on_join", {"topic_partitions": None}, 0),
            ("no_subscription", {"subscribed_topic_names": None}, 0),
            ("empty_member_id", {"member_id": ""}, 0),
            ("empty_instance_id", {"instance_id": ""}, 0),
            ("static_leave_without_instance", {}, -2),
            ("epoch_below_minus_two", {}, -3),
            ("unknown_assignor", {"server_assignor": "sticky"}, 0),
            ("bad_regex", {"subscribed_topic_regex": "a(b", "subscribed_topic_names": None}, 0),
        ), start=1):
            r = Member(c, other_groups[i], (topic,)).request(epoch, set(), first=True, **fields)
            bad[name] = [r.error_code, r.member_epoch]
        out["bad_heartbeats"] = bad

        # the group epoch a first member lands at (Kafka 4.3.1: 2 with a subscription, 1 without; an
        # existing Empty group: +1)
        first = {}
        r = Member(c, other_groups[10], ("no-such-topic",)).join()
        first["missing_topic"] = [r.error_code, r.member_epoch, describe(c, other_groups[10])[0].group_epoch]
        r = Member(c, other_groups[11], ()).join()
        first["empty_subscription"] = [r.error_code, r.member_epoch]
        gone = Member(c, other_groups[12], (topic,))
        gone.join()
        gone.leave()
        (g,) = describe(c, other_groups[12])
        r = Member(c, other_groups[12], (topic,)).join()
        first["left_then_rejoined"] = [g.group_state, g.group_epoch, r.error_code, describe(c, other_groups[12])[0].group_epoch]
        out["first_member_epochs"] = first

        # a regex subscription: its partitions, then those of a new matching topic (Kafka resolves
        # regexes in the background and sees new topics within ~10 s: polled, bounded; sizes compared)
        prefix = f"rx{uuid.uuid4().hex[:6]}"
        regex_topic = cluster.create_topic(2, prefix=prefix)
        rm = Member(c, other_groups[13], None, regex=f"{prefix}-.*")
        rm.join()

        def poll(count: int) -> int:
            deadline = time.monotonic() + WAIT_S
            while len(rm.assigned) < count and time.monotonic() < deadline:
                time.sleep(0.2)
                rm.beat()
            return len(rm.assigned)

        regex = {"first_topic": poll(2)}
        cluster.create_topic(1, prefix=prefix)
        regex["new_topic"] = poll(3)
        regex["topics"] = len({t for t, _ in rm.assigned}), regex_topic in {t for t, _ in rm.assigned}
        out["regex"] = regex

    from integration_tests.conformance.drivers.java_client import JavaClientDriver, unavailable
    from integration_tests.helpers import produce

    if unavailable() is None:
        java_topic = cluster.create_topic(2, prefix="differential")
        produce(cluster.bootstrap, java_topic, [{"value": b"v%d" % i, "partition": i % 2} for i in range(10)])
        java = JavaClientDriver(cluster.bootstrap, group_protocol="consumer")
        java_group = f"differential-{uuid.uuid4().hex[:8]}"
        with WireClient(cluster.bootstrap) as c:
            _wait_coordinator(c, java_group)
        t0 = time.monotonic()
        got = java.group_consume(java_topic, java_group, 10)
        with WireClient(cluster.bootstrap) as c:
            (g,) = c.request(OffsetFetchRequest(groups=(OffsetFetchRequestGroup(
                group_id=java_group, member_id=None, member_epoch=-1, topics=None),), require_stable=False)).groups
            (desc,) = describe(c, java_group)
        out["java_client"] = {"records": len(got), "committed": sorted([p.partition_index, p.committed_offset]
                                                                       for t in g.topics for p in t.partitions),
                              "state_after_close": desc.group_state, "within_wait": time.monotonic() - t0 < WAIT_S}
        out["java_client"]["rebalance"] = _java_rebalance(cluster, java)
    return out
