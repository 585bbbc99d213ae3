"""A write task's result (Spark's ``WriterCommitMessage``): :class:`KafkaCommitMessage`, and their sums.

Each task returns one message to the driver, which sums them in ``commit`` / ``abort``
(:func:`summarize`); a failed task's message is None.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from pyspark.sql.datasource import WriterCommitMessage


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    """Result of one write task: acknowledged records per ``(topic, partition)``.

    Exactly-once tasks also report their ``transactional_id`` and ``skipped=True`` when the
    marker showed their rows as already committed (a replay or a retry), so nothing was written.
    """

    counts: dict = field(default_factory=dict)
    transactional_id: str | None = None
    skipped: bool = False

    @property
    def records(self) -> int:
        """Acknowledged records of the task, all partitions together."""
        return sum(self.counts.values())


def summarize(messages: Iterable[KafkaCommitMessage | None]) -> dict:
    """Sum the per-partition counts of the tasks' commit messages (None = failed task)."""
    total: Counter = Counter()
    for m in messages:
        if m is not None:
            total.update(m.counts)
    return dict(total)


def skipped_tasks(messages) -> int:
    """Number of exactly-once tasks that found their rows already committed."""
    return sum(1 for m in messages if m is not None and m.skipped)
