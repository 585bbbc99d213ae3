"""ACLs on the embedded broker, driven by independent clients: librdkafka (confluent-kafka: producer,
consumer, transactions, AdminClient ACL calls), kafka-python (KafkaAdminClient ACL API) and aiokafka
(produce and read, denied write).

One broker with ``authorizer.class.name`` = Kafka's StandardAuthorizer, SCRAM-SHA-256 users
``admin`` (a super user), ``alice`` and ``bob`` on a SASL_PLAINTEXT listener and a PLAINTEXT
listener (``User:ANONYMOUS``). Each test grants what it needs through the admin and checks that
the right credentials with the ACL work, that a missing ACL fails with Kafka's error and reaches
no data, that DENY beats ALLOW, that prefixed patterns apply, and that Metadata hides topics.
Nothing secret reaches the broker's log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import pytest
from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicCollection,
                             TopicPartition)
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ConfigResource, NewTopic, ResourcePatternType, ResourceType)

from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.security.authorizer import STANDARD_AUTHORIZER
from support.log_capture import LogCapture

DEADLINE_S = 30.0
PASSWORDS = {"admin": "admin-pw-Qe71", "alice": "alice-pw-Lm09", "bob": "bob-pw-Ty33", "carol": "carol-pw-Nu48"}
JAAS = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)


def start_broker(**extra) -> EmbeddedBroker:
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
              "sasl.enabled.mechanisms": "SCRAM-SHA-256", "sasl.jaas.config": JAAS,
              "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin",
              "group.initial.rebalance.delay.ms": "0", **extra}
    return EmbeddedBroker(config=config).start()


def ports_of(broker: EmbeddedBroker) -> dict[str, int]:
    return {lst.name: lst.port for lst in broker.broker.security.listeners}


@pytest.fixture(scope="module")
def secured():
    """``(broker, ports, captured log lines)`` of the module's broker."""
    capture = LogCapture()
    logger = logging.getLogger("pyspark_kafka")
    old = logger.level
    logger.addHandler(capture)
    logger.setLevel(logging.DEBUG)
    broker = start_broker()
    try:
        state = (broker, ports_of(broker), capture.lines)
        # plain consumers look up their group's coordinator (DESCRIBE) even when only assigned: groups g-*
        grant(state, *(acl(ResourceType.GROUP, "g-", AclOperation.READ, principal=p, pattern=PREFIXED)
                       for p in ("User:alice", "User:bob")))
        yield state
    finally:
        _ADMINS.clear()  # drop the admin clients before their broker goes
        broker.stop()
        logger.removeHandler(capture)
        logger.setLevel(old)


def client(secured, user: str | None, **extra) -> dict:
    """librdkafka settings for ``user`` over SCRAM (None: PLAINTEXT, ``User:ANONYMOUS``)."""
    _, ports, _ = secured
    if user is None:
        return {"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}", **extra}
    return {"bootstrap.servers": f"127.0.0.1:{ports['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": PASSWORDS[user], **extra}


_ADMINS: dict[tuple, AdminClient] = {}


def admin(secured, user: str = "admin") -> AdminClient:
    """One AdminClient per broker and user, kept for the module (a dropped client cancels its futures)."""
    key = (secured[1]["SASL_PLAINTEXT"], user)
    if key not in _ADMINS:
        _ADMINS[key] = AdminClient(client(secured, user))
    return _ADMINS[key]


def unique(prefix: str) -> str:
    return f"{prefix}-{os.urandom(3).hex()}"


def grant(secured, *bindings: AclBinding) -> None:
    for f in admin(secured).create_acls(list(bindings)).values():
        f.result(DEADLINE_S)


def acl(rtype, name, op, principal="User:alice", perm=ALLOW, pattern=LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


def make_topic(secured, name: str, partitions: int = 1) -> str:
    admin(secured).create_topics([NewTopic(name, partitions, 1)])[name].result(DEADLINE_S)
    return name


def produce_errors(conf: dict, topic: str, n: int = 3) -> list:
    """Produce ``n`` records; the delivery errors (None for each delivered record)."""
    results = []
    producer = Producer({**conf, "message.timeout.ms": 10000})
    for i in range(n):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: results.append(err))
    producer.flush(DEADLINE_S)
    return results


