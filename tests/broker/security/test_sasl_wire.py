"""SaslHandshake / SaslAuthenticate at the wire: the states of Kafka's SaslServerAuthenticator.

Raw kio requests (support.wire) where exact versions, orders and broken tokens matter:
requests before authentication close the connection with no answer, handshake v0 exchanges
raw tokens, malformed tokens fail cleanly and the broker keeps serving, KIP-368 lifetimes.
"""

from __future__ import annotations

import logging
import struct
import time

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v9.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v0.request import SaslAuthenticateRequest as SaslAuthenticateV0
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from pyspark_kafka.broker import EmbeddedBroker
from support.wire import WireClient

PASSWORD = "wire-pw-Qe93"
JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="{PASSWORD}";'
PLAIN_TOKEN = b"\0alice\0" + PASSWORD.encode()


@pytest.fixture(scope="module")
def sasl_broker():
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
              "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256", "sasl.jaas.config": JAAS,
              "connections.max.reauth.ms": "60000"}
    with EmbeddedBroker(config=config) as broker:
        yield broker, broker.listeners


def authenticated(address: str) -> WireClient:
    client = WireClient(address)
    assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    assert client.request(SaslAuthenticateRequest(auth_bytes=PLAIN_TOKEN)).error_code == 0
    return client


def metadata_ok(client: WireClient) -> bool:
    return client.request(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                          include_cluster_authorized_operations=False,
                                          include_topic_authorized_operations=False)).brokers != ()


def test_api_versions_before_authentication_lists_the_sasl_apis(sasl_broker):
    _, addr = sasl_broker
    with WireClient(addr["SASL_PLAINTEXT"]) as c:
        keys = {k.api_key: (k.min_version, k.max_version) for k in
                c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1")).api_keys}
        assert keys[17] == (0, 1) and keys[36] == (0, 2) and keys[50] == (0, 0) and keys[51] == (0, 0)


@pytest.mark.parametrize("first", ["metadata", "sasl-authenticate"])
def test_requests_before_authentication_close_the_connection(sasl_broker, first):
    _, addr = sasl_broker
    with WireClient(addr["SASL_PLAINTEXT"]) as c:
        if first == "metadata":
            c.send(MetadataRequest(topics=None, allow_auto_topic_creation=True,
                                   include_cluster_authorized_operations=False,
                                   include_topic_authorized_operations=False))
        else:
            c.send(SaslAuthenticateRequest(auth_bytes=PLAIN_TOKEN))
        assert c.is_closed_by_broker()


def test_unsupported_mechanism_answers_the_enabled_list_then_closes(sasl_broker):
    _, addr = sasl_broker
    with WireClient(addr["SASL_PLAINTEXT"]) as c:
        answer = c.request(SaslHandshakeRequest(mechanism="GSSAPI"))
        assert (answer.error_code, list(answer.mechanisms)) == (33, ["PLAIN", "SCRAM-SHA-256"])
        assert c.is_closed_by_broker()


def test_session_lifetime_and_illegal_state_after_authentication(sasl_broker):
    _, addr = sasl_broker
    with WireClient(addr["SASL_PLAINTEXT"]) as c:
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        answer = c.request(SaslAuthenticateRequest(auth_bytes=PLAIN_TOKEN))
        assert answer.error_code == 0 and answer.session_lifetime.total_seconds() * 1000 == 60000
        again = c.request(SaslAuthenticateRequest(auth_bytes=PLAIN_TOKEN))
        assert (again.error_code, again.error_message) == (
            34, "SaslAuthenticate request received after successful authentication")
        assert metadata_ok(c)  # the connection stays usable, as in Kafka
        # KIP-368 re-authentication on the same connection, same principal
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        assert c.request(SaslAuthenticateRequest(auth_bytes=PLAIN_TOKEN)).error_code == 0
        assert metadata_ok(c)


def test_sasl_requests_on_a_plaintext_listener_are_illegal_state(sasl_broker):
    _, addr = sasl_broker
    with WireClient(addr["PLAINTEXT"]) as c:
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 34
        assert metadata_ok(c)


def test_handshake_v0_exchanges_raw_tokens(sasl_broker):
    _, addr = sasl_broker
    with WireClient(addr["SASL_PLAINTEXT"]) as c:
        assert c.request(SaslHandshakeV0(mechanism="PLAIN")).error_code == 0
        c.send_raw(struct.pack(">i", len(PLAIN_TOKEN)) + PLAIN_TOKEN)
        assert c.recv_frame() == b""  # PLAIN's empty answer, size-prefixed, no Kafka header
        assert metadata_ok(c)
    with WireClient(addr["SASL_PLAINTEXT"]) as c:
        assert c.request(SaslHandshakeV0(mechanism="PLAIN")).error_code == 0
        c.send_raw(struct.pack(">i", 11) + b"\0alice\0nope")
        assert c.is_closed_by_broker()  # a failed v0 exchange: closed, no answer


@pytest.mark.parametrize("mechanism, token", [
    ("PLAIN", b""), ("PLAIN", b"\0\0"), ("PLAIN", b"a\0b\0c\0d"), ("PLAIN", b"\xff\0\xfe\0\xfd"),
    ("SCRAM-SHA-256", b""), ("SCRAM-SHA-256", b"n,,"), ("SCRAM-SHA-256", b"y,a=,n=,r="),
    ("SCRAM-SHA-256", b"p=tls-unique,,n=alice,r=x"), ("SCRAM-SHA-256", b"\x00" * 4096),
], ids=lambda v: v if isinstance(v, str) else v[:12].hex() or "empty")
def test_malformed_tokens_fail_cleanly_and_the_broker_keeps_serving(sasl_broker, mechanism, token):
    _, addr = sasl_broker
    with WireClient(addr["SASL_PLAINTEXT"]) as c:
        assert c.request(SaslHandshakeRequest(mechanism=mechanism)).error_code == 0
        answer = c.request(SaslAuthenticateRequest(auth_bytes=token))
        assert answer.error_code == 58 and answer.auth_bytes == b""
        assert PASSWORD not in (answer.error_message or "")
        assert c.is_closed_by_broker()
    with authenticated(addr["SASL_PLAINTEXT"]) as c:
        assert metadata_ok(c)


def test_oversized_or_garbled_frames_before_authentication_close_only_that_connection(sasl_broker):
    _, addr = sasl_broker
    with WireClient(addr["SASL_PLAINTEXT"]) as c:
        c.send_raw(struct.pack(">i", 600_000) + b"\0" * 64)  # over the 512 KiB pre-authentication limit
        assert c.is_closed_by_broker()
    with WireClient(addr["SASL_PLAINTEXT"]) as c:
        assert c.request(SaslHandshakeV0(mechanism="PLAIN")).error_code == 0
        c.send_raw(struct.pack(">i", -5))
        assert c.is_closed_by_broker()
    with WireClient(addr["SASL_PLAINTEXT"]) as c:
        c.send_raw(struct.pack(">ihhi", 10, 36, 0, 1) + b"\xff\xff")  # SaslAuthenticate v0 cut short
        assert c.is_closed_by_broker()
    with authenticated(addr["SASL_PLAINTEXT"]) as c:
        assert metadata_ok(c)


def test_expired_session_is_closed(tmp_path):
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
              "sasl.jaas.config": JAAS, "connections.max.reauth.ms": "1"}
    with EmbeddedBroker(data_dir=tmp_path, config=config) as broker:
        with WireClient(broker.bootstrap_servers) as c:
            assert c.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
            answer = c.request(SaslAuthenticateV0(auth_bytes=PLAIN_TOKEN))
            assert answer.error_code == 0
            # 1 ms lifetime: metadata requests until the broker closes the connection (Kafka
            # closes an expired session's connection); bounded in count and time
            deadline, closed = time.monotonic() + 10, False
            for _ in range(1000):
                c.send(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                       include_cluster_authorized_operations=False,
                                       include_topic_authorized_operations=False))
                if c.recv_frame() is None:
                    closed = True
                    break
                if time.monotonic() > deadline:
                    break
            assert closed


