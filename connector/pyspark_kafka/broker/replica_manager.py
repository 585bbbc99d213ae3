"""The storage seam between the API handlers and the partition logs (Kafka's ``ReplicaManager``).

Handlers map requests onto :class:`ReplicaManager` and its results back onto responses; they
never touch a :class:`~pyspark_kafka.broker.log.partition_log.PartitionLog`. The replica manager
owns the :class:`~pyspark_kafka.broker.log.manager.LogManager` and knows nothing of the wire
format: it takes topic names, partition numbers, record bytes and offsets, returns plain values
(:class:`~pyspark_kafka.broker.log.partition_log.AppendResult`, :class:`LogReadResult`) and
raises :mod:`pyspark_kafka.broker.errors` exceptions carrying their Kafka error code.

Operations (Kafka's names in parentheses): :meth:`~ReplicaManager.append_records`
(``appendRecords``), :meth:`~ReplicaManager.read_records` (``readFromLog``),
:meth:`~ReplicaManager.offset_for_timestamp` (``fetchOffsetForTimestamp``),
:meth:`~ReplicaManager.append_marker` (WriteTxnMarkers), :meth:`~ReplicaManager.delete_records`
(``deleteRecords``), :meth:`~ReplicaManager.active_producers` (``activeProducerState``),
:meth:`~ReplicaManager.partition_sizes` (``describeLogDirs``),
:meth:`~ReplicaManager.end_offset_for_epoch` (``lastOffsetForLeaderEpoch``), topic auto-creation and topic-id
lookup, and the append notifications that wake long-polling fetches (``DelayedFetch``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.topic_config import validate_topic_name
from pyspark_kafka.broker.coordinator.internal_topics import INTERNAL_TOPICS
from pyspark_kafka.broker.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    FencedLeaderEpochError,
    KafkaError,
    NotEnoughReplicasAfterAppendError,
    OffsetNotAvailableError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    UnknownTopicIdError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from pyspark_kafka.broker.log.manager import LogManager
from pyspark_kafka.broker.log.offset_targets import (
    DELETE_TO_HIGH_WATERMARK,
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from pyspark_kafka.broker.log.partition_log import AppendResult, FetchSlice, PartitionLog
from pyspark_kafka.broker.log.producer_state import AbortedTxn, ProducerEntry
from pyspark_kafka.broker.log.record_batch import BATCH_HEADER_SIZE, parse_header
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger("pyspark_kafka.broker")



TransactionVerifier = Callable[[int, int, str, int], None]
"""``verify(producer_id, producer_epoch, topic, partition)``: raises KafkaError when a transactional
batch may not be appended (see ``TransactionCoordinator.check_transactional_produce``)."""


class LogReadResult(NamedTuple):
    """One partition's answer to a fetch (Kafka's ``LogReadResult``), for :meth:`ReplicaManager.read_records`.

    ``records`` is a :class:`FetchSlice` (file path, byte position, byte length: sent with sendfile)
    or ``b""`` when nothing was read. The offsets are -1 when the partition does not exist.
    ``aborted_transactions`` lists the aborted transactions overlapping the slice (read_committed only).
    """

    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: FetchSlice | bytes = b""
    aborted_transactions: Sequence[AbortedTxn] = ()

    @classmethod
    def of(cls, plog: PartitionLog, error_code: ErrorCode, records: FetchSlice | bytes = b"",
           aborted: Sequence[AbortedTxn] = ()) -> "LogReadResult":
        """The result carrying ``plog``'s high watermark, last stable offset and log start offset."""
        return cls(error_code, plog.high_watermark, plog.last_stable_offset, plog.log_start_offset, records, aborted)