def end_offset(secured, topic: str) -> int:
    c = Consumer(client(secured, "admin", **{"group.id": unique("peek")}))
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S)[1]
    finally:
        c.close()


def consume(conf: dict, topic: str, n: int, deadline_s: float = DEADLINE_S) -> tuple[list[bytes], list]:
    """Read up to ``n`` values of partition 0 from the start: ``(values, errors)`` (bounded wait)."""
    c = Consumer({**conf, "group.id": conf.get("group.id", unique("g")), "enable.auto.commit": False})
    got, errors = [], []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + deadline_s
        while len(got) < n and not errors and time.monotonic() < deadline:
            msg = c.poll(0.3)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.append(msg.error())
            else:
                got.append(msg.value())
    finally:
        c.close()
    return got, errors


def test_acl_admin_calls_confluent(secured):
    a = admin(secured)
    name = unique("acl-admin")
    bindings = [acl(ResourceType.TOPIC, name, AclOperation.READ),
                acl(ResourceType.TOPIC, name[:8], AclOperation.WRITE, pattern=PREFIXED),
                acl(ResourceType.GROUP, name, AclOperation.ALL, principal="User:bob", perm=DENY)]
    for f in a.create_acls(bindings).values():
        assert f.result(DEADLINE_S) is None
    a.create_acls(bindings[:1])[bindings[0]].result(DEADLINE_S)  # creating an existing ACL keeps it once
    mine = AclBindingFilter(ResourceType.ANY, name, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                            AclPermissionType.ANY)
    assert sorted(map(str, a.describe_acls(mine).result(DEADLINE_S))) == sorted(map(str, [bindings[0], bindings[2]]))
    match = AclBindingFilter(ResourceType.TOPIC, name, ResourcePatternType.MATCH, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    assert sorted(map(str, a.describe_acls(match).result(DEADLINE_S))) == sorted(map(str, bindings[:2]))
    # alice may neither see nor change ACLs: CLUSTER_AUTHORIZATION_FAILED (librdkafka 2.x reports a
    # DescribeAcls answered with it as an empty list; kafka-python raises it: test_kafka_python_admin_acl_api)
    alice = admin(secured, "alice")
    assert alice.describe_acls(EVERYTHING).result(DEADLINE_S) == []
    with pytest.raises(KafkaException) as denied:
        alice.create_acls([acl(ResourceType.TOPIC, "*", AclOperation.ALL)])[
            acl(ResourceType.TOPIC, "*", AclOperation.ALL)].result(DEADLINE_S)
    assert denied.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # a CLUSTER resource must be named kafka-cluster: INVALID_REQUEST
    bad = acl(ResourceType.BROKER, "my-cluster", AclOperation.ALTER)
    with pytest.raises(KafkaException) as invalid:
        a.create_acls([bad])[bad].result(DEADLINE_S)
    assert invalid.value.args[0].code() == KafkaError.INVALID_REQUEST
    deleted = a.delete_acls([mine, match])
    assert sorted(map(str, deleted[mine].result(DEADLINE_S))) == sorted(map(str, [bindings[0], bindings[2]]))
    assert sorted(map(str, deleted[match].result(DEADLINE_S))) == sorted(map(str, bindings[:2]))
    assert a.describe_acls(mine).result(DEADLINE_S) == [] and a.describe_acls(match).result(DEADLINE_S) == []


def test_produce_and_consume_need_write_and_read(secured):
    ok, closed = make_topic(secured, unique("acl-ok")), make_topic(secured, unique("acl-closed"))
    grant(secured, acl(ResourceType.TOPIC, ok, AclOperation.WRITE), acl(ResourceType.TOPIC, ok, AclOperation.READ))
    alice = client(secured, "alice")
    assert produce_errors(alice, ok) == [None, None, None]
    values, errors = consume(alice, ok, 3)
    assert (values, errors) == ([b"v0", b"v1", b"v2"], [])
    denied = produce_errors(alice, closed)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    assert end_offset(secured, closed) == 0  # nothing written
    assert produce_errors(client(secured, "admin"), closed, 1) == [None]
    # without DESCRIBE the topic is hidden from Metadata: the client never learns its leader, reads nothing
    assert consume(alice, closed, 1, deadline_s=3) == ([], [])
    # with DESCRIBE (not READ) the Fetch itself is refused
    grant(secured, acl(ResourceType.TOPIC, closed, AclOperation.DESCRIBE))
    values, errors = consume(alice, closed, 1)
    assert values == [] and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # PLAINTEXT clients are User:ANONYMOUS, with no ACL: denied too
    assert [e.code() for e in produce_errors(client(secured, None), ok, 1)] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_commit_needs_read_on_the_group(secured):
    topic = make_topic(secured, unique("acl-commit"))
    group, other = unique("cg-ok"), unique("cg-closed")
    grant(secured, acl(ResourceType.TOPIC, topic, AclOperation.READ), acl(ResourceType.GROUP, group, AclOperation.READ),
          # DESCRIBE lets the client find the coordinator; OffsetCommit itself needs READ
          acl(ResourceType.GROUP, other, AclOperation.DESCRIBE))
    for g, expected in ((group, KafkaError.NO_ERROR), (other, KafkaError.GROUP_AUTHORIZATION_FAILED)):
        c = Consumer(client(secured, "alice", **{"group.id": g, "enable.auto.commit": False}))
        try:
            if expected == KafkaError.NO_ERROR:
                committed = c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
                assert committed[0].error is None
                assert c.committed([TopicPartition(topic, 0)], timeout=DEADLINE_S)[0].offset == 0
            else:
                with pytest.raises(KafkaException) as denied:
                    c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
                assert denied.value.args[0].code() == expected
        finally:
            c.close()
    assert other not in [g.group_id for g in admin(secured).list_consumer_groups().result(DEADLINE_S).valid]


def test_subscribe_needs_read_on_the_group(secured):
    topic = make_topic(secured, unique("acl-sub"))
    grant(secured, acl(ResourceType.TOPIC, topic, AclOperation.READ))
    c = Consumer(client(secured, "alice", **{"group.id": unique("sg-none"), "auto.offset.reset": "earliest"}))
    try:
        c.subscribe([topic])
        error, deadline = None, time.monotonic() + DEADLINE_S
        while error is None and time.monotonic() < deadline:
            msg = c.poll(0.3)
            if msg is not None and msg.error() is not None:
                error = msg.error()
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        c.close()


def test_metadata_hides_topics_and_auto_create_needs_create(secured):
    seen, hidden = make_topic(secured, unique("acl-seen")), make_topic(secured, unique("acl-hidden"))
    grant(secured, acl(ResourceType.TOPIC, seen, AclOperation.DESCRIBE))
    a = admin(secured, "alice")
    topics = a.list_topics(timeout=DEADLINE_S).topics
    assert seen in topics and hidden not in topics
    assert a.list_topics(topic=hidden, timeout=DEADLINE_S).topics[hidden].error.code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    # describing (and thus auto-creating) a new name: DESCRIBE alone is not CREATE
    fresh = unique("acl-fresh")
    grant(secured, acl(ResourceType.TOPIC, fresh, AclOperation.DESCRIBE))
    assert a.list_topics(topic=fresh, timeout=DEADLINE_S).topics[fresh].error.code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert fresh not in admin(secured).list_topics(timeout=DEADLINE_S).topics
    with pytest.raises(KafkaException) as denied:
        a.describe_topics(TopicCollection([hidden]))[hidden].result(DEADLINE_S)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_deny_beats_allow_and_prefixed_patterns(secured):
    prefix = unique("acl-pre") + "-"
    open_topic, secret = make_topic(secured, prefix + "open"), make_topic(secured, prefix + "secret")
    for t in (open_topic, secret):
        assert produce_errors(client(secured, "admin"), t, 2) == [None, None]
    grant(secured, acl(ResourceType.TOPIC, prefix, AclOperation.READ, pattern=PREFIXED),
          acl(ResourceType.TOPIC, secret, AclOperation.READ, perm=DENY),
          acl(ResourceType.TOPIC, prefix, AclOperation.ALL, principal="User:bob", pattern=PREFIXED),
          acl(ResourceType.TOPIC, "*", AclOperation.READ, principal="User:bob", perm=DENY))
    alice, bob = client(secured, "alice"), client(secured, "bob")
    assert consume(alice, open_topic, 2) == ([b"v0", b"v1"], [])
    values, errors = consume(alice, secret, 2)
    assert values == [] and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # bob: ALL on the prefix, but a wildcard DENY READ: he may write, not read
    assert produce_errors(bob, open_topic, 1) == [None]
    values, errors = consume(bob, open_topic, 1)
    assert values == [] and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_transactional_and_idempotent_producers(secured):
    topic = make_topic(secured, unique("acl-txn"))
    txn_ok, txn_closed = unique("tx-ok"), unique("tx-closed")
    grant(secured, acl(ResourceType.TOPIC, topic, AclOperation.WRITE),
          acl(ResourceType.TRANSACTIONAL_ID, txn_ok, AclOperation.WRITE))
    denied = Producer(client(secured, "alice", **{"transactional.id": txn_closed}))
    with pytest.raises(KafkaException) as exc:
        denied.init_transactions(DEADLINE_S)
    assert exc.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    producer = Producer(client(secured, "alice", **{"transactional.id": txn_ok}))
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, b"in-txn")
    producer.commit_transaction(DEADLINE_S)
    assert end_offset(secured, topic) == 2  # the record and its commit marker
    # an idempotent producer needs WRITE on some topic (KIP-679); its denial: test_acls_wire.py
    assert produce_errors(client(secured, "alice", **{"enable.idempotence": True}), topic, 1) == [None]


