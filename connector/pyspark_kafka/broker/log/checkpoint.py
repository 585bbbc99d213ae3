"""Small files in the data directory, written atomically (temp file + fsync + rename + fsync dir,
see :func:`pyspark_kafka.kafka.fsutil.atomic_write`).

Offset checkpoints use Kafka's text format (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``)::

    0                  <- version
    2                  <- number of entries
    my-topic 0 1234    <- topic partition offset
    my-topic 1 99
"""

from __future__ import annotations

from pathlib import Path

from pyspark_kafka.broker.log_escape import get_logger

# The durable-write helpers live in pyspark_kafka.kafka.fsutil (shared with the connector's file sinks);
# they are re-exported here for the broker modules that import them from this module.
from pyspark_kafka.kafka.fsutil import atomic_write, fsync_dir, write_synced  # noqa: F401

log = get_logger(__name__)

CHECKPOINT_VERSION = 0


def write_offset_checkpoint(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    """Write ``{(topic, partition): offset}`` in Kafka's checkpoint format, atomically."""
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    atomic_write(path, ("\n".join(lines) + "\n").encode())


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Read a checkpoint file; a missing file is empty. A malformed one is logged and treated as
    empty, which only makes the next load re-validate more (never less) data."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return {}
    try:
        lines = text.splitlines()
        if int(lines[0]) != CHECKPOINT_VERSION:
            raise ValueError(f"unsupported version {lines[0]!r}")
        count = int(lines[1])
        entries = lines[2 : 2 + count]
        if len(entries) != count:
            raise ValueError(f"expected {count} entries, found {len(entries)}")
        result = {}
        for line in entries:
            topic, partition, offset = line.split(" ")
            result[(topic, int(partition))] = int(offset)
        return result
    except (ValueError, IndexError) as e:
        log.warning("ignoring malformed checkpoint %s (%s): affected logs are fully re-validated", path, e)
        return {}
