"""Rules of the columnar decoder that legitimate logs rely on (issue 34): what its integrity checks must
still accept, beside what they refuse (``test_corrupt_batches.py``)."""

from __future__ import annotations

import pytest

from pyspark_kafka.broker.log.record_batch import CONTROL_BIT, TRANSACTIONAL_BIT, build_batch
from pyspark_kafka.errors import CorruptRecordError
from pyspark_kafka.read.record_decoder import decode, select_batches

from support.batches import encode_record, make_batch


def _marker(key: bytes, count: int = 1, producer_id: int = 7) -> bytes:
    body = b"\x00" + b"\x00" + b"\x00" + bytes([len(key) * 2]) + key + bytes([12]) + b"\x00\x00" + b"\x00" * 4 + b"\x00"
    record = bytes([len(body) * 2]) + body
    return build_batch(record if count else b"", record_count=count, last_offset_delta=0, base_timestamp=0,
                       max_timestamp=0, attributes=CONTROL_BIT | TRANSACTIONAL_BIT, producer_id=producer_id,
                       producer_epoch=0, base_offset=3)


def _read(records: bytes, committed: bool = False):
    seg = select_batches(records, 0, committed, [], topic="t", partition=0)
    return {d: decode(seg, 0, 100, d).offsets.tolist() for d in ("numba", "numpy")}


@pytest.mark.parametrize("committed", [False, True])
def test_a_marker_emptied_by_the_log_cleaner_is_read_past(committed):
    """Kafka's cleaner keeps the last batch of a producer with no record (BatchRetention.RETAIN_EMPTY),
    control flag included: not corrupt."""
    data = make_batch([b"a", b"b", b"c"]) + _marker(b"", count=0)
    assert _read(data, committed) == {"numba": [0, 1, 2], "numpy": [0, 1, 2]}


@pytest.mark.parametrize("key", [b"\x00\x00\x00\x00", b"\x00\x00\x00\x01"])
def test_abort_and_commit_markers_are_read_past(key):
    assert _read(make_batch([b"a", b"b", b"c"]) + _marker(key))["numba"] == [0, 1, 2]


@pytest.mark.parametrize("key, count, producer_id", [
    (b"\x00\x00\x00\x02", 1, 7),   # type 2 is no transaction marker
    (b"\xff\xff\x00\x00", 1, 7),   # negative version
    (b"key-2", 1, 7),              # a data record's key: attributes damaged into 'control'
    (b"\x00\x00\x00\x00", 1, -1),  # a marker without a producer
])
def test_anything_else_marked_control_is_corrupt(key, count, producer_id):
    with pytest.raises(CorruptRecordError, match="control"):
        _read(make_batch([b"a"]) + _marker(key, count, producer_id))


def test_a_batch_with_headers_decodes_on_both_decoders():
    """The header walk of both decoders accepts well-formed headers (key length 0 and null values too)."""
    head = b"\x04" + b"\x02h" + b"\x02v" + b"\x00" + b"\x01"  # 2 headers: ("h", b"v"), ("", None)
    body = b"\x00" + b"\x00" + b"\x00" + b"\x02k" + b"\x02v" + head
    record = bytes([len(body) * 2]) + body
    batch = build_batch(record, record_count=1, last_offset_delta=0, base_timestamp=0, max_timestamp=0)
    assert _read(batch) == {"numba": [0], "numpy": [0]}
    assert len(encode_record(0, 0, b"k", b"v")) == len(record) - len(head) + 1  # same layout but 0 headers


def test_a_log_append_time_batch_keeps_a_negative_max_timestamp():
    """Kafka gives every record of a LOG_APPEND_TIME batch its maxTimestamp, -1 included, with type 1
    (round 3's decoders took -1 as 'no append time' and returned create times; found by the fuzzer)."""
    from pyspark_kafka.broker.log.record_batch import TIMESTAMP_TYPE_BIT

    batch = build_batch(encode_record(0, 5, b"k", b"v"), record_count=1, last_offset_delta=0,
                        base_timestamp=1_700_000_000_000, max_timestamp=-1, attributes=TIMESTAMP_TYPE_BIT)
    seg = select_batches(batch, 0, False, [], topic="t", partition=0)
    for decoder in ("numba", "numpy"):
        dec = decode(seg, 0, 1, decoder)
        assert (dec.timestamps_ms.tolist(), dec.timestamp_types.tolist()) == ([-1], [1]), decoder


@pytest.mark.parametrize("tail", [b"\x00" * 8 + b"\xff\xff\xff\xff" + b"\x00" * 5,  # batchLength -1
                                  b"\x00" * 8 + b"\x00\x00\x01\x00" + b"\x00" * 4 + b"\x07"])  # cut, magic 7
def test_a_cut_tail_that_cannot_be_a_batch_is_corrupt(tail):
    """Kafka's ByteBufferLogInputStream.nextBatch: a cut last batch is dropped only when what is there
    could start a batch (batchLength at least the minimum, magic 2)."""
    with pytest.raises(CorruptRecordError):
        _read(make_batch([b"a"]) + tail)
    assert _read(make_batch([b"a"]) + make_batch([b"b"])[:30])["numba"] == [0]  # a real cut batch: dropped
