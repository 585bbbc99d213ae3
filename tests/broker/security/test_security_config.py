"""Listener, TLS, JAAS and SCRAM building blocks of the secured broker, without a network.

Listener rules as Kafka's ``KafkaConfig``; SCRAM checked against RFC 7677's SCRAM-SHA-256
example (an independent vector: a wrong key derivation or AuthMessage fails it).
"""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from pyspark_kafka.broker.config import BrokerConfig, is_sensitive
from pyspark_kafka.broker.errors import ConfigError
from pyspark_kafka.broker.security import jaas
from pyspark_kafka.broker.security.credentials import CredentialStore
from pyspark_kafka.broker.security.listeners import parse_listeners
from pyspark_kafka.broker.security.scram import (SaslFailure, ScramServer,
                                                 credential_from_salted_password, new_credential)
from pyspark_kafka.broker.security.session import Security
from pyspark_kafka.broker.security.tls import server_context
from support.certs import STORE_PASSWORD, make_pki


def listeners(**cfg):
    return [(lst.name, lst.protocol, lst.host, lst.port, lst.advertised())
            for lst in parse_listeners(BrokerConfig(cfg))]


def test_default_protocol_map_and_several_listeners():
    got = listeners(listeners="PLAINTEXT://127.0.0.1:9092,SSL://:9093,SASL_SSL://localhost:9094")
    assert got == [("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092, ("127.0.0.1", 9092)),
                   ("SSL", "SSL", "", 9093, ("127.0.0.1", 9093)),
                   ("SASL_SSL", "SASL_SSL", "localhost", 9094, ("localhost", 9094))]


def test_custom_listener_names_need_a_protocol_map_entry():
    with pytest.raises(ConfigError, match="no security protocol is defined for listener EXTERNAL"):
        listeners(listeners="EXTERNAL://127.0.0.1:9092")
    got = listeners(listeners="INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093",
                    **{"listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
                       "advertised.listeners": "EXTERNAL://kafka.example:19093",
                       "inter.broker.listener.name": "INTERNAL"})
    assert got[1] == ("EXTERNAL", "SASL_SSL", "127.0.0.1", 9093, ("kafka.example", 19093))


@pytest.mark.parametrize("cfg, message", [
    ({"listeners": "PLAINTEXT:/127.0.0.1:9092"}, "entry 'PLAINTEXT:/127.0.0.1:9092' is invalid"),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093"}, "listener name PLAINTEXT twice"),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9092"}, "one port twice"),
    ({"listeners": "A://127.0.0.1:1", "listener.security.protocol.map": "A:TLS"}, "entry 'A:TLS' is invalid"),
    ({"advertised.listeners": "SSL://h:1"}, "names listener SSL, which is not in listeners"),
    ({"inter.broker.listener.name": "EXTERNAL"}, "inter.broker.listener.name='EXTERNAL' is not a listener"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol"),
])
def test_bad_listener_configs_name_the_entry(cfg, message):
    with pytest.raises(ConfigError, match=message):
        listeners(**cfg)


def test_per_listener_configs_are_accepted_and_override():
    cfg = BrokerConfig({"ssl.client.auth": "requested", "listener.name.ssl.ssl.client.auth": "required",
                        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": "x required;"})
    assert cfg.for_listener("SSL", "ssl.client.auth") == "required"
    assert cfg.for_listener("SASL_SSL", "ssl.client.auth") == "requested"
    with pytest.raises(ConfigError, match="not a per-listener config"):
        BrokerConfig({"listener.name.ssl.log.retention.ms": "1"})
    with pytest.raises(ConfigError, match="ssl.client.auth"):
        BrokerConfig({"listener.name.ssl.ssl.client.auth": "sometimes"})
    assert is_sensitive("listener.name.ssl.ssl.keystore.password") and is_sensitive("sasl.jaas.config")
    assert not is_sensitive("ssl.keystore.location")


def test_unsupported_mechanisms_and_missing_plain_users_are_refused(tmp_path):
    base = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}
    with pytest.raises(ConfigError, match="GSSAPI is not supported"):
        Security(BrokerConfig(base), tmp_path)  # Kafka's default sasl.enabled.mechanisms is GSSAPI
    with pytest.raises(ConfigError, match="OAUTHBEARER is not supported"):
        Security(BrokerConfig({**base, "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"}), tmp_path)
    with pytest.raises(ConfigError, match="SASL/PLAIN needs its users"):
        Security(BrokerConfig({**base, "sasl.enabled.mechanisms": "PLAIN"}), tmp_path)


def test_jaas_options_and_errors_never_show_values():
    module, options = jaas.parse_jaas("sasl.jaas.config", 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                      'required username="admin" password="a\\"b" user_alice="s3cr=t";')
    assert module.endswith("PlainLoginModule")
    assert jaas.users(options) == {"alice": "s3cr=t"} and options["password"] == 'a"b'
    with pytest.raises(ConfigError) as e:
        jaas.parse_jaas("sasl.jaas.config", 'x required user_alice="topsecret"')
    assert "topsecret" not in str(e.value)


RFC7677 = dict(user="user", password="pencil", client_nonce="rOprNGfwEbeRWgbNEkqO",
               server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))


