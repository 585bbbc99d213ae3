"""The executor's columnar read path: one offset range fetched as raw record batches and decoded to Arrow.

:func:`read_range_columnar` reads ``[from_offset, until_offset)`` of one partition with a pooled
:class:`~pyspark_kafka.kafka.fetch_client.FetchClient`: Fetch requests to the partition's leader,
the next one sent before the current answer is decoded (the broker reads while the worker
decodes), each answer's batches selected and decoded by :mod:`pyspark_kafka.read.record_decoder`,
the rows yielded as ``pyarrow.RecordBatch`` es of the Kafka source schema.

It keeps the consumer path's rules (:mod:`pyspark_kafka.read.partition_reader`): records below the
range's start (inside the first batch) and at or after its end are cut; control batches and, with
``kafka.isolation.level=read_committed``, aborted transactions are skipped; a range whose last
offsets are gaps (compaction, control records) completes once the partition's end (high watermark,
or last stable offset under read_committed) reaches the range's end; OFFSET_OUT_OF_RANGE follows
``failOnDataLoss``; leader changes (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...) and broken
connections refresh the metadata and retry until ``kafkaConsumer.pollTimeoutMs`` passes without
progress (then ReadTimeoutError).

:func:`choose_path` decides, per input partition, between this path and the consumer path
(option ``readPath``: ``auto``, ``columnar`` or ``consumer``).
"""

from __future__ import annotations

import logging
import time
from typing import Iterator

import numpy as np
import pyarrow as pa
from kio.serial import entity_reader
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0

from pyspark_kafka.errors import (
    DATA_LOSS_FIX,
    DataLossError,
    OptionError,
    PySparkKafkaError,
    ReadTimeoutError,
    authorization_hint,
)
from pyspark_kafka.kafka.fetch_client import (
    AuthenticationError,
    FetchClientError,
    FetchConfig,
    columnar_config,
    pooled_fetch_client,
)
from pyspark_kafka.read.record_decoder import (
    binary_array,
    decode,
    fixed_width_array,
    headers_array,
    repeated_string_array,
    select_batches,
)

log = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS = 500
"""Fetch's max wait: the broker answers at once when data is there; this bounds a wait at the log end."""
RETRY_BACKOFF_S = 0.1
"""Pause before retrying after a leader change or a broken connection (Kafka's ``retry.backoff.ms``)."""

# Errors after which the leader is looked up again and the fetch retried (Kafka's consumer does the same).
_RETRIABLE = {
    3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_OR_FOLLOWER",
    7: "REQUEST_TIMED_OUT", 9: "REPLICA_NOT_AVAILABLE", 13: "NETWORK_EXCEPTION", 56: "KAFKA_STORAGE_ERROR",
    74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH", 100: "UNKNOWN_TOPIC_ID", 103: "OFFSET_NOT_AVAILABLE",
}
_NAMES = {1: "OFFSET_OUT_OF_RANGE", 29: "TOPIC_AUTHORIZATION_FAILED", 31: "CLUSTER_AUTHORIZATION_FAILED",
          2: "CORRUPT_MESSAGE", 35: "UNSUPPORTED_VERSION", **_RETRIABLE}
_FALLBACK_LOGGED: set = set()


def choose_path(read_path: str, conf: dict) -> tuple[FetchConfig | None, str | None]:
    """``(FetchConfig, None)`` to read columnar, or ``(None, reason)`` to read with the consumer.

    ``read_path``: the ``readPath`` option. ``auto`` reads columnar when
    :func:`~pyspark_kafka.kafka.fetch_client.columnar_config` can serve ``conf`` and logs the
    reason once per worker process when it cannot; ``columnar`` raises OptionError with that
    reason instead; ``consumer`` always reads with the consumer.
    """
    if read_path == "consumer":
        return None, "readPath=consumer"
    config, reason = columnar_config(conf)
    if config is not None:
        return config, None
    if read_path == "columnar":
        raise OptionError(f"readPath=columnar cannot serve this configuration: {reason}; use "
                          ".option('readPath', 'auto') to fall back to the confluent-kafka consumer")
    if reason not in _FALLBACK_LOGGED:
        _FALLBACK_LOGGED.add(reason)
        log.warning("reading with the confluent-kafka consumer instead of the columnar fetch path: %s", reason)
    return None, reason


