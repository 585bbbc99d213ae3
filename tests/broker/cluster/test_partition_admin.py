"""The controller's admin rules in-process (controller/partition_admin.py, Kafka's ReplicationControlManager):
ElectLeaders PREFERRED/UNCLEAN and their errors, reassignment merge / completion / revert (KIP-455), new partitions
continuing the rack-unaware placement, DeleteTopics records; and the single-node broker's answers to ElectLeaders and
AlterPartitionReassignments over the wire."""

from __future__ import annotations

import random

import pytest

from pyspark_kafka.broker.controller import partition_admin as pa
from pyspark_kafka.broker.controller.image import ClusterImage, PartitionState
from pyspark_kafka.broker.errors import ErrorCode


def image(partitions: dict[int, PartitionState], fenced=(), brokers=(0, 1, 2)) -> ClusterImage:
    img = ClusterImage()
    for offset, b in enumerate(brokers):
        img.apply(offset, {"type": "broker", "id": b, "epoch": offset, "host": "h", "port": 1})
        if b not in fenced:
            img.apply(offset, {"type": "unfence", "id": b, "epoch": offset})
    img.apply(10, {"type": "topic", "name": "t", "topic_id": "id-t", "configs": {}})
    for p, st in partitions.items():
        img.apply(11 + p, st.record("t", p))
    return img


def test_preferred_election_moves_leadership_to_the_first_replica_in_the_isr():
    img = image({0: PartitionState((0, 1, 2), (0, 1, 2), 1, 3, 7)})
    results, records = pa.elect_leaders(img, pa.PREFERRED, {"t": [0]})
    assert results == {"t": [{"partition": 0, "error_code": 0, "error_message": None}]}
    assert records[0]["leader"] == 0 and records[0]["leader_epoch"] == 4 and records[0]["partition_epoch"] == 8


@pytest.mark.parametrize("state,fenced,election,expected", [
    (PartitionState((0, 1), (0, 1), 0), (), pa.PREFERRED, ErrorCode.election_not_needed),
    (PartitionState((0, 1), (1,), 1), (), pa.PREFERRED, ErrorCode.preferred_leader_not_available),  # not in ISR
    (PartitionState((0, 1), (0, 1), 1), (0,), pa.PREFERRED, ErrorCode.preferred_leader_not_available),  # fenced
    (PartitionState((0, 1), (0, 1), 1), (), pa.UNCLEAN, ErrorCode.election_not_needed),  # it has a leader
    (PartitionState((0, 1), (0,), -1), (0, 1), pa.UNCLEAN, ErrorCode.eligible_leaders_not_available),
])
def test_election_errors_are_kafkas(state, fenced, election, expected):
    code, message, new = pa.elect_one(image({0: state}, fenced), "t", 0, election)
    assert code == expected and new is None


def test_unclean_election_prefers_the_isr_then_any_live_replica():
    code, _, new = pa.elect_one(image({0: PartitionState((0, 1, 2), (0,), -1)}, fenced=(0,)), "t", 0, pa.UNCLEAN)
    assert code == 0 and new.leader == 1 and new.isr == (1,)  # data loss: only the new leader is in sync
    code, _, new = pa.elect_one(image({0: PartitionState((0, 1, 2), (2,), -1)}, fenced=(0,)), "t", 0, pa.UNCLEAN)
    assert code == 0 and new.leader == 2 and new.isr == (2,)


def test_electing_all_partitions_leaves_out_those_not_needing_it():
    img = image({0: PartitionState((0, 1), (0, 1), 0), 1: PartitionState((1, 0), (0, 1), 0)})
    results, records = pa.elect_leaders(img, pa.PREFERRED, None)
    assert results == {"t": [{"partition": 1, "error_code": 0, "error_message": None}]} and len(records) == 1
    assert pa.elect_leaders(img, pa.PREFERRED, {"t": [5]})[0]["t"][0]["error_code"] == ErrorCode.unknown_topic_or_partition


def test_reassignment_adds_then_completes_when_the_new_replicas_join_the_isr():
    img = image({0: PartitionState((0, 1), (0, 1), 0, 2, 5)})
    code, _, merged = pa.alter_reassignment(img, "t", 0, [2, 1])
    assert code == 0 and merged.replicas == (2, 1, 0) and merged.adding == (2,) and merged.removing == (0,)
    assert merged.isr == (0, 1) and merged.leader == 0 and merged.leader_epoch == 2
    assert pa.complete_reassignment(merged, {0, 1, 2}) is merged  # broker 2 not yet in the ISR
    caught_up = PartitionState(merged.replicas, (0, 1, 2), 0, 2, 6, merged.adding, merged.removing)
    done = pa.complete_reassignment(caught_up, {0, 1, 2})
    assert done.replicas == (2, 1) and done.isr == (1, 2) and not done.reassigning
    assert done.leader == 2 and done.leader_epoch == 3  # the removed leader: the first valid target replica leads


