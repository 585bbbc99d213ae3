"""Kafka Java client settings in ``kafka.*`` options run unchanged: translated, refused with the
alternative, or dropped with a warning (pyspark_kafka.kafka.javaconfig, pyspark_kafka.kafka.keystores)."""

from __future__ import annotations

import datetime
import logging
from collections import Counter

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from pyspark_kafka.kafka import javaconfig
from pyspark_kafka.kafka.clients import client_params
from pyspark_kafka.errors import OptionError
from pyspark_kafka.kafka.javaconfig import java_partitioner, parse_jaas, to_librdkafka

PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="s3cr=t\\"x";'
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required username=bob password=pw;"


def test_renamed_and_converted_settings():
    out = to_librdkafka({"bootstrap.servers": "h:1", "max.request.size": "2000000", "buffer.memory": "33554432",
                         "receive.buffer.bytes": "65536", "send.buffer.bytes": "131072", "fetch.max.wait.ms": "250",
                         "linger.ms": "5", "compression.type": "zstd", "compression.zstd.level": "7",
                         "compression.gzip.level": "3",
                         "partition.assignment.strategy":
                             "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"})
    assert out == {"bootstrap.servers": "h:1", "message.max.bytes": "2000000", "queue.buffering.max.kbytes": "32768",
                   "socket.receive.buffer.bytes": "65536", "socket.send.buffer.bytes": "131072",
                   "fetch.wait.max.ms": "250", "linger.ms": "5", "compression.type": "zstd",
                   "compression.level": "7", "partition.assignment.strategy": "cooperative-sticky"}


def test_every_translated_setting_is_accepted_by_librdkafka():
    from confluent_kafka import Consumer, Producer

    producer = to_librdkafka({"bootstrap.servers": "127.0.0.1:1", "max.request.size": "2000000",
                              "buffer.memory": "1048576", "send.buffer.bytes": "131072", "sasl.jaas.config": PLAIN,
                              "sasl.mechanism": "PLAIN", "security.protocol": "SASL_PLAINTEXT",
                              "max.block.ms": "1000", "delivery.timeout.ms": "5000"})
    Producer(producer).flush(0)
    consumer = to_librdkafka({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "fetch.max.wait.ms": "100",
                              "max.partition.fetch.bytes": "1048576", "receive.buffer.bytes": "65536",
                              "partition.assignment.strategy": "org.apache.kafka.clients.consumer.RangeAssignor,"
                                                               "org.apache.kafka.clients.consumer.RoundRobinAssignor"})
    Consumer(consumer).close()


@pytest.mark.parametrize("java,librdkafka", [("", "none"), (" ", "none"), ("https", "https"), ("HTTPS", "HTTPS")])
def test_empty_endpoint_identification_turns_the_host_name_check_off(java, librdkafka):
    """The Java client disables the host name check with an empty value (SslConfigs); librdkafka
    refuses an empty value and says ``none``: the translation is accepted by librdkafka."""
    from confluent_kafka import Producer

    out = to_librdkafka({"bootstrap.servers": "127.0.0.1:1", "ssl.endpoint.identification.algorithm": java})
    assert out["ssl.endpoint.identification.algorithm"] == librdkafka
    Producer(out).flush(0)


@pytest.mark.parametrize("value,expected", [
    (PLAIN, ("org.apache.kafka.common.security.plain.PlainLoginModule", {"username": "alice", "password": 's3cr=t"x'})),
    (SCRAM, ("org.apache.kafka.common.security.scram.ScramLoginModule", {"username": "bob", "password": "pw"})),
])
def test_parse_jaas(value, expected):
    assert parse_jaas(value) == expected


def test_jaas_login_modules_map_to_librdkafka_sasl_settings():
    assert to_librdkafka({"sasl.jaas.config": SCRAM, "sasl.mechanism": "SCRAM-SHA-512"}) == {
        "sasl.username": "bob", "sasl.password": "pw", "sasl.mechanism": "SCRAM-SHA-512"}
    krb = ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
           'keyTab="/etc/k.keytab" principal="svc@EXAMPLE.COM";')
    assert to_librdkafka({"sasl.jaas.config": krb}) == {"sasl.kerberos.keytab": "/etc/k.keytab",
                                                        "sasl.kerberos.principal": "svc@EXAMPLE.COM"}
    unsecured = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                 'unsecuredLoginStringClaim_sub="tester";')
    assert to_librdkafka({"sasl.jaas.config": unsecured}) == {"enable.sasl.oauthbearer.unsecure.jwt": "true",
                                                              "sasl.oauthbearer.config": "principal=tester"}
    oidc = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId="app" '
            'clientSecret="very-secret" scope="kafka";')
    out = to_librdkafka({"sasl.jaas.config": oidc, "sasl.oauthbearer.token.endpoint.url": "https://idp/token"})
    assert out["sasl.oauthbearer.method"] == "oidc" and out["sasl.oauthbearer.client.secret"] == "very-secret"
    with pytest.raises(OptionError, match="token.endpoint.url"):
        to_librdkafka({"sasl.jaas.config": oidc})


