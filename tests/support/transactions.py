"""Transactional producers and raw transaction requests for the broker's transaction tests."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic

from support.wire import WireClient


DEADLINE_S = 30.0


def new_id() -> str:
    return f"tx-{uuid.uuid4().hex}"


def txn_producer(bootstrap: str, transactional_id: str | None = None, **conf) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id or new_id(),
                  "linger.ms": 5, **conf})
    p.init_transactions(DEADLINE_S)
    return p


def produce_txn(p: Producer, topic: str, items: list[bytes], partitions: int, commit: bool) -> None:
    p.begin_transaction()
    for i, v in enumerate(items):
        p.produce(topic, value=v, partition=i % partitions)
    if commit:
        p.commit_transaction(DEADLINE_S)
    else:
        assert p.flush(DEADLINE_S) == 0  # the records are in the log before the abort
        p.abort_transaction(DEADLINE_S)


def list_offset(bootstrap: str, topic: str, partition: int, isolation_level: int) -> int:
    """ListOffsets LATEST (-1) with ``isolation_level`` 0 (read_uncommitted) or 1 (read_committed)."""
    with WireClient(bootstrap) as client:
        response = client.request(ListOffsetsRequest(
            replica_id=-1, isolation_level=isolation_level,
            topics=(ListOffsetsTopic(name=topic, partitions=(
                ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=-1),)),)))
    p = response.topics[0].partitions[0]
    assert p.error_code == 0
    return p.offset


#: the coordinator errors a Kafka client retries: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
COORDINATOR_RETRIABLE = (14, 15, 16)


def describe(bootstrap: str, transactional_id: str):
    """DescribeTransactions of ``transactional_id``; asked again (bounded, ``DEADLINE_S``) while the coordinator
    answers a retriable coordinator error (it loads its partition after a restart's election, as Kafka's)."""
    import time

    deadline = time.monotonic() + DEADLINE_S
    with WireClient(bootstrap) as client:
        while True:
            state = client.request(DescribeTransactionsRequest(transactional_ids=(transactional_id,))
                                   ).transaction_states[0]
            if int(state.error_code) not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
                return state
            time.sleep(0.05)
