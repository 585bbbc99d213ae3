"""Small files in the data directory, written atomically (temp file + fsync + rename + fsync dir).

Offset checkpoints use Kafka's text format (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``)::

    0                  <- version
    2                  <- number of entries
    my-topic 0 1234    <- topic partition offset
    my-topic 1 99
"""

from __future__ import annotations

import os
from pathlib import Path
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger(__name__)

CHECKPOINT_VERSION = 0


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename or unlink inside it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (created or truncated) and fsync it before returning."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new content."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    write_synced(tmp, data)
    os.replace(tmp, path)
    fsync_dir(path.parent)


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