class ReplicaManager:
    """The broker's partitions: appends, reads, offset lookups and append notifications.

    ``ReplicaManager(data_dir, config, verify_transaction)``: ``logs`` is the
    :class:`LogManager` under ``data_dir`` (call ``logs.load()`` before serving; admin APIs and
    the coordinators' internal topics use it as the topic catalog); ``verify_transaction``
    checks transactional batches before they are appended (the transaction coordinator).
    Used from the broker's event loop thread only.

    ``partitions`` holds the :class:`~pyspark_kafka.broker.cluster.partition.Partition` of every replica this
    broker hosts (made by the broker lifecycle from the metadata image, also on a one-node combined cluster):
    appends and reads go to the leader only (NOT_LEADER_OR_FOLLOWER elsewhere, leader epochs checked, KIP-320),
    follower fetches advance the followers' offsets and the high watermark, and acks=all appends wait
    (:meth:`wait_for_replication`, Kafka's ``DelayedProduce``) until the ISR has them (docs/replication.md). With
    an ISR of one the high watermark moves at the append (``Partition.maybe_increment_hw``) and acks=all finds it
    there at once.
    """

    def __init__(self, data_dir: Path, config: BrokerConfig, verify_transaction: TransactionVerifier) -> None:
        self.config = config
        self.logs = LogManager(data_dir, config)
        self.verify_transaction = verify_transaction
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}
        self.node_id = config.get_int("node.id")
        self.shutting_down = False  # set by the broker lifecycle's controlled shutdown
        self.partitions: dict[tuple[str, int], "Partition"] = {}
        #: (topic, partition) -> an event set once this broker's election as its leader is applied (the broker
        #: lifecycle writes the new leader epoch's checkpoint first, off the event loop); see wait_for_elections
        self.electing: dict[tuple[str, int], asyncio.Event] = {}
        # The broker's MetadataCache (set by the Broker): it tells a partition that exists
        # on other brokers (NOT_LEADER_OR_FOLLOWER) from one that does not exist (UNKNOWN_TOPIC_OR_PARTITION)
        self.metadata_cache: "MetadataCache | None" = None

    # --- replication -----------------------------------------------------------------------------

    def leader_partition(self, topic: str, partition: int, current_leader_epoch: int = -1) -> "Partition":
        """The partition this broker leads.

        Raises FencedLeaderEpochError / UnknownLeaderEpochError when ``current_leader_epoch`` (-1: not given) is
        older / newer than the partition's current leader epoch (KIP-320), checked first, on a follower too (Kafka's
        ``Partition.getLocalLog``: a client with a stale epoch learns that its metadata is stale); then
        NotLeaderOrFollowerError when this broker does not lead it (the client refreshes its metadata).
        A partition with no replica here raises :meth:`not_hosted`'s error.
        """
        part = self.partitions.get((topic, partition))
        if part is None:
            raise self.not_hosted(topic, partition)
        self._check_epoch(part, topic, partition, current_leader_epoch)
        if not part.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.node_id} is not the leader of {topic}-{partition} "
                                           f"(leader {part.state.leader}): refresh metadata")
        return part

    async def wait_for_elections(self, keys: Iterable[tuple[str, int]], timeout_s: float) -> None:
        """Wait, at most ``timeout_s`` seconds, until no ``(topic, partition)`` of ``keys`` has an election of this
        broker in progress (:attr:`electing`); nothing to wait for in the common case.

        Kafka's ``Partition.makeLeader`` holds the partition's lock while it writes the new leader epoch's
        checkpoint, and a produce or fetch takes the same lock: one sent meanwhile waits, then finds the leader.
        Here the election's checkpoint is written in a worker thread (the broker lifecycle's
        ``_write_elections``); Produce and Fetch wait for it the same way instead of answering
        NOT_LEADER_OR_FOLLOWER, which a client retries only after its backoff (librdkafka: 100 ms)."""
        if not self.electing:
            return
        events = {self.electing[k] for k in keys if k in self.electing}
        if events:
            try:
                await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), max(0.0, timeout_s))
            except asyncio.TimeoutError:
                pass  # the request is answered as the partition is now (NOT_LEADER_OR_FOLLOWER: retriable)

    def not_hosted(self, topic: str, partition: int) -> KafkaError:
        """The error (returned, not raised) for ``topic``/``partition`` when this broker holds no replica of it.

        Kafka's ``ReplicaManager.getPartitionOrError``: NotLeaderOrFollowerError when the cluster's metadata
        (:attr:`metadata_cache`) has the partition, so the client refreshes its metadata and finds the
        replicas elsewhere; else UnknownTopicOrPartitionError. Apache Kafka 4.4.0 answers Fetch (by name or
        topic id), Produce and ListOffsets this way on a broker with no replica of the partition.
        """
        cache = self.metadata_cache
        if cache is not None and cache.contains_partition(topic, partition):
            return NotLeaderOrFollowerError(f"broker {self.node_id} holds no replica of {topic}-{partition}: "
                                            "refresh metadata")
        return UnknownTopicOrPartitionError(f"this broker has no partition {topic}-{partition}")

    @staticmethod
    def _check_epoch(part, topic: str, partition: int, current_leader_epoch: int) -> None:
        epoch = part.state.leader_epoch
        if current_leader_epoch != -1 and current_leader_epoch < epoch:
            raise FencedLeaderEpochError(f"the current leader epoch of {topic}-{partition} is {epoch}, newer than "
                                         f"the request's {current_leader_epoch}: refresh metadata")
        if current_leader_epoch > epoch:
            raise UnknownLeaderEpochError(f"the current leader epoch of {topic}-{partition} is {epoch}, older than "
                                          f"the request's {current_leader_epoch}")

    def check_min_isr(self, part, topic: str, partition: int, after_append: bool = False) -> None:
        """acks=all: NotEnoughReplicasError (before the append) or NotEnoughReplicasAfterAppendError when the ISR
        is smaller than the topic's ``min.insync.replicas`` (Kafka's ``Partition.appendRecordsToLeader`` and
        ``checkEnoughReplicasReachOffset``)."""
        min_isr = self._min_isr(topic)
        if len(part.isr) < min_isr:
            cls = NotEnoughReplicasAfterAppendError if after_append else NotEnoughReplicasError
            raise cls(f"the ISR {list(part.isr)} of {topic}-{partition} is smaller than min.insync.replicas="
                      f"{min_isr}{' after the append' if after_append else ''}: wait for followers to catch up or "
                      "lower min.insync.replicas")

    def _min_isr(self, topic: str) -> int:
        info = self.logs.topic(topic)
        value = (info.configs if info else {}).get("min.insync.replicas")
        return int(value) if value is not None else self.config.get_int("min.insync.replicas")

    async def wait_for_acks(self, appended: Iterable[tuple[str, int]], acks: int,
                            timeout_ms: int) -> dict[tuple[str, int], KafkaError]:
        """After appends to the ``(topic, partition)`` keys of ``appended``: wait as ``acks`` asks (Kafka's
        ``DelayedProduce``) and return the error of each partition that did not get there.

        Nothing to wait for with acks 0 or 1. With acks=all (-1) each partition waits (:meth:`wait_for_replication`, at most ``timeout_ms``
        ms) until its high watermark reaches its log end offset as it is when the wait starts.
        """
        if acks != -1:
            return {}
        errors: dict[tuple[str, int], KafkaError] = {}
        waiting: list[tuple[str, int, int]] = []
        for topic, partition in appended:
            # first without waiting (Kafka's DelayedProduce: tryCompleteElseWatch completes at once when it can): a
            # partition whose ISR is only this leader has its high watermark at the log end already, and an await
            # per partition would cost event loop turns
            plog = self.logs.get_log(topic, partition)
            required = plog.log_end_offset if plog is not None else 0
            try:
                if not self._replicated_to(topic, partition, required):
                    waiting.append((topic, partition, required))
            except KafkaError as exc:
                errors[(topic, partition)] = exc

        async def one(topic: str, partition: int, required: int) -> None:
            try:
                await self.wait_for_replication(topic, partition, required, timeout_ms)
            except KafkaError as exc:
                errors[(topic, partition)] = exc

        if waiting:
            await asyncio.gather(*(one(*w) for w in waiting))
        return errors

    def _replicated_to(self, topic: str, partition: int, required_offset: int) -> bool:
        """Whether the high watermark of ``topic``/``partition`` reached ``required_offset`` (then the ISR is checked
        against ``min.insync.replicas``). Raises NotLeaderOrFollowerError when this broker does not lead it (or shuts
        down), NotEnoughReplicasAfterAppendError when the ISR is too small once reached (Kafka's
        ``Partition.checkEnoughReplicasReachOffset``)."""
        part = self.partitions.get((topic, partition))
        if part is None or not part.is_leader or self.shutting_down:
            raise NotLeaderOrFollowerError(f"broker {self.node_id} lost the leadership of {topic}-{partition} "
                                           "before the ISR had the records: retry on the new leader")
        if part.log.high_watermark >= required_offset:
            self.check_min_isr(part, topic, partition, after_append=True)
            return True
        return False

    async def wait_for_replication(self, topic: str, partition: int, required_offset: int, timeout_ms: int) -> None:
        """acks=all: wait until the high watermark reaches ``required_offset`` (the appended records' next
        offset) or ``timeout_ms`` passes (Kafka's ``DelayedProduce``).

        Raises RequestTimedOutError on timeout, NotLeaderOrFollowerError when leadership is lost meanwhile,
        NotEnoughReplicasAfterAppendError when the ISR is below ``min.insync.replicas`` once reached.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, timeout_ms) / 1000
        while True:
            part = self.partitions.get((topic, partition))
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # Python 3.11's wait_for may have swallowed it
                raise asyncio.CancelledError()
            if self._replicated_to(topic, partition, required_offset):
                return
            left = deadline - loop.time()
            if left <= 0:
                raise RequestTimedOutError(
                    f"the ISR {list(part.isr)} of {topic}-{partition} did not reach offset {required_offset} within "
                    f"the request timeout of {timeout_ms} ms (high watermark {part.log.high_watermark})")
            await self.wait_for_append([(topic, partition)], left)

    # --- produce ------------------------------------------------------------------------------

    def append_records(self, topic: str | None, partition: int, records, acks: int, now_ms: int) -> AppendResult:
        """Append a client's record set (bytes or memoryview of whole batches) to ``topic``/``partition``.

        Kafka's ``ReplicaManager.appendRecords`` for one partition, in its order of checks: ``acks``
        must be 0, 1 or -1 (InvalidRequiredAcksError); ``topic`` None (an unknown topic id) raises
        UnknownTopicIdError; ``records`` None raises CorruptRecordError; internal topics are refused
        (InvalidTopicError, "Cannot append to internal topic"); a partition this broker does not lead raises
        :meth:`leader_partition`'s error (UnknownTopicOrPartitionError, NotLeaderOrFollowerError; Kafka creates
        topics only from a Metadata request, never from Produce); a transactional batch goes through
        ``verify_transaction``; then the log validates and appends (idempotence, flush policy).
        Waiting fetches of the partition are woken. Returns the AppendResult (base offset, log
        append time in ms or -1, log start offset); acks=all waits in :meth:`wait_for_acks`.
        """
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks={acks} is not 0, 1 or -1")
        if topic is None:
            raise UnknownTopicIdError("unknown topic id")
        if records is None:
            raise CorruptRecordError("produce request without records")
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"cannot append to internal topic {topic}: only the broker's coordinators write it")
        validate_topic_name(topic)
        part = self.leader_partition(topic, partition)
        plog = part.log
        if acks == -1:
            self.check_min_isr(part, topic, partition)
        if len(records) >= BATCH_HEADER_SIZE:  # a shorter one: the log's validation reports it
            header = parse_header(records)
            if header.is_transactional and not header.is_control:
                self.verify_transaction(header.producer_id, header.producer_epoch, topic, partition)
        result = plog.append(records, now_ms=now_ms, from_client=True)
        part.maybe_increment_hw()
        self.notify_append(topic, partition)
        return result

    def append_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                      now_ms: int, coordinator_epoch: int = 0) -> bool:
        """Write a transaction marker (COMMIT or ABORT control batch) and wake the partition's fetches.

        Returns False when the partition no longer exists (nothing written). Raises KafkaError
        from the log (e.g. InvalidProducerEpochError for a stale epoch), NotLeaderOrFollowerError when this
        broker does not lead the partition.
        """
        plog = self.logs.get_log(topic, partition)
        if plog is None:
            return False
        part = self.leader_partition(topic, partition)  # never into a follower's copy (it would diverge)
        plog.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, now_ms=now_ms)
        part.maybe_increment_hw()
        self.notify_append(topic, partition)
        return True

    # --- fetch --------------------------------------------------------------------------------

    def read_records(self, topic: str | None, partition: int, fetch_offset: int, max_bytes: int, *,
                     read_committed: bool, min_one_message: bool, replica_id: int = -1,
                     current_leader_epoch: int = -1) -> LogReadResult:
        """Whole batches of ``topic``/``partition`` from the one holding ``fetch_offset``, at most ``max_bytes``.

        Kafka's ``readFromLog`` for one partition: the slice ends below the high watermark, or
        below the last stable offset when ``read_committed`` (then with the aborted transactions
        it overlaps, Kafka's ``collectAbortedTransactions``); ``min_one_message`` returns a first
        batch larger than ``max_bytes`` whole (KIP-74). Errors are in the result, not raised:
        UNKNOWN_TOPIC_ID for ``topic`` None, :meth:`not_hosted`'s code (UNKNOWN_TOPIC_OR_PARTITION, or
        NOT_LEADER_OR_FOLLOWER for a partition of the cluster with no replica here), OFFSET_OUT_OF_RANGE, and
        CORRUPT_MESSAGE when the scan for the fetch offset meets a batch length below the minimum
        (logged at ERROR, as Kafka's ``ReplicaManager.readFromLog`` does for its ``CorruptRecordException``).
        Damaged batches are otherwise served as stored (see :meth:`LogSegment.read`).
        """
        plog = self.logs.get_log(topic, partition) if topic is not None else None
        if plog is None:
            code = ErrorCode.unknown_topic_id if topic is None else self.not_hosted(topic, partition).error_code
            return LogReadResult(code, -1, -1, -1)
        upper = plog.last_stable_offset if read_committed else plog.high_watermark
        try:
            part = self.leader_partition(topic, partition, current_leader_epoch)
        except KafkaError as exc:
            return LogReadResult(exc.error_code, -1, -1, -1)
        if replica_id >= 0:  # a follower's fetch: its fetch offset is its LEO; it reads up to ours
            from pyspark_kafka.broker.cluster.partition import mono_ms
            if part.update_follower(replica_id, fetch_offset, mono_ms()):
                self.notify_append(topic, partition)
            upper = plog.log_end_offset
        try:
            fetched = plog.read(fetch_offset, max_bytes, max_offset=upper, min_one_message=min_one_message)
        except KafkaError as exc:
            if isinstance(exc, CorruptRecordError):  # Kafka's readFromLog logs this at ERROR and answers the error
                log.error("Error processing fetch with max size %d from %s on partition %s-%d at offset %d: %s",
                          max_bytes, f"replica {replica_id}" if replica_id >= 0 else "consumer", topic, partition,
                          fetch_offset, exc)
            return LogReadResult.of(plog, exc.error_code)
        aborted = plog.aborted_transactions(fetch_offset, upper) if read_committed and fetched.length else ()
        return LogReadResult.of(plog, ErrorCode.none, fetched, aborted)

    # --- list offsets -----------------------------------------------------------------------

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's current leader epoch (0 when this broker hosts no replica of it)."""
        part = self.partitions.get((topic, partition))
        return 0 if part is None else part.state.leader_epoch

    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int, read_committed: bool,
                             current_leader_epoch: int = -1) -> tuple[int, int]:
        """``(offset, timestamp)`` answering ListOffsets ``timestamp`` (ms, or a special target) for one partition.

        Kafka's ``fetchOffsetForTimestamp``: LATEST (-1) → high watermark, or the last stable
        offset when ``read_committed``; EARLIEST (-2) and EARLIEST_LOCAL (-4) → log start offset;
        MAX_TIMESTAMP (-3) → the record with the largest timestamp; ``timestamp`` >= 0 → the first
        offset whose timestamp is >= it. The timestamp is -1 for LATEST/EARLIEST; ``(-1, -1)``
        when no record matches. Raises UnknownTopicOrPartitionError, or InvalidRequestError for
        another negative target.
        """
        plog = self._partition_log(topic, partition)
        part = self.leader_partition(topic, partition, current_leader_epoch)
        if timestamp == LATEST_TIMESTAMP:
            epoch_start = part.epochs.end_offset_for(part.state.leader_epoch - 1, plog.log_end_offset)[1]
            if plog.high_watermark < epoch_start:
                # Kafka's Partition.fetchOffsetForTimestamp: a new leader whose high watermark has not yet
                # reached the start of its epoch might answer an offset below what the old leader answered
                raise OffsetNotAvailableError(
                    f"the new leader of {topic}-{partition} has not yet caught its high watermark up to the start "
                    f"of leader epoch {part.state.leader_epoch} (offset {epoch_start}): retry")
        if timestamp == LATEST_TIMESTAMP:
            return (plog.last_stable_offset if read_committed else plog.high_watermark), -1
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return plog.log_start_offset, -1
        if timestamp == MAX_TIMESTAMP:
            found = plog.max_timestamp_offset()
        elif timestamp >= 0:
            found = plog.offset_for_timestamp(timestamp)
        else:
            raise InvalidRequestError(f"timestamp {timestamp} is not a ListOffsets target")
        return (-1, -1) if found is None else found

    # --- delete records -----------------------------------------------------------------------

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Move ``topic``/``partition``'s log start offset up to ``offset`` (-1: the high watermark); return it.

        Kafka's ``deleteRecordsOnLocalLog`` and ``Partition.deleteRecordsOnLeader``, in their order
        of checks: internal topics are refused (InvalidTopicError); UnknownTopicOrPartitionError;
        a topic whose ``cleanup.policy`` lacks ``delete`` raises PolicyViolationError; an offset
        that is negative (other than -1) or past the high watermark raises OffsetOutOfRangeError.
        An offset at or below the current log start offset changes nothing. Closed segments wholly
        below the new start are deleted and ``log-start-offset-checkpoint`` is rewritten before
        this returns, so the start survives a restart. Returns the low watermark (the log start offset).
        """
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"Cannot delete records of internal topic {topic}")
        plog = self._partition_log(topic, partition)
        if not plog.config.deletes:
            raise PolicyViolationError(
                f"Records of partition {topic}-{partition} can not be deleted due to the configured policy "
                f"(cleanup.policy={plog.config.cleanup_policy}: add delete to delete records)")
        target = plog.high_watermark if offset == DELETE_TO_HIGH_WATERMARK else offset
        if target < 0:
            raise OffsetOutOfRangeError(f"The offset {target} for partition {topic}-{partition} is not valid")
        if plog.increment_log_start_offset(target):
            self.logs.checkpoint()
            log.info("deleted records of %s-%d below offset %d", topic, partition, target)
        return plog.log_start_offset

    # --- describe (DescribeProducers, DescribeLogDirs, OffsetForLeaderEpoch) -----------------

    @property
    def log_dir(self) -> Path:
        """The data directory holding every partition log (DescribeLogDirs' one log dir)."""
        return self.logs.data_dir

    def log_start_offset(self, topic: str | None, partition: int) -> int:
        """The partition's log start offset; -1 when this broker has no such partition."""
        plog = self.logs.get_log(topic, partition) if topic is not None else None
        return -1 if plog is None else plog.log_start_offset

    def _partition_log(self, topic: str, partition: int) -> PartitionLog:
        """The log of ``topic``/``partition``; when this broker has none, raises :meth:`not_hosted`'s error
        (NOT_LEADER_OR_FOLLOWER for a partition of the cluster, else UNKNOWN_TOPIC_OR_PARTITION), as Kafka's
        ``getPartitionOrException`` does for ListOffsets, DeleteRecords, DescribeProducers and OffsetForLeaderEpoch."""
        plog = self.logs.get_log(topic, partition)
        if plog is None:
            raise self.not_hosted(topic, partition)
        return plog

    def active_producers(self, topic: str, partition: int) -> list[ProducerEntry]:
        """The producers ``topic``/``partition`` keeps state for (Kafka's ``activeProducerState``), by producer id.

        Raises UnknownTopicOrPartitionError.
        """
        state = self._partition_log(topic, partition).producer_state
        return [state.producers[pid] for pid in sorted(state.producers)]

    def partition_sizes(self) -> Iterator[tuple[str, int, int]]:
        """``(topic, partition, bytes of its .log files)`` for every open partition (DescribeLogDirs)."""
        for (topic, partition), plog in sorted(self.logs.open_partitions().items()):
            yield topic, partition, plog.size_in_bytes()

    def end_offset_for_epoch(self, topic: str, partition: int, current_leader_epoch: int,
                             leader_epoch: int) -> tuple[int, int]:
        """``(leader epoch, end offset)`` answering OffsetForLeaderEpoch for one partition this broker leads.

        Kafka's ``Partition.lastOffsetForLeaderEpoch``: UnknownTopicOrPartitionError first; then
        :meth:`leader_partition`'s checks of ``current_leader_epoch`` (-1: not given; lower raises
        FencedLeaderEpochError, higher UnknownLeaderEpochError) and of the leadership; then the partition's
        leader-epoch cache answers (KIP-101/279; ``(-1, -1)`` for an epoch newer than every known one).
        """
        plog = self._partition_log(topic, partition)
        part = self.leader_partition(topic, partition, current_leader_epoch)
        return part.epochs.end_offset_for(leader_epoch, plog.log_end_offset)

    # --- append notifications (Fetch long poll) -------------------------------------------

    def notify_append(self, topic: str, partition: int) -> None:
        """Wake the fetches waiting on ``topic``/``partition`` (called after an append)."""
        for fut in self._waiters.pop((topic, partition), ()):
            if not fut.done():
                fut.set_result(None)

    def waiting_fetches(self, topic: str, partition: int) -> int:
        """How many fetches are parked waiting for an append to ``topic``/``partition`` (for tests)."""
        return len(self._waiters.get((topic, partition), ()))

    async def wait_for_append(self, keys: Iterable[tuple[str, int]], timeout_s: float) -> bool:
        """Wait until one of ``keys`` (topic, partition) gets an append or ``timeout_s`` seconds pass; True if woken."""
        fut = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._waiters.setdefault(key, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            for key in keys:
                waiting = self._waiters.get(key)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[key]
