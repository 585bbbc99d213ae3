"""The executor's column building (``_ColumnBuilder``) against a row-by-row reference.

``_ColumnBuilder`` turns whole ``consume()`` results into Arrow chunks without Python work per
record; the reference here builds the same batch one Python row at a time
(``RecordBatch.from_pylist``), the obvious per-record implementation. Messages are real
confluent-kafka ``Message`` objects (its constructor), covering null and empty keys and values,
the three timestamp types, headers, and several ``add`` calls per batch.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from confluent_kafka import Message

from pyspark_kafka import offsets as O
from pyspark_kafka.read.partition_reader import _arrow_schema, _ColumnBuilder

TOPIC, PARTITION = "col-topic", 3


def _messages(start: int, count: int) -> list:
    """``count`` messages from offset ``start`` with a gap every 7th offset (as after compaction)."""
    out, offset = [], start
    for i in range(count):
        out.append(Message(
            topic=TOPIC, partition=PARTITION, offset=offset,
            key=None if i % 5 == 0 else (b"" if i % 5 == 1 else b"k%d" % i),
            value=None if i % 11 == 0 else (b"" if i % 11 == 1 else b"v" * (i % 50)),
            headers=None if i % 3 else [("h", b"%d" % i), ("n", None)],
            timestamp=(i % 3, 1_700_000_000_000 + i) if i % 3 else (0, -1),
        ))
        offset += 2 if i % 7 == 6 else 1
    return out


def _reference(msgs: list, include_headers: bool) -> pa.RecordBatch:
    """The batch built one Python row at a time (Kafka's timestamp type ids: confluent-kafka's minus 1)."""
    rows = []
    for m in msgs:
        ts_type, ts_ms = m.timestamp()
        row = {
            "key": m.key(), "value": m.value(), "topic": TOPIC, "partition": PARTITION, "offset": m.offset(),
            "timestamp": dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=ts_ms),
            "timestampType": ts_type - 1,
        }
        if include_headers:
            row["headers"] = [{"key": k, "value": v} for k, v in m.headers()] if m.headers() else None
        rows.append(row)
    return pa.RecordBatch.from_pylist(rows, schema=_arrow_schema(include_headers))


@pytest.mark.parametrize("include_headers", [False, True])
@pytest.mark.parametrize("chunks", [[1], [40], [13, 0, 27, 1]])
def test_flush_equals_row_by_row_reference(include_headers, chunks):
    msgs = _messages(100, sum(chunks))
    builder = _ColumnBuilder(O.OffsetRange(TOPIC, PARTITION, 0, 10_000), include_headers)
    pos = 0
    for size in chunks:
        builder.add(msgs[pos:pos + size])
        pos += size
    assert builder.rows == len(msgs)
    assert builder.bytes == sum(len(m.key() or b"") + len(m.value() or b"") for m in msgs)
    batch = builder.flush()
    batch.validate(full=True)
    expected = _reference(msgs, include_headers)
    assert batch.schema == expected.schema
    for name in expected.schema.names:
        assert batch.column(name).to_pylist() == expected.column(name).to_pylist(), name
    assert batch.equals(expected)


def test_flush_resets_and_empty_flush_is_an_empty_batch():
    builder = _ColumnBuilder(O.OffsetRange(TOPIC, PARTITION, 0, 100), False)
    first = _messages(0, 5)
    builder.add(first)
    assert builder.flush().num_rows == 5
    assert (builder.rows, builder.bytes) == (0, 0)
    empty = builder.flush()
    assert empty.num_rows == 0 and empty.schema == _arrow_schema(False)
    second = _messages(50, 3)
    builder.add(second)
    assert builder.flush().column("offset").to_pylist() == [m.offset() for m in second]
