"""Kafka clusters the integration suite runs on, and what each one serves.

The backends, :class:`Cluster`, :func:`start` and :func:`api_versions` are the package's
:mod:`pyspark_kafka.testing.clusters` (one implementation, shared with the pytest plugin for
users' suites); they are re-exported here so the suite keeps writing ``C.Cluster``,
``C.embedded(...)``, ``C.api_versions(...)``. What only this suite uses lives here: the API
keys and the API groups tests :meth:`Cluster.require`, and :func:`batch_headers` (a raw Fetch
reading the stored RecordBatch headers).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pyspark_kafka.testing.clusters import (  # noqa: F401  (re-exported for the suite)
    APACHE_KAFKA_IMAGE,
    BACKENDS,
    BOOTSTRAP_ENV,
    CONTAINER_START_TIMEOUT_S,
    EMBEDDED_CONFIG,
    RETENTION_CHECK_MS,
    BackendUnavailable,
    Cluster,
    apache_kafka,
    apache_kafka_container,
    api_name,
    api_versions,
    docker_unavailable_reason,
    embedded,
    from_env,
    missing_apis,
    send_request,
    start,
)

# Kafka API keys (Kafka's message schemas, clients/src/main/resources/common/message).
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT = 8, 9, 10, 11, 12
LEAVE_GROUP, SYNC_GROUP, API_VERSIONS = 13, 14, 18
INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28

GROUP_APIS = (FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT, OFFSET_FETCH)
"""What a classic consumer group needs (join, sync, heartbeat, leave, commit, fetch committed)."""
IDEMPOTENCE_APIS = (INIT_PRODUCER_ID,)
"""What an idempotent producer needs (KIP-98)."""
TRANSACTION_APIS = (FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN)
"""What a transactional producer needs (KIP-98), without sending offsets to the transaction."""
TRANSACTIONAL_OFFSETS_APIS = TRANSACTION_APIS + (ADD_OFFSETS_TO_TXN, TXN_OFFSET_COMMIT, OFFSET_FETCH)
"""What a transaction that also commits consumer-group offsets needs (``send_offsets_to_transaction``)."""

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
"""RecordBatch v2 attributes bits 0-2: the compression codec (Kafka's CompressionType ids)."""


@dataclass(frozen=True)
class BatchHeader:
    """The header of one stored RecordBatch v2 (KIP-98 layout): ``codec`` name, ``producer_id``
    (-1 without idempotence), ``transactional`` (attributes bit 4), ``control`` (bit 5)."""

    base_offset: int
    codec: str
    producer_id: int
    transactional: bool
    control: bool


def parse_batch_headers(records: bytes) -> list[BatchHeader]:
    """Headers of the whole record batches in ``records`` (a Fetch response's record set; a
    trailing partial batch is ignored). Offsets: base offset 0, length 8, attributes 21,
    producer id 43 (Kafka's DefaultRecordBatch)."""
    out, pos = [], 0
    while pos + 61 <= len(records):
        base_offset, length = struct.unpack_from(">qi", records, pos)
        if pos + 12 + length > len(records):
            break
        attributes = struct.unpack_from(">h", records, pos + 21)[0]
        producer_id = struct.unpack_from(">q", records, pos + 43)[0]
        out.append(BatchHeader(base_offset, CODECS.get(attributes & 0x07, f"codec {attributes & 0x07}"),
                               producer_id, bool(attributes & 0x10), bool(attributes & 0x20)))
        pos += 12 + length
    return out


def batch_headers(bootstrap: str, topic: str, partition: int, max_bytes: int = 4 << 20) -> list[BatchHeader]:
    """The stored batch headers of one partition from offset 0 (one Fetch v4 to the bootstrap
    broker, which must lead the partition; read_uncommitted, up to ``max_bytes``). Raises
    RuntimeError naming the error code when the fetch fails."""
    import datetime

    from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.fetch.v4.response import FetchResponse

    request = FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=max_bytes,
                           isolation_level=0, topics=(FetchTopic(topic=topic, partitions=(
                               FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=max_bytes),)),))
    response = send_request(bootstrap, request, FetchResponse)
    (data,) = [p for t in response.responses for p in t.partitions]
    if data.error_code != 0:
        raise RuntimeError(f"Fetch {topic}-{partition} from {bootstrap} failed with error code {int(data.error_code)}")
    return parse_batch_headers(bytes(data.records or b""))
