"""Requests that each need an ACL, with the answer Kafka gives a principal that has none.

``DENIED``: ``(name, build() -> kio request, codes(response) -> [error codes], expected code)`` for
every API the broker authorizes, on topic :data:`TOPIC`, group :data:`GROUP`, transactional id
:data:`TXN`. Used by ``tests/broker/security/test_acls_wire.py`` (the embedded broker) and
``test_acls_differential.py`` (the same requests to Apache Kafka, answers compared).
"""

from __future__ import annotations

import datetime

from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions
from kio.schema.alter_partition_reassignments.v0.request import (AlterPartitionReassignmentsRequest,
                                                                  ReassignablePartition, ReassignableTopic)
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.incremental_alter_configs.v1.request import (AlterableConfig, AlterConfigsResource,
                                                             IncrementalAlterConfigsRequest)
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from kio.schema.add_offsets_to_txn.v4.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
from kio.schema.alter_user_scram_credentials.v0.request import (AlterUserScramCredentialsRequest,
                                                                ScramCredentialDeletion)
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.end_txn.v4.request import EndTxnRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.offset_commit.v9.request import OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic
from kio.schema.offset_delete.v0.request import OffsetDeleteRequest, OffsetDeleteRequestPartition, OffsetDeleteRequestTopic
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.txn_offset_commit.v3.request import (TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition,
                                                     TxnOffsetCommitRequestTopic)
from kio.schema.list_offsets.v8.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.offset_for_leader_epoch.v4.request import (OffsetForLeaderEpochRequest, OffsetForLeaderPartition,
                                                           OffsetForLeaderTopic)


TOPIC, GROUP, TXN = "acl-wire", "acl-wire-group", "acl-wire-txn"
ANON = "User:ANONYMOUS"
MS = datetime.timedelta(milliseconds=1)


def partition_codes(response, topics="topics", partitions="partitions") -> list[int]:
    """The error code of every partition of every topic of ``response``."""
    return [p.error_code for t in getattr(response, topics) for p in getattr(t, partitions)]


