"""The storage seam (:class:`ReplicaManager`) without the server: appends, reads, offsets, notifications, on
partitions this broker leads with an ISR of one (the high watermark moves at the append)."""

from __future__ import annotations

import asyncio

import pytest

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    InvalidTxnStateError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from support.batches import make_batch
from pyspark_kafka.broker.log.offset_targets import EARLIEST_TIMESTAMP as EARLIEST
from pyspark_kafka.broker.log.offset_targets import LATEST_TIMESTAMP as LATEST
from pyspark_kafka.broker.log.offset_targets import MAX_TIMESTAMP
from pyspark_kafka.broker.replica_manager import ReplicaManager
from support.batches import transactional
from support.replicas import lead

T0 = 1_700_000_000_000


@pytest.fixture
def rm(tmp_path):
    verified = []

    def verify(producer_id, epoch, topic, partition):
        verified.append((producer_id, epoch, topic, partition))
        if producer_id == 99:
            raise InvalidTxnStateError("not in a transaction")

    manager = ReplicaManager(tmp_path, BrokerConfig({"num.partitions": "2"}), verify)
    manager.logs.load()
    lead(manager, "t", 2)  # this broker the leader and only in-sync replica of t-0 and t-1
    manager.verified = verified
    yield manager
    manager.logs.close()


def test_append_then_read_and_list_offsets(rm):
    first = rm.append_records("t", 0, make_batch([b"a", b"b"]), 1, T0)
    second = rm.append_records("t", 0, make_batch([b"c"], timestamp_ms=T0 + 10), -1, T0)
    assert (first.base_offset, second.base_offset, rm.logs.topic("t").num_partitions) == (0, 2, 2)

    read = rm.read_records("t", 0, 0, 1 << 20, read_committed=False, min_one_message=True)
    assert (read.error_code, read.high_watermark, read.last_stable_offset, read.log_start_offset) == (0, 3, 3, 0)
    assert read.records.length > 0 and read.aborted_transactions == ()
    assert rm.offset_for_timestamp("t", 0, LATEST, False) == (3, -1)
    assert rm.offset_for_timestamp("t", 0, EARLIEST, False) == (0, -1)
    assert rm.offset_for_timestamp("t", 0, MAX_TIMESTAMP, False) == (2, T0 + 10)
    assert rm.offset_for_timestamp("t", 0, T0 + 1, False) == (1, T0 + 1)
    assert rm.offset_for_timestamp("t", 0, T0 + 11, False) == (-1, -1)
    with pytest.raises(InvalidRequestError):
        rm.offset_for_timestamp("t", 0, -7, False)
    with pytest.raises(UnknownTopicOrPartitionError):
        rm.offset_for_timestamp("t", 5, LATEST, False)


def test_read_errors_are_results(rm):
    rm.append_records("t", 0, make_batch([b"a"]), 1, T0)
    assert rm.read_records(None, 0, 0, 100, read_committed=False, min_one_message=True) == (
        ErrorCode.unknown_topic_id, -1, -1, -1, b"", ())
    assert rm.read_records("t", 9, 0, 100, read_committed=False, min_one_message=True).error_code \
        == ErrorCode.unknown_topic_or_partition
    out_of_range = rm.read_records("t", 0, 5, 100, read_committed=True, min_one_message=True)
    assert (out_of_range.error_code, out_of_range.high_watermark) == (ErrorCode.offset_out_of_range, 1)


@pytest.mark.parametrize("args,error", [
    (("t", 0, b"x", 2), InvalidRequiredAcksError),
    ((None, 0, b"x", 1), UnknownTopicIdError),
    (("t", 0, None, 1), CorruptRecordError),
    (("__consumer_offsets", 0, b"x", 1), InvalidTopicError),
    (("t", 7, b"x", 1), UnknownTopicOrPartitionError),
])
def test_append_checks(rm, args, error):
    with pytest.raises(error):
        rm.append_records(*args, T0)


def test_transactional_batches_are_verified(rm):
    with pytest.raises(InvalidTxnStateError):
        batch = make_batch([b"a"], producer_id=99, producer_epoch=0, base_sequence=0)
        rm.append_records("t", 1, transactional(bytearray(batch)), 1, T0)
    assert rm.verified == [(99, 0, "t", 1)]
    assert rm.read_records("t", 1, 0, 100, read_committed=False, min_one_message=True).high_watermark == 0
    idempotent = make_batch([b"a"], producer_id=5, producer_epoch=0, base_sequence=0)  # not transactional
    rm.append_records("t", 1, idempotent, 1, T0)
    assert rm.verified == [(99, 0, "t", 1)]


def test_an_append_wakes_waiting_fetches(rm):
    rm.append_records("t", 0, make_batch([b"a"]), 1, T0)

    async def scenario():
        waiting = asyncio.ensure_future(rm.wait_for_append([("t", 0)], 30))
        await asyncio.sleep(0)  # one loop turn (not a delay): the task registers before its first await
        assert rm.waiting_fetches("t", 0) == 1
        rm.append_records("t", 0, make_batch([b"b"]), 1, T0)
        assert await waiting is True
        assert rm.waiting_fetches("t", 0) == 0
        assert await rm.wait_for_append([("t", 1)], 0) is False

    asyncio.run(scenario())
