"""``format("pykafka")`` with Spark's Java-style security options against the secured embedded broker.

The job's options are the ones a Spark ``format("kafka")`` job over SASL_SSL/SCRAM-SHA-512 uses
(``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.*`` as PKCS12): the connector translates them for librdkafka, writes a
DataFrame and reads it back. A wrong password fails the job at once (within a second, not after
``kafka.default.api.timeout.ms``) with librdkafka's authentication error, never the password.
"""

from __future__ import annotations

import pytest

from pyspark_kafka.broker import EmbeddedBroker
from support.certs import STORE_PASSWORD, make_pki

PASSWORD = "spark-pw-Hc38"


@pytest.fixture(scope="module")
def sasl_ssl(tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    config = {"listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
              "ssl.keystore.location": str(pki.server_pem), "sasl.enabled.mechanisms": "SCRAM-SHA-512",
              "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                  f'user_etl="{PASSWORD}";'}
    with EmbeddedBroker(config=config) as broker:
        yield broker.bootstrap_servers, pki


def options(bootstrap: str, pki, password: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": bootstrap,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                  f'username="etl" password="{password}";',
        "kafka.ssl.truststore.type": "PKCS12",
        "kafka.ssl.truststore.location": str(pki.ca_p12),
        "kafka.ssl.truststore.password": STORE_PASSWORD,
    }


@pytest.mark.slow
def test_spark_job_writes_and_reads_over_sasl_ssl(spark, sasl_ssl, read_path):
    bootstrap, pki = sasl_ssl
    opts = options(bootstrap, pki, PASSWORD)
    rows = [(f"k{i}", f"v{i}") for i in range(20)]
    topic = f"secured-orders-{read_path}"  # one topic per read path (the broker is the module's)
    spark.createDataFrame(rows, "key string, value string").write.format("pykafka").options(
        **opts, topic=topic).mode("append").save()
    got = (spark.read.format("pykafka").options(**opts, subscribe=topic).load()
           .selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)").collect())
    assert sorted(tuple(r) for r in got) == sorted(rows)


@pytest.mark.slow
def test_spark_job_with_a_wrong_password_says_authentication_failed(spark, sasl_ssl):
    bootstrap, pki = sasl_ssl
    opts = options(bootstrap, pki, "wrong-" + PASSWORD)
    with pytest.raises(Exception) as failure:
        spark.read.format("pykafka").options(**opts, subscribe="secured-orders").load().collect()
    text = str(failure.value)
    assert "wrong-" + PASSWORD not in text
    assert ("refused the authentication" in text and "Authentication failed during authentication due to "
            "invalid credentials with SASL mechanism SCRAM-SHA-512" in text), text[-2000:]
