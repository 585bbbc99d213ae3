"""The leader-epoch cache and its checkpoint file (Kafka's ``LeaderEpochFileCache`` and
``leader-epoch-checkpoint``, KIP-101).

Entries ``(leader epoch, start offset)``: the first offset written at each leader epoch, epochs and offsets both
increasing. The file is Kafka's text format: a version line ``0``, the entry count, then ``epoch offset`` lines,
rewritten atomically (temp file + rename) on every change.
"""

from __future__ import annotations

import os
from pathlib import Path

FILE_NAME = "leader-epoch-checkpoint"


class LeaderEpochCache:
    """``LeaderEpochCache(partition_dir)`` loads ``leader-epoch-checkpoint`` (a missing or malformed file = empty)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / FILE_NAME
        self.entries: list[tuple[int, int]] = []
        try:
            lines = self.path.read_text().split("\n")
            count = int(lines[1])
            self.entries = [tuple(int(x) for x in line.split()) for line in lines[2:2 + count]]
        except (OSError, ValueError, IndexError):
            self.entries = []

    def latest_epoch(self) -> int:
        """The newest leader epoch (-1 when empty)."""
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (ignored unless newer than the latest epoch)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        self.entries = [(e, o) for e, o in self.entries if o < start_offset] + [(epoch, start_offset)]
        self._write()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(largest epoch <= epoch, its end offset)`` (Kafka's ``endOffsetFor``): the end of an epoch is the start
        of the next one; the latest epoch ends at ``log_end_offset``; ``(-1, -1)`` for epoch -1 (undefined) and
        when ``epoch`` is newer than every known epoch (Kafka's ``LeaderEpochFileCache.endOffsetFor``: "the requested
        epoch is larger than any known epoch"); ``(epoch, start of the first known epoch)`` when ``epoch`` is older
        than every known one (as the single node answers it)."""
        if not self.entries or epoch > self.entries[-1][0] or epoch == -1:
            return -1, -1
        if epoch < self.entries[0][0]:  # older than every known epoch: it ends where the first known one starts
            return epoch, self.entries[0][1]
        found = -1
        for i, (e, _) in enumerate(self.entries):
            if e <= epoch:
                found = i
        if found < 0:
            return -1, -1
        end = self.entries[found + 1][1] if found + 1 < len(self.entries) else log_end_offset
        return self.entries[found][0], end

    def truncate_from_end(self, offset: int) -> None:
        """Drop the epochs starting at or after ``offset`` (the log was truncated there)."""
        kept = [(e, o) for e, o in self.entries if o < offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def _write(self) -> None:
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        body = "0\n%d\n%s" % (len(self.entries), "".join(f"{e} {o}\n" for e, o in self.entries))
        with open(tmp, "w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
