"""How far a streaming query is behind its topics: Spark's Kafka source metrics, from query progress.

Spark's own Kafka source reports ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and
``avgOffsetsBehindLatest`` in each progress's ``sources[].metrics`` (``KafkaMicroBatchStream.metrics``).
pyspark's Python streaming source API (4.3) has no hook for custom source metrics, so pykafka
reports the latest offsets it saw instead (``reportLatestOffset``: the progress's
``sources[].latestOffset``), and this module computes the same three numbers from a progress:

- :func:`offsets_behind_latest` — from one progress (a ``StreamingQueryProgress`` or its JSON dict);
- :class:`OffsetLagListener` — a ``StreamingQueryListener`` keeping the numbers of the last
  progress of every query, for dashboards and tests: ``spark.streams.addListener(OffsetLagListener())``.

Per partition, behind = latest offset - end offset of the micro-batch (never below 0);
partitions in ``latestOffset`` that the batch's end offsets lack count from 0.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

METRICS = ("minOffsetsBehindLatest", "maxOffsetsBehindLatest", "avgOffsetsBehindLatest")


def _offsets(value: Any) -> dict[tuple[str, str], int]:
    if value is None:
        return {}
    if isinstance(value, str):
        value = json.loads(value) if value.strip() not in ("", "null") else {}
    return {(topic, part): int(off) for topic, parts in value.items() for part, off in parts.items()}


def offsets_behind_latest(progress: Any) -> dict[str, str] | None:
    """Spark's three lag metrics (strings, as in ``SourceProgress.metrics``) for the first source
    of ``progress`` that reports a latest offset, or None when none does.

    ``progress``: a pyspark ``StreamingQueryProgress`` or its ``json.loads(progress.json)`` dict.
    """
    if not isinstance(progress, dict):
        progress = json.loads(progress.json)
    for source in progress.get("sources", []):
        latest = _offsets(source.get("latestOffset"))
        if not latest:
            continue
        end = _offsets(source.get("endOffset"))
        behind = [max(0, off - end.get(tp, 0)) for tp, off in latest.items()]
        return {"minOffsetsBehindLatest": str(min(behind)), "maxOffsetsBehindLatest": str(max(behind)),
                "avgOffsetsBehindLatest": str(sum(behind) / len(behind))}
    return None


class OffsetLagListener(StreamingQueryListener):
    """Keeps :func:`offsets_behind_latest` of each query's last progress in ``lag[query id]``.

    ``history[query id]`` lists them in progress order. Register with
    ``spark.streams.addListener(listener)``; remove with ``spark.streams.removeListener``.
    """

    def __init__(self) -> None:
        self.lag: dict[str, dict[str, str]] = {}
        self.history: dict[str, list[dict[str, str]]] = {}

    def onQueryStarted(self, event) -> None:  # noqa: N802 - Spark's listener API
        pass

    def onQueryProgress(self, event) -> None:  # noqa: N802
        metrics = offsets_behind_latest(event.progress)
        if metrics is not None:
            qid = str(event.progress.id)
            self.lag[qid] = metrics
            self.history.setdefault(qid, []).append(metrics)

    def onQueryIdle(self, event) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        pass
