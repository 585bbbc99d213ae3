"""Partition routing: murmur2 against Kafka's and librdkafka's published vectors, the
routing rule, the column-wise Router, and the ``partitioner`` option."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from pyspark_kafka.errors import OptionError, RecordError
from pyspark_kafka.write.routing import (
    MURMUR2,
    ROUND_ROBIN,
    Router,
    load_partitioner,
    murmur2,
    murmur2_array,
    partition_for,
    to_positive,
)

# Apache Kafka, clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
KAFKA_UTILS_TEST_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

# librdkafka, src/rdmurmur2.c, unittest_murmur2 ("java_murmur2_results", int32 bit patterns).
LIBRDKAFKA_VECTORS = [
    (b"kafka", 0xD067CF64),
    (b"giberish123456789", 0x8F552B0C),
    (b"1234", 0x9FC97B14),
    (b"234", 0xE7C009CA),
    (b"34", 0x873930DA),
    (b"4", 0x5A4B5CA1),
    (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x78424F1C),
    (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4A62B377),
    (b"eAmbleWillBeRemoved,ThePrePartThatIs", 0xE0E4E09E),
    (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x62B8B43F),
    (b"", 0x106E08D9),
]


def _signed(u32: int) -> int:
    return u32 - (1 << 32) if u32 & 0x80000000 else u32


@pytest.mark.parametrize("data,expected", KAFKA_UTILS_TEST_VECTORS)
def test_murmur2_matches_kafka_utils_test(data, expected):
    assert murmur2(data) == expected


@pytest.mark.parametrize("data,expected", LIBRDKAFKA_VECTORS)
def test_murmur2_matches_librdkafka_vectors(data, expected):
    assert murmur2(data) == _signed(expected)


def test_murmur2_array_equals_scalar_on_published_vectors():
    cases = KAFKA_UTILS_TEST_VECTORS + [(d, _signed(e)) for d, e in LIBRDKAFKA_VECTORS]
    arr = pa.array([d for d, _ in cases], type=pa.binary())
    assert murmur2_array(arr).tolist() == [e for _, e in cases]


@pytest.mark.parametrize("arrow_type", [pa.binary(), pa.large_binary()])
def test_murmur2_array_equals_scalar_on_random_keys_with_nulls_and_slices(arrow_type):
    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40))) for _ in range(2000)]
    keys[5] = None
    arr = pa.array(keys, type=arrow_type).slice(3, 1500)  # non-zero array offset
    got = murmur2_array(arr).tolist()
    for k, h in zip(keys[3:1503], got):
        assert h == (0 if k is None else murmur2(k))


def test_murmur2_array_equals_scalar_on_long_keys_of_many_lengths():
    rng = random.Random(5)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 600))) for _ in range(200)] + [b"k" * 4099]
    assert murmur2_array(pa.array(keys, pa.binary())).tolist() == [murmur2(k) for k in keys]


def test_murmur2_array_hashes_strings_as_utf8():
    words = ["kafka", "änderung", "日本語", ""]
    assert murmur2_array(pa.array(words)).tolist() == [murmur2(w.encode()) for w in words]


def test_to_positive_masks_the_sign_bit_like_java():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-2147483648) == 0
    assert to_positive(5) == 5
    # "21" hashes negative: masking (Java), not abs(), decides its partition.
    assert partition_for(b"21", 6) == (-973932308 & 0x7FFFFFFF) % 6 == 0
    assert abs(-973932308) % 6 == 2


@pytest.mark.parametrize(
    "key,num,explicit,rr,available,expected",
    [
        (b"abc", 3, 2, 0, None, 2),  # explicit wins over the key
        (None, 3, 0, 5, None, 0),  # explicit wins over round robin
        (b"abc", 7, None, 0, None, 479470107 % 7),  # key: murmur2 % n
        (b"kafka", 5, None, 9, None, to_positive(_signed(0xD067CF64)) % 5),
        (None, 4, None, 6, None, 2),  # no key: round robin over 0..n-1
        (None, 4, None, 3, [0, 2], 2),  # round robin over available partitions only
        (None, 4, None, 4, [0, 2], 0),
        (b"", 3, None, 0, None, to_positive(_signed(0x106E08D9)) % 3),  # empty key is a key
    ],
)
def test_partition_for_rule_order(key, num, explicit, rr, available, expected):
    assert partition_for(key, num, explicit, rr, available) == expected


def test_partition_for_rejects_topic_without_partitions():
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for(b"k", 0)


def test_router_equals_partition_for_row_by_row():
    rng = random.Random(3)
    n = 3000
    keys = [None if rng.random() < 0.3 else f"user-{rng.randrange(500)}".encode() for _ in range(n)]
    explicit = [rng.randrange(6) if rng.random() < 0.1 else None for _ in range(n)]
    router = Router(MURMUR2, start=2)
    got = router.assign("t", n, 6, pa.array(keys, pa.binary()), pa.array(explicit, pa.int32())).tolist()
    rr = 2
    for k, e, p in zip(keys, explicit, got):
        want = partition_for(k, 6, e, rr)
        if e is None and k is None:
            rr += 1
        assert p == want


def test_router_round_robin_continues_across_batches_per_topic():
    router = Router(MURMUR2, start=1)
    first = router.assign("a", 4, 3, explicit=pa.array([None] * 4, pa.int32())).tolist()
    other = router.assign("b", 2, 3).tolist()
    second = router.assign("a", 2, 3, pa.array([None, None], pa.binary())).tolist()
    assert first == [1, 2, 0, 1]
    assert other == [1, 2]
    assert second == [2, 0]


def test_router_with_no_key_or_partition_column_routes_every_row():
    assert Router(MURMUR2, start=0).assign("t", 5, 2).tolist() == [0, 1, 0, 1, 0]
    assert Router(MURMUR2, start=0).assign("t", 3, 4, available=[1, 3]).tolist() == [1, 3, 1]


def test_router_spreads_null_keys_evenly():
    router = Router(MURMUR2, start=0)
    parts = router.assign("t", 10_000, 7, pa.array([None] * 10_000, pa.binary()))
    counts = np.bincount(parts, minlength=7)
    assert counts.max() - counts.min() <= 1


def test_router_roundrobin_partitioner_ignores_keys():
    router = Router(ROUND_ROBIN, start=0)
    assert router.assign("t", 4, 3, pa.array([b"x", b"x", b"x", b"x"])).tolist() == [0, 1, 2, 0]


def test_router_random_start_still_cycles_all_partitions():
    parts = Router(MURMUR2).assign("t", 8, 4).tolist()
    assert sorted(parts) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert all((b - a) % 4 == 1 for a, b in zip(parts, parts[1:]))


class ModPartitioner:
    """Test partitioner: key length mod n; null keys to the last partition."""

    def partition(self, topic, key, num_partitions):
        return num_partitions - 1 if key is None else len(key) % num_partitions


class BadReturnPartitioner:
    def partition(self, topic, key, num_partitions):
        return num_partitions  # one past the end


class NoMethodPartitioner:
    pass


class FailingInitPartitioner:
    def __init__(self):
        raise RuntimeError("boom")


def test_user_partitioner_is_called_with_topic_key_and_count():
    method = load_partitioner(f"{__name__}.ModPartitioner")
    router = Router(method)
    keys = pa.array(["a", "bb", None, "dddd"])
    explicit = pa.array([None, None, None, 0], pa.int32())
    assert router.assign("t", 4, 3, keys, explicit).tolist() == [1, 2, 2, 0]


def test_user_partitioner_bad_return_names_class_and_range():
    router = Router(load_partitioner(f"{__name__}.BadReturnPartitioner"))
    with pytest.raises(RecordError, match=r"BadReturnPartitioner returned 3 for topic 't' with 3 partitions.*\[0, 3\)"):
        router.assign("t", 1, 3, pa.array([b"k"]))


@pytest.mark.parametrize(
    "name,message",
    [
        ("nosuchmodule_xyz.Part", r"cannot import 'nosuchmodule_xyz.Part'.*ModuleNotFoundError"),
        (f"{__name__}.Missing", r"cannot import .*Missing.*AttributeError"),
        (f"{__name__}.NoMethodPartitioner", r"has no method partition\(topic, key, num_partitions\)"),
        (f"{__name__}.FailingInitPartitioner", r"FailingInitPartitioner\(\) failed \(RuntimeError: boom\)"),
        ("consistent_random", r"must be 'murmur2', 'roundrobin' or 'module.Class'"),
    ],
)
def test_bad_partitioner_option_is_a_clear_error(name, message):
    with pytest.raises(OptionError, match=message):
        load_partitioner(name)


def test_builtin_partitioner_names():
    assert load_partitioner(None) == MURMUR2
    assert load_partitioner("Murmur2") == MURMUR2
    assert load_partitioner("RoundRobin") == ROUND_ROBIN


def test_kafka_python_murmur2_agrees_with_partition_for():
    """kafka-python's murmur2 (an independent port of the Java client's), used the way its
    DefaultPartitioner does (``murmur2(key) & 0x7fffffff % n``), on random keys."""
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

    rng = random.Random(11)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 33))) for _ in range(2000)]
    for n in (1, 3, 7, 12):
        assert [partition_for(k, n) for k in keys] == [(kafka_python_murmur2(k) & 0x7FFFFFFF) % n for k in keys]
        assert (Router(MURMUR2).assign("t", len(keys), n, pa.array(keys, pa.binary())).tolist()
                == [partition_for(k, n) for k in keys])


def test_librdkafka_murmur2_partitioner_agrees_with_partition_for(bootstrap, make_topic):
    """librdkafka's Java-compatible partitioner (an independent C implementation) puts
    each key where partition_for says, on the embedded broker."""
    from confluent_kafka import Producer

    topic = make_topic(partitions=5)
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2"})
    landed = {}

    def on_delivery(err, msg):
        assert err is None, err
        landed[msg.key()] = msg.partition()

    keys = [f"key-{i}".encode() for i in range(200)] + [k for k, _ in KAFKA_UTILS_TEST_VECTORS]
    for k in keys:
        producer.produce(topic, b"v", k, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert landed == {k: partition_for(k, 5) for k in keys}