def read_range_columnar(part, config: FetchConfig, schema: pa.Schema, on_out_of_range, batch_rows: int,
                        clock=time.monotonic, decoder: str | None = None) -> Iterator[pa.RecordBatch]:
    """Yield ``part.range`` (a :class:`~pyspark_kafka.read.partition_reader.KafkaInputPartition`) as
    record batches of ``schema``, at most ``batch_rows`` rows each.

    ``on_out_of_range(next_offset, low, high) -> resume offset`` applies ``failOnDataLoss``
    (raises DataLossError, or returns where to go on). Raises ReadTimeoutError when the range makes
    no progress for ``kafkaConsumer.pollTimeoutMs``, PySparkKafkaError for errors that retrying
    cannot fix (authorization, corrupt data), AuthenticationError for refused TLS or SASL.
    """
    rng = part.range
    topic, partition, until = rng.topic, rng.partition, rng.until_offset
    committed = str(part.conf.get("isolation.level", "read_uncommitted")) == "read_committed"
    isolation = 1 if committed else 0
    timeout_s = part.poll_timeout_ms / 1000
    next_offset = rng.from_offset
    deadline = clock() + timeout_s
    last_problem = "no answer yet"
    check_crcs = str(part.conf.get("check.crcs", "true")).strip().lower() not in ("false", "0")
    stalled_below = None  # the partition's end while the leader answers no records below it
    with pooled_fetch_client(config) as client:
        inflight = None  # (connection, offset, response type) of a Fetch sent ahead
        while next_offset < until:
            if clock() >= deadline and stalled_below is not None:
                next_offset = _empty_below_end(part, next_offset, stalled_below)
                stalled_below = None
                deadline = clock() + timeout_s
                continue
            if clock() >= deadline:
                raise ReadTimeoutError(
                    f"no record of {rng} arrived for {part.poll_timeout_ms} ms (waiting at offset {next_offset}; "
                    f"last problem: {last_problem}) from kafka.bootstrap.servers="
                    f"{part.conf.get('bootstrap.servers')!r}: check the brokers, or raise kafkaConsumer.pollTimeoutMs")
            node = None
            try:
                if inflight is not None and inflight[1] == next_offset:
                    conn, _, response_type = inflight
                else:
                    _drain(inflight)
                    node = client.leader(topic, partition)
                    if node is None:
                        raise FetchClientError(f"no leader known for {topic}-{partition}")
                    conn = client.connection(node)
                    request, response_type = client.fetch_request(conn, topic, partition, next_offset, isolation,
                                                                  FETCH_MAX_WAIT_MS)
                    conn.send(request)
                inflight = None
                data = _partition_data(conn.receive_frame(), response_type, conn)
            except FetchClientError as exc:
                inflight = None
                last_problem = str(exc)
                client.forget(topic, partition, node)
                time.sleep(RETRY_BACKOFF_S)
                continue
            code = int(data.error_code)
            if code == 1:
                low = _list_offset(client, topic, partition, -2, isolation)
                high = _list_offset(client, topic, partition, -1, isolation)
                next_offset = on_out_of_range(next_offset, low, high)
                continue
            if code in _RETRIABLE:
                last_problem = _RETRIABLE[code]
                log.info("reading %s: %s from the leader; looking it up again", rng, last_problem)
                client.forget(topic, partition)
                time.sleep(RETRY_BACKOFF_S)
                continue
            if code:
                name = _NAMES.get(code, f"error code {code}")
                raise PySparkKafkaError(f"reading {rng} failed at offset {next_offset}: Fetch answered {name}"
                                        + authorization_hint(name, "READ", topic))
            aborted = [(int(a.producer_id), int(a.first_offset)) for a in (data.aborted_transactions or ())]
            end = int(data.last_stable_offset) if committed and data.last_stable_offset >= 0 \
                else int(data.high_watermark)
            seg = select_batches(data.records or b"", next_offset, committed, aborted, check_crcs=check_crcs,
                                 topic=topic, partition=partition, high_watermark=int(data.high_watermark),
                                 until_offset=until)
            if seg.next_offset is None:  # an empty answer (one with bytes but no whole batch raised above)
                if next_offset < end:
                    # records below the partition's end exist but none came: never end or skip silently
                    stalled_below = end
                    time.sleep(RETRY_BACKOFF_S)
                continue  # at the partition's end: wait for the records (bounded by the deadline)
            stalled_below = None
            new_next = seg.next_offset
            if new_next < until:  # ask for the next answer before decoding this one
                request, response_type = client.fetch_request(conn, topic, partition, new_next, isolation,
                                                              FETCH_MAX_WAIT_MS)
                try:
                    conn.send(request)
                    inflight = (conn, new_next, response_type)
                except FetchClientError as exc:
                    last_problem = str(exc)
            dec = decode(seg, next_offset, until, decoder)
            next_offset = new_next
            deadline = clock() + timeout_s
            if dec.rows:
                batch = _record_batch(dec, topic, partition, schema)
                for start in range(0, dec.rows, batch_rows):
                    yield batch.slice(start, batch_rows) if dec.rows > batch_rows else batch
        _drain(inflight)


