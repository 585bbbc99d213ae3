"""Broker log lines that no client can forge.

Group ids, member ids (which embed the client id), transactional ids, topic names in error
messages and peer-supplied bytes reach the broker's log lines. A value with a newline or
another control character could start a fake log line ("...\\n2026-01-01 ERROR ..."). Every
broker module takes its logger from :func:`get_logger`, whose filter escapes control
characters (C0, DEL, C1 and the Unicode line and paragraph separators) in the string and
exception arguments of each record, as ``\\xNN`` / ``\\uNNNN``. The format strings themselves
are the broker's own and are left alone.
"""

from __future__ import annotations

import logging
import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape(text: str) -> str:
    """``text`` with control characters written as escapes (``"a\\nb"`` → ``"a\\\\x0ab"``)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        text)


def _safe(value):
    if isinstance(value, str):
        return escape(value) if _CONTROL.search(value) else value
    if isinstance(value, BaseException):
        text = str(value)
        return escape(text) if _CONTROL.search(text) else value
    return value


class EscapeClientStrings(logging.Filter):
    """Escapes control characters in a record's string and exception arguments (never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(_safe(a) for a in args)
        elif isinstance(args, dict):
            record.args = {k: _safe(v) for k, v in args.items()}
        return True


_FILTER = EscapeClientStrings()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with :class:`EscapeClientStrings` attached (once)."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger
