"""Run the conformance matrix (scenario × client) and render it as Markdown.

A cell is ``pass``, ``fail`` (the scenario raised; the reason is the error) or
``unsupported``: the broker does not advertise an API the scenario needs (checked with
ApiVersions before running), or the client cannot do it (``Driver.unsupported`` or
:class:`~integration_tests.conformance.scenarios.Unsupported` raised by the driver).
Every cell runs in its own thread bounded by :data:`CELL_TIMEOUT_S`.
"""

from __future__ import annotations

import datetime
import json
import textwrap
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from integration_tests import clusters as C
from integration_tests.conformance.scenarios import SCENARIOS, Context, Scenario, Unsupported

CELL_TIMEOUT_S = 120.0
PASS, FAIL, UNSUPPORTED = "pass", "fail", "unsupported"
BROKER_LACKS = "broker does not serve "
"""Prefix of the reason of a cell the broker cannot support (missing APIs)."""
REASON_CHARS = 300

REPO = Path(__file__).resolve().parents[2]
RESULTS_PATH = Path(__file__).resolve().parent / "results.json"
DOC_PATH = REPO / "docs" / "compatibility.md"


@dataclass(frozen=True)
class Cell:
    """One result: ``status`` is pass/fail/unsupported, ``reason`` empty for pass, ``seconds`` run time."""

    scenario: str
    client: str
    status: str
    reason: str = ""
    seconds: float = 0.0


def _short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."


