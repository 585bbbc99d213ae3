"""Fetch responses across versions (non-flexible and flexible framing, topic ids) and zero copy."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Producer
from kio.index import load_request_schema
from kio.records.readers import read_batch
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from pyspark_kafka.broker.protocol import build
from support.wire import WireClient

DEADLINE_S = 20.0


def _fill(bootstrap, topic, partitions, per_partition):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "compression.codec": "none"})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=b"p%d-r%d" % (part, i), partition=part)
            p.flush(DEADLINE_S)
    assert p.flush(DEADLINE_S) == 0


def _values(records: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(records):
        batch, size = read_batch(records, pos)
        out.extend(r.value for r in batch.records)
        pos += size
    return out


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16])
def test_fetch_every_partition_in_each_version(bootstrap, make_topic, version):
    topic = make_topic(partitions=3)
    _fill(bootstrap, topic, 3, 4)
    with WireClient(bootstrap) as c:
        topic_id = c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                                             allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False)).topics[0].topic_id
        request = build(load_request_schema(1, version), {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": 1, "log_start_offset": -1,
                 "last_fetched_epoch": -1, "partition_max_bytes": 1 << 20} for p in range(3)]}],
        })
        resp = c.request(request)
    parts = resp.responses[0].partitions
    assert [p.error_code for p in parts] == [0, 0, 0]
    assert [p.high_watermark for p in parts] == [4, 4, 4]
    # Whole batches from the one containing offset 1 (one record per batch here).
    assert [_values(p.records) for p in parts] == [[b"p%d-r%d" % (n, i) for i in range(1, 4)] for n in range(3)]


def test_fetched_records_go_out_with_sendfile(bootstrap, make_topic, monkeypatch):
    """The record bytes are sent from the segment file with os.sendfile (zero copy)."""
    topic = make_topic(partitions=1)
    _fill(bootstrap, topic, 1, 5)
    calls = []
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd, in_fd, offset, count, *args, **kwargs):
        sent = real_sendfile(out_fd, in_fd, offset, count, *args, **kwargs)
        calls.append(sent)
        return sent

    monkeypatch.setattr(os, "sendfile", counting_sendfile)
    request = build(load_request_schema(1, 12), {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                     "log_start_offset": -1, "last_fetched_epoch": -1,
                                                     "partition_max_bytes": 1 << 20}]}],
    })
    with WireClient(bootstrap) as c:
        part = c.request(request).responses[0].partitions[0]
    assert _values(part.records) == [b"p0-r%d" % i for i in range(5)]
    assert sum(calls) == len(part.records)
