"""Transaction coordinator (KIP-98) and producer id allocation (Kafka's ``TransactionCoordinator`` / ``TransactionStateManager``).

State per ``transactional.id`` (:class:`TransactionMetadata`) lives in the internal topic
``__transaction_state`` (``transaction.state.log.num.partitions`` partitions, compacted; the
id's partition is ``abs(javaHashCode(id)) % partitions`` as in Kafka). Every state change is
appended there before it takes effect; :meth:`TransactionCoordinator.load` replays the topic
at start and finishes what a crash interrupted: a transaction found in PrepareCommit or
PrepareAbort gets its markers (again) and moves to CompleteCommit/CompleteAbort, so it is
never left half visible. An Ongoing transaction stays open until its producer ends it, a new
producer with the same id fences it (abort), or ``transaction.timeout.ms`` passes (abort).
The coordinator reaches ``__transaction_state`` only through a
:class:`~pyspark_kafka.broker.coordinator.partition_writer.PartitionWriter` (the broker's logs, or memory in
unit tests); in the replicated cluster it owns only the partitions this broker leads
(:meth:`TransactionCoordinator.load_partition` / :meth:`~TransactionCoordinator.unload_partition`).

State machine (Kafka's ``TransactionState``)::

    Empty ──AddPartitions/AddOffsets──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
                                           └──EndTxn(abort) / timeout / fence──▶ PrepareAbort ──markers──▶ CompleteAbort
    Complete* ──AddPartitions──▶ Ongoing;   Empty/Complete* ──InitProducerId──▶ Empty (epoch + 1)

Markers are control batches written to every partition of the transaction by the ``marker_writer``
(the broker's: WriteTxnMarkers to each partition's leader, ``cluster/coordinators.py``, Kafka's
``TransactionMarkerChannelManager``), after EndTxn is answered; a ``__consumer_offsets`` partition completes
the offsets staged by TxnOffsetCommit (:meth:`OffsetStore.complete_txn`). Once every marker is written the
writer calls :meth:`TransactionCoordinator.markers_written`, which records CompleteCommit / CompleteAbort.

Record format in ``__transaction_state`` (Kafka's ``TransactionLogKey`` v0 / ``TransactionLogValue`` v0,
big-endian, strings int16-length UTF-8)::

    key:   version int16 (0), transactional_id string
    value: version int16 (0), producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
           state int8, partitions [topic string, [partition int32]] (int32 counts),
           last_update_timestamp_ms int64, start_timestamp_ms int64

Producer ids come from :class:`ProducerIdManager`: blocks of 1000 reserved durably in
``DATA_DIR/producer-id-block`` before use, so an id is never handed out twice, even after a crash.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Awaitable, Callable, Iterable, Iterator

from kio.serial.errors import DecodeError
from kio.serial.readers import read_int8, read_int16, read_int32, read_int64, read_legacy_string
from kio.serial.writers import write_int8, write_int16, write_int32, write_int64, write_legacy_string

from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.coordinator.internal_topics import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    Cursor,
    TopicPartition,
    encode_fields,
    partition_for,
)
from pyspark_kafka.broker.coordinator.partition_writer import PartitionWriter
from pyspark_kafka.broker.log.checkpoint import atomic_write
from pyspark_kafka.broker.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
)
from pyspark_kafka.broker.log.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from pyspark_kafka.broker.log.records import encode_batch

log = get_logger(__name__)

MAX_EPOCH = 32767 - 1  # Kafka bumps to a new producer id before the epoch reaches Short.MAX_VALUE
PRODUCER_ID_BLOCK_SIZE = 1000
PRODUCER_ID_BLOCK_FILE = "producer-id-block"
KEY_VERSION = 0
VALUE_VERSION = 0
STATE_SEGMENT_BYTES = 104857600  # Kafka's transaction.state.log.segment.bytes default


class TxnState(enum.IntEnum):
    """Kafka's transaction states, with their ids in ``__transaction_state``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's DescribeTransactions / ListTransactions use (``CompleteCommit`` ...)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


