"""``meta.properties``: a data directory's identity (cluster id, node id, directory id), as Apache Kafka keeps it.

Apache Kafka 4.4 (``org.apache.kafka.metadata.properties.MetaProperties`` / ``MetaPropertiesEnsemble`` in
kafka-server-common) writes ``meta.properties`` in every log directory when ``kafka-storage format`` runs and checks it
at every start. A KRaft node's file is version 1 with four keys, written by ``java.util.Properties.store`` (a blank
comment, a date comment, then ``key=value`` lines)::

    #
    #Sun Nov 29 05:18:35 UTC 2026
    node.id=1
    directory.id=3JoxwHIh8ttZfckEt4XXHA
    version=1
    cluster.id=dCmmMXIeSEejSxCa9C8_hw

Here a node writes the file on its first start (there is no format step) and checks it at every later start:

- a stored ``node.id`` other than the configured one refuses the start (Kafka's message, plus the fix); nothing is
  written;
- a stored ``cluster.id`` other than the one the node must have (a split cluster's controller: the voter set's) refuses
  the start the same way; a combined node has no other source, so its stored cluster id is the cluster id (a moved
  data directory keeps it, where the id derived from the directory's path would change);
- a data directory written before this file existed gets one on its next start (no refusal).

Kafka refuses a log directory without ``meta.properties`` ("No readable meta.properties files found"); this broker
has no format step, so it writes one instead.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from pyspark_kafka.broker.errors import KafkaStorageError

FILE_NAME = "meta.properties"
VERSION = 1  # KRaft (Kafka's MetaPropertiesVersion.V1: cluster.id and node.id always present)


class MetaPropertiesError(KafkaStorageError, RuntimeError):
    """``meta.properties`` disagrees with this node's config or cannot be read: the node does not start.

    The message names the file, both values and the fix (Kafka's ``MetaPropertiesEnsemble.verify`` texts)."""


@dataclass(frozen=True)
class MetaProperties:
    """One ``meta.properties``: ``version`` (1), ``cluster_id`` (22-character base64 Kafka Uuid), ``node_id``,
    ``directory_id`` (this log directory's Kafka Uuid, KIP-858)."""

    cluster_id: str
    node_id: int
    directory_id: str
    version: int = VERSION

    def lines(self) -> list[str]:
        """The ``key=value`` lines in the order Kafka 4.4's ``Properties.store`` wrote them on this machine."""
        return [f"node.id={self.node_id}", f"directory.id={self.directory_id}", f"version={self.version}",
                f"cluster.id={self.cluster_id}"]


def new_directory_id() -> str:
    """A random directory id as Kafka's ``Uuid.randomUuid`` makes one: 16 random bytes in URL-safe base64 without
    padding, never starting with ``-`` and never one of the reserved ids (the first 100, KIP-858)."""
    while True:
        raw = uuid.uuid4().bytes
        if int.from_bytes(raw[:8], "big") == 0 and int.from_bytes(raw[8:], "big") < 100:
            continue
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def read(data_dir: Path) -> MetaProperties | None:
    """The ``meta.properties`` of ``data_dir``, or None when there is none.

    Raises :class:`MetaPropertiesError` for a file that cannot be parsed, has a version other than 1, or lacks
    ``cluster.id`` or ``node.id`` (Kafka's ``MetaProperties.Builder`` texts)."""
    path = Path(data_dir) / FILE_NAME
    try:
        text = path.read_text(encoding="latin-1")
    except (FileNotFoundError, NotADirectoryError):  # a data dir that is a file: the log manager names it
        return None
    except OSError as exc:
        raise MetaPropertiesError(f"cannot read {path}: {exc}") from exc
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        props[key.strip()] = value.strip() if sep else ""
    fix = f"restore the file or remove {path} (the node then writes a new one from its config)"
    version = props.get("version", "0")
    if version != str(VERSION):
        raise MetaPropertiesError(f"{path}: version {version!r}, this broker reads version {VERSION} (KRaft) only; "
                                  f"{fix}")
    if not props.get("cluster.id"):
        raise MetaPropertiesError(f"cluster.id was not specified in the v1 file: {path}; {fix}")
    try:
        node_id = int(props["node.id"])
    except (KeyError, ValueError):
        raise MetaPropertiesError(f"node.id was not specified in {path} (or is not a base-10 number); {fix}") from None
    return MetaProperties(props["cluster.id"], node_id, props.get("directory.id") or "", VERSION)


def write(data_dir: Path, meta: MetaProperties) -> None:
    """Write ``data_dir/meta.properties`` atomically (a ``.tmp`` file, fsync, rename, fsync of the directory, as
    Kafka's ``PropertiesUtils.writePropertiesFile``). Raises OSError."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / FILE_NAME
    tmp = data_dir / (FILE_NAME + ".tmp")
    stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime())
    with open(tmp, "w", encoding="latin-1") as f:
        f.write("\n".join(["#", f"#{stamp}", *meta.lines()]) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure(data_dir: Path, node_id: int, cluster_id: str, cluster_id_is_fixed: bool = False) -> MetaProperties:
    """Check ``data_dir/meta.properties`` against this node, or write it when there is none; return what holds.

    ``node_id``: the configured ``node.id``. ``cluster_id``: the id to write when there is no file; with
    ``cluster_id_is_fixed`` (the node's cluster id comes from elsewhere, e.g. the voter set) also the id the file must
    hold, else the stored id wins (a combined node keeps its cluster id when its data directory moves).
    Raises :class:`MetaPropertiesError` (nothing written) when the stored node id differs, or the stored cluster id
    differs from a fixed one, or the file is unreadable; OSError when it cannot be written."""
    data_dir = Path(data_dir)
    path = data_dir / FILE_NAME
    stored = check_node_id(data_dir, node_id)
    if stored is None:
        meta = MetaProperties(cluster_id, node_id, new_directory_id())
        write(data_dir, meta)
        return meta
    if cluster_id_is_fixed and stored.cluster_id != cluster_id:
        raise MetaPropertiesError(
            f"Invalid cluster.id in: {path}. Expected {cluster_id}, but read {stored.cluster_id}. This data "
            "directory belongs to another cluster: start this node on an empty data directory, or use the "
            "cluster's own config (controller.quorum.voters) with this directory.")
    if not stored.directory_id:  # a file without directory.id (Kafka adds one at its next start)
        stored = MetaProperties(stored.cluster_id, stored.node_id, new_directory_id())
        write(data_dir, stored)
    return stored


def check_node_id(data_dir: Path, node_id: int) -> MetaProperties | None:
    """The stored ``meta.properties`` of ``data_dir`` (None when there is none) after checking its node id against
    the configured ``node_id``. Writes nothing.

    Raises :class:`MetaPropertiesError` when the node ids differ (Kafka's ``MetaPropertiesEnsemble.verify`` message,
    plus the fix) or the file is unreadable."""
    stored = read(data_dir)
    if stored is not None and stored.node_id != node_id:
        raise MetaPropertiesError(
            f"Stored node id {stored.node_id} doesn't match previous node id {node_id} in {Path(data_dir) / FILE_NAME}. "
            "If you moved your data, make sure your configured node id matches. If you intend to create a new node, "
            f"you should remove all data in your data directories. (Here: set node.id={stored.node_id}, or start this "
            "node on an empty data directory.)")
    return stored


def note_cluster_id(data_dir: Path, node_id: int, cluster_id: str) -> MetaProperties:
    """A split cluster's broker learns its cluster id from the controller at registration: write ``meta.properties``
    with it when there is none (its node id was checked at start, :func:`check_node_id`), else return the stored one.

    A stored cluster id is returned as stored (the broker sent it in its registration, and the controller refuses
    another cluster's with INCONSISTENT_CLUSTER_ID, as Kafka's does). Raises OSError when it cannot write."""
    stored = read(data_dir)
    if stored is None:
        stored = MetaProperties(cluster_id, node_id, new_directory_id())
        write(data_dir, stored)
    return stored
