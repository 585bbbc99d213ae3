"""Table-driven tests of the pure rules behind idempotence and transactions (no broker needed)."""

from __future__ import annotations

import pytest

from pyspark_kafka.broker.coordinator.txn import (
    MAX_EPOCH,
    TransactionMetadata,
    TxnState,
    bumped,
    check_producer,
    check_timeout,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    end_txn_transition,
)
from pyspark_kafka.broker.coordinator.internal_topics import java_string_hash, partition_for
from pyspark_kafka.broker.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
)
from pyspark_kafka.broker.log.producer_state import (
    INT32_MAX,
    BatchMetadata,
    ProducerEntry,
    check_sequence,
    in_sequence,
)
from pyspark_kafka.broker.log.records import control_batch, control_marker, control_type


@pytest.mark.parametrize("last, nxt, expected", [
    (4, 5, True), (4, 6, False), (4, 4, False), (INT32_MAX, 0, True), (INT32_MAX - 1, 0, False), (-1, 0, True),
])
def test_in_sequence(last, nxt, expected):
    assert in_sequence(last, nxt) is expected


def _entry(epoch: int, last_seq: int | None) -> ProducerEntry:
    entry = ProducerEntry(1, epoch)
    if last_seq is not None:
        entry.batches.append(BatchMetadata(0, last_seq, 10, 0, -1))
    return entry


@pytest.mark.parametrize("entry, epoch, first_seq, ok", [
    (None, 0, 42, True),                   # unknown producer: any sequence (KIP-360)
    (_entry(0, 9), 0, 10, True),           # in sequence
    (_entry(0, 9), 0, 12, False),          # gap
    (_entry(0, 9), 1, 0, True),            # new epoch starts at 0
    (_entry(0, 9), 1, 10, False),          # new epoch must start at 0
    (_entry(-1, None), 3, 7, True),        # no known epoch
])
def test_check_sequence(entry, epoch, first_seq, ok):
    if ok:
        check_sequence(entry, epoch, first_seq, "t-0")
    else:
        with pytest.raises(OutOfOrderSequenceError):
            check_sequence(entry, epoch, first_seq, "t-0")


def _meta(state: TxnState, epoch: int = 3) -> TransactionMetadata:
    return TransactionMetadata("app", 42, epoch, 60000, state, {("t", 0)}, 1, 1)


@pytest.mark.parametrize("state, commit, expected", [
    (TxnState.ONGOING, True, TxnState.PREPARE_COMMIT),
    (TxnState.ONGOING, False, TxnState.PREPARE_ABORT),
    (TxnState.COMPLETE_COMMIT, True, None),           # a retried commit
    (TxnState.COMPLETE_ABORT, False, None),
    (TxnState.COMPLETE_COMMIT, False, InvalidTxnStateError),
    (TxnState.EMPTY, True, InvalidTxnStateError),
    (TxnState.PREPARE_COMMIT, True, ConcurrentTransactionsError),
    (TxnState.PREPARE_ABORT, True, InvalidTxnStateError),
])
def test_end_txn_transition(state, commit, expected):
    if isinstance(expected, type) and issubclass(expected, Exception):
        with pytest.raises(expected):
            end_txn_transition(_meta(state), commit)
    else:
        assert end_txn_transition(_meta(state), commit) == expected


def test_check_producer_and_timeout():
    meta = _meta(TxnState.ONGOING)
    assert check_producer(meta, "app", 42, 3) is meta
    with pytest.raises(InvalidProducerIdMappingError):
        check_producer(None, "app", 42, 3)
    with pytest.raises(InvalidProducerIdMappingError):
        check_producer(meta, "app", 41, 3)
    with pytest.raises(ProducerFencedError, match="fenced"):
        check_producer(meta, "app", 42, 2)
    check_timeout(900000, 900000)
    for bad in (0, 900001):
        with pytest.raises(InvalidTransactionTimeoutError, match="transaction.max.timeout.ms"):
            check_timeout(bad, 900000)


def test_epoch_bump_moves_to_a_new_producer_id_when_exhausted():
    assert bumped(_meta(TxnState.EMPTY, epoch=-1), lambda: 99) == (42, 0)
    assert bumped(_meta(TxnState.EMPTY, epoch=7), lambda: 99) == (42, 8)
    assert bumped(_meta(TxnState.EMPTY, epoch=MAX_EPOCH), lambda: 99) == (99, 0)


@pytest.mark.parametrize("text, hash_code, partition", [
    ("", 0, 0), ("hello", 99162322, 22), ("my-transactional-id", -959806496, 46), ("payments-eos", -480596375, 25),
    ("polygenelubricants", -(2**31), 0),  # Utils.abs(Integer.MIN_VALUE) == 0
])
def test_internal_topic_partition_is_kafkas(text, hash_code, partition):
    """Values computed with Java 17: ``s.hashCode()`` and ``Utils.abs(s.hashCode()) % 50``."""
    assert java_string_hash(text) == hash_code
    assert partition_for(text, 50) == partition


def test_transaction_log_record_round_trip():
    meta = TransactionMetadata("app-é", 123456789012, 7, 60000, TxnState.ONGOING,
                               {("orders", 0), ("orders", 2), ("__consumer_offsets", 13)}, 1700, 1800)
    assert decode_key(encode_key(meta.transactional_id)) == "app-é"
    back = decode_value("app-é", encode_value(meta))
    assert back == meta


@pytest.mark.parametrize("commit, expected", [(True, 1), (False, 0)])
def test_control_batch_round_trip(commit, expected):
    assert control_type(control_batch(5, 1, commit, 0, 1_700_000_000_000)) == expected
    assert control_marker(control_batch(5, 1, commit, 7, 1_700_000_000_000)) == (expected, 7)


def test_producer_state_keeps_the_marker_coordinator_epoch_across_a_snapshot(tmp_path):
    from pyspark_kafka.broker.log.producer_state import ProducerStateManager
    from pyspark_kafka.broker.log.record_batch import parse_header

    state = ProducerStateManager(tmp_path, "t-0")
    marker = parse_header(control_batch(5, 1, True, 3, 1_700_000_000_000))
    state.on_batch(marker, *control_marker(control_batch(5, 1, True, 3, 1_700_000_000_000)))
    assert state.producers[5].coordinator_epoch == 3
    state.take_snapshot(1)
    reloaded = ProducerStateManager(tmp_path, "t-0")
    reloaded.load_snapshot(1)
    assert reloaded.producers[5].coordinator_epoch == 3
