"""librdkafka's log lines through Python ``logging``, each distinct line once a minute.

Without a ``logger``, librdkafka writes its log lines to stderr itself (``%3|...|FAIL|...``), one
per connection attempt: an unreachable bootstrap server printed about 57 lines per second of
retries before the error that names it. Every client this package makes gets
:data:`LIBRDKAFKA_LOG` as its confluent-kafka ``logger`` (:mod:`pyspark_kafka.kafka.clients`), so:

- the lines go to the Python logger ``pyspark_kafka.librdkafka`` (configure it like any logger;
  with no logging configured, Python prints WARNING and above to stderr);
- librdkafka's errors are logged as warnings: librdkafka retries what it logs (a refused
  connection, a broker going away), and a failure that ends a job reaches the job as an exception
  naming the cause; the Java client logs the same events at WARN;
- a line that differs from an earlier one only in its timing (``after 0ms in state CONNECT``),
  thread or client name is not logged again within :data:`REPEAT_AFTER_S`; the next one says how
  many were left out.

confluent-kafka forwards the lines when the client is polled (``poll``, ``consume``, ``flush``),
on the polling Python thread.
"""

from __future__ import annotations

import logging
import re
import threading
import time

LOGGER = logging.getLogger("pyspark_kafka.librdkafka")

REPEAT_AFTER_S = 60.0
"""A line already logged is left out for this long (then logged again, with the count left out)."""

MAX_KEYS = 1024
"""Distinct lines remembered; beyond this the memory starts afresh."""

_THREAD = re.compile(r"^\[thrd:[^\]]*\]:\s*")
_VOLATILE = re.compile(r"\s*\(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)|\d+ms")


class LibrdkafkaLog:
    """A confluent-kafka ``logger``: ``log(level, fmt, facility, client_name, message)``."""

    def __init__(self, logger: logging.Logger = LOGGER, repeat_after_s: float = REPEAT_AFTER_S):
        self._logger = logger
        self._repeat_after_s = repeat_after_s
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], float] = {}
        self._left_out: dict[tuple[str, str], int] = {}

    def log(self, level: int, fmt: str = "", fac: str = "", name: str = "", message: str = "", *rest) -> None:
        level = min(int(level), logging.WARNING)
        if not self._logger.isEnabledFor(level):
            return
        text = _THREAD.sub("", str(message))
        key = (str(fac), _VOLATILE.sub("", text))
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._repeat_after_s:
                self._left_out[key] = self._left_out.get(key, 0) + 1
                return
            if len(self._last) >= MAX_KEYS:
                self._last.clear()
                self._left_out.clear()
            self._last[key] = now
            left_out = self._left_out.pop(key, 0)
        more = f" ({left_out} more like it since)" if left_out else ""
        self._logger.log(level, "librdkafka %s: %s%s", fac, text, more)


LIBRDKAFKA_LOG = LibrdkafkaLog()
"""The ``logger`` of every client this package makes (one per process, so retries share it)."""


def with_logger(conf: dict) -> dict:
    """``conf`` with :data:`LIBRDKAFKA_LOG` as its ``logger`` unless it sets ``logger`` or ``log_cb``."""
    if "logger" in conf or "log_cb" in conf:
        return conf
    return {**conf, "logger": LIBRDKAFKA_LOG}
