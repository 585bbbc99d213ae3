"""A logging handler that keeps every formatted record (with its traceback) in memory, for tests
that assert what the broker logs (and that no secret is in it)."""

from __future__ import annotations

import logging


class LogCapture(logging.Handler):
    """``LogCapture()``: ``lines`` holds each record's formatted text plus its exception text."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record) + (record.exc_text or ""))
