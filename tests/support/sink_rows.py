"""Rows for the sink tests: Arrow batches with Spark's Kafka column types."""

from __future__ import annotations

import pyarrow as pa


def arrow(rows):
    """Arrow batch with Spark's Kafka column types from ``(topic, partition, offset)`` triples."""
    t, p, o = zip(*rows) if rows else ((), (), ())
    return pa.record_batch(
        [
            pa.array(t, pa.string()),
            pa.array(p, pa.int32()),
            pa.array(o, pa.int64()),
            pa.array([f"{a}-{b}-{c}" for a, b, c in rows], pa.string()),
        ],
        names=["topic", "partition", "offset", "value"],
    )


def recs(topic, partition, start, end):
    """``(topic, partition, offset)`` for offsets ``start`` to ``end - 1``."""
    return [(topic, partition, o) for o in range(start, end)]