def test_scram_sha_256_matches_rfc7677_example():
    v = RFC7677
    salted = hashlib.pbkdf2_hmac("sha256", v["password"].encode(), v["salt"], 4096)
    cred = credential_from_salted_password("SCRAM-SHA-256", v["salt"], salted, 4096)
    server = ScramServer("SCRAM-SHA-256", lambda u: cred if u == "user" else None, server_nonce=v["server_nonce"])
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


@pytest.mark.parametrize("client_final", [
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=eHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO-other-nonce,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    b"c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=!!",
    b"\xff\xfe",
])
def test_scram_refuses_a_wrong_proof_nonce_binding_or_garbage(client_final):
    v = RFC7677
    cred = credential_from_salted_password("SCRAM-SHA-256", v["salt"],
                                           hashlib.pbkdf2_hmac("sha256", b"pencil", v["salt"], 4096), 4096)
    server = ScramServer("SCRAM-SHA-256", lambda u: cred, server_nonce=v["server_nonce"])
    server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(SaslFailure, match="^Authentication failed during authentication due to invalid credentials "
                                          "with SASL mechanism SCRAM-SHA-256$"):
        server.evaluate(client_final)
    assert not server.complete


def test_scram_unknown_user_and_foreign_authzid():
    server = ScramServer("SCRAM-SHA-512", lambda u: None)
    with pytest.raises(SaslFailure, match="invalid credentials with SASL mechanism SCRAM-SHA-512"):
        server.evaluate(b"n,,n=nobody,r=abc")
    cred = new_credential("SCRAM-SHA-512", "pw")
    with pytest.raises(SaslFailure, match="authorization id that is different from username"):
        ScramServer("SCRAM-SHA-512", lambda u: cred).evaluate(b"n,a=admin,n=alice,r=abc")
    with pytest.raises(SaslFailure):  # delegation tokens (tokenauth=true) are not supported
        ScramServer("SCRAM-SHA-512", lambda u: cred).evaluate(b"n,,n=alice,r=abc,tokenauth=true")


def test_credential_store_keeps_no_password_and_survives_reopen(tmp_path):
    store = CredentialStore(tmp_path)
    store.apply({("alice", "SCRAM-SHA-256"): new_credential("SCRAM-SHA-256", "alice-very-secret", 8192)}, set())
    text = (tmp_path / "scram-credentials.json").read_text()
    assert "alice-very-secret" not in text
    assert set(json.loads(text)["alice"]["SCRAM-SHA-256"]) == {"salt", "stored_key", "server_key", "iterations"}
    assert (tmp_path / "scram-credentials.json").stat().st_mode & 0o077 == 0
    again = CredentialStore(tmp_path)
    assert again.get("alice", "SCRAM-SHA-256") == store.get("alice", "SCRAM-SHA-256")
    again.apply({}, {("alice", "SCRAM-SHA-256")})
    assert CredentialStore(tmp_path).users() == {}


def test_tls_context_from_pem_and_pkcs12_stores(tmp_path):
    pki = make_pki(tmp_path)
    pem = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                        "ssl.keystore.location": str(pki.server_pem)})
    assert server_context(pem, "SSL").verify_mode.name == "CERT_NONE"
    inline = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                           "ssl.keystore.certificate.chain": pki.server_pem.read_text().split("-----BEGIN PRIVATE")[0],
                           "ssl.keystore.key": pki.server_key_text})
    server_context(inline, "SSL")
    p12 = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PKCS12",
                        "ssl.keystore.location": str(pki.server_p12), "ssl.keystore.password": STORE_PASSWORD,
                        "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(pki.ca_p12),
                        "ssl.truststore.password": STORE_PASSWORD, "ssl.client.auth": "required",
                        "ssl.enabled.protocols": "TLSv1.3"})
    ctx = server_context(p12, "SSL")
    assert ctx.verify_mode.name == "CERT_REQUIRED" and ctx.minimum_version.name == "TLSv1_3"
    wrong = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PKCS12",
                          "ssl.keystore.location": str(pki.server_p12), "ssl.keystore.password": "not-the-password"})
    with pytest.raises(ConfigError, match="cannot open the PKCS12 store") as e:
        server_context(wrong, "SSL")
    assert "not-the-password" not in str(e.value)
    with pytest.raises(ConfigError, match="convert a JKS store"):
        server_context(BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "x"}), "SSL")
    with pytest.raises(ConfigError, match="needs a trust store"):
        server_context(BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                                     "ssl.keystore.location": str(pki.server_pem), "ssl.client.auth": "required"}), "SSL")
