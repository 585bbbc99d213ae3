"""The broker's docs stay true to its code, and the broker stays free of PySpark.

- Every API table row (``| Name (key) | min–max | ...``) in the broker docs names a served API with
  exactly the versions of the handler registry; ``docs/broker.md`` lists all of them. The names are
  kio's (Kafka's JSON schema names).
- Every config table row gives Kafka's name and the default of ``BROKER_DEFAULTS`` (and, in the
  storage table, the broker config that supplies a topic config's default).

``python tests/broker/test_docs.py`` prints the API rows of ``docs/broker.md`` from the registry
(fill in the notes column by hand).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from kio.index import load_request_schema

from pyspark_kafka.broker.config import BROKER_DEFAULTS, TOPIC_CONFIG_TO_BROKER
from pyspark_kafka.broker.handlers import load_handlers

DOCS = Path(__file__).resolve().parents[2] / "docs"
BROKER_DOCS = ("broker.md", "broker-storage.md", "transactions.md", "consumer-groups-broker.md")
API_ROW = re.compile(r"^\|\s*(\w+) \((\d+)\)\s*\|\s*(\d+)(?:\s*[–-]\s*(\d+))?\s*\|", re.M)
TABLE_ROW = re.compile(r"^\|(.+)\|\s*$", re.M)
CONFIG_NAME = re.compile(r"^`([a-z0-9.]+)`")


def registry_rows() -> dict[int, tuple[str, int, int]]:
    """``{api key: (name, min version, max version)}`` of every served API."""
    return {
        key: (load_request_schema(key, api.max_version).__name__.removesuffix("Request"), api.min_version,
              api.max_version)
        for key, api in load_handlers().items()
    }


def doc_api_rows(doc: str) -> dict[int, tuple[str, int, int]]:
    """The API rows of ``docs/<doc>`` as ``{api key: (name, min version, max version)}``."""
    rows = {}
    for name, key, low, high in API_ROW.findall((DOCS / doc).read_text()):
        rows[int(key)] = (name, int(low), int(high or low))
    return rows


def doc_config_defaults(doc: str) -> list[tuple[str, str | None, str]]:
    """``(broker config, topic config or None, default cell)`` of each config table row of ``docs/<doc>``.

    A row starting with a backticked broker config gives its default in the next cell; a row of
    the storage table (topic config, broker config, default) gives the default in the third.
    """
    found = []
    for line in TABLE_ROW.findall((DOCS / doc).read_text()):
        cells = [c.strip() for c in line.split("|")]
        first = CONFIG_NAME.match(cells[0])
        if first is None or len(cells) < 3:
            continue
        second = CONFIG_NAME.match(cells[1])
        if second is not None and first.group(1) in TOPIC_CONFIG_TO_BROKER:
            found.append((second.group(1), first.group(1), cells[2]))
        elif first.group(1) in BROKER_DEFAULTS:
            found.append((first.group(1), None, cells[1]))
    return found


def test_broker_md_lists_every_served_api_with_its_versions():
    assert doc_api_rows("broker.md") == registry_rows()


@pytest.mark.parametrize("doc", ["transactions.md", "consumer-groups-broker.md"])
def test_api_tables_of_the_family_docs_match_the_registry(doc):
    rows = doc_api_rows(doc)
    registry = registry_rows()
    assert rows, f"no API table found in docs/{doc}"
    assert rows == {key: registry.get(key) for key in rows}


@pytest.mark.parametrize("doc", BROKER_DOCS)
def test_config_tables_give_kafka_names_and_our_defaults(doc):
    rows = doc_config_defaults(doc)
    for broker_name, topic_name, cell in rows:
        if topic_name is not None:
            assert TOPIC_CONFIG_TO_BROKER[topic_name] == broker_name, (doc, topic_name)
        default = BROKER_DEFAULTS[broker_name]
        shown = cell.split()[0].strip("`")
        assert shown == ("none" if default is None else default), (doc, broker_name, cell)
    assert rows, f"no config table found in docs/{doc}"


def test_importing_the_broker_does_not_import_pyspark():
    code = ("import sys, pyspark_kafka.broker.server as s; s.load_handlers(); "
            "assert 'pyspark' not in sys.modules, 'the broker imported pyspark'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


if __name__ == "__main__":
    for key, (name, low, high) in sorted(registry_rows().items()):
        print(f"| {name} ({key}) | {low}–{high} | |" if low != high else f"| {name} ({key}) | {low} | |")
