"""Client batches are decoded record by record before they are stored (Kafka's LogValidator).

Every lying batch here carries a *valid* CRC32C (recomputed after the lie), so only the
record-level validation can catch it. Each must be refused with Kafka's error code, leave the
log untouched (the next good batch gets the next offset) and leave earlier data readable.
"""

from __future__ import annotations

import gzip
import struct
import time

import crc32c
import lz4.frame
import pytest
import snappy
import zstandard

from pyspark_kafka.broker.log.compression import decompress
from pyspark_kafka.broker.errors import CorruptRecordError, UnsupportedCompressionError
from support.client_records import consume
from support.malformed import assert_nothing_lost, produce_request
from support.wire import WireClient, record_batch

CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD = 2, 76, 87
HEADER = 61


def rebuild(batch: bytes, *, body: bytes | None = None, codec: int | None = None, count: int | None = None,
            last_delta: int | None = None, producer: tuple[int, int, int] | None = None) -> bytes:
    """``batch`` with its records section, codec bits, record count, lastOffsetDelta or producer
    fields replaced; batchLength and CRC32C recomputed (so the batch is well framed)."""
    out = bytearray(batch[:HEADER]) + (batch[HEADER:] if body is None else body)
    struct.pack_into(">i", out, 8, len(out) - 12)
    if codec is not None:
        attrs = struct.unpack_from(">h", out, 21)[0]
        struct.pack_into(">h", out, 21, (attrs & ~0x07) | codec)
    if count is not None:
        struct.pack_into(">i", out, 57, count)
    if last_delta is not None:
        struct.pack_into(">i", out, 23, last_delta)
    if producer is not None:
        struct.pack_into(">qhi", out, 43, *producer)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def xerial(data: bytes) -> bytes:
    block = snappy.compress(data)
    return b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(block)) + block


COMPRESS = {1: gzip.compress, 2: xerial, 3: lz4.frame.compress, 4: lambda d: zstandard.ZstdCompressor().compress(d)}


def _produce(bootstrap: str, topic: str, records: bytes):
    with WireClient(bootstrap) as c:
        return c.request(produce_request(topic, records)).responses[0].partition_responses[0]


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_decoded_and_accepted(bootstrap, make_topic, codec):
    topic = make_topic(partitions=1)
    plain = record_batch([b"a", b"bb", b"ccc"], key=b"k")
    ok = _produce(bootstrap, topic, rebuild(plain, body=COMPRESS[codec](plain[HEADER:]), codec=codec))
    assert (ok.error_code, ok.base_offset) == (0, 0)
    assert [m.value() for m in consume(bootstrap, topic, 3)] == [b"a", b"bb", b"ccc"]


def _two_records_same_delta() -> bytes:
    """Two records that both carry offset delta 0 (uncompressed)."""
    one = record_batch([b"x"])
    return rebuild(one, body=one[HEADER:] * 2, count=2, last_delta=1)


def _record_length_lies() -> bytes:
    batch = bytearray(record_batch([b"value-1", b"value-2"]))
    batch[HEADER] += 2  # first record's length varint (zigzag, one byte): one more than its fields take
    return rebuild(bytes(batch))


def _value_length_of(size: int) -> bytes:
    """One record (no key, value ``ab``, no headers) whose valueLength varint (2, zigzag 4) takes ``size``
    bytes: canonical at 1, padded with continuation bytes above. Kafka's ``ByteUtils.readVarint`` reads an
    int32 varint of at most 5 bytes and throws on a sixth ("Varint is too long"), which its record reader
    turns into InvalidRecordException."""
    length = bytes([0x84] + [0x80] * (size - 2) + [0x00]) if size > 1 else b"\x04"
    body = b"\x00\x00\x00\x01" + length + b"ab" + b"\x00"  # attributes, timestampDelta, offsetDelta, keyLength -1
    return rebuild(record_batch([b"ab"]), body=bytes([len(body) * 2]) + body)


def _gzip_bomb() -> bytes:
    plain = record_batch([b"v"])
    return rebuild(plain, body=gzip.compress(b"\x00" * (8 << 20), compresslevel=1), codec=1)


