"""The cluster metadata image as the state of metadata log snapshots (KIP-630).

:class:`ImageState` is the :class:`~pyspark_kafka.broker.controller.snapshots.SnapshotState` of the cluster metadata: a
:class:`~pyspark_kafka.broker.controller.image.ClusterImage` kept up to date from the committed records; a snapshot
holds :meth:`ClusterImage.snapshot_records` (whole records, as Kafka's snapshots hold ``TopicRecord``,
``PartitionRecord``, ... rather than deltas), so the image loaded from a snapshot plus the log after it equals the
image replayed from offset 0. :func:`metadata_snapshots` builds the snapshot keeper a metadata log uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from pyspark_kafka.broker.controller.image import ClusterImage, decode, encode
from pyspark_kafka.broker.controller.snapshots import MetadataSnapshots, SnapshotPolicy


class ImageState:
    """A :class:`ClusterImage` fed by committed records (``apply``), saved as and rebuilt from snapshot records."""

    def __init__(self) -> None:
        self.image = ClusterImage()

    def apply(self, offset: int, record: bytes) -> None:
        """Apply one committed record (raises ValueError for bytes that are not a metadata record)."""
        self.image.apply(offset, decode(record))

    def records(self) -> list[bytes]:
        """The image as snapshot records (bytes)."""
        return [encode(r) for r in self.image.snapshot_records()]

    def load(self, end_offset: int, records: list[bytes]) -> None:
        """A fresh image from ``records``, each applied at offset ``end_offset - 1``."""
        self.image = image_from_snapshot(end_offset, records)


def image_from_snapshot(end_offset: int, records: list[bytes]) -> ClusterImage:
    """The image a snapshot ending at ``end_offset`` rebuilds (every record applied at ``end_offset - 1``)."""
    image = ClusterImage()
    for raw in records:
        image.apply(end_offset - 1, decode(raw))
    image.offset = end_offset - 1
    return image


def metadata_snapshots(directory: str | Path,
                       config: Mapping[str, object] | Callable[[str], object] | None = None) -> MetadataSnapshots:
    """The snapshot keeper of a metadata log in ``directory`` (``__cluster_metadata-0``), with the
    ``metadata.log.max.record.bytes.between.snapshots`` / ``metadata.log.max.snapshot.interval.ms`` of ``config``
    (Kafka's defaults when absent). Raises ValueError for a malformed setting."""
    return MetadataSnapshots(directory, ImageState(), SnapshotPolicy.from_config(config or {}))
