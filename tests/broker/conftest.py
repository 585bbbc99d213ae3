"""Fixtures of the broker tests (the session ``broker``, ``bootstrap`` and ``make_topic`` are in
``tests/conftest.py``).

- ``written``: per test module, a topic with 50 known records (gzip) produced before any malformed
  or oversized input; :func:`support.malformed.assert_nothing_lost` checks they read back intact.
- ``tools``: per test module, Kafka's tools in one JVM (:class:`support.kafka_tools.ToolServer`); skips when
  Kafka's jars cannot be had.
"""

from __future__ import annotations

import os

import pytest

from support.client_records import RECORDS, produce
from support.kafka_tools import tool_server_for_module
from support.topics import create_topic


@pytest.fixture(scope="module")
def written(bootstrap, broker):
    """A topic with known records, produced before any malformed input."""
    topic = create_topic(bootstrap, f"malformed-guard-{os.getpid()}-{os.urandom(3).hex()}", partitions=1)
    records = RECORDS[:50]
    produce(bootstrap, topic, records, **{"compression.codec": "gzip"})
    return topic, records


@pytest.fixture(scope="module")
def tools():
    """Kafka's tools in one JVM (``support.kafka_tools.ToolServer``); skips when the jars cannot be had."""
    yield from tool_server_for_module()
