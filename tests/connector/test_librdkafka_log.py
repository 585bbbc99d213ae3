"""librdkafka's log lines go through Python logging, as warnings at most, once per distinct line
(issue 37: an unreachable bootstrap server printed about 57 ``FAIL ... Connection refused`` lines a
second on stderr before the error that names it)."""

from __future__ import annotations

import logging
import socket
import time

from pyspark_kafka.kafka.clients import new_admin
from pyspark_kafka.kafka.librdkafka_log import LIBRDKAFKA_LOG, LibrdkafkaLog, with_logger

REFUSED = "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: " \
          "Connection refused (after {ms}ms in state CONNECT)"


def test_errors_become_one_warning_per_distinct_line(caplog):
    log = LibrdkafkaLog(logging.getLogger("test.librdkafka"), repeat_after_s=60)
    with caplog.at_level(logging.DEBUG, logger="test.librdkafka"):
        for ms in range(20):
            log.log(logging.ERROR, "%s [%s] %s", "FAIL", f"rdkafka#producer-{ms}", REFUSED.format(ms=ms))
        log.log(logging.INFO, "%s [%s] %s", "CONFWARN", "rdkafka#consumer-1", "something else")
    records = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert records == [
        (logging.WARNING, "librdkafka FAIL: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: "
                          "Connection refused (after 0ms in state CONNECT)"),
        (logging.INFO, "librdkafka CONFWARN: something else"),
    ]


def test_a_line_comes_again_after_the_interval_with_the_count_left_out(caplog):
    log = LibrdkafkaLog(logging.getLogger("test.librdkafka"), repeat_after_s=0.05)
    with caplog.at_level(logging.WARNING, logger="test.librdkafka"):
        for _ in range(3):
            log.log(logging.ERROR, "", "FAIL", "c", "broker down")
        time.sleep(0.06)
        log.log(logging.ERROR, "", "FAIL", "c", "broker down")
    assert [r.getMessage() for r in caplog.records] == ["librdkafka FAIL: broker down",
                                                       "librdkafka FAIL: broker down (2 more like it since)"]


def test_every_client_gets_it_unless_the_user_sets_a_logger():
    assert with_logger({"bootstrap.servers": "b:1"})["logger"] is LIBRDKAFKA_LOG
    mine = object()
    assert with_logger({"logger": mine})["logger"] is mine
    assert "logger" not in with_logger({"log_cb": print})


def test_a_refused_bootstrap_server_logs_one_line_over_many_retries(caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = LibrdkafkaLog(logging.getLogger("test.librdkafka.admin"))
    with caplog.at_level(logging.DEBUG, logger="test.librdkafka.admin"):
        admin = new_admin({"bootstrap.servers": f"127.0.0.1:{port}", "logger": log})
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            admin.poll(0.05)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "Connection refused" in lines[0], lines
    assert caplog.records[0].levelno == logging.WARNING
