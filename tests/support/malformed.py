"""Helpers of the malformed-input tests: a raw ProduceRequest, and the check that the guard topic
(the ``written`` fixture of ``tests/broker/conftest.py``) lost nothing."""

from __future__ import annotations

import datetime

from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from support.client_records import as_tuples, consume, expected


def assert_nothing_lost(bootstrap, written):
    topic, records = written
    assert as_tuples(consume(bootstrap, topic, len(records))) == expected(records)


def produce_request(topic: str, records: bytes, acks: int = -1, partition: int = 0) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=10), topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition, records=records),)),))
