"""Fixtures of the group coordinator tests.

- ``gbroker``: per test module, an embedded broker with fast group timing
  (:data:`support.groups.BROKER_CONFIG`: no initial rebalance delay, 1 s minimum session timeout).
- ``topic``: a fresh topic of :data:`support.groups.PARTITIONS` partitions on it.
"""

from __future__ import annotations

import uuid

import pytest

from pyspark_kafka.broker import EmbeddedBroker
from support.groups import BROKER_CONFIG, PARTITIONS, wait_for_group_coordinator
from support.topics import create_topic


@pytest.fixture(scope="module")
def gbroker(request, tmp_path_factory):
    name = request.module.__name__.rpartition(".")[2].removeprefix("test_").replace("_", "-")
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp(name), config=BROKER_CONFIG) as b:
        wait_for_group_coordinator(b.bootstrap_servers)  # as a client does before its first group request
        yield b


@pytest.fixture
def topic(gbroker):
    return create_topic(gbroker.bootstrap_servers, f"g-{uuid.uuid4().hex[:10]}", PARTITIONS)