def _empty_below_end(part, next_offset: int, end: int) -> int:
    """The leader answered no record at ``next_offset`` for ``kafkaConsumer.pollTimeoutMs`` although the
    partition's end (high watermark, or last stable offset under read_committed) is ``end``: raise
    DataLossError (``failOnDataLoss=true``) or warn and return the offset to go on from.

    Spark's connector (``KafkaDataConsumer.fetchRecord``) never takes an empty poll below the end as
    the end of a range either: it polls until ``pollTimeoutMs`` and then fails. A healthy broker
    answers such a Fetch with the next batch; an empty answer means the log cannot serve these
    offsets (damaged or missing segment data), or, rarely, that the offsets up to the end were
    compacted away with no record after them.
    """
    rng = part.range
    missing_end = min(end, rng.until_offset)
    message = (f"offsets [{next_offset}, {missing_end}) of {rng.topic}-{rng.partition} could not be fetched: for "
               f"{part.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs) the leader answered no records at offset "
               f"{next_offset} although the partition's end is {end}, while reading {rng}")
    if part.fail_on_data_loss:
        raise DataLossError(f"{message}. {DATA_LOSS_FIX}")
    log.warning("%s; skipping these %d offsets (failOnDataLoss=false)", message, missing_end - next_offset)
    return missing_end


def _drain(inflight) -> None:
    """Read and drop the answer of a Fetch sent ahead that is no longer wanted (keeps the connection in step)."""
    if inflight is not None and not inflight[0].closed:
        try:
            inflight[0].receive_frame()
        except FetchClientError:
            pass


def _partition_data(frame: bytes, response_type, conn):
    """The one partition of a Fetch answer's ``frame``; FetchClientError when it has none."""
    header = ResponseHeaderV1 if response_type.__flexible__ else ResponseHeaderV0
    _, used = entity_reader(header)(frame, 0)
    response, _ = entity_reader(response_type)(frame, used)
    top = int(getattr(response, "error_code", 0))
    if top:
        raise FetchClientError(f"Fetch from {conn._where()} answered error code {top}")
    for topic in response.responses:
        for p in topic.partitions:
            return p
    raise FetchClientError(f"Fetch from {conn._where()} answered without the partition")


def _list_offset(client, topic: str, partition: int, which: int, isolation: int) -> int:
    """The partition's log start (``which`` -2) or end (-1) offset; PySparkKafkaError when not answered."""
    try:
        code, offset = client.list_offset(topic, partition, which, isolation)
    except FetchClientError as exc:
        raise PySparkKafkaError(f"cannot ask the offsets of {topic}-{partition}: {exc}") from None
    if code:
        raise PySparkKafkaError(f"ListOffsets for {topic}-{partition} answered {_NAMES.get(code, code)}")
    return offset


def _record_batch(dec, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """The decoded rows as one record batch of the Kafka source ``schema``."""
    n = dec.rows
    columns = [
        binary_array(dec.keys),
        binary_array(dec.values),
        repeated_string_array(topic, n),
        fixed_width_array(pa.int32(), np.full(n, partition, np.int32)),
        fixed_width_array(pa.int64(), dec.offsets),
        fixed_width_array(pa.timestamp("us", tz="UTC"), dec.timestamps_ms * np.int64(1000)),
        fixed_width_array(pa.int32(), dec.timestamp_types),
    ]
    if len(schema) > 7:
        columns.append(headers_array(dec, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


__all__ = ["AuthenticationError", "choose_path", "read_range_columnar"]
