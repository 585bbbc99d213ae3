"""Each API's authorization check on the wire, with Kafka's error code (``KafkaApis`` / ``ControllerApis``).

The raw client connects over PLAINTEXT as ``User:ANONYMOUS``, which has no ACL on this broker: every
request below must be refused with the code Kafka answers, and touch nothing. The ACLs that make
the allowed cases pass are granted through the broker's authorizer between requests.
"""

from __future__ import annotations

import datetime

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest
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
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.offset_commit.v9.request import OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic
from kio.schema.offset_delete.v0.request import OffsetDeleteRequest, OffsetDeleteRequestPartition, OffsetDeleteRequestTopic
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.txn_offset_commit.v3.request import (TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition,
                                                     TxnOffsetCommitRequestTopic)
from kio.schema.list_offsets.v8.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_for_leader_epoch.v4.request import (OffsetForLeaderEpochRequest, OffsetForLeaderPartition,
                                                           OffsetForLeaderTopic)

from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.security.acls import AclBinding, AclOperation, PatternType, Permission, ResourceType
from pyspark_kafka.broker.security.authorizer import STANDARD_AUTHORIZER
from support.wire import WireClient

DEADLINE_S = 20.0
TOPIC, GROUP, TXN = "acl-wire", "acl-wire-group", "acl-wire-txn"
ANON = "User:ANONYMOUS"
MS = datetime.timedelta(milliseconds=1)


def anon(rtype, name, op, pattern=PatternType.LITERAL, perm=Permission.ALLOW) -> AclBinding:
    return AclBinding(rtype, name, pattern, ANON, "*", op, perm)


@pytest.fixture(scope="module")
def wire_broker():
    """A broker with the StandardAuthorizer, topic ``acl-wire`` (one record), and no ACL for
    ``User:ANONYMOUS`` once set up."""
    broker = EmbeddedBroker(config={"authorizer.class.name": STANDARD_AUTHORIZER,
                                    "group.initial.rebalance.delay.ms": "0"}).start()
    authorizer = broker.broker.authorizer
    setup = [anon(ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALL),
             anon(ResourceType.TOPIC, "*", AclOperation.ALL), anon(ResourceType.GROUP, "*", AclOperation.ALL)]
    try:
        authorizer.create(setup)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(DEADLINE_S)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        producer.produce(TOPIC, b"kept")
        assert producer.flush(DEADLINE_S) == 0
        authorizer.delete(set(setup))
        yield broker
    finally:
        broker.stop()


def request(broker, req):
    with WireClient(broker.bootstrap_servers) as client:
        return client.request(req)


def partition_codes(response, topics="topics", partitions="partitions") -> list[int]:
    return [p.error_code for t in getattr(response, topics) for p in getattr(t, partitions)]


DENIED = [
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
        resource_type=4, resource_name="0", configs=(AlterableConfig(
            name="log.retention.ms", config_operation=0, value="1000"),)),), validate_only=True),
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
    ("DescribeUserScramCredentials", lambda: DescribeUserScramCredentialsRequest(users=None),
     lambda r: [r.error_code], ErrorCode.cluster_authorization_failed),
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


@pytest.mark.parametrize("name, build, codes, expected", DENIED, ids=[d[0] for d in DENIED])
def test_denied_without_acl(wire_broker, name, build, codes, expected):
    assert set(codes(request(wire_broker, build()))) == {expected}


def test_nothing_changed_by_the_denied_requests(wire_broker):
    authorizer = wire_broker.broker.authorizer
    grants = [anon(ResourceType.TOPIC, TOPIC, AclOperation.DESCRIBE), anon(ResourceType.TOPIC, TOPIC, AclOperation.READ)]
    authorizer.create(grants)
    try:
        offsets = request(wire_broker, DENIED[0][1]())
        assert partition_codes(offsets) == [ErrorCode.none] and offsets.topics[0].partitions[0].offset == 1
        metadata = request(wire_broker, MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),),
                                                        allow_auto_topic_creation=False,
                                                        include_topic_authorized_operations=True))
        (topic,) = metadata.topics
        assert len(topic.partitions) == 1  # CreatePartitions was refused
        # READ implies DESCRIBE: the bitfield holds READ (3) and DESCRIBE (8) only
        assert topic.topic_authorized_operations == (1 << 3) | (1 << 8)
        assert not any(ACL.resource_name == "*" for ACL in authorizer.store.bindings)  # CreateAcls was refused
    finally:
        authorizer.delete(set(grants))