def test_create_topic_and_describe_configs_need_their_acls(secured):
    prefix = unique("acl-mk") + "-"
    a = admin(secured, "alice")
    name = prefix + "one"
    with pytest.raises(KafkaException) as denied:
        a.create_topics([NewTopic(name, 1, 1)])[name].result(DEADLINE_S)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert name not in admin(secured).list_topics(timeout=DEADLINE_S).topics
    grant(secured, acl(ResourceType.TOPIC, prefix, AclOperation.CREATE, pattern=PREFIXED))
    a.create_topics([NewTopic(name, 1, 1)])[name].result(DEADLINE_S)
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    with pytest.raises(KafkaException) as denied:
        a.describe_configs([resource])[resource].result(DEADLINE_S)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    with pytest.raises(KafkaException) as denied:
        a.describe_configs([broker])[broker].result(DEADLINE_S)
    assert denied.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    grant(secured, acl(ResourceType.TOPIC, name, AclOperation.ALTER_CONFIGS))  # implies DESCRIBE_CONFIGS
    assert a.describe_configs([resource])[resource].result(DEADLINE_S)["cleanup.policy"].value == "delete"


def test_kafka_python_admin_acl_api(secured):
    kafka_admin = pytest.importorskip("kafka.admin")
    _, ports, _ = secured
    ka = kafka_admin.KafkaAdminClient(
        bootstrap_servers=f"127.0.0.1:{ports['SASL_PLAINTEXT']}", security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="admin", sasl_plain_password=PASSWORDS["admin"],
        request_timeout_ms=20000)
    try:
        name = unique("kp-acl")
        binding = kafka_admin.ACL(principal="User:alice", host="*", operation=kafka_admin.ACLOperation.READ,
                                  permission_type=kafka_admin.ACLPermissionType.ALLOW,
                                  resource_pattern=kafka_admin.ResourcePattern(kafka_admin.ResourceType.TOPIC, name))
        created = ka.create_acls([binding])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        acl_filter = kafka_admin.ACLFilter(principal=None, host=None, operation=kafka_admin.ACLOperation.ANY,
                                           permission_type=kafka_admin.ACLPermissionType.ANY,
                                           resource_pattern=kafka_admin.ResourcePatternFilter(
                                               kafka_admin.ResourceType.TOPIC, name, kafka_admin.ACLResourcePatternType.ANY))
        described, error = ka.describe_acls(acl_filter)
        assert error.errno == 0 and [(a.principal, a.operation, a.resource_pattern.resource_name)
                                     for a in described] == [("User:alice", kafka_admin.ACLOperation.READ, name)]
        deleted = ka.delete_acls([acl_filter])
        assert [len(matches) for _, matches, _ in deleted] == [1]
        assert ka.describe_acls(acl_filter)[0] == []
    finally:
        ka.close()
    denied = kafka_admin.KafkaAdminClient(
        bootstrap_servers=f"127.0.0.1:{ports['SASL_PLAINTEXT']}", security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice", sasl_plain_password=PASSWORDS["alice"],
        request_timeout_ms=20000)
    try:
        with pytest.raises(Exception, match="Cluster authorization failed"):
            denied.describe_acls(acl_filter)
    finally:
        denied.close()


