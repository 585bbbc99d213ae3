"""What the executor's read does when the bytes a broker serves are wrong (issue 34), on both read paths.

A real embedded broker holds healthy records; a Kafka-protocol proxy in front of it
(:class:`support.kafka_proxy.KafkaProxy`) damages its Fetch answers in transit, as a faulty disk or
network would: a flipped value byte, a record batch left out while the high watermark says there
are records. Offset ranges are read through ``read_partition``, the executor's read function,
with ``readPath=columnar`` (both decoders) and ``readPath=consumer`` (librdkafka with
``check.crcs=true``, the default we set). The decoders' own corruption matrix, with no broker, is
``test_corrupt_batches.py``.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
from confluent_kafka import Producer

from pyspark_kafka import offsets as O
from pyspark_kafka.errors import CorruptRecordError, DataLossError, PySparkKafkaError
from pyspark_kafka.read import record_decoder
from pyspark_kafka.read.partition_reader import KafkaInputPartition, executor_conf, read_partition
from pyspark_kafka.kafka.record_format import HEADER

from support.kafka_proxy import KafkaProxy

RECORDS = 60
POLL_TIMEOUT_MS = 1500


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10})
    for i in range(RECORDS):
        producer.produce(topic, partition=0, key=b"k%d" % i, value=b"value-%03d" % i)
        if i % 10 == 9:
            producer.flush(30)  # ten records per batch, so a damaged batch is one of six
    assert producer.flush(30) == 0


def _rows(bootstrap: str, topic: str, path: str, fail_on_data_loss: bool = True, until: int = RECORDS,
          **options) -> list:
    conf = executor_conf({"kafka.bootstrap.servers": bootstrap, **options}, "integrity-test")
    part = KafkaInputPartition(O.OffsetRange(topic, 0, 0, until), conf, POLL_TIMEOUT_MS, fail_on_data_loss,
                               False, path)
    return [row for batch in read_partition(part) for row in batch.to_pylist()]


def _batches(records: bytes):
    """``(position, base offset, size)`` of each whole batch in a Fetch answer's records."""
    pos, out = 0, []
    while pos + HEADER.size <= len(records):
        base, length = HEADER.unpack_from(records, pos)[:2]
        if pos + 12 + length > len(records):
            break
        out.append((pos, base, 12 + length))
        pos += 12 + length
    return out


def _rewrite(response, change):
    """The Fetch ``response`` with each partition's records replaced by ``change(records)`` (None: unchanged)."""
    topics = []
    for topic in response.responses:
        parts = []
        for p in topic.partitions:
            new = change(bytes(p.records)) if p.records else None
            parts.append(p if new is None else dataclasses.replace(p, records=new))
        topics.append(dataclasses.replace(topic, partitions=tuple(parts)))
    return dataclasses.replace(response, responses=tuple(topics))


def _flip_value_byte_of_batch_at(offset: int):
    """A proxy hook flipping the last value byte of the batch holding ``offset`` (its CRC no longer matches)."""

    def change(records: bytes):
        for pos, base, size in _batches(records):
            if base <= offset < base + 10:
                damaged = bytearray(records)
                damaged[pos + size - 2] ^= 0x01  # the value's last byte (the record ends with its 0 header count)
                return bytes(damaged)
        return None

    return lambda response: _rewrite(response, change)


def _drop_batches_from(offset: int):
    """A proxy hook leaving out every batch at or after ``offset``: the answer is empty (or stops early)
    while its high watermark says the records are there."""

    def change(records: bytes):
        keep = [(pos, size) for pos, base, size in _batches(records) if base < offset]
        return b"".join(records[pos:pos + size] for pos, size in keep)

    return lambda response: _rewrite(response, change)


@pytest.fixture()
def topic(bootstrap, make_topic):
    name = make_topic(partitions=1)
    _produce(bootstrap, name)
    return name


