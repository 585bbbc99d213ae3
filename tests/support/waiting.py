"""Polling until a condition holds, bounded: the one wait loop of the tests."""

from __future__ import annotations

import time


def wait_until(condition, what: str = "the condition", timeout_s: float = 30.0, interval_s: float = 0.1):
    """Call ``condition()`` every ``interval_s`` until it returns a truthy value and return that value;
    fail naming ``what`` when it is still false after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
