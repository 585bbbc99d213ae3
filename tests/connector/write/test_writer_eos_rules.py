"""Pure rules of the exactly-once writer (no broker, no Spark): ids, options, the marker, the decision."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType
from pyspark_kafka.errors import OptionError
from pyspark_kafka.write.transactions import (
    Decision,
    Fingerprint,
    Marker,
    ReplayMismatchError,
    check_replay,
    decide,
    marker_consumer_config,
    parse_marker,
    parse_prefix,
    transactional_id,
    transactional_producer_config,
)
from pyspark_kafka.write import KafkaBatchWriter, KafkaStreamWriter, WriteSpec

OPTS = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t", "deliveryGuarantee": "exactly-once"}
VALUE = StructType([StructField("value", StringType())])


def test_transactional_id_is_prefix_scope_and_spark_partition():
    assert transactional_id("pykafka", "2f1c-query", 7) == "pykafka-2f1c-query-7"


@pytest.mark.parametrize("options, expected", [
    ({}, "pykafka"),
    ({"transactionalIdPrefix": "orders-etl"}, "orders-etl"),
    ({"TRANSACTIONALIDPREFIX": "x"}, "x"),  # Spark option names are case-insensitive
])
def test_prefix_option(options, expected):
    assert parse_prefix(options) == expected


@pytest.mark.parametrize("bad", ["", "   ", "my prefix"])
def test_prefix_must_be_a_name_without_spaces(bad):
    with pytest.raises(OptionError, match=r"option 'transactionalIdPrefix' must be a non-empty name without spaces"):
        parse_prefix({"transactionalIdPrefix": bad})


def test_transactional_producer_defaults():
    conf = transactional_producer_config({"bootstrap.servers": "h:1"})
    assert conf == {"bootstrap.servers": "h:1", "acks": "all", "enable.idempotence": "true",
                    "transaction.timeout.ms": 60000, "delivery.timeout.ms": 60000}


def test_transactional_producer_keeps_consistent_user_settings():
    conf = transactional_producer_config({"acks": "-1", "transaction.timeout.ms": "300000", "message.timeout.ms": "90000"})
    assert (conf["acks"], conf["transaction.timeout.ms"], conf["message.timeout.ms"]) == ("-1", 300000, 90000)
    assert "delivery.timeout.ms" not in conf  # librdkafka's alias is kept, not doubled


@pytest.mark.parametrize("settings, message", [
    ({"acks": "1"}, r"option 'kafka.acks'='1' contradicts deliveryGuarantee=exactly-once, which needs acks=all"),
    ({"enable.idempotence": "false"}, r"'kafka.enable.idempotence'='false' contradicts .* needs enable.idempotence=true"),
    ({"transactional.id": "mine"}, r"'kafka.transactional.id' cannot be set .* set that option instead"),
    ({"delivery.timeout.ms": "120000"}, r"'kafka.delivery.timeout.ms'=120000 is larger than 'kafka.transaction.timeout.ms'=60000"),
    ({"transaction.timeout.ms": "soon"}, r"'kafka.transaction.timeout.ms' must be an integer \(ms\), got 'soon'"),
    ({"transaction.timeout.ms": "0"}, r"'kafka.transaction.timeout.ms' must be > 0 ms"),
])
def test_transactional_producer_refuses_contradictions(settings, message):
    with pytest.raises(OptionError, match=message):
        transactional_producer_config(settings)


def test_marker_consumer_drops_producer_settings_and_reads_committed():
    conf = marker_consumer_config({"bootstrap.servers": "h:1", "acks": "all", "linger.ms": "5",
                                   "transaction.timeout.ms": 60000, "security.protocol": "plaintext"})
    assert conf == {"bootstrap.servers": "h:1", "security.protocol": "plaintext",
                    "isolation.level": "read_committed", "enable.auto.commit": False}


def test_marker_round_trip_through_offset_and_metadata():
    m = Marker(41, Fingerprint(3, 6, 120))
    assert m.offset == 42
    assert m.metadata() == '{"v":1,"batch":41,"rows":3,"keyBytes":6,"valueBytes":120}'
    assert parse_marker(m.offset, m.metadata()) == m


@pytest.mark.parametrize("offset, metadata, expected", [
    (-1001, None, None),            # librdkafka's OFFSET_INVALID: the group has no commit
    (0, "", None),
    (5, "", Marker(4)),             # foreign or empty metadata: batch from the offset, no fingerprint
    (5, "not json", Marker(4)),
    (5, '{"v":1,"batch":3,"rows":1,"keyBytes":0,"valueBytes":1}', Marker(4)),  # batch disagrees with offset
])
def test_parse_marker(offset, metadata, expected):
    assert parse_marker(offset, metadata) == expected


@pytest.mark.parametrize("marker, batch, expected", [
    (None, 0, Decision.WRITE),
    (Marker(3), 4, Decision.WRITE),
    (Marker(3), 9, Decision.WRITE),          # partition had no rows in batches 4..8
    (Marker(4), 4, Decision.ALREADY_COMMITTED),
    (Marker(5), 4, Decision.SUPERSEDED),     # a zombie of batch 4 after batch 5 committed
])
def test_decide(marker, batch, expected):
    assert decide(marker, batch) is expected


def test_fingerprint_counts_rows_and_bytes_nulls_as_zero():
    batch = pa.record_batch([pa.array(["ab", None, "c"]), pa.array([b"xyz", b"", None])], ["key", "value"])
    assert Fingerprint.of(batch) == Fingerprint(3, 3, 3)
    assert Fingerprint.of(pa.record_batch([pa.array(["é"])], ["value"])) == Fingerprint(1, 0, 2)  # UTF-8 bytes
    assert Fingerprint(1, 2, 3) + Fingerprint(10, 20, 30) == Fingerprint(11, 22, 33)


def test_replay_check_passes_for_the_same_input_or_an_unknown_one():
    check_replay(Marker(2, Fingerprint(5, 0, 50)), Fingerprint(5, 0, 50), "p-q-0")
    check_replay(Marker(2), Fingerprint(9, 9, 9), "p-q-0")


def test_replay_check_refuses_a_differently_split_batch():
    with pytest.raises(ReplayMismatchError, match=r"batch 2 of the task with transactional.id 'p-q-1' was already "
                                                  r"committed to Kafka with different input \(5 rows, 0 key bytes, "
                                                  r"50 value bytes\) than this replay has \(4 rows.*nothing was written"):
        check_replay(Marker(2, Fingerprint(5, 0, 50)), Fingerprint(4, 0, 40), "p-q-1")


def test_write_spec_for_exactly_once():
    spec = WriteSpec.from_options({**OPTS, "transactionalIdPrefix": "etl", "kafka.linger.ms": "2"}, VALUE)
    assert spec.exactly_once and spec.prefix == "etl" and spec.timeout_ms == 60000
    assert spec.producer["linger.ms"] == "2" and "linger.ms" not in spec.consumer
    assert not WriteSpec.from_options({**OPTS, "deliveryGuarantee": "at-least-once"}, VALUE).exactly_once


def test_writers_refuse_bad_exactly_once_options_on_the_driver():
    with pytest.raises(OptionError, match="'kafka.enable.idempotence'='false' contradicts"):
        KafkaStreamWriter({**OPTS, "kafka.enable.idempotence": "false"}, VALUE, False)
    with pytest.raises(OptionError, match="option 'transactionalIdPrefix' must be"):
        KafkaBatchWriter({**OPTS, "transactionalIdPrefix": " "}, VALUE, False)
    with pytest.raises(OptionError, match="cannot create a Kafka producer .* 'no.such.setting'"):
        KafkaStreamWriter({**OPTS, "kafka.no.such.setting": "1"}, VALUE, False)


def test_each_batch_job_gets_its_own_transactional_scope():
    a, b = KafkaBatchWriter(OPTS, VALUE, False), KafkaBatchWriter(OPTS, VALUE, False)
    assert a.job_id.startswith("job-") and a.job_id != b.job_id
    assert KafkaBatchWriter({**OPTS, "deliveryGuarantee": "at-least-once"}, VALUE, False).job_id is None


def test_liveness_passes_while_the_feeding_processes_live():
    from pyspark_kafka.write.transactions import SparkLiveness

    live = SparkLiveness()
    assert live.chain[0] == os.getppid()
    live.check("tid")  # nothing died: no error


def test_liveness_detects_that_the_feeding_process_died():
    """A process whose parent dies is re-parented: the check then refuses to commit.

    Real processes: this test forks a 'feeder' (stands for the Spark JVM / worker daemon)
    which forks the 'task'; the feeder exits; the task's check must raise.
    """
    from pyspark_kafka.write.transactions import InputTruncatedError, SparkLiveness

    result_r, result_w = os.pipe()
    feeder = os.fork()
    if feeder == 0:  # the feeder
        go_r, go_w = os.pipe()
        ready_r, ready_w = os.pipe()
        task = os.fork()
        if task == 0:  # the task
            os.close(go_w)
            live = SparkLiveness()  # records the chain while the feeder lives
            os.write(ready_w, b"r")
            os.read(go_r, 1)  # blocks until the feeder has exited (its end of the pipe closes)
            deadline = time.monotonic() + 10
            while os.getppid() == live.chain[0] and time.monotonic() < deadline:
                time.sleep(0.01)  # re-parenting follows the exit; bounded
            try:
                live.check("tid")
                os.write(result_w, b"N")
            except InputTruncatedError as e:
                os.write(result_w, b"Y" if "tid" in str(e) else b"?")
            os._exit(0)
        os.read(ready_r, 1)  # the task has recorded its chain
        os._exit(0)  # the feeder dies; the task's go pipe reaches EOF
    os.close(result_w)
    os.waitpid(feeder, 0)
    with os.fdopen(result_r, "rb") as f:
        outcome = f.read(1)
    assert outcome == b"Y"
