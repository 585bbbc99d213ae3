"""The SASL answers of the embedded broker, result by result against Apache Kafka 4.3.1.

Both brokers get a PLAINTEXT and a SASL_PLAINTEXT listener with PLAIN (JAAS users) and
SCRAM-SHA-256 (a user made with AlterUserScramCredentials); the same raw-wire probes go to
each: what answers, with which error code and message, and whether the connection is closed.
Apache Kafka runs from Maven Central's jars (skipped when unavailable). About 25 s here.
"""

from __future__ import annotations

import struct

import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from kio.schema.alter_user_scram_credentials.v0.request import (AlterUserScramCredentialsRequest,
                                                                ScramCredentialDeletion, ScramCredentialUpsertion)
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.metadata.v9.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from support.wire import WireClient

pytestmark = pytest.mark.slow

PASSWORD = "ref-pw-Lm04"
JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="{PASSWORD}";'
SASL_CONFIG = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
               "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
               # Kafka needs a JAAS entry for every enabled mechanism (the broker accepts it too)
               "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
                   "org.apache.kafka.common.security.scram.ScramLoginModule required;"}
METADATA = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                           include_topic_authorized_operations=False)


def _add_scram_user(plaintext: str) -> None:
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    admin = AdminClient({"bootstrap.servers": plaintext})  # kept alive until the result is in
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("bob", info, PASSWORD.encode())])["bob"].result(30)


def _exchange(address: str, mechanism: str, tokens: list[bytes]) -> tuple:
    """Handshake then SaslAuthenticate with each token: the answers and whether the broker closed."""
    with WireClient(address) as c:
        hs = c.request(SaslHandshakeRequest(mechanism=mechanism))
        out = [("handshake", int(hs.error_code), tuple(sorted(hs.mechanisms)))]
        if hs.error_code:
            return (*out, ("closed", c.is_closed_by_broker()))
        for token in tokens:
            answer = c.request(SaslAuthenticateRequest(auth_bytes=token))
            out.append(("authenticate", int(answer.error_code), answer.error_message))
            if answer.error_code:
                return (*out, ("closed", c.is_closed_by_broker()))
        again = c.request(SaslAuthenticateRequest(auth_bytes=tokens[-1]))
        out.append(("again", int(again.error_code), again.error_message))
        return tuple(out)


def observe(sasl: str, plaintext: str) -> dict[str, tuple]:
    """Every probe's observable result."""
    got = {}
    with WireClient(sasl) as c:
        c.send(METADATA)
        got["metadata before authentication"] = ("closed", c.is_closed_by_broker())
    got["unsupported mechanism"] = _exchange(sasl, "GSSAPI", [])
    got["plain ok, then again"] = _exchange(sasl, "PLAIN", [b"\0alice\0" + PASSWORD.encode()])
    got["plain wrong password"] = _exchange(sasl, "PLAIN", [b"\0alice\0nope"])
    got["plain unknown user"] = _exchange(sasl, "PLAIN", [b"\0mallory\0" + PASSWORD.encode()])
    got["plain malformed"] = _exchange(sasl, "PLAIN", [b"only-one-part"])
    got["scram unknown user"] = _exchange(sasl, "SCRAM-SHA-256", [b"n,,n=mallory,r=abcdefgh"])
    got["scram garbage"] = _exchange(sasl, "SCRAM-SHA-256", [b"garbage"])
    for name, token in (("v0 raw plain ok", b"\0alice\0" + PASSWORD.encode()), ("v0 raw plain wrong", b"\0alice\0no")):
        with WireClient(sasl) as c:
            hs = c.request(SaslHandshakeV0(mechanism="PLAIN"))
            c.send_raw(struct.pack(">i", len(token)) + token)
            answer = c.recv_frame()
            served = answer is not None and c.request(METADATA).brokers != ()
            got[name] = (int(hs.error_code), answer, served)
    with WireClient(plaintext) as c:
        hs = c.request(SaslHandshakeRequest(mechanism="PLAIN"))
        got["handshake on plaintext"] = (int(hs.error_code), tuple(hs.mechanisms))
        d = c.request(DescribeUserScramCredentialsRequest(users=(UserName(name="bob"), UserName(name="nobody"))))
        got["describe error"] = (int(d.error_code), d.error_message)
        got["describe"] = tuple((r.user, int(r.error_code), r.error_message,
                                 tuple((int(i.mechanism), int(i.iterations)) for i in r.credential_infos))
                                for r in d.results)
        a = c.request(AlterUserScramCredentialsRequest(
            deletions=(ScramCredentialDeletion(name="nobody", mechanism=1),),
            upsertions=(ScramCredentialUpsertion(name="weak", mechanism=1, iterations=1000, salt=b"s" * 16,
                                                 salted_password=b"p" * 32),
                        ScramCredentialUpsertion(name="strong", mechanism=2, iterations=8192, salt=b"s" * 16,
                                                 salted_password=b"p" * 64),
                        ScramCredentialUpsertion(name="odd", mechanism=7, iterations=8192, salt=b"s" * 16,
                                                 salted_password=b"p" * 32))))
        got["alter"] = tuple(sorted((r.user, int(r.error_code), r.error_message) for r in a.results))
    return got


