"""The transaction coordinator's state machine on an in-memory partition writer (no broker, no socket):
Empty → Ongoing → PrepareCommit → CompleteCommit with the markers written, fencing by a new producer
instance, the timeout abort, offsets committed in a transaction, and a load that completes a transaction a
crash left in PrepareCommit. test_transactions*.py prove the same through real clients."""

from __future__ import annotations

import asyncio

import pytest

from pyspark_kafka.broker.coordinator.internal_topics import OFFSETS_TOPIC
from pyspark_kafka.broker.coordinator.offsets import OffsetAndMetadata
from pyspark_kafka.broker.coordinator.partition_writer import InMemoryPartitionWriter
from pyspark_kafka.broker.coordinator.txn import TxnState
from pyspark_kafka.broker.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from pyspark_kafka.broker.log.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from support.coordinators import MarkerLog, groups, markers_settled, transactions

T0 = 1_700_000_000_000


def init(txn, txn_id="tx", timeout_ms=60_000, now_ms=T0):
    return txn.init_producer_id(txn_id, timeout_ms, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, now_ms)


def test_commit_goes_through_prepare_to_complete_with_its_markers(tmp_path):
    async def scenario():
        markers = MarkerLog()
        txn = transactions(tmp_path, groups(), markers)
        pid, epoch = init(txn)
        assert epoch == 0 and txn.describe("tx").state is TxnState.EMPTY
        txn.add_partitions("tx", pid, epoch, [("t", 0), ("t", 2)], T0)
        assert txn.describe("tx").state is TxnState.ONGOING and txn.describe("tx").start_ms == T0
        txn.end_txn("tx", pid, epoch, True, T0 + 1)
        assert txn.describe("tx").state is TxnState.PREPARE_COMMIT  # answered; the markers follow
        await markers_settled(txn)
        assert txn.describe("tx").state is TxnState.COMPLETE_COMMIT and txn.describe("tx").partitions == set()
        assert markers.written == [("t", 0, pid, 0, True), ("t", 2, pid, 0, True)]
        txn.end_txn("tx", pid, epoch, True, T0 + 2)  # a retry of a finished commit succeeds
        with pytest.raises(InvalidTxnStateError):
            txn.end_txn("tx", pid, epoch, False, T0 + 3)  # aborting what was committed

    asyncio.run(scenario())


def test_a_new_instance_fences_the_old_one_and_aborts_its_open_transaction(tmp_path):
    async def scenario():
        markers = MarkerLog()
        txn = transactions(tmp_path, groups(), markers)
        pid, epoch = init(txn)
        txn.add_partitions("tx", pid, epoch, [("t", 1)], T0)
        with pytest.raises(ConcurrentTransactionsError):
            init(txn)  # aborts the open transaction, the client retries
        await markers_settled(txn)
        assert markers.written == [("t", 1, pid, 1, False)] and txn.describe("tx").state is TxnState.COMPLETE_ABORT
        assert init(txn) == (pid, 2)
        with pytest.raises(ProducerFencedError):
            txn.add_partitions("tx", pid, epoch, [("t", 1)], T0)

    asyncio.run(scenario())


def test_a_transaction_open_longer_than_its_timeout_is_aborted(tmp_path):
    async def scenario():
        txn = transactions(tmp_path, groups(), MarkerLog())
        pid, epoch = init(txn, timeout_ms=1_000)
        txn.add_partitions("tx", pid, epoch, [("t", 0)], T0)
        assert txn.abort_timed_out(T0 + 1_000) == []
        assert txn.abort_timed_out(T0 + 1_001) == ["tx"]
        await markers_settled(txn)
        assert txn.describe("tx").state is TxnState.COMPLETE_ABORT and txn.describe("tx").producer_epoch == epoch + 1

    asyncio.run(scenario())


def test_offsets_committed_in_a_transaction_become_visible_at_commit(tmp_path):
    async def scenario():
        group_coordinator = groups()
        txn = transactions(tmp_path, group_coordinator, MarkerLog())
        pid, epoch = init(txn)
        txn.add_partitions("tx", pid, epoch, [txn.offsets_partition("g")], T0)
        group_coordinator.offsets.stage_txn_offsets(pid, epoch, "g", {("t", 0): OffsetAndMetadata(8)}, T0)
        assert group_coordinator.offsets.committed("g") == {}
        txn.end_txn("tx", pid, epoch, True, T0 + 1)
        await markers_settled(txn)
        assert group_coordinator.offsets.committed("g")[("t", 0)].offset == 8

    asyncio.run(scenario())


def test_a_load_completes_a_transaction_left_in_prepare_commit(tmp_path):
    async def scenario():
        writer = InMemoryPartitionWriter()
        markers = MarkerLog()
        txn = transactions(tmp_path, groups(writer), markers)
        pid, epoch = init(txn)
        txn.add_partitions("tx", pid, epoch, [("t", 0), (OFFSETS_TOPIC, 0)], T0)
        markers.fail = CoordinatorNotAvailableError("the broker dies before the markers")
        txn.end_txn("tx", pid, epoch, True, T0 + 1)
        await markers_settled(txn)
        assert txn.describe("tx").state is TxnState.PREPARE_COMMIT
        after_crash = MarkerLog()
        restarted = transactions(tmp_path, groups(writer), after_crash, now_ms=T0 + 2)
        await markers_settled(restarted)
        assert restarted.describe("tx").state is TxnState.COMPLETE_COMMIT
        assert after_crash.written == [("t", 0, pid, epoch, True)]
        assert init(restarted, now_ms=T0 + 3) == (pid, epoch + 1)  # the producer id survived the restart

    asyncio.run(scenario())