DENIED = [
    ("ElectLeaders", lambda: ElectLeadersRequest(election_type=0, topic_partitions=(
        TopicPartitions(topic=TOPIC, partitions=(0,)),)),
     lambda r: [r.error_code] + [p.error_code for t in r.replica_election_results for p in t.partition_result],
     ErrorCode.cluster_authorization_failed),
    ("AlterPartitionReassignments", lambda: AlterPartitionReassignmentsRequest(topics=(ReassignableTopic(
        name=TOPIC, partitions=(ReassignablePartition(partition_index=0, replicas=None),)),)),
     lambda r: [r.error_code] + [p.error_code for t in r.responses for p in t.partitions],
     ErrorCode.cluster_authorization_failed),
    ("ListPartitionReassignments", lambda: ListPartitionReassignmentsRequest(topics=None),
     lambda r: [r.error_code], ErrorCode.cluster_authorization_failed),
    ("ListOffsets", lambda: ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(
        name=TOPIC, partitions=(ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),)),
     partition_codes, ErrorCode.topic_authorization_failed),
    ("Fetch as a follower", lambda: FetchRequest(
        cluster_id=None, replica_id=1, max_wait=0 * MS, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=(FetchTopic(topic=TOPIC, partitions=(FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20),)),), forgotten_topics_data=(), rack_id=""),
     lambda r: partition_codes(r, "responses"), ErrorCode.topic_authorization_failed),
    ("OffsetForLeaderEpoch", lambda: OffsetForLeaderEpochRequest(replica_id=-1, topics=(OffsetForLeaderTopic(
        topic=TOPIC, partitions=(OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0),)),)),
     partition_codes, ErrorCode.topic_authorization_failed),
    ("DeleteRecords", lambda: DeleteRecordsRequest(topics=(DeleteRecordsTopic(
        name=TOPIC, partitions=(DeleteRecordsPartition(partition_index=0, offset=-1),)),), timeout=1000 * MS),
     partition_codes, ErrorCode.topic_authorization_failed),
    ("DescribeProducers", lambda: DescribeProducersRequest(topics=(TopicRequest(name=TOPIC, partition_indexes=(0,)),)),
     partition_codes, ErrorCode.topic_authorization_failed),
    ("DeleteTopics", lambda: DeleteTopicsRequest(topics=(DeleteTopicState(name=TOPIC, topic_id=None),),
                                                 timeout=1000 * MS),
     lambda r: [t.error_code for t in r.responses], ErrorCode.topic_authorization_failed),
    ("CreatePartitions", lambda: CreatePartitionsRequest(topics=(CreatePartitionsTopic(
        name=TOPIC, count=3, assignments=None),), timeout=1000 * MS, validate_only=False),
     lambda r: [t.error_code for t in r.results], ErrorCode.topic_authorization_failed),
    ("IncrementalAlterConfigs topic", lambda: IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
        resource_type=2, resource_name=TOPIC, configs=(AlterableConfig(
            name="retention.ms", config_operation=0, value="1000"),)),), validate_only=False),
     lambda r: [x.error_code for x in r.responses], ErrorCode.topic_authorization_failed),
    ("IncrementalAlterConfigs broker", lambda: IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
        resource_type=4, resource_name="", configs=(AlterableConfig(
            name="log.retention.ms", config_operation=0, value="1000"),)),), validate_only=True),
     lambda r: [x.error_code for x in r.responses], ErrorCode.cluster_authorization_failed),
    ("IncrementalAlterConfigs another broker", lambda: IncrementalAlterConfigsRequest(resources=(
        AlterConfigsResource(resource_type=4, resource_name="7", configs=(AlterableConfig(
            name="log.retention.ms", config_operation=0, value="1000"),)),), validate_only=True),
     # authorized first, as Kafka 4.4 (4.3 answered INVALID_REQUEST: it checked the broker id first)
     lambda r: [x.error_code for x in r.responses], ErrorCode.cluster_authorization_failed),
    ("DescribeLogDirs", lambda: DescribeLogDirsRequest(topics=None),
     lambda r: [r.error_code], ErrorCode.cluster_authorization_failed),
    ("DescribeGroups", lambda: DescribeGroupsRequest(groups=(GROUP,), include_authorized_operations=False),
     lambda r: [g.error_code for g in r.groups], ErrorCode.group_authorization_failed),
    ("DeleteGroups", lambda: DeleteGroupsRequest(groups_names=(GROUP,)),
     lambda r: [g.error_code for g in r.results], ErrorCode.group_authorization_failed),
    ("FindCoordinator group", lambda: FindCoordinatorRequest(key_type=0, coordinator_keys=(GROUP,)),
     lambda r: [c.error_code for c in r.coordinators], ErrorCode.group_authorization_failed),
    ("FindCoordinator transaction", lambda: FindCoordinatorRequest(key_type=1, coordinator_keys=(TXN,)),
     lambda r: [c.error_code for c in r.coordinators], ErrorCode.transactional_id_authorization_failed),
    ("InitProducerId transactional", lambda: InitProducerIdRequest(
        transactional_id=TXN, transaction_timeout=60000 * MS, producer_id=-1, producer_epoch=-1),
     lambda r: [r.error_code], ErrorCode.transactional_id_authorization_failed),
    ("InitProducerId idempotent", lambda: InitProducerIdRequest(
        transactional_id=None, transaction_timeout=60000 * MS, producer_id=-1, producer_epoch=-1),
     lambda r: [r.error_code], ErrorCode.cluster_authorization_failed),
    ("DescribeTransactions", lambda: DescribeTransactionsRequest(transactional_ids=(TXN,)),
     lambda r: [s.error_code for s in r.transaction_states], ErrorCode.transactional_id_authorization_failed),
    # users named: Kafka 4.3.1 answers nothing to users=null from a denied principal (a NullPointerException
    # in DescribeUserScramCredentialsRequest.getErrorResponse); the embedded broker answers 31
    ("DescribeUserScramCredentials", lambda: DescribeUserScramCredentialsRequest(users=(UserName(name="alice"),)),
     lambda r: [r.error_code] + [u.error_code for u in r.results], ErrorCode.cluster_authorization_failed),
    ("DescribeAcls", lambda: DescribeAclsRequest(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
        host_filter=None, operation=1, permission_type=1), lambda r: [r.error_code], ErrorCode.cluster_authorization_failed),
    ("CreateAcls", lambda: CreateAclsRequest(creations=(AclCreation(
        resource_type=2, resource_name="*", resource_pattern_type=3, principal=ANON, host="*", operation=2,
        permission_type=3),)), lambda r: [x.error_code for x in r.results], ErrorCode.cluster_authorization_failed),
    ("DeleteAcls", lambda: DeleteAclsRequest(filters=(DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
        host_filter=None, operation=1, permission_type=1),)),
     lambda r: [f.error_code for f in r.filter_results], ErrorCode.cluster_authorization_failed),
    ("AlterUserScramCredentials", lambda: AlterUserScramCredentialsRequest(
        deletions=(ScramCredentialDeletion(name="alice", mechanism=1),), upsertions=()),
     lambda r: [u.error_code for u in r.results], ErrorCode.cluster_authorization_failed),
    ("JoinGroup", lambda: JoinGroupRequest(
        group_id=GROUP, session_timeout=10000 * MS, rebalance_timeout=10000 * MS, member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),), reason=None),
     lambda r: [r.error_code], ErrorCode.group_authorization_failed),
    ("Heartbeat", lambda: HeartbeatRequest(group_id=GROUP, generation_id=1, member_id="m", group_instance_id=None),
     lambda r: [r.error_code], ErrorCode.group_authorization_failed),
    ("OffsetCommit", lambda: OffsetCommitRequest(
        group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(OffsetCommitRequestTopic(name=TOPIC, partitions=(OffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""),)),)),
     partition_codes, ErrorCode.group_authorization_failed),
    ("OffsetFetch", lambda: OffsetFetchRequest(groups=(OffsetFetchRequestGroup(group_id=GROUP, topics=(
        OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0,)),)),), require_stable=False),
     lambda r: [g.error_code for g in r.groups], ErrorCode.group_authorization_failed),
    ("OffsetDelete", lambda: OffsetDeleteRequest(group_id=GROUP, topics=(OffsetDeleteRequestTopic(
        name=TOPIC, partitions=(OffsetDeleteRequestPartition(partition_index=0),)),)),
     lambda r: [r.error_code], ErrorCode.group_authorization_failed),
    ("ConsumerGroupHeartbeat", lambda: ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id="m-1", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout=10000 * MS, subscribed_topic_names=(TOPIC,), subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=()), lambda r: [r.error_code], ErrorCode.group_authorization_failed),
    ("AddPartitionsToTxn", lambda: AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TXN, v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
        v3_and_below_topics=(AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),)),
     lambda r: [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition],
     ErrorCode.transactional_id_authorization_failed),
    ("AddOffsetsToTxn", lambda: AddOffsetsToTxnRequest(transactional_id=TXN, producer_id=1, producer_epoch=0,
                                                       group_id=GROUP),
     lambda r: [r.error_code], ErrorCode.transactional_id_authorization_failed),
    ("TxnOffsetCommit", lambda: TxnOffsetCommitRequest(
        transactional_id=TXN, group_id=GROUP, producer_id=1, producer_epoch=0, generation_id=-1, member_id="",
        group_instance_id=None, topics=(TxnOffsetCommitRequestTopic(name=TOPIC, partitions=(
            TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                            committed_metadata=""),)),)),
     partition_codes, ErrorCode.transactional_id_authorization_failed),
    ("EndTxn", lambda: EndTxnRequest(transactional_id=TXN, producer_id=1, producer_epoch=0, committed=True),
     lambda r: [r.error_code], ErrorCode.transactional_id_authorization_failed),
]


def change_acls(embedded, add=(), remove=(), timeout_s: float = 10.0) -> None:
    """Create ``add`` and delete ``remove`` (AclBinding lists) on an ``EmbeddedBroker`` through its controller, as
    CreateAcls / DeleteAcls from a super user would: ACLs are metadata records on a combined node, so a test cannot
    write them into the authorizer directly. Returns once the node's metadata image has them; raises
    AssertionError when the controller refuses, TimeoutError after ``timeout_s`` s."""
    import asyncio

    from pyspark_kafka.broker.security.acls import AclFilter

    broker = embedded.broker

    async def run() -> None:
        if add:
            answer = await broker.forwarding.forward({"op": "create_acls", "creations": [b.to_json() for b in add]})
            assert answer["error_code"] == 0, answer
        if remove:
            filters = [AclFilter(b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation,
                                 b.permission).to_json() for b in remove]
            answer = await broker.forwarding.forward({"op": "delete_acls", "filters": filters})
            assert answer["error_code"] == 0, answer

    asyncio.run_coroutine_threadsafe(run(), embedded._loop).result(timeout_s)
