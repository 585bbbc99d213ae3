"""The embedded broker with PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL and client-auth listeners at once.

Real clients only: librdkafka (confluent-kafka), kafka-python and aiokafka. Right credentials
produce and consume; each wrong case fails with the error the client reports and leaves no
data (the topic it named is never created). Nothing secret reaches the broker's log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

from pyspark_kafka.broker import EmbeddedBroker
from support.certs import STORE_PASSWORD, make_pki
from support.log_capture import LogCapture

DEADLINE_S = 30.0
PLAIN_PW = "alice-pw-Zq81"
SCRAM_PW = "bob-pw-Kx27"
CAROL_PW = "carol-pw-Wt55"
SECRETS = (PLAIN_PW, SCRAM_PW, CAROL_PW, "wrong-pw-Jh40", STORE_PASSWORD)
PLAIN_JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="{PLAIN_PW}";'
SCRAM_JAAS = f'org.apache.kafka.common.security.scram.ScramLoginModule required user_bob="{SCRAM_PW}";'


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """``(EmbeddedBroker, {listener name: port}, Pki, captured log lines)``."""
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    capture = LogCapture()
    # the broker's own loggers (clients' debug logs show SCRAM salts by design: not ours)
    loggers = [logging.getLogger(name) for name in ("pyspark_kafka", "asyncio")]
    old_levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(capture)
        lg.setLevel(logging.DEBUG)
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                     "SASL_SSL://127.0.0.1:0,MTLS://127.0.0.1:0,REQ://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL,MTLS:SSL,REQ:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_pem),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        # the client-auth listener: a PKCS12 key store and trust store, per-listener names
        "listener.name.mtls.ssl.keystore.type": "PKCS12",
        "listener.name.mtls.ssl.keystore.location": str(pki.server_p12),
        "listener.name.mtls.ssl.keystore.password": STORE_PASSWORD,
        "listener.name.mtls.ssl.truststore.type": "PKCS12",
        "listener.name.mtls.ssl.truststore.location": str(pki.ca_p12),
        "listener.name.mtls.ssl.truststore.password": STORE_PASSWORD,
        "listener.name.mtls.ssl.client.auth": "required",
        # a listener that asks for a certificate but does not need one; PEM trust store
        "listener.name.req.ssl.truststore.type": "PEM",
        "listener.name.req.ssl.truststore.location": str(pki.ca_pem),
        "listener.name.req.ssl.client.auth": "requested",
        "group.initial.rebalance.delay.ms": "0",
    }
    broker = EmbeddedBroker(config=config).start()
    try:
        ports = {lst.name: lst.port for lst in broker.broker.security.listeners}
        yield broker, ports, pki, capture.lines
    finally:
        broker.stop()
        for lg, level in zip(loggers, old_levels):
            lg.removeHandler(capture)
            lg.setLevel(level)


def conf(secured, listener: str, **extra) -> dict:
    _, ports, pki, _ = secured
    out = {"bootstrap.servers": f"127.0.0.1:{ports[listener]}", "socket.timeout.ms": 10000}
    if listener in ("SSL", "SASL_SSL", "MTLS", "REQ"):
        out.update({"security.protocol": "SSL" if listener != "SASL_SSL" else "SASL_SSL",
                    "ssl.ca.location": str(pki.ca_pem)})
    if listener == "SASL_PLAINTEXT":
        out["security.protocol"] = "SASL_PLAINTEXT"
    out.update(extra)
    return out


def sasl(mechanism: str, user: str, password: str) -> dict:
    return {"sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}


def unique(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{os.urandom(3).hex()}"


def roundtrip(client_conf: dict, topic: str, n: int = 3) -> list[bytes]:
    """Produce ``n`` records and read them back with one client configuration; return the values."""
    producer = Producer(client_conf)
    for i in range(n):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(DEADLINE_S) == 0, "records were not delivered"
    consumer = Consumer({**client_conf, "group.id": unique("g"), "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + DEADLINE_S
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def failed_attempt(client_conf: dict, topic: str) -> list[KafkaError]:
    """Produce to ``topic`` with a client that must fail; return the errors it reported (bounded wait)."""
    errors: list[KafkaError] = []
    producer = Producer({**client_conf, "error_cb": errors.append, "message.timeout.ms": 5000})
    producer.produce(topic, b"must-not-arrive")
    deadline = time.monotonic() + DEADLINE_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    producer.flush(0)
    return errors


def topic_names(secured) -> set[str]:
    return set(AdminClient(conf(secured, "PLAINTEXT")).list_topics(timeout=DEADLINE_S).topics)


@pytest.mark.parametrize("listener, extra", [
    ("PLAINTEXT", {}),
    ("SSL", {}),
    ("SASL_PLAINTEXT", sasl("PLAIN", "alice", PLAIN_PW)),
    ("SASL_PLAINTEXT", sasl("SCRAM-SHA-256", "bob", SCRAM_PW)),
    ("SASL_PLAINTEXT", sasl("SCRAM-SHA-512", "bob", SCRAM_PW)),
], ids=["plaintext", "ssl", "sasl-plain", "scram-256", "scram-512"])
def test_right_credentials_produce_and_consume(secured, listener, extra):
    topic = unique("ok")
    assert roundtrip(conf(secured, listener, **extra), topic) == [b"v0", b"v1", b"v2"]


def test_metadata_advertises_the_listener_the_client_came_in_on(secured):
    _, ports, _, _ = secured
    for listener in ("PLAINTEXT", "SSL"):
        md = AdminClient(conf(secured, listener)).list_topics(timeout=DEADLINE_S)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", ports[listener])]


@pytest.mark.parametrize("mechanism, user, password, message", [
    ("PLAIN", "alice", "wrong-pw-Jh40", "Authentication failed: Invalid username or password"),
    ("PLAIN", "mallory", PLAIN_PW, "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-256", "bob", "wrong-pw-Jh40",
     "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"),
    ("SCRAM-SHA-512", "mallory", SCRAM_PW,
     "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"),
], ids=["plain-wrong-password", "plain-unknown-user", "scram-wrong-password", "scram-unknown-user"])
def test_wrong_credentials_fail_with_kafkas_message_and_write_nothing(secured, mechanism, user, password, message):
    topic = unique("denied")
    errors = failed_attempt(conf(secured, "SASL_PLAINTEXT", **sasl(mechanism, user, password)), topic)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert message in errors[0].str()
    assert password not in errors[0].str() and user not in errors[0].str().split("SASL authentication error")[1]
    assert topic not in topic_names(secured)


def test_unsupported_mechanism_names_the_enabled_ones(secured):
    topic = unique("mech")
    errors = failed_attempt(conf(secured, "SASL_SSL", **sasl("PLAIN", "alice", PLAIN_PW)), topic)
    assert errors, "no error reported"
    text = " ".join(e.str() for e in errors)
    assert "Unsupported SASL mechanism" in text and "SCRAM-SHA-512" in text, text
    assert topic not in topic_names(secured)


@pytest.mark.parametrize("case", ["plaintext-client-on-tls-port", "tls-client-on-plaintext-port",
                                  "no-client-certificate"])
def test_transport_mismatches_fail_without_data_access(secured, case):
    _, ports, pki, _ = secured
    topic = unique("mismatch")
    if case == "plaintext-client-on-tls-port":
        client = {"bootstrap.servers": f"127.0.0.1:{ports['SSL']}"}
    elif case == "tls-client-on-plaintext-port":
        client = conf(secured, "SSL", **{"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
    else:
        client = conf(secured, "MTLS")
    errors = failed_attempt({**client, "socket.timeout.ms": 5000}, topic)
    assert errors, "the client reported no error"
    assert {e.code() for e in errors} <= {KafkaError._TRANSPORT, KafkaError._SSL, KafkaError._ALL_BROKERS_DOWN,
                                          KafkaError._TIMED_OUT}, errors
    assert topic not in topic_names(secured)


def test_client_certificate_authenticates_as_its_subject(secured):
    _, _, pki, lines = secured
    client = conf(secured, "MTLS", **{"ssl.certificate.location": str(pki.client_cert),
                                      "ssl.key.location": str(pki.client_key)})
    assert roundtrip(client, unique("mtls"), 1) == [b"v0"]
    assert any("authenticated as User:CN=client,O=pyspark-kafka" in line for line in lines)


def test_scram_users_via_alter_and_describe_user_scram_credentials(secured):
    admin = AdminClient(conf(secured, "PLAINTEXT"))
    sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    for future in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("carol", sha512, CAROL_PW.encode())]).values():
        future.result(DEADLINE_S)
    described = admin.describe_user_scram_credentials(["carol"]).result(DEADLINE_S) if hasattr(
        admin.describe_user_scram_credentials(["carol"]), "result") else {
        u: f.result(DEADLINE_S) for u, f in admin.describe_user_scram_credentials(["carol"]).items()}
    infos = described["carol"].scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]
    carol = conf(secured, "SASL_SSL", **sasl("SCRAM-SHA-512", "carol", CAROL_PW))
    assert roundtrip(carol, unique("carol"), 1) == [b"v0"]
    for future in admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)]).values():
        future.result(DEADLINE_S)
    errors = failed_attempt(carol, unique("carol-gone"))
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION


def test_too_few_iterations_and_unknown_user_are_refused(secured):
    admin = AdminClient(conf(secured, "PLAINTEXT"))
    weak = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000)
    future = admin.alter_user_scram_credentials([UserScramCredentialUpsertion("dave", weak, b"x")])["dave"]
    with pytest.raises(Exception, match="Too few iterations"):
        future.result(DEADLINE_S)
    future = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)])["nobody"]
    with pytest.raises(Exception, match="does not exist"):
        future.result(DEADLINE_S)


def test_kafka_python_scram_sha_256(secured):
    kafka = pytest.importorskip("kafka")
    _, ports, _, _ = secured
    topic = unique("kp")
    common = dict(bootstrap_servers=f"127.0.0.1:{ports['SASL_PLAINTEXT']}", security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob", sasl_plain_password=SCRAM_PW)
    producer = kafka.KafkaProducer(**common)
    try:
        producer.send(topic, b"kp-1").get(DEADLINE_S)
    finally:
        producer.close(DEADLINE_S)
    consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=int(DEADLINE_S * 1000),
                                   **common)
    try:
        assert next(iter(consumer)).value == b"kp-1"
    finally:
        consumer.close()


def test_aiokafka_scram_sha_512_over_tls(secured):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.helpers import create_ssl_context

    _, ports, pki, _ = secured
    topic = unique("aio")
    common = dict(bootstrap_servers=f"127.0.0.1:{ports['SASL_SSL']}", security_protocol="SASL_SSL",
                  ssl_context=create_ssl_context(cafile=str(pki.ca_pem)), sasl_mechanism="SCRAM-SHA-512",
                  sasl_plain_username="bob", sasl_plain_password=SCRAM_PW)

    async def main():
        producer = aiokafka.AIOKafkaProducer(**common)
        await asyncio.wait_for(producer.start(), DEADLINE_S)
        try:
            await asyncio.wait_for(producer.send_and_wait(topic, b"aio-1"), DEADLINE_S)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await asyncio.wait_for(consumer.start(), DEADLINE_S)
        try:
            return (await asyncio.wait_for(consumer.getone(), DEADLINE_S)).value
        finally:
            await consumer.stop()

    # bob on SASL_SSL: the SCRAM-SHA-512 credential seeded from the SASL_PLAINTEXT listener's JAAS config
    assert asyncio.run(main()) == b"aio-1"


def test_nothing_secret_in_the_broker_log(secured):
    broker, _, pki, lines = secured
    failed_attempt(conf(secured, "SASL_PLAINTEXT", **sasl("SCRAM-SHA-256", "bob", "wrong-pw-Jh40")), unique("x"))
    failed_attempt(conf(secured, "SASL_PLAINTEXT", **sasl("PLAIN", "alice", "wrong-pw-Jh40")), unique("x"))
    import base64
    import json

    # the credentials are the metadata image's (scram_credential records): salts and keys, never a password
    stored = broker.broker.security.credentials.users()
    b64 = base64.b64encode
    salts = [b64(c.salt).decode() for mechs in stored.values() for c in mechs.values()]
    keys = [b64(k).decode() for mechs in stored.values() for c in mechs.values() for k in (c.stored_key, c.server_key)]
    assert salts and keys
    key_lines = [ln for ln in pki.server_key_text.splitlines() if ln and "-----" not in ln]
    text = "\n".join(lines)
    assert "failed authentication" in text  # the capture did see the failures
    for secret in [*SECRETS, *salts, *keys, *key_lines, base64.b64decode(salts[0]).hex()]:
        assert secret not in text
    metadata = (broker.data_dir / "__cluster_metadata-0" / "metadata.log").read_bytes()
    assert salts[0].encode() in metadata  # the records are there ...
    assert not any(s.encode() in metadata for s in SECRETS)  # ... without a password
    assert not (broker.data_dir / "scram-credentials.json").exists()
    assert not any(s in json.dumps(sorted(stored)) for s in SECRETS)


def test_describe_configs_hides_passwords_and_jaas(secured):
    from confluent_kafka.admin import ConfigResource

    admin = AdminClient(conf(secured, "PLAINTEXT"))
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    entries = admin.describe_configs([resource])[resource].result(DEADLINE_S)
    for name in ("listener.name.mtls.ssl.keystore.password", "sasl.jaas.config",
                 "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config"):
        assert entries[name].is_sensitive and entries[name].value is None, name
    assert entries["listener.name.mtls.ssl.client.auth"].value == "required"
    assert not any(s in str(e.value) for e in entries.values() for s in SECRETS)


def test_librdkafka_reauthenticates_before_the_session_expires(tmp_path):
    """KIP-368: with connections.max.reauth.ms the client re-authenticates on its open connections;
    no connection is closed for an expired session and every record is delivered."""
    capture = LogCapture()
    logger = logging.getLogger("pyspark_kafka")
    old = logger.level
    logger.addHandler(capture)
    logger.setLevel(logging.DEBUG)
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
              "sasl.jaas.config": SCRAM_JAAS, "connections.max.reauth.ms": "1000"}
    try:
        with EmbeddedBroker(data_dir=tmp_path, config=config) as broker:
            client = {"bootstrap.servers": broker.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                      **sasl("SCRAM-SHA-256", "bob", SCRAM_PW)}
            outcome = {"ok": 0, "failed": 0}

            def delivered(err, _msg):
                outcome["failed" if err else "ok"] += 1

            producer = Producer(client)
            deadline, sent = time.monotonic() + DEADLINE_S, 0
            # bounded: until three more authentications than the two first connections, at most 30 s
            while sum("authenticated as" in line for line in capture.lines) < 5 and time.monotonic() < deadline:
                producer.produce("reauth", b"r", callback=delivered)
                sent += 1
                producer.poll(0.05)
            assert producer.flush(DEADLINE_S) == 0
    finally:
        logger.removeHandler(capture)
        logger.setLevel(old)
    assert sum("authenticated as User:bob" in line for line in capture.lines) >= 5
    assert not any("expired" in line for line in capture.lines)
    assert outcome == {"ok": sent, "failed": 0}


def test_requested_client_certificate_is_optional(secured):
    _, _, pki, lines = secured
    assert roundtrip(conf(secured, "REQ"), unique("req-anon"), 1) == [b"v0"]
    before = sum("on listener REQ authenticated as" in line for line in lines)
    client = conf(secured, "REQ", **{"ssl.certificate.location": str(pki.client_cert),
                                     "ssl.key.location": str(pki.client_key)})
    assert roundtrip(client, unique("req-cert"), 1) == [b"v0"]
    assert sum("on listener REQ authenticated as User:CN=client,O=pyspark-kafka" in line for line in lines) > before


def test_enabled_protocols_refuse_an_older_tls_client(tmp_path):
    pki = make_pki(tmp_path / "pki")
    config = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
              "ssl.keystore.location": str(pki.server_pem), "ssl.enabled.protocols": "TLSv1.3"}
    with EmbeddedBroker(data_dir=tmp_path / "data", config=config) as broker:
        def handshake(version: ssl.TLSVersion) -> str:
            context = ssl.create_default_context(cafile=str(pki.ca_pem))
            context.minimum_version = context.maximum_version = version
            with socket.create_connection(("127.0.0.1", broker.port), timeout=DEADLINE_S) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                    return tls.version()

        assert handshake(ssl.TLSVersion.TLSv1_3) == "TLSv1.3"
        with pytest.raises(ssl.SSLError):
            handshake(ssl.TLSVersion.TLSv1_2)


def test_large_fetch_over_tls_falls_back_from_sendfile(secured):
    """Fetched log segment slices go through the TLS layer (no os.sendfile there): 3 MiB read back intact."""
    topic = unique("tls-big")
    client = conf(secured, "SASL_SSL", **sasl("SCRAM-SHA-512", "bob", SCRAM_PW))
    values = [bytes([i]) * 65536 for i in range(48)]
    producer = Producer({**client, "linger.ms": 20})
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(DEADLINE_S) == 0
    consumer = Consumer({**client, "group.id": unique("g"), "enable.auto.commit": False,
                         "fetch.max.bytes": 4 * 1024 * 1024})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + DEADLINE_S
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == values
