"""ACLs survive SIGKILL: a broker process with the StandardAuthorizer gets ACLs through CreateAcls
(librdkafka's admin client), is SIGKILLed and restarted on the same data directory; DescribeAcls
answers the same bindings and they are enforced as before. The broker's whole output holds no password.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from pyspark_kafka.broker.security.authorizer import STANDARD_AUTHORIZER
from support.broker_process import BrokerProcess

DEADLINE_S = 30.0
PASSWORDS = {"admin": "adm-restart-Pw81", "alice": "ali-restart-Pw27"}
CONFIG = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
          "sasl.enabled.mechanisms": "SCRAM-SHA-256",
          "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                              + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";",
          "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin"}
EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)
BINDINGS = [AclBinding(ResourceType.TOPIC, "kept", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, "ke", ResourcePatternType.PREFIXED, "User:alice", "*",
                       AclOperation.WRITE, AclPermissionType.DENY)]


def start(data_dir) -> tuple[BrokerProcess, dict[str, int]]:
    proc = BrokerProcess(data_dir, config=CONFIG)
    return proc, proc.listener_ports(2)


def scram(port: int, user: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": PASSWORDS[user]}


def produce_error(conf: dict, topic: str):
    errors = []
    producer = Producer({**conf, "message.timeout.ms": 10000})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(DEADLINE_S)
    assert len(errors) == 1
    return errors[0]


def test_acls_survive_sigkill(tmp_path):
    proc, ports = start(tmp_path)
    try:
        admin = AdminClient(scram(ports["SASL_PLAINTEXT"], "admin"))
        admin.create_topics([NewTopic("kept", 1, 1)])["kept"].result(DEADLINE_S)
        for f in admin.create_acls(BINDINGS).values():
            f.result(DEADLINE_S)
        # the PREFIXED DENY beats the LITERAL ALLOW
        assert produce_error(scram(ports["SASL_PLAINTEXT"], "alice"), "kept").code() == \
            KafkaError.TOPIC_AUTHORIZATION_FAILED
        for f in admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "ke", ResourcePatternType.PREFIXED, None,
                                                     None, AclOperation.ANY, AclPermissionType.ANY)]).values():
            assert len(f.result(DEADLINE_S)) == 1
        assert produce_error(scram(ports["SASL_PLAINTEXT"], "alice"), "kept") is None
    finally:
        proc.kill()
    first_log = proc.output()

    proc, ports = start(tmp_path)
    try:
        admin = AdminClient(scram(ports["SASL_PLAINTEXT"], "admin"))
        assert [str(b) for b in admin.describe_acls(EVERYTHING).result(DEADLINE_S)] == [str(BINDINGS[0])]
        assert produce_error(scram(ports["SASL_PLAINTEXT"], "alice"), "kept") is None  # still allowed ...
        anonymous = produce_error({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"}, "kept")
        assert anonymous.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # ... and still only alice
    finally:
        proc.kill()
    log = first_log + proc.output()
    for password in PASSWORDS.values():
        assert password not in log
    # kept as metadata records (the combined node's metadata log), not in the single node's acls.json
    assert b"User:alice" in (tmp_path / "__cluster_metadata-0" / "metadata.log").read_bytes()
    assert not (tmp_path / "acls.json").exists()