def test_allow_everyone_if_no_acl_found():
    broker = start_broker(**{"allow.everyone.if.no.acl.found": "true"})
    try:
        secured = (broker, ports_of(broker), [])
        free, guarded = make_topic(secured, "free"), make_topic(secured, "guarded")
        grant(secured, acl(ResourceType.TOPIC, guarded, AclOperation.WRITE, principal="User:bob"))
        alice = client(secured, "alice")
        assert produce_errors(alice, free, 1) == [None]  # no ACL on the topic: allowed
        assert [e.code() for e in produce_errors(alice, guarded, 1)] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
        assert produce_errors(client(secured, "bob"), guarded, 1) == [None]
    finally:
        _ADMINS.pop((secured[1]["SASL_PLAINTEXT"], "admin"), None)
        broker.stop()


def test_no_secret_in_the_broker_log(secured):
    _, _, lines = secured
    text = "\n".join(lines)
    assert "Denied operation" in text  # denials are logged (DEBUG) ...
    for secret in PASSWORDS.values():
        assert secret not in text        # ... and no password ever is


def test_tls_client_certificate_principal(tmp_path):
    """ACLs name a TLS client by its certificate subject (Kafka's ``DefaultKafkaPrincipalBuilder``)."""
    from support.certs import make_pki

    pki = make_pki(tmp_path)
    broker = EmbeddedBroker(config={
        "listeners": "PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem), "ssl.client.auth": "required",
        "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"}).start()
    try:
        ports = ports_of(broker)
        plain = {"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"}
        admin_client = AdminClient(plain)
        for t in ("cert-ok", "cert-closed"):
            admin_client.create_topics([NewTopic(t, 1, 1)])[t].result(DEADLINE_S)
        binding = AclBinding(ResourceType.TOPIC, "cert-ok", LITERAL, "User:CN=client,O=pyspark-kafka", "*",
                             AclOperation.WRITE, ALLOW)
        admin_client.create_acls([binding])[binding].result(DEADLINE_S)
        tls = {"bootstrap.servers": f"127.0.0.1:{ports['MTLS']}", "security.protocol": "SSL",
               "ssl.ca.location": str(pki.ca_pem), "ssl.certificate.location": str(pki.client_cert),
               "ssl.key.location": str(pki.client_key)}
        assert produce_errors(tls, "cert-ok", 1) == [None]
        assert [e.code() for e in produce_errors(tls, "cert-closed", 1)] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    finally:
        broker.stop()