@pytest.fixture(scope="module")
def embedded():
    from pyspark_kafka.broker import EmbeddedBroker

    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", **SASL_CONFIG}
    with EmbeddedBroker(config=config) as broker:
        ports = {lst.name: f"127.0.0.1:{lst.port}" for lst in broker.broker.security.listeners}
        _add_scram_user(ports["PLAINTEXT"])
        yield ports["SASL_PLAINTEXT"], ports["PLAINTEXT"]


@pytest.fixture(scope="module")
def apache():
    from pyspark_kafka.testing.apache_kafka import ApacheKafka, _free_port
    from pyspark_kafka.testing.maven import MavenUnavailable

    sasl_port = _free_port()

    class SaslKafka(ApacheKafka):
        def properties(self, node_id, voters):
            props = super().properties(node_id, voters)
            props["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
            props["advertised.listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
            props["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            props.update(SASL_CONFIG)
            return props

    kafka = SaslKafka(nodes=1)
    try:
        kafka.start()
    except MavenUnavailable as e:
        pytest.skip(f"Apache Kafka {kafka.version} from Maven Central unavailable: {e}")
    try:
        _add_scram_user(kafka.bootstrap_servers)
        yield f"127.0.0.1:{sasl_port}", kafka.bootstrap_servers
    finally:
        kafka.stop()


def test_java_client_over_sasl_ssl_scram(tmp_path, monkeypatch):
    """Kafka's Java client (the conformance driver) produces and fetches over SASL_SSL with
    SCRAM-SHA-512 and a PEM trust store; a wrong password fails with Kafka's exception and text."""
    from integration_tests.conformance.drivers import java_client
    from integration_tests.conformance.scenarios import Rec
    from pyspark_kafka.broker import EmbeddedBroker
    from support.certs import make_pki

    why = java_client.unavailable()
    if why:
        pytest.skip(f"Java driver unavailable: {why}")
    pki = make_pki(tmp_path / "pki")
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
              "ssl.keystore.location": str(pki.server_pem), "sasl.enabled.mechanisms": "SCRAM-SHA-512"}

    def client_properties(password: str):
        path = tmp_path / f"client-{password}.properties"
        path.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca_pem}\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="bob" password="{password}";\n')
        monkeypatch.setenv("KAFKA_CLIENT_PROPERTIES", str(path))

    with EmbeddedBroker(config=config) as broker:
        ports = {lst.name: f"127.0.0.1:{lst.port}" for lst in broker.broker.security.listeners}
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        admin = AdminClient({"bootstrap.servers": ports["PLAINTEXT"]})
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("bob", info, PASSWORD.encode())])["bob"].result(30)
        driver = java_client.JavaClientDriver(ports["SASL_SSL"])
        client_properties(PASSWORD)
        driver.produce("java-sasl", [Rec(value=b"j1", partition=0), Rec(value=b"j2", partition=0)])
        assert [f.value for f in driver.fetch("java-sasl", {0: 0}, 2)] == [b"j1", b"j2"]
        client_properties("not-" + PASSWORD)
        with pytest.raises(AssertionError) as failure:
            driver.produce("java-sasl", [Rec(value=b"no", partition=0)])
        assert ("SaslAuthenticationException: Authentication failed during authentication due to invalid "
                "credentials with SASL mechanism SCRAM-SHA-512") in str(failure.value)
        from confluent_kafka import Consumer, TopicPartition

        watcher = Consumer({"bootstrap.servers": ports["PLAINTEXT"], "group.id": "w"})
        try:
            assert watcher.get_watermark_offsets(TopicPartition("java-sasl", 0), timeout=30) == (0, 2)
        finally:
            watcher.close()


def test_sasl_answers_match_apache_kafka(embedded, apache):
    ours, theirs = observe(*embedded), observe(*apache)
    for key in theirs:
        assert (key, ours.get(key)) == (key, theirs[key])
    assert ours == theirs