FUZZ_FRAMES = 300
FUZZ_SEED = 18


def test_mutated_sasl_frames_never_break_the_broker(sasl_broker):
    """Seeded mutations (support.fuzz_mutate) of real SASL frames, each on a fresh connection after
    a valid handshake (so SaslAuthenticate reaches the mechanism); the broker answers or closes,
    and afterwards still authenticates and serves. Bounded: 300 frames, 5 s per read."""
    import socket

    from support.fuzz_mutate import Mutator
    from support.wire import encode_request

    _, addr = sasl_broker
    host, port = addr["SASL_PLAINTEXT"].rsplit(":", 1)
    seeds = [
        ("PLAIN", encode_request(SaslAuthenticateRequest(auth_bytes=PLAIN_TOKEN), 2)[4:]),
        ("SCRAM-SHA-256", encode_request(SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=0123456789abcdef"), 2)[4:]),
        ("PLAIN", encode_request(SaslHandshakeRequest(mechanism="PLAIN"), 2)[4:]),
        ("PLAIN", encode_request(SaslAuthenticateV0(auth_bytes=PLAIN_TOKEN), 2)[4:]),
    ]
    handshakes = {m: encode_request(SaslHandshakeRequest(mechanism=m), 1) for m in ("PLAIN", "SCRAM-SHA-256")}
    mutator = Mutator(FUZZ_SEED, [f for _, f in seeds])
    kinds, answered = set(), 0
    errors: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = errors.append
    logging.getLogger("pyspark_kafka").addHandler(handler)
    def exchange(data: bytes) -> bytes:
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)  # EOF: a frame that claims more bytes ends here
            got = b""
            try:
                while chunk := sock.recv(65536):
                    got += chunk
            except (ConnectionResetError, socket.timeout):
                pass
            return got

    handshake_answer = {m: len(exchange(h)) for m, h in handshakes.items()}
    for i in range(FUZZ_FRAMES):
        mechanism, frame = seeds[i % len(seeds)]
        kind, wire = mutator.mutate(frame)
        kinds.add(kind)
        answered += len(exchange(handshakes[mechanism] + wire)) > handshake_answer[mechanism]
    logging.getLogger("pyspark_kafka").removeHandler(handler)
    assert len(kinds) >= 5, kinds
    assert 0 < answered < FUZZ_FRAMES  # some mutations were answered (error codes), others closed
    assert not errors, [e.getMessage() for e in errors]  # no handler crash, no unexpected error
    with authenticated(addr["SASL_PLAINTEXT"]) as c:
        assert metadata_ok(c)
