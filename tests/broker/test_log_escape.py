"""Client-supplied strings cannot forge broker log lines (pyspark_kafka.broker.log_escape)."""

from __future__ import annotations

import logging
import time

from support.fuzz_network import BrokerProcess
from pyspark_kafka.broker.log_escape import escape, get_logger

FORGED = "g1\n2026-11-24 00:00:00,000 ERROR pyspark_kafka.broker: forged line\u2028x\x1b[31m"


def test_escape_writes_control_characters_as_escapes():
    assert escape(FORGED) == "g1\\x0a2026-11-24 00:00:00,000 ERROR pyspark_kafka.broker: forged line\\u2028x\\x1b[31m"
    assert escape("plain group-id_1.2") == "plain group-id_1.2"


def test_every_argument_of_a_broker_log_record_is_escaped(caplog):
    log = get_logger("pyspark_kafka.broker.test")
    with caplog.at_level(logging.INFO, logger="pyspark_kafka.broker.test"):
        log.info("group %s: member %s left", FORGED, ValueError("bad\nline"))
    (message,) = [r.getMessage() for r in caplog.records]
    assert "\n" not in message and "forged line\\u2028" in message and "bad\\x0aline" in message


def test_a_group_id_with_a_newline_stays_on_one_line_of_the_broker_log(tmp_path):
    from confluent_kafka import Consumer

    from support.topics import create_topic

    with BrokerProcess(tmp_path / "data") as b:
        create_topic(b.bootstrap, "joined", partitions=1)
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": FORGED, "session.timeout.ms": 6000})
        consumer.subscribe(["joined"])
        deadline = time.monotonic() + 30
        while "g1\\x0a2026" not in b.log_path.read_text() and time.monotonic() < deadline:
            consumer.poll(0.2)
        consumer.close()
        text = b.log_path.read_text()
    assert "g1\\x0a2026-11-24 00:00:00,000 ERROR pyspark_kafka.broker: forged line" in text
    assert not any(line.startswith("2026-11-24 00:00:00,000 ERROR") for line in text.splitlines())