@pytest.mark.parametrize("decoder", ["numba", "numpy"])
def test_a_damaged_batch_fails_the_columnar_read_naming_partition_and_offsets(bootstrap, topic, decoder,
                                                                               monkeypatch):
    monkeypatch.setenv(record_decoder.DECODER_ENV, decoder)
    with KafkaProxy(bootstrap, on_fetch_response=_flip_value_byte_of_batch_at(30)) as proxy:
        with pytest.raises(CorruptRecordError) as caught:
            _rows(proxy.bootstrap, topic, "columnar")
        first_line = str(caught.value).splitlines()[0]
        assert first_line.startswith(f"corrupt record batch in {topic}-0 at offsets 30..39: its CRC-32C is ")
        # kafka.check.crcs=false: the value byte is read as damaged, as Kafka's Java client would with it off
        rows = _rows(proxy.bootstrap, topic, "columnar", **{"kafka.check.crcs": "false"})
    assert [r["offset"] for r in rows] == list(range(RECORDS))
    assert rows[39]["value"] == b"value-038"  # "9" (0x39) flipped to "8" (0x38)


def test_a_damaged_batch_fails_the_consumer_path_naming_corruption(bootstrap, topic):
    with KafkaProxy(bootstrap, on_fetch_response=_flip_value_byte_of_batch_at(30)) as proxy:
        with pytest.raises(PySparkKafkaError) as caught:
            _rows(proxy.bootstrap, topic, "consumer")
    message = str(caught.value)
    assert isinstance(caught.value, CorruptRecordError), message
    assert f"{topic}-0" in message.splitlines()[0] and "corrupt" in message.splitlines()[0]


@pytest.mark.parametrize("path", ["columnar", "consumer"])
def test_a_range_ending_before_a_damaged_batch_reads_as_on_sparks_connector(bootstrap, topic, path):
    """The Fetch answer brings the damaged batch along, but a range that ends before it never reads into
    it: Kafka's consumer checks only the batches it iterates, so Spark's connector reads such a range
    (integration_tests/reference/test_reference_corrupt.py); one that reaches into it fails."""
    with KafkaProxy(bootstrap, on_fetch_response=_flip_value_byte_of_batch_at(30)) as proxy:
        rows = _rows(proxy.bootstrap, topic, path, until=30)
        assert [r["offset"] for r in rows] == list(range(30))
        with pytest.raises(CorruptRecordError):
            _rows(proxy.bootstrap, topic, path, until=31)


def test_the_same_batch_undamaged_reads_whole_through_the_proxy(bootstrap, topic):
    """The control case: the proxy passing answers on unchanged changes nothing on either path."""
    with KafkaProxy(bootstrap, on_fetch_response=lambda response: None) as proxy:
        for path in ("columnar", "consumer"):
            rows = _rows(proxy.bootstrap, topic, path)
            assert [r["offset"] for r in rows] == list(range(RECORDS)), path


def test_answers_without_records_below_the_high_watermark_never_end_a_range_silently(bootstrap, topic):
    """Spark's ``KafkaDataConsumer`` rule: an empty poll below the partition's end is retried for
    ``pollTimeoutMs``, then fails (``failOnDataLoss=true``) naming the offsets, or is skipped with a
    warning counting them (``false``). Round 3's reader took it as the end of the range: 30 of 60
    rows and no error."""
    with KafkaProxy(bootstrap, on_fetch_response=_drop_batches_from(30)) as proxy:
        with pytest.raises(DataLossError) as caught:
            _rows(proxy.bootstrap, topic, "columnar")
        assert f"offsets [30, 60) of {topic}-0 could not be fetched" in str(caught.value)
        assert "failOnDataLoss=false" in str(caught.value)


def test_fail_on_data_loss_false_skips_the_unfetchable_offsets_with_a_warning(bootstrap, topic, caplog):
    with KafkaProxy(bootstrap, on_fetch_response=_drop_batches_from(30)) as proxy:
        with caplog.at_level(logging.WARNING, logger="pyspark_kafka.read.columnar"):
            rows = _rows(proxy.bootstrap, topic, "columnar", fail_on_data_loss=False)
    assert [r["offset"] for r in rows] == list(range(30))
    assert any("skipping these 30 offsets (failOnDataLoss=false)" in r.getMessage() for r in caplog.records)