def _zstd_bomb() -> bytes:
    plain = record_batch([b"v"])
    return rebuild(plain, body=zstandard.ZstdCompressor().compress(b"\x00" * (8 << 20)), codec=4)


LIES = {
    # name: (batch, topic config, expected error code)
    "count-lies": (lambda: rebuild(record_batch([b"a", b"b"]), count=3, last_delta=2), {}, INVALID_RECORD),
    "offset-deltas-repeat": (_two_records_same_delta, {}, INVALID_RECORD),
    "record-length-lies": (_record_length_lies, {}, INVALID_RECORD),
    "int32-varint-of-6-bytes": (lambda: _value_length_of(6), {}, INVALID_RECORD),
    "trailing-bytes": (lambda: rebuild(record_batch([b"a"]), body=record_batch([b"a"])[HEADER:] + b"\x00" * 9),
                       {}, INVALID_RECORD),
    "records-cut-short": (lambda: rebuild(record_batch([b"aaaa", b"bbbb"]),
                                          body=record_batch([b"aaaa", b"bbbb"])[HEADER:-3]), {}, INVALID_RECORD),
    "gzip-garbage": (lambda: rebuild(record_batch([b"a"]), body=b"not gzip at all", codec=1), {}, CORRUPT_MESSAGE),
    "zstd-garbage": (lambda: rebuild(record_batch([b"a"]), body=b"\x28\xb5\x2f\xfd garbage", codec=4), {},
                     CORRUPT_MESSAGE),
    "lz4-truncated": (lambda: rebuild(record_batch([b"a"]), body=lz4.frame.compress(record_batch([b"a"])[HEADER:])[:-6],
                                      codec=3), {}, CORRUPT_MESSAGE),
    "snappy-lying-preamble": (lambda: rebuild(record_batch([b"a"]), body=b"\xff\xff\xff\xff\x0f\x00", codec=2), {},
                              CORRUPT_MESSAGE),
    "gzip-bomb": (_gzip_bomb, {"max.message.bytes": "65536"}, CORRUPT_MESSAGE),
    "zstd-bomb": (_zstd_bomb, {"max.message.bytes": "65536"}, CORRUPT_MESSAGE),
    "unknown-codec": (lambda: rebuild(record_batch([b"a"]), codec=5), {}, UNSUPPORTED_COMPRESSION_TYPE),
    "keyless-on-compacted": (lambda: record_batch([b"a"]), {"cleanup.policy": "compact"}, INVALID_RECORD),
    "producer-id-without-sequence": (lambda: rebuild(record_batch([b"a"], key=b"k"), producer=(7, 0, -1)), {},
                                     INVALID_RECORD),
}


@pytest.mark.parametrize("case", sorted(LIES))
def test_lying_batches_are_refused_and_nothing_is_stored(bootstrap, make_topic, written, case):  # noqa: F811
    make, config, code = LIES[case]
    topic = make_topic(partitions=1, config=config)
    good = record_batch([b"good"], key=b"k")
    assert _produce(bootstrap, topic, good).base_offset == 0
    refused = _produce(bootstrap, topic, make())
    assert refused.error_code == code, refused.error_message
    assert refused.error_message  # names the cause
    after = _produce(bootstrap, topic, good)
    assert (after.error_code, after.base_offset) == (0, 1)  # nothing of the lying batch was stored
    assert [m.value() for m in consume(bootstrap, topic, 2)] == [b"good", b"good"]
    assert_nothing_lost(bootstrap, written)


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_decompress_stops_at_its_bound(codec):
    data = b"\x00" * 100_000
    packed = COMPRESS[codec](data)
    assert decompress(codec, packed, 100_000) == data
    with pytest.raises(CorruptRecordError, match="expand to more than 99999 bytes|more than the 99999"):
        decompress(codec, packed, 99_999)


def test_decompress_refuses_undefined_codecs():
    with pytest.raises(UnsupportedCompressionError, match="codec id 6"):
        decompress(6, b"x", 100)