def test_lists_leave_out_what_the_principal_may_not_describe(wire_broker):
    assert request(wire_broker, ListGroupsRequest(states_filter=(), types_filter=())).groups == ()
    assert request(wire_broker, ListTransactionsRequest(state_filters=(), producer_id_filters=(),
                                                        duration_filter=-1)).transaction_states == ()
    assert request(wire_broker, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False)).topics == ()


def test_idempotent_producer_needs_write_on_some_topic_or_idempotent_write(wire_broker):
    """KIP-679 (Kafka's ``authorizeByResourceType``): WRITE on any topic, or IDEMPOTENT_WRITE on the cluster."""
    authorizer = wire_broker.broker.authorizer
    idempotent = DENIED[15][1]
    for grant in (anon(ResourceType.TOPIC, "some-other-", AclOperation.WRITE, PatternType.PREFIXED),
                  anon(ResourceType.CLUSTER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)):
        authorizer.create([grant])
        try:
            answer = request(wire_broker, idempotent())
            assert answer.error_code == ErrorCode.none and answer.producer_id >= 0
        finally:
            authorizer.delete({grant})
    assert request(wire_broker, idempotent()).error_code == ErrorCode.cluster_authorization_failed


def test_acl_apis_without_an_authorizer_answer_security_disabled():
    with EmbeddedBroker() as broker:
        assert request(broker, DENIED[18][1]()).error_code == ErrorCode.security_disabled
        assert [r.error_code for r in request(broker, DENIED[19][1]()).results] == [ErrorCode.security_disabled]


def test_authorized_operations_bitfields(wire_broker):
    """Metadata (cluster), DescribeGroups: the bitfield of the operations the principal may do when asked."""
    authorizer = wire_broker.broker.authorizer
    grants = [anon(ResourceType.GROUP, GROUP, AclOperation.READ),
              anon(ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALTER_CONFIGS)]
    authorizer.create(grants)
    try:
        (group,) = request(wire_broker, DescribeGroupsRequest(groups=(GROUP,), include_authorized_operations=True)).groups
        assert group.error_code == ErrorCode.none and group.authorized_operations == (1 << 3) | (1 << 8)
        from kio.schema.metadata.v10.request import MetadataRequest as MetadataV10
        cluster = request(wire_broker, MetadataV10(topics=(), allow_auto_topic_creation=False,
                                                   include_cluster_authorized_operations=True,
                                                   include_topic_authorized_operations=False))
        # ALTER_CONFIGS (11) implies DESCRIBE_CONFIGS (10)
        assert cluster.cluster_authorized_operations == (1 << 10) | (1 << 11)
    finally:
        authorizer.delete(set(grants))


def test_partial_denials_name_the_partition(wire_broker):
    """With the group / transactional id allowed, a topic without its ACL fails alone (Kafka's order)."""
    authorizer = wire_broker.broker.authorizer
    grants = [anon(ResourceType.GROUP, GROUP, AclOperation.READ),
              anon(ResourceType.TRANSACTIONAL_ID, TXN, AclOperation.WRITE),
              anon(ResourceType.TOPIC, "acl-wire-other", AclOperation.WRITE)]
    authorizer.create(grants)
    try:
        commit = request(wire_broker, OffsetCommitRequest(
            group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=(OffsetCommitRequestTopic(name=TOPIC, partitions=(OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""),)),)))
        assert partition_codes(commit) == [ErrorCode.topic_authorization_failed]
        add = request(wire_broker, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TXN, v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
            v3_and_below_topics=(AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),
                                 AddPartitionsToTxnTopic(name="acl-wire-other", partitions=(0,)))))
        codes = {t.name: [p.partition_error_code for p in t.results_by_partition]
                 for t in add.results_by_topic_v3_and_below}
        # the allowed topic does not exist: UNKNOWN_TOPIC_OR_PARTITION; the request as a whole fails
        assert codes == {TOPIC: [ErrorCode.topic_authorization_failed],
                         "acl-wire-other": [ErrorCode.unknown_topic_or_partition]}
    finally:
        authorizer.delete(set(grants))
