"""A secured broker process loses nothing across SIGKILL: records and SCRAM credentials.

The user is created with AlterUserScramCredentials (librdkafka's admin client), records are
produced over SASL_PLAINTEXT with SCRAM-SHA-256, the process is SIGKILLed and restarted on the
same data directory: the user still authenticates (and a wrong password still fails), every
record reads back, and the broker's whole output holds no password.
"""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from support.broker_process import BrokerProcess

DEADLINE_S = 30.0
PASSWORD = "restart-pw-Vb62"
CONFIG = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
          "sasl.enabled.mechanisms": "SCRAM-SHA-256"}


def scram(port: int, password: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": password}


def start(data_dir) -> tuple[BrokerProcess, dict[str, int]]:
    proc = BrokerProcess(data_dir, config=CONFIG)
    return proc, proc.listener_ports(2)


def test_credentials_and_records_survive_sigkill(tmp_path):
    proc, ports = start(tmp_path)
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("carol", info, PASSWORD.encode())])["carol"].result(DEADLINE_S)
        producer = Producer(scram(ports["SASL_PLAINTEXT"], PASSWORD))
        for i in range(5):
            producer.produce("kept", f"r{i}".encode())
        assert producer.flush(DEADLINE_S) == 0
    finally:
        proc.kill()
    first_log = proc.output()

    proc, ports = start(tmp_path)
    try:
        consumer = Consumer({**scram(ports["SASL_PLAINTEXT"], PASSWORD), "group.id": "g", "enable.auto.commit": False})
        consumer.assign([TopicPartition("kept", 0, OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + DEADLINE_S
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.close()
        assert got == [f"r{i}".encode() for i in range(5)]
        errors = []
        wrong = Producer({**scram(ports["SASL_PLAINTEXT"], "not-" + PASSWORD), "error_cb": errors.append})
        wrong.produce("kept", b"no")
        deadline = time.monotonic() + DEADLINE_S
        while not errors and time.monotonic() < deadline:
            wrong.poll(0.2)
        wrong.purge()
        assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    finally:
        proc.kill()
    log = first_log + proc.output()
    assert "failed authentication" in log
    assert PASSWORD not in log
    # the credential is a metadata record (salt and keys), no longer a file of the data dir
    assert not (tmp_path / "scram-credentials.json").exists()
    metadata = (tmp_path / "__cluster_metadata-0" / "metadata.log").read_bytes()
    assert b'"scram_credential"' in metadata and PASSWORD.encode() not in metadata