STATE_BY_NAME = {s.kafka_name: s for s in TxnState}
PREPARE = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass
class TransactionMetadata:
    """One transactional id: its producer id/epoch, timeout (ms), state and partitions.

    ``last_producer_epoch`` is the epoch before the last bump by the coordinator (timeout or
    fencing), so a producer retrying with it is recognised (KIP-588); -1 when unknown.
    Timestamps are ms since the epoch; ``start_ms`` is -1 outside a transaction.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = NO_PRODUCER_EPOCH


# --- pure rules ---------------------------------------------------------------------------------


def check_timeout(timeout_ms: int, max_timeout_ms: int) -> None:
    """Raise InvalidTransactionTimeoutError unless ``0 < timeout_ms <= transaction.max.timeout.ms``."""
    if timeout_ms <= 0 or timeout_ms > max_timeout_ms:
        raise InvalidTransactionTimeoutError(
            f"transaction.timeout.ms={timeout_ms} is not in 1..{max_timeout_ms} (the broker's "
            "transaction.max.timeout.ms): lower the producer's transaction.timeout.ms or raise the broker limit"
        )


def check_producer(meta: TransactionMetadata | None, transactional_id: str, producer_id: int, epoch: int) -> TransactionMetadata:
    """The metadata of ``transactional_id`` if ``producer_id``/``epoch`` are its current ones.

    Raises InvalidProducerIdMappingError (unknown id or another producer id) or
    ProducerFencedError (another epoch: a newer producer took over), as Kafka's coordinator.
    """
    if meta is None or meta.producer_id != producer_id:
        raise InvalidProducerIdMappingError(
            f"producer id {producer_id} is not the current producer of transactional.id {transactional_id!r}: "
            "call init_transactions() first"
        )
    if meta.producer_epoch != epoch:
        raise ProducerFencedError(
            f"producer {producer_id} with epoch {epoch} was fenced: transactional.id {transactional_id!r} now has "
            f"epoch {meta.producer_epoch} (a newer producer instance called init_transactions(), or the "
            "coordinator aborted a timed-out transaction); close this producer"
        )
    return meta


def end_txn_transition(meta: TransactionMetadata, commit: bool) -> TxnState | None:
    """The Prepare state EndTxn moves ``meta`` to, or None when it is a retry of a finished EndTxn.

    Raises ConcurrentTransactionsError (the same end is still in progress) or
    InvalidTxnStateError (no transaction, or the opposite end was chosen), as Kafka.
    """
    state = meta.state
    if state == TxnState.ONGOING:
        return TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    if state == done:
        return None
    if state == preparing:
        raise ConcurrentTransactionsError(f"transaction of {meta.transactional_id!r} is still completing: retry")
    verb = "commit" if commit else "abort"
    raise InvalidTxnStateError(
        f"cannot {verb} transactional.id {meta.transactional_id!r} in state {state.kafka_name}: "
        "there is no open transaction to end that way"
    )


def bumped(meta: TransactionMetadata, new_producer_id: Callable[[], int]) -> tuple[int, int]:
    """``(producer id, epoch)`` after an epoch bump: epoch + 1, or a new producer id at epoch 0 when exhausted."""
    if meta.producer_epoch >= MAX_EPOCH:
        return new_producer_id(), 0
    return meta.producer_id, meta.producer_epoch + 1


# --- __transaction_state records ------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    """TransactionLogKey v0 bytes."""
    return encode_fields((write_int16, KEY_VERSION), (write_legacy_string, transactional_id))


def encode_value(meta: TransactionMetadata) -> bytes:
    """TransactionLogValue v0 bytes (see the module docstring)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    fields: list[tuple] = [
        (write_int16, VALUE_VERSION), (write_int64, meta.producer_id), (write_int16, meta.producer_epoch),
        (write_int32, meta.timeout_ms), (write_int8, int(meta.state)), (write_int32, len(by_topic)),
    ]
    for topic, partitions in by_topic.items():
        fields += [(write_legacy_string, topic), (write_int32, len(partitions))]
        fields += [(write_int32, p) for p in partitions]
    fields += [(write_int64, meta.last_update_ms), (write_int64, meta.start_ms)]
    return encode_fields(*fields)


def decode_key(data: bytes) -> str:
    """The transactional id of a TransactionLogKey; ValueError for an unknown version."""
    c = Cursor(data)
    version = c.read(read_int16)
    if version != KEY_VERSION:
        raise ValueError(f"unknown {TRANSACTION_STATE_TOPIC} key version {version}")
    return c.read(read_legacy_string)