def test_vectorized_and_record_by_record_checks_agree():
    """Large batches are checked with numpy, small ones record by record: both must accept and
    refuse exactly the same records sections (seeded mutations of valid ones)."""
    import random

    from kio.records.schema import NewRecordBatch, Record, RecordHeader
    from kio.records.writers import write_new_batch
    import datetime
    import io

    from pyspark_kafka.broker.log import validator
    from pyspark_kafka.broker.errors import InvalidRecordError
    from pyspark_kafka.kafka.record_format import VarintError

    rng = random.Random(7)
    ts = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)

    def body(n: int) -> bytes:
        records = tuple(Record(attributes=0, timestamp=ts + datetime.timedelta(milliseconds=rng.randrange(10**6)),
                               offset=i, key=rng.choice([None, b"k" * rng.randrange(200)]),
                               value=rng.choice([None, b"v" * rng.randrange(300)]),
                               headers=tuple(RecordHeader(key=b"h", value=rng.choice([None, b"x"]))
                                             for _ in range(rng.choice([0, 0, 0, 1, 2]))))
                        for i in range(n))
        buf = io.BytesIO()
        write_new_batch(buf, NewRecordBatch(producer_id=-1, producer_epoch=-1, base_sequence=-1, records=records,
                                            attributes=0))
        return buf.getvalue()[HEADER:]

    def scalar_ok(data: bytes, n: int, compacted: bool) -> bool:
        try:
            validator._walk_records(data, n, compacted, "t-0")
            return True
        except (InvalidRecordError, VarintError):  # a varint past its record or too long (record_format's decoder)
            return False

    checked = refused = 0
    for _ in range(40):
        n = rng.randrange(validator.VECTORIZE_FROM, validator.VECTORIZE_FROM + 50)
        valid = body(n)
        for compacted in (False, True):
            assert validator._records_valid(valid, n, compacted) == scalar_ok(valid, n, compacted)
        for _ in range(10):
            bad = bytearray(valid)
            for _ in range(rng.randint(1, 3)):
                bad[rng.randrange(len(bad))] = rng.randrange(256)
            bad = bytes(bad[:len(bad) - rng.choice([0, 0, 1, 5])])
            expected = scalar_ok(bad, n, False)
            assert validator._records_valid(bad, n, False) == expected
            checked += 1
            refused += not expected
    assert refused > 50 and checked - refused > 5  # both outcomes were exercised


def test_an_int32_varint_of_5_bytes_is_read_as_kafka_reads_it(bootstrap, make_topic):
    """Kafka accepts a non-canonical int32 varint of up to 5 bytes (the 6-byte one is a LIES case)."""
    topic = make_topic(partitions=1)
    ok = _produce(bootstrap, topic, _value_length_of(5))
    assert (ok.error_code, ok.base_offset) == (0, 0), ok.error_message
    assert [m.value() for m in consume(bootstrap, topic, 1)] == [b"ab"]


@pytest.mark.slow
def test_apache_kafka_answers_the_varint_lengths_as_we_do(bootstrap, make_topic):
    """The same three batches on Apache Kafka 4.4.0 and on the embedded broker: the same error codes."""
    from pyspark_kafka.testing.apache_kafka import ApacheKafka, KafkaStartError
    from support.topics import create_topic

    answers = {}
    try:
        with ApacheKafka(nodes=1) as kafka:
            create_topic(kafka.bootstrap_servers, "varints", 1, {})
            # a new topic's leader may not have taken its leadership yet: NOT_LEADER_OR_FOLLOWER (6) is retriable,
            # and a client sends again (bounded here at 15 s)
            deadline = time.monotonic() + 15
            while _produce(kafka.bootstrap_servers, "varints", _value_length_of(1)).error_code == 6 \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
            answers["kafka"] = [_produce(kafka.bootstrap_servers, "varints", _value_length_of(n)).error_code
                                for n in (1, 5, 6)]
    except KafkaStartError as e:
        pytest.skip(f"Apache Kafka cannot run here: {e}")
    topic = make_topic(partitions=1)
    answers["ours"] = [_produce(bootstrap, topic, _value_length_of(n)).error_code for n in (1, 5, 6)]
    assert answers["kafka"] == [0, 0, INVALID_RECORD], answers
    assert answers["ours"] == answers["kafka"], answers
