"""The client conformance matrix on the embedded broker.

Runs every scenario with every client (confluent-kafka, kafka-python, aiokafka, kcat, Kafka's
Java client) and fails on any ``fail`` of a scenario whose APIs the broker advertises in
ApiVersions (read here from the broker's handler registry, which is what ApiVersions is built
from). An ``unsupported`` cell is accepted only for an honest reason: the broker lacks an API,
or the client declares it cannot do the scenario (always, or under a declared condition). kcat
and the Java client are left out, with a warning naming the reason, where they cannot run.
``docs/compatibility.md`` is regenerated from a run with ``python -m integration_tests.conformance``.
"""

from __future__ import annotations

import shutil
import warnings

import pytest

from integration_tests.conformance import matrix
from integration_tests.conformance.drivers import all_drivers, java_client
from integration_tests.conformance.scenarios import SCENARIOS


def _missing_clients() -> dict[str, str]:
    """{client: why it cannot run here}: kcat without its binary (Debian package kcat), Kafka's
    Java client without a JDK or Kafka's jars from Maven Central."""
    missing = {} if shutil.which("kcat") else {"kcat": "kcat is not installed (apt-get install kcat)"}
    why = java_client.unavailable()
    if why:
        missing["java"] = why
    return missing


def _installed_clients() -> list[str]:
    """Every client of the matrix that can run here."""
    missing = _missing_clients()
    return [name for name in all_drivers() if name not in missing]


@pytest.fixture(scope="module")
def results(embedded_cluster):
    for client, why in _missing_clients().items():
        warnings.warn(f"{client} is left out of the conformance matrix: {why}")
    return matrix.run_matrix(embedded_cluster, clients=_installed_clients())


def test_the_broker_advertises_exactly_its_handler_registry(embedded_cluster):
    from pyspark_kafka.broker.handlers import REGISTRY

    served = {key: (api.min_version, api.max_version) for key, api in REGISTRY.items()}
    assert embedded_cluster.apis == served


@pytest.mark.slow
def test_no_client_fails_a_scenario_the_broker_supports(results):
    assert len(results["cells"]) == len(SCENARIOS) * len(_installed_clients())
    failed = [f"{c['scenario']} × {c['client']}: {c['reason']}" for c in matrix.failures(results)]
    assert failed == [], "\n".join(failed)


@pytest.mark.slow
def test_unsupported_cells_have_an_honest_reason(results):
    drivers = all_drivers()
    for cell in results["cells"]:
        if cell["status"] != matrix.UNSUPPORTED:
            continue
        driver = drivers[cell["client"]]
        assert (cell["reason"].startswith(matrix.BROKER_LACKS)
                or cell["reason"] == driver.unsupported.get(cell["scenario"])
                or cell["scenario"] in driver.unsupported_when), cell


@pytest.mark.slow
def test_core_scenarios_pass_for_every_client(results):
    core = {"metadata", "produce.none", "fetch.offset", "fetch.timestamp"}
    not_passing = [c for c in results["cells"] if c["scenario"] in core and c["status"] != matrix.PASS]
    assert not_passing == []


def test_markdown_lists_every_cell_and_the_reasons():
    results = {
        "generated": "2026-01-01T00:00:00+00:00", "backend": "embedded",
        "broker_apis": {"Produce (0)": [3, 11]}, "clients": {"a": "a 1.0", "b": "b 2.0"},
        "scenarios": [{"id": "metadata", "title": "Metadata"}, {"id": "fetch.offset", "title": "Fetch"}],
        "cells": [
            {"scenario": "metadata", "client": "a", "status": "pass", "reason": "", "seconds": 0.1},
            {"scenario": "metadata", "client": "b", "status": "fail", "reason": "boom | bang", "seconds": 0.1},
            {"scenario": "fetch.offset", "client": "a", "status": "unsupported", "reason": "no way", "seconds": 0},
        ],
    }
    text = matrix.render_markdown(results)
    assert "| scenario | a | b |" in text
    assert "| `metadata`: Metadata | ✅ pass | ❌ fail [1] |" in text
    assert "| `fetch.offset`: Fetch | ➖ unsupported [2] | not run |" in text
    assert "1. boom / bang" in text and "2. no way" in text
    assert "Produce (0) 3–11" in text and "- b: b 2.0" in text