def decode_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    """A TransactionLogValue v0 as :class:`TransactionMetadata`; ValueError for an unknown version."""
    c = Cursor(data)
    version = c.read(read_int16)
    if version != VALUE_VERSION:
        raise ValueError(f"unknown {TRANSACTION_STATE_TOPIC} value version {version}")
    producer_id, epoch, timeout_ms, state = c.read(read_int64), c.read(read_int16), c.read(read_int32), c.read(read_int8)
    partitions = set()
    for _ in range(c.read(read_int32)):
        topic = c.read(read_legacy_string)
        partitions.update((topic, c.read(read_int32)) for _ in range(c.read(read_int32)))
    last_update, start = c.read(read_int64), c.read(read_int64)
    return TransactionMetadata(transactional_id, producer_id, epoch, timeout_ms, TxnState(state), partitions,
                               start, last_update)


# --- producer ids --------------------------------------------------------------------------------


class ProducerIdManager:
    """Hands out producer ids from blocks reserved in ``DATA_DIR/producer-id-block`` (Kafka's ProducerIdManager).

    The file holds the first id of the next unreserved block; it is rewritten (atomically,
    fsynced) before any id of a new block is used, so ids are unique across restarts.
    """

    def __init__(self, data_dir: Path, block_size: int = PRODUCER_ID_BLOCK_SIZE):
        self.path = Path(data_dir) / PRODUCER_ID_BLOCK_FILE
        self.block_size = block_size
        self._next = 0
        self._block_end = 0
        try:
            self._block_end = self._next = int(self.path.read_text().strip())
        except FileNotFoundError:
            pass
        except ValueError as e:
            raise KafkaError(f"{self.path} is unreadable ({e}): restore it or remove it only with an empty data dir")

    def at_least(self, producer_id: int) -> None:
        """Never hand out ids at or below ``producer_id`` (one seen in the logs)."""
        if producer_id >= self._next:
            self._next = self._block_end = producer_id + 1

    def next_id(self) -> int:
        if self._next >= self._block_end:
            self._block_end = self._next + self.block_size
            atomic_write(self.path, f"{self._block_end}\n".encode())
        producer_id = self._next
        self._next += 1
        return producer_id


# --- the coordinator -------------------------------------------------------------------------------


