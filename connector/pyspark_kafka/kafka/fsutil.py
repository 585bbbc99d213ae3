"""Durable file writes shared by the embedded broker and the connector's file sinks.

Imports nothing from :mod:`pyspark_kafka` (the broker must not pull in the connector and the
connector must not pull in the broker). The crash-safety recipe is the usual POSIX one, also
Kafka's (``Utils.atomicMoveWithFallback`` + ``flushDir``): write a temp file in the target's
directory, fsync it, move it into place, then fsync the directory so the new name is durable.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Union

StrPath = Union[str, "os.PathLike[str]"]


def fsync_dir(path: StrPath) -> None:
    """fsync directory ``path`` so a create, rename or unlink inside it survives a crash.

    Raises :class:`OSError` (e.g. ``FileNotFoundError``) when the directory cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: StrPath) -> None:
    """fsync the already written file ``path`` (e.g. one a library such as pyarrow wrote and closed)."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def write_synced(path: StrPath, data: bytes) -> None:
    """Write ``data`` to ``path`` (created or truncated) and fsync it before returning."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write(path: StrPath, data: bytes, *, overwrite: bool = True) -> None:
    """Put ``data`` at ``path`` so a crash leaves either no change or the whole new content.

    - ``overwrite=True``: the temp file is ``<name>.tmp`` beside ``path`` (one writer per file;
      the broker's loaders delete leftovers by that suffix) and ``os.replace`` moves it over any
      old file.
    - ``overwrite=False``: create-only. The temp file is ``.tmp-<uuid>`` (concurrent writers may
      race for the name) and ``os.link`` publishes it, which raises :class:`FileExistsError` when
      ``path`` already exists: exactly one writer wins (the file sink's commit protocol). The temp
      file is removed either way; the directory is fsynced only after a successful publish.

    Raises :class:`OSError` from the file system, :class:`FileExistsError` as above.
    """
    path = Path(path)
    if overwrite:
        tmp = path.with_name(path.name + ".tmp")
        write_synced(tmp, data)
        os.replace(tmp, path)
    else:
        tmp = path.with_name(f".tmp-{uuid.uuid4().hex}")
        write_synced(tmp, data)
        try:
            os.link(tmp, path)
        finally:
            os.unlink(tmp)
    fsync_dir(path.parent)
