"""The columnar read path (Fetch → RecordBatch v2 → Arrow) against the consumer path, row for row.

Records are produced by confluent-kafka (a real producer: every codec, null and empty keys and
values, headers, committed and aborted transactions) to the embedded broker; each offset range is
read by ``read_partition`` twice, ``readPath=consumer`` and ``readPath=columnar`` (with both
decoders, numba and numpy), and the Arrow batches must be equal. No Spark here: the Spark suites
run over both paths through the ``read_path`` fixture.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from pyspark_kafka import offsets as O
from pyspark_kafka.errors import DataLossError, OptionError
from pyspark_kafka.read import columnar, record_decoder
from pyspark_kafka.kafka.fetch_client import columnar_config
from pyspark_kafka.read.options import parse_read_path
from pyspark_kafka.read.partition_reader import KafkaInputPartition, executor_conf, read_partition

BASE_TS = 1_700_000_000_000


def _produce(bootstrap, topic, count, codec="none", partition=0, headers=True, **extra):
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                         "batch.num.messages": 37, **extra})
    for i in range(count):
        producer.produce(topic, partition=partition,
                         key=None if i % 7 == 0 else (b"" if i % 7 == 1 else b"k%d" % i),
                         value=None if i % 11 == 0 else (b"" if i % 11 == 1 else b"value-%d" % i * (i % 9)),
                         timestamp=BASE_TS + i,
                         headers=[("h", b"%d" % i), ("none", None)] if headers and i % 3 == 0 else None)
    assert producer.flush(30) == 0
    return producer


def _read(bootstrap, topic, start, end, path, partition=0, headers=True, **options):
    conf = executor_conf({"kafka.bootstrap.servers": bootstrap, **options}, "columnar-test")
    part = KafkaInputPartition(O.OffsetRange(topic, partition, start, end), conf, 10_000,
                               options.get("failOnDataLoss", "true") == "true", headers, path)
    batches = list(read_partition(part))
    return pa.Table.from_batches(batches, schema=batches[0].schema) if batches else None


def _assert_same(bootstrap, topic, start, end, headers=True, **options):
    """Both paths (and both decoders) read ``[start, end)`` identically; returns the table."""
    expected = _read(bootstrap, topic, start, end, "consumer", headers=headers, **options)
    for decoder in ("numba", "numpy"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(record_decoder.DECODER_ENV, decoder)
            got = _read(bootstrap, topic, start, end, "columnar", headers=headers, **options)
        if expected is None:  # no row at all: neither path may yield one
            assert got is None, decoder
            continue
        assert got.schema == expected.schema, decoder
        assert got.to_pylist() == expected.to_pylist(), decoder
    return expected


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_reads_the_same_rows_as_the_consumer(bootstrap, make_topic, codec):
    topic = make_topic(partitions=1)
    _produce(bootstrap, topic, 300, codec)
    table = _assert_same(bootstrap, topic, 0, 300)
    assert table.num_rows == 300 and table.column("offset").to_pylist() == list(range(300))
    # a range starting and ending inside batches cuts records below its start and at/after its end
    cut = _assert_same(bootstrap, topic, 41, 250, headers=False)
    assert cut.column("offset").to_pylist() == list(range(41, 250))


def test_log_append_time_batches_use_the_batch_timestamp(bootstrap, make_topic):
    topic = make_topic(partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    _produce(bootstrap, topic, 50)
    table = _assert_same(bootstrap, topic, 0, 50)
    assert set(table.column("timestampType").to_pylist()) == {1}


def test_read_committed_skips_aborted_transactions_and_markers(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}", "linger.ms": 5})
    producer.init_transactions(30)
    for round_, commit in enumerate([True, False, True, False, True]):
        producer.begin_transaction()
        for i in range(20):
            producer.produce(topic, partition=0, value=b"r%d-%d" % (round_, i))
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    _produce(bootstrap, topic, 10)  # non-transactional records after the markers
    end = 5 * 21 + 10
    committed = _assert_same(bootstrap, topic, 0, end, **{"kafka.isolation.level": "read_committed"})
    assert committed.num_rows == 3 * 20 + 10
    assert all(not v.startswith(b"r1-") and not v.startswith(b"r3-")
               for v in committed.column("value").to_pylist() if v)
    uncommitted = _assert_same(bootstrap, topic, 0, end)
    assert uncommitted.num_rows == 5 * 20 + 10  # control records are never rows
    # a range ending on a commit marker completes
    assert _assert_same(bootstrap, topic, 0, 21, headers=False).num_rows == 20


def test_offsets_below_the_log_start_follow_fail_on_data_loss(bootstrap, make_topic):
    from confluent_kafka.admin import AdminClient
    from confluent_kafka import TopicPartition

    topic = make_topic(partitions=1)
    _produce(bootstrap, topic, 100, headers=False)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 60)]).values():
        future.result(30)
    conf = executor_conf({"kafka.bootstrap.servers": bootstrap}, "g")
    part = KafkaInputPartition(O.OffsetRange(topic, 0, 10, 100), conf, 10_000, True, False, "columnar")
    with pytest.raises(DataLossError, match=r"offsets \[10, 60\)"):
        list(read_partition(part))
    table = _assert_same(bootstrap, topic, 10, 100, headers=False, failOnDataLoss="false")
    assert table.column("offset").to_pylist() == list(range(60, 100))


def test_read_path_option_and_fallback(bootstrap, caplog):
    assert parse_read_path({}) == "auto" and parse_read_path({"READPATH": "Columnar"}) == "columnar"
    with pytest.raises(OptionError, match="readPath"):
        parse_read_path({"readPath": "fast"})
    plain = executor_conf({"kafka.bootstrap.servers": bootstrap}, "g")
    assert columnar_config(plain)[0] is not None
    gssapi = {**plain, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}
    config, reason = columnar_config(gssapi)
    assert config is None and "GSSAPI" in reason
    assert columnar_config({**plain, "socket.nagle.disable": "true"})[1].startswith("setting(s) socket.nagle")
    with pytest.raises(OptionError, match="GSSAPI"):
        columnar.choose_path("columnar", gssapi)
    with caplog.at_level(logging.WARNING, logger=columnar.__name__):
        assert columnar.choose_path("auto", gssapi) == (None, reason)
        columnar.choose_path("auto", gssapi)
    assert sum("GSSAPI" in r.getMessage() for r in caplog.records) <= 1  # logged once per worker
    assert columnar.choose_path("consumer", plain)[0] is None


def test_numpy_decoder_is_selectable_and_rejects_unknown_names(monkeypatch):
    monkeypatch.setenv(record_decoder.DECODER_ENV, "numpy")
    assert record_decoder.default_decoder() == "numpy"
    monkeypatch.setenv(record_decoder.DECODER_ENV, "cython")
    with pytest.raises(Exception, match="numba' or 'numpy"):
        record_decoder.default_decoder()


@pytest.mark.parametrize("mechanism, module", [
    ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
    ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
])
def test_sasl_plain_and_scram_read_the_same_rows_and_a_wrong_password_fails(tmp_path, mechanism, module):
    from confluent_kafka.admin import AdminClient, NewTopic

    from pyspark_kafka.broker import EmbeddedBroker
    from pyspark_kafka.kafka.fetch_client import AuthenticationError

    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": mechanism,
              "sasl.jaas.config": f'{module} required user_etl="etl-pw";'}
    sasl = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": mechanism,
            "kafka.sasl.username": "etl", "kafka.sasl.password": "etl-pw"}
    librdkafka = {k.removeprefix("kafka."): v for k, v in sasl.items()}
    with EmbeddedBroker(data_dir=tmp_path / "sasl", config=config) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap, **librdkafka})
        admin.create_topics([NewTopic("sasl-topic", 1, 1)])["sasl-topic"].result(20)
        _produce(bootstrap, "sasl-topic", 60, **librdkafka)
        table = _assert_same(bootstrap, "sasl-topic", 0, 60, **sasl)
        assert table.num_rows == 60
        with pytest.raises(AuthenticationError, match=f"SASL {mechanism} authentication .* failed"):
            _read(bootstrap, "sasl-topic", 0, 60, "columnar", **{**sasl, "kafka.sasl.password": "wrong"})


def test_compacted_gaps_read_the_same_and_a_range_ending_on_gaps_completes(bootstrap, make_topic):
    """Compaction (the embedded broker's cleaner, settings as the differential suite's) leaves offset
    gaps inside and at the end of batches; both paths read the same rows, and a range whose last
    offsets were compacted away completes instead of waiting for pollTimeoutMs."""
    import time

    topic = make_topic(partitions=1, config={"cleanup.policy": "compact", "segment.ms": "100",
                                             "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "100",
                                             "min.compaction.lag.ms": "0"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(40):
        producer.produce(topic, partition=0, key=b"k%d" % (i % 4), value=b"v%d" % i)
    producer.flush(30)
    deadline = time.monotonic() + 40
    while True:  # roll segments (the active one is never cleaned) until the cleaner removed superseded values
        time.sleep(0.3)
        producer.produce(topic, partition=0, key=b"roll", value=b"r")
        producer.flush(30)
        first = _read(bootstrap, topic, 0, 40, "consumer", headers=False)
        if first is None or first.num_rows < 40 or time.monotonic() > deadline:
            break
    assert first is not None and first.num_rows < 40, "the cleaner did not run within 40 s"
    _assert_same(bootstrap, topic, 0, 40, headers=False)
    # offsets 36..39 hold the last values of k0..k3 (kept); [0, 36) is all compacted away: both paths
    # complete at once with no row (pollTimeoutMs is 10 s here)
    started = time.monotonic()
    assert _assert_same(bootstrap, topic, 0, 36, headers=False) is None
    assert time.monotonic() - started < 10


def test_a_reused_spark_worker_freezes_its_heap_once_per_read_path(monkeypatch):
    """Spark's daemon runs gc.collect() after every task of a reused worker: after the first read
    of each path the worker's objects (imports, numba's kernels, pooled clients) are frozen so that
    collection stays cheap."""
    import gc

    from pyspark_kafka.read import partition_reader

    monkeypatch.setattr(partition_reader, "_HEAP_FROZEN", [])
    monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
    freezes = []
    real_freeze = gc.freeze
    # counted calls, not only the frozen count: frozen objects freed meanwhile (other threads) lower the count
    monkeypatch.setattr(gc, "freeze", lambda: (freezes.append(1), real_freeze()))
    before = gc.get_freeze_count()
    partition_reader.freeze_worker_heap("consumer")  # not a reused Spark worker (e.g. this test process): nothing
    assert freezes == [] and partition_reader._HEAP_FROZEN == []
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    try:
        partition_reader.freeze_worker_heap("consumer")
        assert len(freezes) == 1 and gc.get_freeze_count() > before
        partition_reader.freeze_worker_heap("consumer")  # once per process and path
        assert len(freezes) == 1
        after_first = gc.get_freeze_count()
        kernels = [[i] for i in range(1000)]  # what the columnar path's first read adds (numba's kernels)
        partition_reader.freeze_worker_heap("columnar")  # the other path's first read: frozen again
        # the new objects are frozen too (a margin for frozen objects other threads free meanwhile)
        assert len(freezes) == 2 and gc.get_freeze_count() >= after_first + len(kernels) - 100
        partition_reader.freeze_worker_heap("columnar")
        assert len(freezes) == 2
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("decoder", ["numba", "numpy"])
def test_a_columnar_read_imports_no_pandas(bootstrap, make_topic, decoder):
    """The columnar path builds its Arrow columns from buffers: ``pa.array`` and ``pa.scalar`` import
    pandas (pyarrow checks each input for a pandas object), 120-170 ms in the first read of every new
    Spark Python worker and source runner. A fresh interpreter reads a range with headers and nulls
    and must not have pandas loaded after, with the same rows as the consumer path."""
    import json
    import subprocess
    import sys

    topic = make_topic(partitions=1)
    _produce(bootstrap, topic, 120)
    expected = _read(bootstrap, topic, 0, 120, "consumer")
    code = (
        "import sys, json, pyarrow as pa\n"
        "from pyspark_kafka import offsets as O\n"
        "from pyspark_kafka.read.partition_reader import KafkaInputPartition, executor_conf, read_partition\n"
        f"conf = executor_conf({{'kafka.bootstrap.servers': {bootstrap!r}}}, 'no-pandas')\n"
        f"part = KafkaInputPartition(O.OffsetRange({topic!r}, 0, 0, 120), conf, 10_000, True, True, 'columnar')\n"
        "batches = list(read_partition(part))\n"
        "loaded = 'pandas' in sys.modules\n"
        "rows = pa.Table.from_batches(batches).to_pylist()\n"
        "print(json.dumps({'pandas': loaded, 'rows': len(rows), 'last': repr(rows[-1]), 'nulls': sum(r['key'] is None "
        "for r in rows), 'headers': sum(r['headers'] is not None for r in rows)}))\n"
    )
    env = {**__import__("os").environ, record_decoder.DECODER_ENV: decoder}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    want = expected.to_pylist()
    assert got == {"pandas": False, "rows": 120, "last": repr(want[-1]),
                   "nulls": sum(r["key"] is None for r in want), "headers": sum(r["headers"] is not None for r in want)}


def test_column_builders_refuse_what_does_not_fit():
    """``fixed_width_array`` refuses values whose width is not the Arrow type's (a silent reinterpretation
    would give wrong numbers); ``repeated_string_array`` refuses topic names beyond an int32-offset string
    column (2 GiB) before allocating them."""
    import numpy as np

    from pyspark_kafka.errors import PySparkKafkaError

    assert record_decoder.fixed_width_array(pa.int32(), np.array([1, -2], np.int32)).to_pylist() == [1, -2]
    with pytest.raises(ValueError, match="int64 values of shape \\(2,\\) do not make an Arrow int32 array"):
        record_decoder.fixed_width_array(pa.int32(), np.array([1, 2], np.int64))
    assert record_decoder.repeated_string_array("tö", 3).to_pylist() == ["tö", "tö", "tö"]
    assert record_decoder.repeated_string_array("t", 0).to_pylist() == []
    with pytest.raises(PySparkKafkaError, match="more than 2 GiB of topic names"):
        record_decoder.repeated_string_array("x" * 1000, 3_000_000)
