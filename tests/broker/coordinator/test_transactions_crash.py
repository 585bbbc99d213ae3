"""Transactions across crashes: the broker killed mid-transaction or between PrepareCommit and its
markers, and a consume-transform-produce client killed again and again. Nothing may be half
visible, lost or duplicated for a read_committed reader."""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from support.topics import create_topic
from pyspark_kafka.broker.coordinator.txn import TxnState
from support.batches import make_batch
from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.coordinator.group import GroupCoordinator
from pyspark_kafka.broker.coordinator.internal_topics import TRANSACTION_STATE_TOPIC
from pyspark_kafka.broker.coordinator.partition_writer import LogPartitionWriter
from pyspark_kafka.broker.coordinator.txn import TransactionCoordinator
from pyspark_kafka.broker.replica_manager import ReplicaManager
from support.coordinators import InMemoryMetadataCache, markers_settled
from support.replicas import lead
from support.broker_process import BrokerProcess
from support.records import read_all, values
from support.transactions import DEADLINE_S, describe, list_offset, produce_txn, txn_producer
from support.waiting import wait_until

NOW = 1_700_000_000_000


# --- the coordinator completes what a crash interrupted -----------------------------------------------


def _transactional_batch(values_: list[bytes], producer_id: int, epoch: int, seq: int) -> bytes:
    from support.batches import transactional

    return transactional(bytearray(make_batch(values_, producer_id=producer_id, producer_epoch=epoch,
                                               base_sequence=seq)))


class _Node:
    """A broker's storage and transaction coordinator, without a server (the coordinator owns every
    ``__transaction_state`` partition and loads them all, as a leader of each does): ``replica_manager``, ``txn``."""

    def __init__(self, data_dir: Path) -> None:
        config = BrokerConfig({"transaction.state.log.replication.factor": "1"})
        self.replica_manager = ReplicaManager(data_dir, config, lambda *a: None)
        self.replica_manager.logs.load()
        lead(self.replica_manager, "data", 2)  # as the broker lifecycle makes this broker their leader
        writer = LogPartitionWriter(self.replica_manager.logs)
        groups = GroupCoordinator(writer, InMemoryMetadataCache({"data": 2}), config)
        self.txn_coordinator = TransactionCoordinator(writer, config, data_dir, groups, self._write_markers)

    async def _write_markers(self, meta, commit: bool) -> None:
        """The markers of prepared ``meta`` into this broker's partitions (it leads them all), then completed."""
        for topic, partition in sorted(meta.partitions):
            self.replica_manager.append_marker(topic, partition, meta.producer_id, meta.producer_epoch, commit,
                                               meta.last_update_ms)
        self.txn_coordinator.markers_written(meta, commit, meta.last_update_ms)

    def load(self, now_ms: int) -> TransactionCoordinator:
        """Lead and load every ``__transaction_state`` partition (created when missing), as on an election."""
        txn = self.txn_coordinator.ensure_loaded(now_ms)
        count = txn.writer.create_topic(TRANSACTION_STATE_TOPIC, 1, 1 << 20)
        for partition in range(count):
            txn.load_partition(partition, now_ms)
        return txn


def _crash(broker: _Node) -> None:
    """Drop a broker without closing its logs (no snapshot, no clean-shutdown marker), as SIGKILL would."""
    for key in list(broker.replica_manager.logs.topics()):
        for partition in range(broker.replica_manager.logs.topic(key).num_partitions):
            for segment in broker.replica_manager.logs.get_log(key, partition).segments:
                segment.close()