def run_cell(scenario: Scenario, driver, ctx: Context, timeout_s: float = CELL_TIMEOUT_S) -> Cell:
    """Run one scenario with one driver in a daemon thread, at most ``timeout_s`` seconds."""
    outcome: dict = {}

    def target() -> None:
        try:
            scenario.run(ctx, driver)
            outcome["status"] = (PASS, "")
        except Unsupported as e:
            outcome["status"] = (UNSUPPORTED, str(e))
        except BaseException as e:  # the cell's verdict; the matrix goes on
            outcome["status"] = (FAIL, _short(e))
            outcome["trace"] = traceback.format_exc()

    started = time.monotonic()
    thread = threading.Thread(target=target, name=f"cell-{scenario.id}-{driver.name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    seconds = round(time.monotonic() - started, 2)
    if thread.is_alive():
        return Cell(scenario.id, driver.name, FAIL, f"timed out after {timeout_s:g} s", seconds)
    status, reason = outcome["status"]
    return Cell(scenario.id, driver.name, status, reason, seconds)


def run_matrix(cluster: C.Cluster, clients: list[str] | None = None, scenarios: list[str] | None = None,
               log=print) -> dict:
    """Run the selected scenarios (ids; default all) with the selected clients (default all)
    on ``cluster``; return the results document (see :func:`write_results`)."""
    from integration_tests.conformance.drivers import all_drivers

    ctx = Context(cluster)
    drivers = [cls(cluster.bootstrap) for name, cls in all_drivers().items() if clients is None or name in clients]
    chosen = [s for s in SCENARIOS if scenarios is None or s.id in scenarios]
    cells = []
    try:
        for scenario in chosen:
            missing = C.missing_apis(cluster.apis, scenario.apis)
            for driver in drivers:
                if missing:
                    cell = Cell(scenario.id, driver.name, UNSUPPORTED, BROKER_LACKS + ", ".join(missing))
                elif scenario.id in driver.unsupported:
                    cell = Cell(scenario.id, driver.name, UNSUPPORTED, driver.unsupported[scenario.id])
                else:
                    cell = run_cell(scenario, driver, ctx)
                log(f"{scenario.id:24} {driver.name:16} {cell.status:12} {cell.seconds:6.1f}s {cell.reason}")
                cells.append(cell)
        versions = {d.name: _version(d) for d in drivers}
    finally:
        for d in drivers:
            d.close()
    return {
        "generated": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "backend": cluster.name,
        "broker_apis": {f"{C.api_name(k)} ({k})": list(v) for k, v in sorted(cluster.apis.items())},
        "clients": versions,
        "scenarios": [{"id": s.id, "title": s.title} for s in chosen],
        "cells": [asdict(c) for c in cells],
    }


def _version(driver) -> str:
    try:
        return driver.version()
    except Exception as e:
        return f"{driver.name} (version unknown: {e})"


def failures(results: dict) -> list[dict]:
    """The ``fail`` cells of a results document."""
    return [c for c in results["cells"] if c["status"] == FAIL]


def write_results(results: dict, path: Path = RESULTS_PATH) -> None:
    """Save a results document as JSON (the input of :func:`render_markdown`)."""
    path.write_text(json.dumps(results, indent=2) + "\n")


_MARK = {PASS: "✅ pass", FAIL: "❌ fail", UNSUPPORTED: "➖ unsupported"}


TOOLS_SECTION = """## Kafka's own tools

Not part of the matrix above: each row is asserted, on the embedded broker and on Apache Kafka
alike, by the tool tests (Kafka's tools from the Maven Central jars; see [testing.md](testing.md)).

| tool (main class) | on the embedded broker |
|---|---|
| kafka-topics (`TopicCommand`): create with a config, describe, alter partitions, list, delete; duplicate create and shrinking refused | ✅ as Apache Kafka |
| kafka-console-producer / kafka-console-consumer (keys, `--group`) | ✅ as Apache Kafka |
| kafka-consumer-groups (`ConsumerGroupCommand`): list, describe with lag, reset-offsets `--to-earliest --execute`, delete | ✅ as Apache Kafka |
| kafka-consumer-groups on a KIP-848 group (console consumer with `group.protocol=consumer`): `--list --type`, describe with lag, `--state`, delete | ✅ as Apache Kafka |
| kafka-get-offsets (`GetOffsetShell`): latest, earliest | ✅ as Apache Kafka |
| kafka-transactions: list, describe | ✅ as Apache Kafka |
| kafka-configs (`ConfigCommand`): describe a topic's overrides; `--alter` add and delete configs, then describe; an invalid value refused | ✅ as Apache Kafka |
| kafka-transactions describe-producers (`TransactionsCommand`): an idempotent producer | ✅ as Apache Kafka |
| kafka-log-dirs (`LogDirsCommand`) `--describe --topic-list`: the topic's partitions and sizes | ✅ as Apache Kafka |
| kafka-delete-records (`DeleteRecordsCommand`): low watermark moved, earliest offset follows; an offset past the end refused | ✅ as Apache Kafka |
| kafka-dump-log (`DumpLogSegments`) on the broker's own `.log`, `.index`, `.timeindex`, `__consumer_offsets`, `__transaction_state` | ✅ valid; the producer-state `.snapshot` is this broker's own format |"""
"""The tools section of ``docs/compatibility.md`` (asserted by the tool tests, not by the matrix)."""

JAVA_SECTION = """## Kafka's Java client beyond the matrix

Not part of the matrix above: each row runs Kafka's Java client 4.3.1 (the driver's `produce`,
`produce_runs`, `consume_transform_produce`, `group_member` and `admin` commands) on the embedded
broker and on Apache Kafka 4.3.1 and compares the results field by field, or asserts the same
outcome on both.

| Java client feature | on the embedded broker |
|---|---|
| producer `acks=0`, `acks=1`, `acks=all`; idempotent; gzip, snappy, lz4, zstd; headers (a null header value too); explicit and broker timestamps; a 1,000,000-byte record: delivery reports (partition, offset, timestamp), what the Java consumer reads back, the stored batches' codec and producer id | ✅ as Apache Kafka |
| transactional consume-transform-produce with `sendOffsetsToTransaction` (group metadata, KIP-447): the output under read_committed, the group's committed offsets | ✅ as Apache Kafka |
| classic group protocol with `range`, `roundrobin`, `cooperative-sticky`: assignment shapes, DescribeGroups state, type and assignor | ✅ as Apache Kafka |
| admin: create topics (configs; existing, invalid config, replication factor too large refused), describe topics, create partitions (not more refused), describe configs with synonyms, incremental alter (SET, DELETE, APPEND; invalid value, unknown config, unknown topic refused) | ✅ as Apache Kafka |
| admin: list offsets (earliest, latest, latest read_committed, max timestamp, by timestamp, unknown topic), delete records (beyond the high watermark refused), describe cluster, describe log dirs | ✅ as Apache Kafka |
| admin: list groups, describe groups (unknown group), list group offsets, delete groups (unknown group refused), describe producers (open transaction, after the commit marker), list and describe transactions (Ongoing, CompleteCommit), delete topics | ✅ as Apache Kafka |
| incremental cooperative rebalancing (KIP-429), 12 partitions, 3 → 6 → 4 → 6 → 2 members, producing all along: converged after each round, no partition owned twice at once, every record consumed once; also librdkafka's and kafka-python's cooperative-sticky | ✅ as Apache Kafka |"""
"""The Java client section of ``docs/compatibility.md`` (asserted by the differential and rebalance tests)."""


def render_markdown(results: dict) -> str:
    """``docs/compatibility.md`` from a results document: the table plus numbered notes giving
    the reason of every cell that did not pass."""
    clients = list(results["clients"])
    by_cell = {(c["scenario"], c["client"]): c for c in results["cells"]}
    notes: dict[str, int] = {}
    lines = [
        "# Client compatibility of the embedded broker",
        "",
        *textwrap.wrap(
            "Generated by `python -m integration_tests.conformance` from the last run "
            f"({results['generated']}, backend `{results['backend']}`); do not edit by hand. "
            "The same scenario script is driven by each client through a small driver. "
            "`unsupported` means the broker does not advertise an API the scenario needs, or the client has no way "
            "to do it; `fail` means the scenario ran and did not give Kafka's result. "
            "A test fails on any `fail` of a scenario whose APIs the broker serves.", 110),
        "",
        "| scenario | " + " | ".join(clients) + " |",
        "|---|" + "---|" * len(clients),
    ]
    for s in results["scenarios"]:
        row = []
        for client in clients:
            cell = by_cell.get((s["id"], client))
            if cell is None:
                row.append("not run")
                continue
            text = _MARK[cell["status"]]
            if cell["reason"]:
                n = notes.setdefault(cell["reason"], len(notes) + 1)
                text += f" [{n}]"
            row.append(text)
        lines.append(f"| `{s['id']}`: {s['title']} | " + " | ".join(row) + " |")
    if notes:
        lines += ["", "Notes:", ""]
        lines += [textwrap.fill(f"{n}. {reason.replace('|', '/')}", 110, subsequent_indent="   ")
                  for reason, n in notes.items()]
    lines += ["", "Clients:", ""]
    lines += [f"- {name}: {version}" for name, version in results["clients"].items()]
    lines += ["", "APIs the broker advertised (ApiVersions, min–max version):", ""]
    lines += textwrap.wrap(", ".join(f"{name} {v[0]}–{v[1]}" for name, v in results["broker_apis"].items()), 110,
                           break_on_hyphens=False)
    lines += ["", TOOLS_SECTION, "", JAVA_SECTION]
    return "\n".join(lines) + "\n"