@pytest.mark.parametrize("value", [
    "com.example.MyLoginModule required user=x secret=hunter2;",
    "PlainLoginModule username=x password=hunter2",  # no control flag
    "org.apache.kafka.common.security.plain.PlainLoginModule required username=x;",
])
def test_bad_jaas_is_refused_without_showing_secrets(value):
    with pytest.raises(OptionError, match="sasl.jaas.config") as e:
        to_librdkafka({"sasl.jaas.config": value})
    assert "hunter2" not in str(e.value)


@pytest.mark.parametrize("key", sorted(javaconfig.SPARK_REFUSES))
def test_settings_spark_refuses_are_refused_with_the_alternative(key):
    with pytest.raises(OptionError, match=f"Kafka option '{key}' is not supported"):
        to_librdkafka({"bootstrap.servers": "h:1", key: "x"})


def test_java_only_tuning_is_dropped_with_one_warning(caplog):
    javaconfig._warned.discard("max.block.ms")
    with caplog.at_level(logging.WARNING, logger="pyspark_kafka"):
        assert to_librdkafka({"max.block.ms": "1000", "ssl.protocol": "TLSv1.2"}) == {}
        assert to_librdkafka({"max.block.ms": "1000"}) == {}
    warnings = [r.getMessage() for r in caplog.records if "max.block.ms" in r.getMessage()]
    assert len(warnings) == 1 and "delivery.timeout.ms" in warnings[0]


@pytest.mark.parametrize("params,expected", [
    ({}, None),
    ({"partitioner.class": "org.apache.kafka.clients.producer.internals.DefaultPartitioner"}, "murmur2"),
    ({"partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"}, "roundrobin"),
    ({"partitioner": "murmur2_random"}, "murmur2"),
])
def test_partitioners_kafka_defines_map_to_our_routing(params, expected):
    assert java_partitioner(params) == expected
    assert "partitioner" not in to_librdkafka(params) and "partitioner.class" not in to_librdkafka(params)


@pytest.mark.parametrize("params", [
    {"partitioner.class": "com.example.GeoPartitioner"},
    {"partitioner.class": "org.apache.kafka.clients.producer.UniformStickyPartitioner"},
    {"partitioner": "consistent_random"},  # librdkafka's default: would silently do nothing
    {"partitioner.ignore.keys": "true"},
])
def test_other_partitioners_are_refused_with_how_to_route(params):
    with pytest.raises(OptionError, match="option 'partitioner'"):
        to_librdkafka(params)


# -- key stores ---------------------------------------------------------------------------------


def _cert(name: str, key, issuer_key=None, issuer_name: str | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name or name)])
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(issuer_key or key, hashes.SHA256()))


@pytest.fixture(scope="module")
def pki():
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("test-ca", ca_key)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert("client", client_key, ca_key, "test-ca")
    return ca, client, client_key


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_pkcs12_and_pem_truststores_become_ssl_ca_pem(tmp_path, pki):
    ca, _, _ = pki
    p12 = tmp_path / "trust.p12"
    p12.write_bytes(pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(ca, b"ca")],
                                                     serialization.BestAvailableEncryption(b"changeit")))
    out = to_librdkafka({"ssl.truststore.location": str(p12), "ssl.truststore.password": "changeit",
                         "ssl.truststore.type": "PKCS12", "security.protocol": "SSL"})
    assert out == {"security.protocol": "SSL", "ssl.ca.pem": _pem(ca)}
    assert to_librdkafka({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": _pem(ca)}) == {
        "ssl.ca.pem": _pem(ca)}
    with pytest.raises(OptionError, match="check the key store password") as e:
        to_librdkafka({"ssl.truststore.location": str(p12), "ssl.truststore.password": "wrong-pass",
                       "ssl.truststore.type": "PKCS12"})
    assert "wrong-pass" not in str(e.value)
    with pytest.raises(OptionError, match="cannot read the key store"):
        to_librdkafka({"ssl.truststore.location": str(tmp_path / "missing.jks")})


def test_jks_stores_become_pem_in_memory(tmp_path, pki):
    jks = pytest.importorskip("jks", reason="pyjks reads JKS key stores")
    ca, client, client_key = pki
    der = lambda c: c.public_bytes(serialization.Encoding.DER)  # noqa: E731
    trust = jks.KeyStore.new("jks", [jks.TrustedCertEntry.new("ca", der(ca))])
    trust.save(str(tmp_path / "trust.jks"), "changeit")
    pkcs8 = client_key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())
    keys = jks.KeyStore.new("jks", [jks.PrivateKeyEntry.new("client", [der(client), der(ca)], pkcs8)])
    keys.save(str(tmp_path / "keys.jks"), "storepass")
    out = to_librdkafka({"ssl.truststore.location": str(tmp_path / "trust.jks"), "ssl.truststore.password": "changeit",
                         "ssl.keystore.location": str(tmp_path / "keys.jks"), "ssl.keystore.password": "storepass",
                         "ssl.key.password": "storepass"})
    assert out["ssl.ca.pem"] == _pem(ca)
    assert out["ssl.certificate.pem"] == _pem(client) + _pem(ca)
    loaded = serialization.load_pem_private_key(out["ssl.key.pem"].encode(), None)
    assert loaded.private_numbers() == client_key.private_numbers()
    assert "ssl.key.password" not in out and "ssl.keystore.location" not in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.jks", "trust.jks"]  # nothing written


