"""SCRAM credentials as metadata records (Kafka's ``UserScramCredentialRecord`` and ``ScramImage``).

- The controller's rules for AlterUserScramCredentials are Kafka 4.4's ``ScramControlManager.alterCredentials``
  (read from its bytecode): a user named twice in one request is refused DUPLICATE_RESOURCE whatever the
  mechanisms, the first refusal of a user wins, the records carry salt, StoredKey, ServerKey and iterations only.
- A combined node keeps the credentials in its metadata log: a user made with AlterUserScramCredentials logs in
  after a restart; the SCRAM JAAS users of the config are written once, not again at each start.
- A single-node data directory's ``scram-credentials.json`` is migrated on the combined node's first start (each
  password still works), then renamed ``scram-credentials.json.migrated``.

The split cluster (a user made through broker 0 logs in on broker 1) is tested in
``tests/broker/cluster/test_cluster_listeners.py``, on that module's cluster.
"""

from __future__ import annotations

import base64
import hashlib
import logging

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.cluster.combined import METADATA_DIR
from pyspark_kafka.broker.controller.image import decode
from pyspark_kafka.broker.controller.scram_control import alter_credentials
from pyspark_kafka.broker.controller.single_voter_log import _HEAD
from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.security.credentials import CredentialStore
from pyspark_kafka.broker.security.scram import new_credential
from support.scram import logs_in

PASSWORD = "scram-md-pw-Qe31"
SEED_PW = "seed-pw-Hy08"
CONFIG = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
          "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
          "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required user_seed="{SEED_PW}";'}


def _upsertion(name: str, mechanism: int = 1, iterations: int = 4096) -> dict:
    salt = b"s" * 16
    salted = hashlib.pbkdf2_hmac("sha256" if mechanism == 1 else "sha512", b"pw", salt, 4096)
    return {"name": name, "mechanism": mechanism, "iterations": iterations,
            "salt": base64.b64encode(salt).decode(), "salted_password": base64.b64encode(salted).decode()}


def test_alter_rules_are_kafkas_scram_control_manager():
    held = {("old", "SCRAM-SHA-256")}
    results, records = alter_credentials(
        lambda user, mech: (user, mech) in held,
        [{"name": "old", "mechanism": 1}, {"name": "gone", "mechanism": 1}, {"name": "", "mechanism": 1}],
        [_upsertion("twice", 1), _upsertion("twice", 2),  # one user, two mechanisms: refused as in Kafka 4.4
         _upsertion("old", 2),  # named in a deletion too
         _upsertion("weak", iterations=4095), _upsertion("strong", iterations=16385), _upsertion("odd", mechanism=3),
         _upsertion("new", 2)])
    assert [(r["user"], r["error_code"], r["error_message"]) for r in results] == [
        ("old", ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
        ("gone", ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
        ("", ErrorCode.unacceptable_credential, "Username must not be empty"),
        ("twice", ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
        ("weak", ErrorCode.unacceptable_credential, "Too few iterations"),
        ("strong", ErrorCode.unacceptable_credential, "Too many iterations"),
        ("odd", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        ("new", ErrorCode.none, None)]
    assert [(r["type"], r["name"], r["mechanism"]) for r in records] == [("scram_credential", "new", 2)]
    assert set(records[0]) == {"type", "name", "mechanism", "salt", "stored_key", "server_key", "iterations"}
    # the first refusal of a user wins: a later duplicate does not replace it
    results, records = alter_credentials(lambda user, mech: False, [{"name": "x", "mechanism": 1}],
                                         [_upsertion("x")])
    assert [(r["error_code"], records) for r in results] == [(ErrorCode.resource_not_found, [])]


def _ports(node) -> dict[str, str]:
    return {lst.name: f"127.0.0.1:{lst.port}" for lst in node.broker.security.listeners}


def _scram_records(data_dir) -> list[dict]:
    """The SCRAM records of a combined node's metadata log (``metadata.log``: size, CRC-32, JSON record), in order."""
    raw, out, position = (data_dir / METADATA_DIR / "metadata.log").read_bytes(), [], 0
    while position < len(raw):
        size, _ = _HEAD.unpack_from(raw, position)
        record = decode(raw[position + _HEAD.size: position + _HEAD.size + size])
        position += _HEAD.size + size
        if "scram" in record["type"]:
            out.append(record)
    return out


def test_credentials_are_metadata_records_and_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    for start in range(2):
        with EmbeddedBroker(data_dir=data, config=CONFIG) as node:
            ports = _ports(node)
            assert logs_in(ports["SASL_PLAINTEXT"], "seed", SEED_PW, "SCRAM-SHA-512")
            if start == 0:
                admin = AdminClient({"bootstrap.servers": ports["PLAINTEXT"]})
                info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
                admin.alter_user_scram_credentials(
                    [UserScramCredentialUpsertion("carol", info, PASSWORD.encode())])["carol"].result(10)
            assert logs_in(ports["SASL_PLAINTEXT"], "carol", PASSWORD)
            assert not logs_in(ports["SASL_PLAINTEXT"], "carol", "not-" + PASSWORD)
            admin = AdminClient({"bootstrap.servers": ports["PLAINTEXT"]})
            described = admin.describe_user_scram_credentials(["carol"])["carol"].result(10)
            assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
                (ScramMechanism.SCRAM_SHA_256, 8192)]
        records = _scram_records(data)
        # the JAAS user "seed" (2 mechanisms) is written at the first start only; carol once
        assert sorted((r["name"], r["mechanism"]) for r in records) == [("carol", 1), ("seed", 1), ("seed", 2)]
    assert not (data / "scram-credentials.json").exists()


def test_single_node_credentials_file_is_migrated_once(tmp_path, caplog):
    data = tmp_path / "data"
    config = {k: v for k, v in CONFIG.items() if k != "sasl.jaas.config"}
    # the old single node's file, as it wrote it (its own store, salted credentials only)
    data.mkdir()
    CredentialStore(data).apply({("dora", "SCRAM-SHA-512"): new_credential("SCRAM-SHA-512", PASSWORD, 4096)}, set())
    assert (data / "scram-credentials.json").exists()
    caplog.set_level(logging.INFO, logger="pyspark_kafka.controller")
    for _ in range(2):
        with EmbeddedBroker(data_dir=data, config=config) as node:
            assert logs_in(_ports(node)["SASL_PLAINTEXT"], "dora", PASSWORD, "SCRAM-SHA-512")
    assert not (data / "scram-credentials.json").exists()
    assert (data / "scram-credentials.json.migrated").exists()
    migrated = [r.getMessage() for r in caplog.records if "migrated to the metadata log" in r.getMessage()]
    assert len(migrated) == 1 and "1 scram_credential records" in migrated[0], migrated
    assert [(r["name"], r["mechanism"]) for r in _scram_records(data)] == [("dora", 2)]
    assert PASSWORD.encode() not in (data / METADATA_DIR / "metadata.log").read_bytes()
