"""docs/comparison.md states only tested sameness: every option-table row that says "Same" names
the differential cases that ran it through both connectors, and every name it gives is a case of
:mod:`integration_tests.reference.test_reference_batch` or :mod:`~.test_reference_stream`.

Runs without Spark or a broker (it reads the page and the suites' case lists)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from integration_tests.reference import test_reference_batch as batch
from integration_tests.reference import test_reference_stream as stream

DOC = Path(__file__).resolve().parents[2] / "docs" / "comparison.md"
CELL_NAME = re.compile(r"`([a-z0-9_]+)`")
NO_CASE_CELLS = {"—", "every case"}


def _option_rows() -> list[tuple[str, str, str]]:
    """``(option, pykafka cell, cases cell)`` of the Reading and Writing option tables."""
    rows = []
    for section in ("## Reading", "## Writing"):
        text = DOC.read_text(encoding="utf-8").split(section, 1)[1].split("\n## ", 1)[0]
        table = [line for line in text.splitlines() if line.startswith("| ")]
        header, body = table[0], table[1:]
        assert header.rstrip().endswith("| run side by side with Spark's connector |"), header
        for line in body:
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            rows.append((cells[0], cells[-2], cells[-1]))
    return rows


def _all_cases() -> set[str]:
    return set(batch._case_names(("rows", "partitions", "error", "write", "stream_write"))) | \
        set(stream._case_names(None)) | set(stream._case_names("error")) | \
        set(stream._case_names(None, "stream_new_topic"))


def test_the_option_tables_are_found():
    rows = _option_rows()
    assert len(rows) >= 30, rows  # both tables parsed, not an empty split
    assert {"`subscribe`", "`topic`"} <= {option for option, _, _ in rows}


@pytest.mark.parametrize("option, says, cases", _option_rows(), ids=lambda v: v[:40] if isinstance(v, str) else v)
def test_every_same_row_names_existing_cases(option, says, cases):
    known = _all_cases()
    named = CELL_NAME.findall(cases) if cases not in NO_CASE_CELLS else []
    assert set(named) <= known, f"{option}: no such differential case {sorted(set(named) - known)}"
    if says.startswith("Same") and cases != "every case" and not cases.startswith("every `write_"):
        assert named, f"{option} says 'Same' but names no differential case that proves it"
