"""``format("pykafka")`` against the embedded broker with ACLs (Kafka's StandardAuthorizer rules).

A job whose principal has WRITE and READ on its topic and READ on the consumer groups the reader
uses (``spark-kafka-relation-*``, Spark's default ``groupIdPrefix`` for batch reads) writes and
reads back; reading a topic it may DESCRIBE but not READ (holding a record) fails with Kafka's "Topic authorization failed" and
returns no rows.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from pyspark_kafka.broker import EmbeddedBroker

PASSWORDS = {"admin": "admin-spark-Pw40", "etl": "etl-spark-Pw77"}
DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def acl_broker():
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
              "sasl.jaas.config": jaas, "super.users": "User:admin",
              "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    with EmbeddedBroker(config=config) as broker:
        admin = AdminClient(client_conf(broker.bootstrap_servers, "admin"))
        for topic in ("etl-orders", "etl-secret"):
            admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(DEADLINE_S)
        grants = [AclBinding(ResourceType.TOPIC, "etl-orders", ResourcePatternType.LITERAL, "User:etl", "*", op,
                             AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
        grants.append(AclBinding(ResourceType.GROUP, "spark-kafka-relation-", ResourcePatternType.PREFIXED,
                                 "User:etl", "*", AclOperation.READ, AclPermissionType.ALLOW))
        grants.append(AclBinding(ResourceType.TOPIC, "etl-secret", ResourcePatternType.LITERAL, "User:etl", "*",
                                 AclOperation.DESCRIBE, AclPermissionType.ALLOW))
        for f in admin.create_acls(grants).values():
            f.result(DEADLINE_S)
        producer = Producer(client_conf(broker.bootstrap_servers, "admin"))
        producer.produce("etl-secret", b"not for etl", partition=0)
        assert producer.flush(DEADLINE_S) == 0
        yield broker.bootstrap_servers


def client_conf(bootstrap: str, user: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": PASSWORDS[user]}


def options(bootstrap: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                      f'username="etl" password="{PASSWORDS["etl"]}";'}


@pytest.mark.slow
def test_spark_job_with_acls(spark, acl_broker):
    opts = options(acl_broker)
    rows = [(f"k{i}", f"v{i}") for i in range(20)]
    spark.createDataFrame(rows, "key string, value string").write.format("pykafka").options(
        **opts, topic="etl-orders").mode("append").save()
    got = (spark.read.format("pykafka").options(**opts, subscribe="etl-orders").load()
           .selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)").collect())
    assert sorted(tuple(r) for r in got) == sorted(rows)
    with pytest.raises(Exception) as failure:
        spark.read.format("pykafka").options(**opts, subscribe="etl-secret").load().collect()
    assert "Topic authorization failed" in str(failure.value) or "TOPIC_AUTHORIZATION_FAILED" in str(failure.value), \
        str(failure.value)[-2000:]
    assert PASSWORDS["etl"] not in str(failure.value)
