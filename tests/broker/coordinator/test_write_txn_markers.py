"""WriteTxnMarkers (27), the request a transaction coordinator sends to partition leaders (KIP-98; in the replicated
cluster our coordinator sends it to other brokers, docs/replication.md). On the single node the broker leads every
partition, so it writes the marker like any Kafka broker: an ABORT ends the producer's open transaction there (the
last stable offset moves past it, read_committed readers skip its records); an unknown partition answers
UNKNOWN_TOPIC_OR_PARTITION and writes nothing."""

from __future__ import annotations

from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse
from kio.static.primitive import i16, i32, i64

from pyspark_kafka.testing.clusters import send_request
from support.transactions import DEADLINE_S, describe, list_offset, new_id, txn_producer


def markers(bootstrap, producer_id, epoch, commit, topic, partitions):
    answer = send_request(bootstrap, WriteTxnMarkersRequest(markers=(WritableTxnMarker(
        producer_id=i64(producer_id), producer_epoch=i16(epoch), transaction_result=commit,
        topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=tuple(i32(p) for p in partitions)),),
        coordinator_epoch=i32(0)),)), WriteTxnMarkersResponse)
    return [(int(p.partition_index), int(p.error_code)) for m in answer.markers for t in m.topics for p in t.partitions]


def test_an_abort_marker_ends_the_open_transaction_on_the_partition(bootstrap, make_topic):
    topic = make_topic(1)
    txn_id = new_id()
    producer = txn_producer(bootstrap, txn_id)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(DEADLINE_S) == 0
    assert list_offset(bootstrap, topic, 0, 1) == 0  # read_committed: the open transaction holds the LSO
    state = describe(bootstrap, txn_id)
    assert markers(bootstrap, state.producer_id, state.producer_epoch, False, topic, [0, 7]) == [(0, 0), (7, 3)]
    assert list_offset(bootstrap, topic, 0, 1) == 2 == list_offset(bootstrap, topic, 0, 0)  # record + marker