def test_a_pkcs12_file_declared_jks_is_read_as_java_reads_it(tmp_path, pki):
    """Issue 27: ``keytool`` on Java 9+ writes PKCS12 unless told otherwise (also into a file named
    ``.jks``); Java's JKS key store type reads it (``keystore.type.compat``), so we do too."""
    ca, client, client_key = pki
    trust = tmp_path / "trust.jks"
    trust.write_bytes(pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(ca, b"ca")],
                                                       serialization.BestAvailableEncryption(b"changeit")))
    keys = tmp_path / "keys.jks"
    keys.write_bytes(pkcs12.serialize_key_and_certificates(b"client", client_key, client, [ca],
                                                           serialization.BestAvailableEncryption(b"storepass")))
    out = to_librdkafka({"ssl.truststore.location": str(trust), "ssl.truststore.password": "changeit",
                         "ssl.keystore.location": str(keys), "ssl.keystore.password": "storepass"})  # type: JKS
    assert out["ssl.ca.pem"] == _pem(ca)
    assert out["ssl.certificate.pem"] == _pem(client) + _pem(ca)
    assert serialization.load_pem_private_key(out["ssl.key.pem"].encode(), None).private_numbers() == \
        client_key.private_numbers()


def test_a_keytool_trust_store_is_read_whatever_its_format(tmp_path, pki):
    import shutil
    import subprocess

    if shutil.which("keytool") is None:
        pytest.skip("no keytool (a JDK) on PATH")
    ca, _, _ = pki
    (tmp_path / "ca.pem").write_text(_pem(ca))
    for name, extra in (("default.jks", []), ("jks.jks", ["-storetype", "JKS"])):
        subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(tmp_path / "ca.pem"),
                        "-keystore", str(tmp_path / name), "-storepass", "changeit", *extra],
                       check=True, capture_output=True, timeout=60)
        if extra:
            pytest.importorskip("jks", reason="pyjks reads JKS key stores")
        out = to_librdkafka({"ssl.truststore.location": str(tmp_path / name), "ssl.truststore.password": "changeit"})
        assert out["ssl.ca.pem"] == _pem(ca), name


def test_pkcs12_keystores_are_read_by_librdkafka_itself(tmp_path):
    out = to_librdkafka({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12",
                         "ssl.keystore.password": "pw"})
    assert out == {"ssl.keystore.location": "/k.p12", "ssl.keystore.password": "pw"}


@pytest.mark.slow
def test_client_params_translate_and_spark_write_honours_java_settings(spark, bootstrap, make_topic):
    """An unchanged Spark Kafka write (Java client vocabulary) through format('pykafka')."""
    topic = make_topic(partitions=3)
    java_opts = {"kafka.bootstrap.servers": bootstrap, "kafka.max.request.size": "2000000",
                 "kafka.buffer.memory": "33554432", "kafka.linger.ms": "5", "kafka.max.block.ms": "60000",
                 "kafka.partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner",
                 "kafka.acks": "all", "kafka.retries": "3", "kafka.request.timeout.ms": "30000"}
    assert client_params(java_opts)["message.max.bytes"] == "2000000"
    (spark.range(300).selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value").coalesce(1)
     .write.format("pykafka").options(**java_opts).option("topic", topic).mode("append").save())
    from support.topics import consume_all

    counts = Counter(m.partition() for m in consume_all(bootstrap, topic))
    assert counts == {0: 100, 1: 100, 2: 100}  # round robin despite the keys, as the Java class asks


def test_authorization_hints_name_the_acl_needed():
    from pyspark_kafka.errors import authorization_hint

    assert "lacks READ on topic 'orders'" in authorization_hint("TOPIC_AUTHORIZATION_FAILED", "READ", "orders")
    assert "--operation Write --topic orders" in authorization_hint("TOPIC_AUTHORIZATION_FAILED", "WRITE", "orders")
    assert "group ACL" in authorization_hint("GROUP_AUTHORIZATION_FAILED", "READ", "orders")
    assert authorization_hint("NOT_LEADER_OR_FOLLOWER", "READ", "orders") == ""
