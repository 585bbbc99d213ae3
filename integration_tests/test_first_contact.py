"""First contact on every backend (issue 27): TLS to a PLAINTEXT listener is named as a TLS handshake
failure within seconds, and a ``subscribe`` topic the cluster lacks is warned about by name and
contributes no partition. The unreachable cases (no broker at all) are in tests/connector/test_first_contact.py.
"""

from __future__ import annotations

import logging
import time

import pytest

from pyspark_kafka.kafka.reachability import BootstrapUnreachableError
from pyspark_kafka.read.offset_reader import OffsetReader
from pyspark_kafka.read.options import parse_reader_options


def _reader(bootstrap: str, **options) -> OffsetReader:
    return OffsetReader(parse_reader_options({"kafka.bootstrap.servers": bootstrap, **options}, mode="batch"))


def test_tls_to_a_plaintext_listener_is_named(kafka_cluster):
    first = kafka_cluster.bootstrap.split(",")[0]
    start = time.monotonic()
    with pytest.raises(BootstrapUnreachableError) as failure:
        _reader(first, subscribe="t", **{"kafka.security.protocol": "SSL"}).topic_partitions()
    assert time.monotonic() - start < 15
    assert failure.value.failures == {first: "TLS handshake failed"}, str(failure.value)


def test_a_missing_subscribed_topic_is_warned_about(kafka_cluster, caplog):
    topic = kafka_cluster.create_topic(2, prefix="first-contact")
    with caplog.at_level(logging.WARNING, logger="pyspark_kafka.read.offset_reader"):
        tps = _reader(kafka_cluster.bootstrap, subscribe=f"{topic},first-contact-missing-topic").topic_partitions()
    assert tps == [(topic, 0), (topic, 1)]
    assert any("'first-contact-missing-topic' does not exist" in r.getMessage() for r in caplog.records)
