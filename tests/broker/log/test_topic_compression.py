"""Topic ``compression.type``: the broker stores each produced batch in the topic's codec (Kafka's
``LogValidator`` recompresses; ``uncompressed`` decompresses, ``producer`` keeps the batch as sent)."""

from __future__ import annotations

import pytest

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.topic_config import LogConfig
from pyspark_kafka.broker.errors import RecordTooLargeError
from pyspark_kafka.broker.log.cleaner import iter_records
from pyspark_kafka.broker.log.compression import compress
from pyspark_kafka.broker.log.partition_log import PartitionLog
from pyspark_kafka.broker.log.record_batch import build_batch, parse_header
from pyspark_kafka.broker.log.records import encode_batch

T0 = 1_700_000_000_000
PAIRS = [(b"k%d" % i, b"value-%d" % i * 20) for i in range(50)]


def produced(codec: int, producer_id: int = -1, base_sequence: int = -1) -> bytes:
    """A client batch of PAIRS in ``codec`` (0-4), as a producer would send it."""
    plain = encode_batch(PAIRS, T0)
    header = parse_header(plain)
    body = compress(codec, plain[61:]) if codec else plain[61:]
    return build_batch(body, record_count=header.record_count, last_offset_delta=header.last_offset_delta,
                       base_timestamp=T0, max_timestamp=T0, attributes=codec, producer_id=producer_id,
                       producer_epoch=0 if producer_id >= 0 else -1, base_sequence=base_sequence)


def stored(plog: PartitionLog):
    segment = plog.active_segment
    return [(header, segment.read_batch(position, header.size)) for position, header in segment.iter_headers()]


def topic_log(tmp_path, **configs) -> PartitionLog:
    return PartitionLog("z", 0, tmp_path / "z-0", LogConfig.from_configs(BrokerConfig(), configs))


@pytest.mark.parametrize("topic_codec, sent, kept", [
    ("gzip", 3, "gzip"), ("snappy", 1, "snappy"), ("lz4", 4, "lz4"), ("zstd", 0, "zstd"),
    ("uncompressed", 4, "none"), ("producer", 2, "snappy"), ("producer", 0, "none"), ("lz4", 3, "lz4"),
])
def test_batches_are_stored_in_the_topic_codec(tmp_path, topic_codec, sent, kept):
    plog = topic_log(tmp_path, **{"compression.type": topic_codec})
    result = plog.append(produced(sent), now_ms=T0, from_client=True)
    assert (result.base_offset, result.last_offset) == (0, 49)
    [(header, batch)] = stored(plog)
    assert header.compression == kept and header.record_count == 50 and header.timestamp_type == "CreateTime"
    assert [(r.offset, r.key, r.timestamp) for r in iter_records(header, batch)] == [
        (i, k, T0) for i, (k, _) in enumerate(PAIRS)]
    plog.close()


def test_recompressed_batch_keeps_producer_fields_and_deduplicates(tmp_path):
    plog = topic_log(tmp_path, **{"compression.type": "zstd"})
    first = plog.append(produced(1, producer_id=5, base_sequence=0), now_ms=T0, from_client=True)
    again = plog.append(produced(1, producer_id=5, base_sequence=0), now_ms=T0, from_client=True)
    assert (again.base_offset, again.record_count) == (first.base_offset, 0)  # a retry: same offsets, nothing new
    [(header, _)] = stored(plog)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 0, 0)
    assert header.compression == "zstd" and plog.log_end_offset == 50
    plog.close()


def test_log_append_time_with_recompression_sets_the_flag_and_max_timestamp(tmp_path):
    plog = topic_log(tmp_path, **{"compression.type": "gzip", "message.timestamp.type": "LogAppendTime"})
    now = T0 + 5000
    result = plog.append(produced(0), now_ms=now, from_client=True)
    [(header, batch)] = stored(plog)
    assert result.log_append_time_ms == now
    assert (header.compression, header.timestamp_type, header.max_timestamp) == ("gzip", "LogAppendTime", now)
    assert {r.timestamp for r in iter_records(header, batch)} == {now}
    plog.close()


def test_a_batch_that_grows_past_max_message_bytes_is_refused(tmp_path):
    # 50 records of repetitive values: tiny in zstd, over 1000 bytes uncompressed
    plog = topic_log(tmp_path, **{"compression.type": "uncompressed", "max.message.bytes": "1000"})
    with pytest.raises(RecordTooLargeError, match="max.message.bytes=1000"):
        plog.append(produced(4), now_ms=T0, from_client=True)
    assert plog.log_end_offset == 0
    plog.close()


def test_a_client_record_set_is_exactly_one_batch(tmp_path):
    # Produce v3+: exactly one batch per partition (Kafka's ProduceRequest.validateRecords answers
    # INVALID_RECORD, measured on Kafka 4.3.1); the broker's own appends may carry more
    from pyspark_kafka.broker.errors import InvalidRecordError

    plog = topic_log(tmp_path)
    with pytest.raises(InvalidRecordError, match="exactly one record batch per partition") as info:
        plog.append(produced(0) + produced(0), now_ms=T0, from_client=True)
    assert info.value.error_code == 87 and plog.log_end_offset == 0
    assert plog.append(produced(0) + produced(0), now_ms=T0).record_count == 100
    plog.close()