@pytest.mark.parametrize("commit", [True, False], ids=["PrepareCommit", "PrepareAbort"])
def test_restart_completes_a_prepared_transaction(tmp_path, commit):
    async def scenario():
        broker = _Node(tmp_path)
        txn = broker.load(NOW)
        pid, epoch = txn.init_producer_id("app", 60000, -1, -1, NOW)
        txn.add_partitions("app", pid, epoch, [("data", 0), ("data", 1)], NOW)
        for partition in range(2):
            broker.replica_manager.logs.get_log("data", partition).append(
                _transactional_batch([b"a", b"b"], pid, epoch, 0))
        # crash after PrepareX is durable and the first partition got its marker, before the second did
        meta = txn.transactions["app"]
        prepared = dataclasses.replace(meta, state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
        txn._persist(prepared, NOW)
        broker.replica_manager.logs.get_log("data", 0).append_marker(pid, epoch, commit)
        assert broker.replica_manager.logs.get_log("data", 1).last_stable_offset == 0
        _crash(broker)

        restarted = _Node(tmp_path)
        assert not restarted.replica_manager.logs.clean_shutdown
        txn = restarted.load(NOW + 1)
        await markers_settled(txn)  # the load completed the prepared transaction: its markers follow
        assert txn.transactions["app"].state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
        for partition in range(2):
            plog = restarted.replica_manager.logs.get_log("data", partition)
            assert plog.last_stable_offset == plog.high_watermark  # nothing left open
            aborted = plog.aborted_transactions(0, plog.high_watermark)
            assert [(a.producer_id, a.first_offset) for a in aborted] == ([] if commit else [(pid, 0)])
        # the producer id is not handed out again after the restart
        assert txn.init_producer_id(None, 0, -1, -1, NOW)[0] > pid
        restarted.replica_manager.logs.close()

    asyncio.run(scenario())


# --- SIGKILL of the broker process ------------------------------------------------------------------------


@pytest.mark.slow
def test_broker_killed_mid_transaction_restarts_with_it_resolvable(tmp_path):
    data = tmp_path / "data"
    txn_id = f"kill-{uuid.uuid4().hex}"
    broker = BrokerProcess(data)
    try:
        topic = create_topic(broker.bootstrap, "orders", partitions=2)
        p = txn_producer(broker.bootstrap, txn_id)
        produce_txn(p, topic, [b"first-%d" % i for i in range(6)], 2, commit=True)
        p.begin_transaction()
        for i in range(6):
            p.produce(topic, value=b"open-%d" % i, partition=i % 2)
        assert p.flush(DEADLINE_S) == 0
        del p  # gone without ending its transaction (destroying a producer does not abort it)
    finally:
        broker.kill()

    broker = BrokerProcess(data)
    try:
        bootstrap = broker.bootstrap
        assert describe(bootstrap, txn_id).transaction_state == "Ongoing"
        assert sorted(values(read_all(bootstrap, topic, 2, "read_committed"))) == sorted(
            b"first-%d" % i for i in range(6))
        assert list_offset(bootstrap, topic, 0, 1) == 4  # held at the open transaction's first offset
        p = txn_producer(bootstrap, txn_id)  # a new instance aborts what the old one left open
        assert describe(bootstrap, txn_id).transaction_state == "Empty"
        assert list_offset(bootstrap, topic, 0, 1) == list_offset(bootstrap, topic, 0, 0) == 8
        assert len(read_all(bootstrap, topic, 2, "read_uncommitted")) == 12
        produce_txn(p, topic, [b"second-%d" % i for i in range(4)], 2, commit=True)
        p.close()
    finally:
        broker.kill()  # right after the commit was acknowledged

    broker = BrokerProcess(data)
    try:
        committed = [b"first-%d" % i for i in range(6)] + [b"second-%d" % i for i in range(4)]
        assert sorted(values(read_all(broker.bootstrap, topic, 2, "read_committed"))) == sorted(committed)
        assert describe(broker.bootstrap, txn_id).transaction_state == "CompleteCommit"
    finally:
        broker.kill()


# --- consume-transform-produce under repeated SIGKILL of the processing client --------------------------

WORKER = textwrap.dedent('''
    import sys
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap, source, sink, group, txn_id = sys.argv[1:6]
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 2})
    producer.init_transactions(30)  # fences the previous incarnation and aborts its open transaction
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": "worker",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "session.timeout.ms": 6000})
    consumer.subscribe([source])
    print("started", flush=True)
    while True:
        msgs = [m for m in consumer.consume(num_messages=7, timeout=0.5) if not m.error()]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, key=m.key(), value=b"T(" + m.value() + b")", partition=m.partition())
        producer.flush(30)
        print("produced", flush=True)
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        print("committed", flush=True)
''')


class Worker:
    """The consume-transform-produce script in its own process; its output lines go to a queue."""

    def __init__(self, script: Path, *args: str):
        self.proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put("")

    def wait_line(self, wanted: str, count: int = 1) -> None:
        seen = []
        while count:
            try:
                line = self.lines.get(timeout=DEADLINE_S * 2)
            except queue.Empty:
                raise AssertionError(f"worker printed no {wanted!r} in time: {seen[-20:]}") from None
            assert line, f"worker exited: {seen[-20:]}"
            seen.append(line)
            count -= line == wanted

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(DEADLINE_S)


@pytest.mark.slow
def test_consume_transform_produce_survives_repeated_client_kills(bootstrap, make_topic, tmp_path):
    source = make_topic(partitions=2)
    sink = make_topic(partitions=2)
    group = f"ctp-{uuid.uuid4().hex}"
    txn_id = f"ctp-{uuid.uuid4().hex}"
    plain = Producer({"bootstrap.servers": bootstrap})
    inputs = [b"in-%03d" % i for i in range(240)]
    for i, v in enumerate(inputs):
        plain.produce(source, key=b"k%d" % i, value=v, partition=i % 2)
    assert plain.flush(DEADLINE_S) == 0
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    args = (bootstrap, source, sink, group, txn_id)

    # kill it mid-transaction (records produced, not committed) and right after commits, in turn
    for kill_after in ["produced", "committed", "produced", "committed", "produced"]:
        worker = Worker(script, *args)
        try:
            worker.wait_line("committed")
            worker.wait_line(kill_after)
        finally:
            worker.kill()

    worker = Worker(script, *args)
    try:
        wait_until(lambda: len(read_all(bootstrap, sink, 2, "read_committed")) >= len(inputs),
                 "the sink to hold every input", timeout_s=DEADLINE_S * 4)
    finally:
        worker.kill()
    out = read_all(bootstrap, sink, 2, "read_committed")
    assert sorted(values(out)) == sorted(b"T(" + v + b")" for v in inputs)  # no loss, no duplicate
    # and per partition in input order: B is a function of A
    for partition in range(2):
        assert [v for p, _, _, v in out if p == partition] == [b"T(" + v + b")" for v in inputs[partition::2]]
