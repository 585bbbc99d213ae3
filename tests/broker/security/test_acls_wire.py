"""Each API's authorization check on the wire, with Kafka's error code (``KafkaApis`` / ``ControllerApis``).

The raw client connects over PLAINTEXT as ``User:ANONYMOUS``, which has no ACL on this broker: every
request below must be refused with the code Kafka answers, and touch nothing. The ACLs that make
the allowed cases pass are granted through the broker's authorizer between requests.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v9.request import OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic

from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.security.acls import AclBinding, AclOperation, PatternType, Permission, ResourceType
from pyspark_kafka.broker.security.authorizer import STANDARD_AUTHORIZER
from support.acl_requests import ANON, DENIED, GROUP, TOPIC, TXN, change_acls, partition_codes
from support.groups import wait_for_group_coordinator
from support.wire import WireClient

DEADLINE_S = 20.0
BUILD = {name: build for name, build, _, _ in DENIED}


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
             anon(ResourceType.TOPIC, "*", AclOperation.ALL), anon(ResourceType.GROUP, "*", AclOperation.ALL),
             anon(ResourceType.TRANSACTIONAL_ID, "*", AclOperation.ALL)]
    try:
        change_acls(broker, add=setup)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(DEADLINE_S)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        producer.produce(TOPIC, b"kept")
        assert producer.flush(DEADLINE_S) == 0
        wait_for_group_coordinator(broker.bootstrap_servers)  # __consumer_offsets exists once a client asked
        wait_for_group_coordinator(broker.bootstrap_servers, key_type=1)  # and __transaction_state
        change_acls(broker, remove=setup)
        yield broker
    finally:
        broker.stop()


def request(broker, req):
    with WireClient(broker.bootstrap_servers) as client:
        return client.request(req)




@pytest.mark.parametrize("name, build, codes, expected", DENIED, ids=[d[0] for d in DENIED])
def test_denied_without_acl(wire_broker, name, build, codes, expected):
    assert set(codes(request(wire_broker, build()))) == {expected}


def test_nothing_changed_by_the_denied_requests(wire_broker):
    authorizer = wire_broker.broker.authorizer
    grants = [anon(ResourceType.TOPIC, TOPIC, AclOperation.DESCRIBE), anon(ResourceType.TOPIC, TOPIC, AclOperation.READ)]
    change_acls(wire_broker, add=grants)
    try:
        offsets = request(wire_broker, BUILD["ListOffsets"]())
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
        change_acls(wire_broker, remove=grants)


def test_lists_leave_out_what_the_principal_may_not_describe(wire_broker):
    assert request(wire_broker, ListGroupsRequest(states_filter=(), types_filter=())).groups == ()
    assert request(wire_broker, ListTransactionsRequest(state_filters=(), producer_id_filters=(),
                                                        duration_filter=-1)).transaction_states == ()
    assert request(wire_broker, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False)).topics == ()


def test_idempotent_producer_needs_write_on_some_topic_or_idempotent_write(wire_broker):
    """KIP-679 (Kafka's ``authorizeByResourceType``): WRITE on any topic, or IDEMPOTENT_WRITE on the cluster."""
    authorizer = wire_broker.broker.authorizer
    idempotent = BUILD["InitProducerId idempotent"]
    for grant in (anon(ResourceType.TOPIC, "some-other-", AclOperation.WRITE, PatternType.PREFIXED),
                  anon(ResourceType.CLUSTER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE)):
        change_acls(wire_broker, add=[grant])
        try:
            answer = request(wire_broker, idempotent())
            assert answer.error_code == ErrorCode.none and answer.producer_id >= 0
        finally:
            change_acls(wire_broker, remove=[grant])
    assert request(wire_broker, idempotent()).error_code == ErrorCode.cluster_authorization_failed


def test_acl_apis_without_an_authorizer_answer_security_disabled():
    with EmbeddedBroker() as broker:
        assert request(broker, BUILD["DescribeAcls"]()).error_code == ErrorCode.security_disabled
        assert [r.error_code for r in request(broker, BUILD["CreateAcls"]()).results] == [ErrorCode.security_disabled]


def test_authorized_operations_bitfields(wire_broker):
    """Metadata (cluster), DescribeGroups: the bitfield of the operations the principal may do when asked."""
    authorizer = wire_broker.broker.authorizer
    grants = [anon(ResourceType.GROUP, GROUP, AclOperation.READ),
              anon(ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALTER_CONFIGS)]
    change_acls(wire_broker, add=grants)
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
        change_acls(wire_broker, remove=grants)


def test_partial_denials_name_the_partition(wire_broker):
    """With the group / transactional id allowed, a topic without its ACL fails alone (Kafka's order)."""
    authorizer = wire_broker.broker.authorizer
    grants = [anon(ResourceType.GROUP, GROUP, AclOperation.READ),
              anon(ResourceType.TRANSACTIONAL_ID, TXN, AclOperation.WRITE),
              anon(ResourceType.TOPIC, "acl-wire-other", AclOperation.WRITE)]
    change_acls(wire_broker, add=grants)
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
        change_acls(wire_broker, remove=grants)


def _produce(broker, batch: bytes, transactional_id):
    import datetime

    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    response = request(broker, ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout=datetime.timedelta(seconds=10),
        topic_data=(TopicProduceData(name=TOPIC, partition_data=(PartitionProduceData(index=0, records=batch),)),)))
    return response.responses[0].partition_responses[0].error_code


def test_produce_checks_the_transactional_id_only_for_transactional_batches(wire_broker):
    """Kafka's ``handleProduceRequest``: WRITE on the transactional id is asked only when a batch is
    transactional (``RequestUtils.hasTransactionalRecords``); a transactional batch without a
    transactional id is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED too. Topic WRITE is granted
    here, the transactional id has no ACL."""
    from support.batches import make_batch, transactional

    authorizer = wire_broker.broker.authorizer
    grant = [anon(ResourceType.TOPIC, TOPIC, AclOperation.WRITE)]
    change_acls(wire_broker, add=grant)
    try:
        assert _produce(wire_broker, bytes(make_batch([b"plain"])), TXN) == ErrorCode.none
        txn_batch = transactional(bytearray(make_batch([b"txn"], producer_id=7, producer_epoch=0)))
        assert _produce(wire_broker, txn_batch, TXN) == ErrorCode.transactional_id_authorization_failed
        assert _produce(wire_broker, txn_batch, None) == ErrorCode.transactional_id_authorization_failed
    finally:
        change_acls(wire_broker, remove=grant)