def test_aiokafka_with_and_without_acls(secured):
    """aiokafka (a third client, pure Python) over SASL_PLAINTEXT/SCRAM-SHA-256: with WRITE and READ on
    the topic it produces and reads back; without WRITE ``send_and_wait`` raises
    TopicAuthorizationFailedError and nothing is written."""
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.errors import TopicAuthorizationFailedError

    _, ports, _ = secured
    ok, closed = make_topic(secured, unique("aio-ok")), make_topic(secured, unique("aio-closed"))
    grant(secured, acl(ResourceType.TOPIC, ok, AclOperation.WRITE), acl(ResourceType.TOPIC, ok, AclOperation.READ),
          acl(ResourceType.TOPIC, closed, AclOperation.DESCRIBE))
    common = dict(bootstrap_servers=f"127.0.0.1:{ports['SASL_PLAINTEXT']}", security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                  sasl_plain_password=PASSWORDS["alice"])

    async def main():
        producer = aiokafka.AIOKafkaProducer(**common)
        await asyncio.wait_for(producer.start(), DEADLINE_S)
        try:
            await asyncio.wait_for(producer.send_and_wait(ok, b"aio-1", partition=0), DEADLINE_S)
            with pytest.raises(TopicAuthorizationFailedError):
                await asyncio.wait_for(producer.send_and_wait(closed, b"aio-denied", partition=0), DEADLINE_S)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(**common, enable_auto_commit=False)
        await asyncio.wait_for(consumer.start(), DEADLINE_S)
        try:
            tp = aiokafka.TopicPartition(ok, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            return (await asyncio.wait_for(consumer.getone(), DEADLINE_S)).value
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == b"aio-1"
    assert end_offset(secured, closed) == 0
