"""The broker's clock: wall-clock time in ms since the epoch, as Kafka's timestamps and timeouts use."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock time in ms since the epoch."""
    return time.time_ns() // 1_000_000
