"""The ``read_path`` fixture's work: run a reader test over both executor read paths.

A test (or module, through ``pytest.mark.usefixtures("read_path")``) that takes the ``read_path``
fixture runs twice, with ``readPath`` defaulting to ``columnar`` and then to ``consumer``
(:data:`pyspark_kafka.read.options.DEFAULT_READ_PATH`, read on the driver, which is this
process). Options a test passes itself still win.
"""

from __future__ import annotations

import pytest

READ_PATHS = ("columnar", "consumer")


def use_read_path(monkeypatch: pytest.MonkeyPatch, path: str) -> str:
    """Make ``path`` the default ``readPath`` of every read planned in this process; returns it."""
    from pyspark_kafka.read import options

    monkeypatch.setattr(options, "DEFAULT_READ_PATH", path)
    return path
