"""First contact with an unreachable cluster fails fast and names each address and its cause.

Issue 27: a batch read on a closed port used to fail after 204 s with "Local: Broker transport
failure"; Spark's connector fails in 3.3 s. Every Spark entry point (read, readStream, write,
writeStream) must fail within 15 s, and the text the user sees (the str of the exception pyspark
raises in the driver) must carry the cause and the fix on the line of our exception.
A ``subscribe`` topic that does not exist fails a batch read naming it (as Spark's connector fails it), and
is warned about by name in a stream.
"""

from __future__ import annotations

import logging
import socket
import time
import traceback

import pytest

from pyspark_kafka.kafka.reachability import (
    BootstrapUnreachableError,
    bootstrap_addresses,
    classify,
    wait_ms,
)
from pyspark_kafka.read.offset_reader import OffsetReader
from pyspark_kafka.read.options import parse_reader_options

BOUND_S = 15.0
"""Issue 27: every entry point fails within 15 s by default."""


def closed_port() -> str:
    """``127.0.0.1:<port>`` on which nothing listens (bound then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def first_contact(servers: str, **extra) -> tuple[BaseException, float]:
    """The error of the first Metadata request of a reader on ``servers`` and the seconds it took."""
    opts = parse_reader_options({"kafka.bootstrap.servers": servers, "subscribe": "t", **extra}, mode="batch")
    start = time.monotonic()
    with pytest.raises(BootstrapUnreachableError) as failure:
        OffsetReader(opts).topic_partitions()
    return failure.value, time.monotonic() - start


def test_admin_clients_use_the_java_reconnect_backoff_unless_reconnect_is_set(bootstrap):
    """Driver-side admin clients get the Java client's ``reconnect.backoff.ms`` (50; librdkafka's 100
    made every new admin client's first metadata wait about 50 ms); a user's own
    ``reconnect.backoff.*`` settings are passed as given, with librdkafka's defaults for the rest."""
    from pyspark_kafka.kafka.clients import admin_config

    assert admin_config({"bootstrap.servers": "b:1", "group.id": "g"}) == {
        "bootstrap.servers": "b:1", "reconnect.backoff.ms": 50, "enable.sparse.connections": False}
    assert admin_config({"reconnect.backoff.max.ms": 20}) == {"reconnect.backoff.max.ms": 20,
                                                              "enable.sparse.connections": False}
    assert admin_config({"reconnect.backoff.ms": 300}) == {"reconnect.backoff.ms": 300,
                                                           "enable.sparse.connections": False}
    assert admin_config({"enable.sparse.connections": "true"}) == {"enable.sparse.connections": "true",
                                                                   "reconnect.backoff.ms": 50}
    for setting in ({}, {"kafka.reconnect.backoff.ms": "300"}):
        opts = parse_reader_options({"kafka.bootstrap.servers": bootstrap, "subscribe": "absent-reconnect-test",
                                     **setting}, mode="stream")
        reader = OffsetReader(opts)
        try:
            assert reader.topic_partitions() == []  # the client is made and answers (no such topic)
        finally:
            reader.close()


def test_a_new_admin_clients_first_metadata_waits_for_no_connection_spacing(bootstrap):
    """A driver-side admin client's first Metadata answer (each query's first offsets) comes without
    librdkafka's spacing of connection attempts: with sparse connections librdkafka drops the bootstrap
    connection after the first answer and logs "Not selecting any broker for cluster connection: still
    suppressed for 47ms" before connecting to the broker by its id (``debug=broker``)."""
    import logging

    from pyspark_kafka.kafka.clients import new_admin

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__(logging.DEBUG)
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    for attempt in range(3):  # three new clients, as three queries make them
        lines = Lines()
        logger = logging.getLogger(f"test-first-metadata-{attempt}")
        logger.setLevel(logging.DEBUG)
        logger.addHandler(lines)
        admin = new_admin({"bootstrap.servers": bootstrap, "debug": "broker", "logger": logger})
        admin.list_topics(timeout=10)
        admin.poll(0)  # deliver the queued log lines
        suppressed = [line for line in lines.lines if "still suppressed" in line]
        assert suppressed == [], suppressed
        assert any("Connected" in line for line in lines.lines), lines.lines[:5]  # the log lines did arrive


def test_rules():
    assert bootstrap_addresses(" SASL_SSL://a:1, b:2 ,") == ["a:1", "b:2"]
    assert classify("_RESOLVE", "Failed to resolve 'x:1': Name or service not known") == "name not resolved"
    assert classify("_TRANSPORT", "Connect to ipv4#127.0.0.1:1 failed: Connection refused") == "connection refused"
    assert classify("_SSL", "SSL handshake failed: Disconnected") == "TLS handshake failed"
    assert classify("_AUTHENTICATION", "SASL authentication error") == "authentication failed"
    assert wait_ms({}) == 10_000 and wait_ms({"kafka.socket.connection.setup.timeout.ms": "2500"}) == 2500
    from pyspark_kafka.errors import OptionError

    with pytest.raises(OptionError, match="kafka.socket.connection.setup.timeout.ms"):
        wait_ms({"kafka.socket.connection.setup.timeout.ms": "soon"})


def test_refused_and_unresolved_addresses_are_each_named_within_seconds():
    port = closed_port()
    error, took = first_contact(f"{port},no-such-host.invalid:9092")
    first = str(error).splitlines()[0]
    assert took < BOUND_S, took
    assert f"{port}: connection refused" in first and "no-such-host.invalid:9092: name not resolved" in first
    assert "check kafka.bootstrap.servers" in first
    # the wait option is named only when an address was silent: nothing was waited for here
    assert "kafka.socket.connection.setup.timeout.ms" not in first and len(first) < 300, first
    assert error.failures == {port: "connection refused", "no-such-host.invalid:9092": "name not resolved"}


def test_tls_to_a_plaintext_listener_says_tls_handshake_failed(bootstrap):
    error, took = first_contact(bootstrap, **{"kafka.security.protocol": "SSL"})
    assert took < BOUND_S, took
    assert error.failures == {bootstrap: "TLS handshake failed"}
    assert "kafka.security.protocol" in str(error).splitlines()[0]


def test_a_silent_listener_is_given_up_after_the_option():
    with socket.socket() as silent:  # accepts TCP connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        error, took = first_contact(address, **{"kafka.socket.connection.setup.timeout.ms": "1500"})
    assert took < BOUND_S, took  # the documented fail-fast bound; the message below shows the option was used
    assert error.failures == {address: "accepted a TCP connection but gave no Kafka answer"}
    assert "kafka.socket.connection.setup.timeout.ms=1500" in str(error)


def test_subscribing_to_a_missing_topic_warns_naming_it(bootstrap, make_topic, caplog):
    present = make_topic(partitions=2)
    opts = parse_reader_options({"kafka.bootstrap.servers": bootstrap, "subscribe": f"{present},no-such-topic-27"},
                                mode="batch")
    reader = OffsetReader(opts)
    with caplog.at_level(logging.WARNING, logger="pyspark_kafka.read.offset_reader"):
        assert reader.topic_partitions() == [(present, 0), (present, 1)]
        reader.topic_partitions()  # warned once per topic, not on every micro-batch
    warnings = [r.getMessage() for r in caplog.records if "no-such-topic-27" in r.getMessage()]
    assert len(warnings) == 1 and "does not exist" in warnings[0], warnings


CAUSE_WITHIN_LINES = 20
"""The line naming the cause comes within this many lines of what Python prints for the error."""

_last_error: list[BaseException] = [Exception()]


def _user_text(action) -> tuple[str, float]:
    start = time.monotonic()
    with pytest.raises(Exception) as failure:
        action()
    _last_error[0] = failure.value
    return str(failure.value), time.monotonic() - start


@pytest.mark.slow
def test_every_spark_entry_point_fails_fast_with_the_cause_first(spark, tmp_path):
    """Batch read, readStream, write and writeStream on a closed port: each within 15 s, and the line
    of our exception in the text pyspark shows names the address, the cause and the option."""
    port = closed_port()
    boot = {"kafka.bootstrap.servers": port}
    df = spark.createDataFrame([("k", "v")], "key string, value string")

    def stream_read():
        q = (spark.readStream.format("pykafka").options(**boot, subscribe="t").load().writeStream
             .format("noop").option("checkpointLocation", str(tmp_path / "r")).start())
        try:
            q.processAllAvailable()
        finally:
            q.stop()

    def stream_write():
        q = (spark.readStream.format("rate").option("rowsPerSecond", 1).load()
             .selectExpr("CAST(value AS STRING) AS value").writeStream.format("pykafka").options(**boot, topic="t")
             .option("checkpointLocation", str(tmp_path / "w")).start())
        try:
            q.processAllAvailable()
        finally:
            q.stop()

    actions = {
        "read": lambda: spark.read.format("pykafka").options(**boot, subscribe="t").load().collect(),
        "readStream": stream_read,
        "write": lambda: df.write.format("pykafka").options(**boot, topic="t").mode("append").save(),
        "writeStream": stream_write,
    }
    for name, action in actions.items():
        text, took = _user_text(action)
        ours = [line for line in text.splitlines() if "BootstrapUnreachableError:" in line]
        assert took < BOUND_S, (name, took)
        # What Python prints for it uncaught: get_spark() hides Python tracebacks inside Spark errors
        # (hideTraceback), so the cause is on the first line of the message, right after the driver's
        # few frames; pyspark used to print our traceback twice first (the cause was line 126 of 128).
        printed = "".join(traceback.format_exception(_last_error[0])).splitlines()
        first = next(i for i, line in enumerate(printed) if "BootstrapUnreachableError:" in line)
        assert first < CAUSE_WITHIN_LINES and printed.count("Traceback (most recent call last):") == 1, \
            (name, "\n".join(printed[:40]))
        assert ours, (name, text[-3000:])
        assert f"({port}: connection refused)" in ours[0] and "check kafka.bootstrap.servers" in ours[0], \
            (name, ours[0])


def test_a_batch_read_of_a_missing_subscribed_topic_names_it(bootstrap, make_topic):
    """As Spark's connector, a batch read fails (differential case error_subscribe_missing_topic); ours names the topic."""
    from pyspark_kafka.errors import OptionError
    from pyspark_kafka.read.planning import batch_offsets

    present = make_topic(partitions=1)
    opts = parse_reader_options({"kafka.bootstrap.servers": bootstrap, "subscribe": f"{present},no-such-topic-27"},
                                mode="batch")
    with pytest.raises(OptionError, match=r"names topic\(s\) \['no-such-topic-27'\] that do not exist"):
        batch_offsets(opts)
