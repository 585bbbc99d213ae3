"""Shared fixtures: one embedded broker and one SparkSession per test session.

- ``broker``: :class:`pyspark_kafka.broker.EmbeddedBroker` on 127.0.0.1 with a free
  port and a temporary data directory, stopped at the end of the session; its retention
  check does not run during a session (records with old timestamps stay).
- ``bootstrap``: its ``host:port``.
- ``make_topic(partitions=3, config=None, name=None)``: creates a fresh topic through
  confluent-kafka's AdminClient (an independent client) and returns its name.
- ``spark``: one ``local[2]`` SparkSession for the whole run.
"""

from __future__ import annotations

import itertools
import os
import uuid

import pytest

from support.read_paths import READ_PATHS, use_read_path
from support.suite_schedule import longest_files_first
from support.topics import create_topic

_counter = itertools.count()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    from pyspark_kafka.broker import EmbeddedBroker

    # No time-based retention during the session: many tests write records with 2023 timestamps, and Kafka's rules
    # (ours too) roll a segment whose first record is older than segment.ms (7 days) and let the retention check (every
    # 5 min by default) delete it, so a test racing a check lost records. Tests of retention start their own broker.
    # No initial rebalance delay (Kafka's default 3000 ms), as the embedded test backend and Apache Kafka's test settings:
    # each new group's first join would wait 3 s. Tests of the delay start their own broker.
    from pyspark_kafka.testing.clusters import EMBEDDED_CONFIG

    delay = "group.initial.rebalance.delay.ms"
    config = {"log.retention.check.interval.ms": str(7 * 24 * 3600 * 1000), delay: EMBEDDED_CONFIG[delay]}
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("broker-data"), config=config) as b:
        yield b


@pytest.fixture(scope="session")
def bootstrap(broker) -> str:
    return broker.bootstrap_servers


@pytest.fixture
def make_topic(bootstrap, request):
    def _make(partitions: int = 3, config: dict | None = None, name: str | None = None) -> str:
        if name is None:
            base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
            name = f"t-{base}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
        return create_topic(bootstrap, name, partitions, config)

    return _make


@pytest.fixture(scope="session")
def spark():
    from pyspark_kafka.spark import get_spark

    session = get_spark("pyspark-kafka-tests", conf={"spark.default.parallelism": "2"})
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _active_spark_session():
    """Before each test: the session's SparkSession is the JVM's active one on this thread
    (support/spark_active.py: a streaming write resolves ``pykafka`` through it)."""
    from support.spark_active import pin_active_session

    pin_active_session()


@pytest.fixture(autouse=True)
def _close_pooled_clients():
    """Close the connector's pooled clients of this process after each test.

    Tests that call the reader or writer in-process (``reader.read(part)``,
    ``write_partition``) leave idle consumers and producers in the per-process pools
    (:func:`pyspark_kafka.kafka.clients.close_pooled_consumers`,
    :func:`pyspark_kafka.write.producer_pool.close_idle_producers`); closed here, none keeps
    reconnecting (and logging ``FAIL``) once a test's broker has stopped. Modules not
    imported by the test are not imported here (broker tests stay free of pyspark).
    """
    import sys

    try:
        yield
    finally:
        clients = sys.modules.get("pyspark_kafka.kafka.clients")
        if clients is not None:
            clients.close_pooled_consumers()
        producer_pool = sys.modules.get("pyspark_kafka.write.producer_pool")
        if producer_pool is not None:
            producer_pool.close_idle_producers()


@pytest.fixture
def checkpoint_dir(tmp_path):
    d = tmp_path / "checkpoint"
    return str(d)


@pytest.fixture(params=READ_PATHS)
def read_path(request, monkeypatch) -> str:
    """Run the test once per executor read path (``columnar``, ``consumer``); see support/read_paths.py."""
    return use_read_path(monkeypatch, request.param)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """Longest test files first (support/suite_schedule.py): pytest-xdist's workers then finish together."""
    longest_files_first(items)