def test_a_reassignment_only_removing_replicas_completes_at_once():
    img = image({0: PartitionState((0, 1, 2), (0, 1, 2), 0, 0, 0)})
    code, _, done = pa.alter_reassignment(img, "t", 0, [1, 2])
    assert code == 0 and done.replicas == (1, 2) and done.isr == (1, 2) and done.leader == 1 and not done.reassigning


def test_cancelling_reverts_to_the_original_replicas():
    img = image({0: PartitionState((2, 1, 0), (0, 1), 0, 2, 6, (2,), (0,))})
    code, _, reverted = pa.alter_reassignment(img, "t", 0, None)
    assert code == 0 and reverted.replicas == (1, 0) and reverted.isr == (0, 1) and not reverted.reassigning
    assert reverted.leader == 0
    img = image({0: PartitionState((0, 1), (0, 1), 0)})
    assert pa.alter_reassignment(img, "t", 0, None)[0] == ErrorCode.no_reassignment_in_progress


@pytest.mark.parametrize("target,message", [([], "empty replica list"), ([1, 1], "broker 1 more than once"),
                                            ([1, 7], "broker 7, but no such broker is registered")])
def test_bad_targets_are_invalid_replica_assignments(target, message):
    code, text, new = pa.alter_reassignment(image({0: PartitionState((0, 1), (0, 1), 0)}), "t", 0, target)
    assert code == ErrorCode.invalid_replica_assignment and message in text and new is None


def test_replication_factor_change_refused_when_not_allowed():
    code, text, _ = pa.alter_reassignment(image({0: PartitionState((0, 1), (0, 1), 0)}), "t", 0, [0, 1, 2], False)
    assert code == ErrorCode.invalid_replication_factor and "allowReplicationFactorChange" in text


def test_new_partitions_continue_the_placement_of_partition_zero():
    img = image({0: PartitionState((1, 2), (1, 2), 1)})
    code, _, records = pa.create_partitions(img, "t", 4, None, random.Random(0))
    assert code == 0 and [r["partition"] for r in records] == [1, 2, 3]
    assert [r["replicas"][0] for r in records] == [2, 0, 1]  # first replicas keep striping from broker 1
    assert all(len(set(r["replicas"])) == 2 and r["leader"] == r["replicas"][0] for r in records)
    code, text, _ = pa.create_partitions(img, "t", 2, [[0, 1, 2]])
    assert code == ErrorCode.invalid_replica_assignment and "previous partitions, which have 2" in text
    assert pa.create_partitions(img, "t", 2, [[0], [1]])[0] == ErrorCode.invalid_replica_assignment


def test_delete_topic_writes_a_remove_topic_record_the_image_applies():
    img = image({0: PartitionState((0,), (0,), 0)})
    code, _, topic_id, records = pa.delete_topic(img, "t")
    assert code == 0 and topic_id == "id-t" and records == [{"type": "remove_topic", "name": "t", "topic_id": "id-t"}]
    img.apply(99, records[0])
    assert "t" not in img.topics and pa.delete_topic(img, "t")[0] == ErrorCode.unknown_topic_or_partition


# --- the single-node broker ----------------------------------------------------------------------

def test_single_broker_answers_election_not_needed_and_only_a_reassignment_to_itself(tmp_path):
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from pyspark_kafka.broker import EmbeddedBroker
    from kio.schema.alter_partition_reassignments.v0.request import (
        AlterPartitionReassignmentsRequest, ReassignablePartition, ReassignableTopic,
    )
    from kio.schema.alter_partition_reassignments.v0.response import AlterPartitionReassignmentsResponse
    from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
    from kio.schema.list_partition_reassignments.v0.response import ListPartitionReassignmentsResponse
    from kio.static.primitive import i32

    from pyspark_kafka.testing.clusters import send_request

    def reassign(bootstrap, topic, partition, replicas):
        request = AlterPartitionReassignmentsRequest(topics=(ReassignableTopic(name=topic, partitions=(
            ReassignablePartition(partition_index=i32(partition),
                                  replicas=None if replicas is None else tuple(i32(r) for r in replicas)),)),))
        answer = send_request(bootstrap, request, AlterPartitionReassignmentsResponse)
        return answer.responses[0].partitions[0].error_code.name.upper()

    with EmbeddedBroker(data_dir=tmp_path / "b") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("one", 1, 1)])["one"].result(30)
        results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("one", 0), TopicPartition("one", 4)]
                                      ).result(30)
        assert sorted(e.name() for e in results.values()) == ["ELECTION_NOT_NEEDED", "UNKNOWN_TOPIC_OR_PART"]
        assert reassign(broker.bootstrap_servers, "one", 0, [0]) == "NONE"
        assert reassign(broker.bootstrap_servers, "one", 0, [0, 1]) == "INVALID_REPLICA_ASSIGNMENT"
        assert reassign(broker.bootstrap_servers, "one", 0, None) == "NO_REASSIGNMENT_IN_PROGRESS"
        listed = send_request(broker.bootstrap_servers, ListPartitionReassignmentsRequest(topics=None),
                              ListPartitionReassignmentsResponse)
        assert listed.error_code == 0 and listed.topics == ()
