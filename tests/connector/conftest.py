"""Connector test fixtures: pooled clients of the test process never outlive their broker.

Tests that call the reader or writer in this process (``reader.read(part)``,
``write_partition``) leave idle consumers and producers in the per-process pools
(:func:`pyspark_kafka.clients.pooled_consumer`, ``writer._acquire``). After each
test they are closed, so none keeps reconnecting (and logging ``FAIL``) once a
test's own broker, or the session broker, has stopped.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _close_pooled_clients():
    from pyspark_kafka.clients import close_pooled_consumers
    from pyspark_kafka.writer import close_idle_producers

    try:
        yield
    finally:
        close_pooled_consumers()
        close_idle_producers()