class TransactionCoordinator:
    """Serves InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and
    ListTransactions for one broker (see the module docstring).

    ``TransactionCoordinator(writer, config, data_dir, groups, marker_writer)``: ``writer`` the
    :class:`PartitionWriter` of ``__transaction_state``, ``groups`` the group coordinator (whose offsets a
    transaction may commit), ``async marker_writer(meta, commit)`` writes the markers of a prepared transaction
    and then calls :meth:`markers_written` (run as a task of the event loop; :attr:`pending_markers` holds the
    tasks). Partitions are loaded as this broker comes to lead them (:meth:`load_partition`). Methods raise
    :class:`KafkaError` subclasses whose ``error_code`` goes into the response. Used from the
    broker's event loop thread only.
    """

    def __init__(self, writer: PartitionWriter, config: BrokerConfig, data_dir: Path, groups,
                 marker_writer: Callable[[TransactionMetadata, bool], Awaitable[None]]) -> None:
        self.writer = writer
        self.marker_writer = marker_writer
        #: the marker writers running (a task each, kept so none is collected before it ends)
        self.pending_markers: set[asyncio.Task] = set()
        self.config = config
        self.groups = groups
        self.producer_ids = ProducerIdManager(data_dir)
        self.transactions: dict[str, TransactionMetadata] = {}
        self._by_producer: dict[int, TransactionMetadata] = {}
        self.loaded = False
        #: ``__transaction_state`` partitions this broker coordinates: the partitions it leads and has loaded
        #: (:meth:`load_partition` / :meth:`unload_partition`, called by ``cluster/coordinators.py``)
        self.owned: set[int] = set()
        #: ``() -> int``, the partition count of ``__transaction_state``: the controller's (set by
        #: ``cluster/coordinators.py``); by default the local log's, else ``transaction.state.log.num.partitions``
        self.partition_count = self._local_partition_count
        #: ``(partition)`` called after each append to ``__transaction_state`` (set by ``cluster/coordinators.py``:
        #: the leader's high watermark moves; by default nothing)
        self.on_append = lambda partition: None

    def _local_partition_count(self) -> int:
        count = self.writer.partition_count(TRANSACTION_STATE_TOPIC)
        return count if count is not None else self.config.get_int("transaction.state.log.num.partitions")

    def ensure_loaded(self, now_ms: int) -> "TransactionCoordinator":
        """This coordinator, loaded (:meth:`load`) on the first call: the server calls it at start,
        tests that skip the server get it on first use. Raises KafkaError when the log cannot be read."""
        if not self.loaded:
            self.load(now_ms)
            self.loaded = True
        return self

    # -- loading ------------------------------------------------------------------------------
    def load(self, now_ms: int) -> None:
        """Nothing to replay at once: :meth:`load_partition` loads each ``__transaction_state`` partition this
        broker comes to lead (and completes the transactions it finds in Prepare*)."""

    def partition_of(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of ``transactional_id`` (Kafka's ``partitionFor``)."""
        return partition_for(transactional_id, self.partition_count())

    def owns(self, transactional_id: str) -> bool:
        """Whether this broker coordinates ``transactional_id``: it leads and has loaded the id's
        ``__transaction_state`` partition."""
        return self.partition_of(transactional_id) in self.owned

    def load_partition(self, partition: int, now_ms: int) -> None:
        """This broker became the leader of ``__transaction_state`` partition ``partition`` (Kafka's
        ``TransactionStateManager.loadTransactionsForTxnTopicPartition``): replay it; a transaction found in
        PrepareCommit / PrepareAbort gets its markers again and completes; an Ongoing one stays open until its
        producer ends it or ``transaction.timeout.ms`` aborts it."""
        self.unload_partition(partition)
        self.owned.add(partition)
        self._load_partitions([partition], now_ms)

    def unload_partition(self, partition: int) -> None:
        """This broker no longer leads ``__transaction_state`` partition ``partition``: forget its transactions
        (requests for them are answered NOT_COORDINATOR)."""
        self.owned.discard(partition)
        for txn_id in [t for t in self.transactions if self.partition_of(t) == partition]:
            meta = self.transactions.pop(txn_id)
            if self._by_producer.get(meta.producer_id) is meta:
                del self._by_producer[meta.producer_id]

    def _load_partitions(self, partitions, now_ms: int) -> None:
        loaded: dict[str, TransactionMetadata] = {}
        for partition in partitions:
            if not self.writer.has_log(TRANSACTION_STATE_TOPIC, partition):
                continue
            for key, value in self._read_records(partition):
                try:
                    txn_id = decode_key(key)
                    meta = None if value is None else decode_value(txn_id, value)
                except (ValueError, DecodeError, UnicodeDecodeError, TypeError) as e:
                    log.warning("skipping an unreadable %s record: %s", TRANSACTION_STATE_TOPIC, e)
                    continue
                if meta is None:
                    loaded.pop(txn_id, None)
                else:
                    loaded[txn_id] = meta
        self.transactions.update(loaded)
        self._by_producer.update({m.producer_id: m for m in loaded.values()})
        for meta in loaded.values():  # never hand out an id a loaded transaction holds
            self.producer_ids.at_least(meta.producer_id)
        for meta in list(loaded.values()):
            if meta.state in PREPARE:
                log.info("completing transaction of %r (%s) interrupted by a restart or a coordinator move",
                         meta.transactional_id, meta.state.kafka_name)
                self._complete(meta, meta.state == TxnState.PREPARE_COMMIT, now_ms)
        if loaded:
            log.info("loaded %d transactional ids from %s", len(loaded), TRANSACTION_STATE_TOPIC)

    def _read_records(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        for batch in self.writer.read(TRANSACTION_STATE_TOPIC, partition):
            for record in batch.records:
                yield record.key, record.value

    # -- persistence --------------------------------------------------------------------------
    def _state_partition(self, transactional_id: str) -> int:
        """The id's partition (the controller created the topic; only its leader writes here)."""
        return self.partition_of(transactional_id)

    def _persist(self, meta: TransactionMetadata, now_ms: int) -> None:
        """Append ``meta`` to ``__transaction_state``, then make it the current state."""
        meta.last_update_ms = now_ms
        batch = encode_batch([(encode_key(meta.transactional_id), encode_value(meta))], now_ms)
        self.writer.append(TRANSACTION_STATE_TOPIC, self._state_partition(meta.transactional_id), batch, now_ms)
        self.on_append(self.partition_of(meta.transactional_id))
        old = self.transactions.get(meta.transactional_id)
        if old is not None and old.producer_id != meta.producer_id:
            self._by_producer.pop(old.producer_id, None)
        self.transactions[meta.transactional_id] = meta
        self._by_producer[meta.producer_id] = meta

    # -- InitProducerId ---------------------------------------------------------------------------
    def init_producer_id(self, transactional_id: str | None, timeout_ms: int, expected_producer_id: int,
                         expected_epoch: int, now_ms: int) -> tuple[int, int]:
        """``(producer id, epoch)`` for a producer starting up (Kafka's ``handleInitProducerId``).

        Without a transactional id: a fresh producer id, epoch 0 (idempotent producer). With one:
        the id's producer id with its epoch bumped, which fences older instances; an open
        transaction of a previous instance is aborted first and ConcurrentTransactionsError asks
        the client to retry. Raises InvalidTransactionTimeoutError, ProducerFencedError (the
        expected producer id/epoch, KIP-360, is not the current one), ConcurrentTransactionsError.
        """
        if not transactional_id:
            return self.producer_ids.next_id(), 0
        check_timeout(timeout_ms, self.config.get_int("transaction.max.timeout.ms"))
        meta = self.transactions.get(transactional_id)
        if meta is None:
            meta = TransactionMetadata(transactional_id, self.producer_ids.next_id(), NO_PRODUCER_EPOCH, timeout_ms)
        elif expected_producer_id != NO_PRODUCER_ID and not (
            expected_producer_id == meta.producer_id
            and expected_epoch in (meta.producer_epoch, meta.last_producer_epoch)
        ):
            raise ProducerFencedError(
                f"producer {expected_producer_id} epoch {expected_epoch} is no longer the producer of "
                f"transactional.id {transactional_id!r} (now {meta.producer_id} epoch {meta.producer_epoch})"
            )
        if meta.state in PREPARE:
            raise ConcurrentTransactionsError(f"the last transaction of {transactional_id!r} is completing: retry")
        if meta.state == TxnState.ONGOING:
            log.info("fencing the previous producer of %r: aborting its open transaction", transactional_id)
            self._abort_with_bump(meta, now_ms)
            raise ConcurrentTransactionsError(
                f"aborted the open transaction of a previous producer with transactional.id {transactional_id!r}: retry"
            )
        producer_id, epoch = bumped(meta, self.producer_ids.next_id)
        updated = replace(meta, producer_id=producer_id, producer_epoch=epoch, timeout_ms=timeout_ms,
                          state=TxnState.EMPTY, partitions=set(), start_ms=-1,
                          last_producer_epoch=meta.producer_epoch if producer_id == meta.producer_id else NO_PRODUCER_EPOCH)
        self._persist(updated, now_ms)
        return producer_id, epoch

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------
    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[TopicPartition], now_ms: int) -> None:
        """Add ``partitions`` to the producer's transaction, starting one if needed (state Ongoing).

        Raises InvalidProducerIdMappingError, ProducerFencedError, ConcurrentTransactionsError.
        """
        meta = check_producer(self.transactions.get(transactional_id), transactional_id, producer_id, epoch)
        if meta.state in PREPARE:
            raise ConcurrentTransactionsError(f"the last transaction of {transactional_id!r} is completing: retry")
        partitions = set(partitions)
        if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
            return
        start = meta.start_ms if meta.state == TxnState.ONGOING else now_ms
        new_partitions = (meta.partitions if meta.state == TxnState.ONGOING else set()) | partitions
        self._persist(replace(meta, state=TxnState.ONGOING, partitions=new_partitions, start_ms=start), now_ms)

    def offsets_partition(self, group_id: str) -> TopicPartition:
        """The ``__consumer_offsets`` partition of ``group_id`` (what AddOffsetsToTxn adds)."""
        return OFFSETS_TOPIC, self.groups.ensure_loaded().offsets.partition_of(group_id)

    # -- EndTxn ---------------------------------------------------------------------------------
    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool, now_ms: int) -> None:
        """Commit or abort the open transaction: PrepareX, markers on every partition, CompleteX.

        A retry of an EndTxn that already completed succeeds. Raises InvalidProducerIdMappingError,
        ProducerFencedError, ConcurrentTransactionsError, InvalidTxnStateError.
        """
        meta = check_producer(self.transactions.get(transactional_id), transactional_id, producer_id, epoch)
        prepare = end_txn_transition(meta, commit)
        if prepare is None:
            return
        prepared = replace(meta, state=prepare)
        self._persist(prepared, now_ms)
        self._complete(prepared, commit, now_ms)

    def _abort_with_bump(self, meta: TransactionMetadata, now_ms: int) -> None:
        """Abort an Ongoing transaction with the epoch bumped, fencing its producer (timeout, new instance)."""
        producer_id, epoch = meta.producer_id, min(meta.producer_epoch + 1, MAX_EPOCH + 1)
        prepared = replace(meta, producer_id=producer_id, producer_epoch=epoch, state=TxnState.PREPARE_ABORT,
                           last_producer_epoch=meta.producer_epoch)
        self._persist(prepared, now_ms)
        self._complete(prepared, False, now_ms)

    def _complete(self, meta: TransactionMetadata, commit: bool, now_ms: int) -> None:
        """Start writing the markers of prepared ``meta`` (a task running ``marker_writer``; Kafka's
        ``TransactionMarkerChannelManager``); :meth:`markers_written` records CompleteCommit / CompleteAbort."""
        task = asyncio.get_running_loop().create_task(self.marker_writer(meta, commit))
        self.pending_markers.add(task)
        task.add_done_callback(self._marker_task_done)

    def _marker_task_done(self, task: asyncio.Task) -> None:
        self.pending_markers.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("writing transaction markers failed: %s (the transaction stays prepared until its "
                      "partition's next leader completes it)", task.exception())

    def markers_written(self, meta: TransactionMetadata, commit: bool, now_ms: int) -> bool:
        """Every marker of prepared ``meta`` is written; record CompleteCommit/CompleteAbort
        unless the transaction moved on meanwhile (another coordinator, a fence). True when recorded."""
        current = self.transactions.get(meta.transactional_id)
        if current is not meta or not self.owns(meta.transactional_id):
            return False
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        self._persist(replace(meta, state=done, partitions=set(), start_ms=-1), now_ms)
        return True

    # -- timeouts -------------------------------------------------------------------------------
    def abort_timed_out(self, now_ms: int) -> list[str]:
        """Abort (with an epoch bump) every Ongoing transaction older than its ``transaction.timeout.ms``.

        Kafka's ``abortTimedOutTransactions``; returns the transactional ids aborted.
        """
        aborted = []
        for meta in list(self.transactions.values()):
            if meta.state == TxnState.ONGOING and now_ms - meta.start_ms > meta.timeout_ms:
                log.info("aborting transaction of %r: open for %d ms, transaction.timeout.ms=%d",
                         meta.transactional_id, now_ms - meta.start_ms, meta.timeout_ms)
                self._abort_with_bump(meta, now_ms)
                aborted.append(meta.transactional_id)
        return aborted

    # -- produce verification --------------------------------------------------------------------
    def check_transactional_produce(self, producer_id: int, epoch: int, topic: str, partition: int) -> None:
        """Refuse a transactional batch whose partition is not in its producer's open transaction.

        Kafka 3.6+ verifies this too (KIP-890 part 1): it keeps a late write of a fenced or
        finished producer from opening a transaction nobody will end (a "hanging" transaction
        that would stall read_committed consumers). Raises InvalidProducerEpochError or
        InvalidTxnStateError.
        """
        meta = self._by_producer.get(producer_id)
        if meta is None:
            # the producer's coordinator may be another broker; the partition's log still
            # fences stale epochs (docs/replication.md: KIP-890 verification only on the coordinator's broker)
            return
        if meta is not None and meta.producer_epoch != epoch:
            raise InvalidProducerEpochError(
                f"transactional produce by producer {producer_id} with epoch {epoch} to {topic}-{partition}: "
                f"the current epoch is {meta.producer_epoch} (the producer was fenced or its transaction aborted)"
            )
        if meta is None or meta.state != TxnState.ONGOING or (topic, partition) not in meta.partitions:
            raise InvalidTxnStateError(
                f"transactional produce by producer {producer_id} to {topic}-{partition}, which is not part of an "
                "open transaction of that producer: add the partition with AddPartitionsToTxn first"
            )

    # -- describe / list ---------------------------------------------------------------------------
    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.transactions.get(transactional_id)

    def list(self, states: set[str], producer_ids: set[int], min_duration_ms: int, now_ms: int) -> list[TransactionMetadata]:
        """Transactions matching all filters (empty filter = any; ``min_duration_ms`` < 0 = any)."""
        return [
            m for m in self.transactions.values()
            if (not states or m.state.kafka_name in states)
            and (not producer_ids or m.producer_id in producer_ids)
            and (min_duration_ms < 0 or (m.state == TxnState.ONGOING and now_ms - m.start_ms > min_duration_ms))
        ]

