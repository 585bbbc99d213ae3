"""The whole suite's order: the longest test files first, so pytest-xdist's workers finish together.

The suite runs on two pytest-xdist workers with whole files per worker (``-n 2 --dist loadfile`` in
setup.cfg). xdist hands files out in collection order, so a long file collected last (the failover
scenarios take about 5 minutes) would run alone at the end while the other worker idles. Putting the
long files first is the classic longest-processing-time-first schedule: the short files fill the gaps.

:data:`FILE_SECONDS` holds the measured seconds of the longest files (one whole run on two xdist
workers on the 2-core machine, 2026-11-26); files not listed keep their collection order after them. Refresh it from a JUnit
report when the balance drifts: ``python tests/support/suite_schedule.py report.xml``.
"""

from __future__ import annotations

import collections
import sys
import xml.etree.ElementTree as ET

FILE_SECONDS: dict[str, int] = {
    "tests/connector/sinks/test_sink_kill.py": 400,  # + table kills and executor kills (2026-11-28, estimated)
    "integration_tests/test_failover.py": 334,
    "integration_tests/reference/test_reference_stream.py": 199,
    "integration_tests/reference/test_reference_batch.py": 190,
    "integration_tests/test_differential.py": 166,
    "integration_tests/test_conformance.py": 152,
    "tests/test_flights_pipeline.py": 140,  # + the --sink delta kill run (70 s alone, load 5-6, 2026-11-28)
    "tests/broker/cluster/test_embedded_cluster.py": 101,
    "tests/connector/write/test_writer_eos_kill.py": 98,
    "integration_tests/test_secured_spark.py": 95,
    "integration_tests/test_spark_distributed.py": 85,
    "integration_tests/reference/test_reference_tables.py": 75,  # alone, load 7 (2026-11-28)
    "integration_tests/test_e2e_exactly_once.py": 73,
    "integration_tests/test_bench_anchors.py": 68,
    "tests/connector/sinks/test_sink_tables.py": 66,
    "integration_tests/test_cooperative_rebalance.py": 65,
    "integration_tests/test_two_broker_kill.py": 55,
    "tests/broker/cluster/test_cluster_admin.py": 50,
    "tests/connector/write/test_writer_kafka.py": 49,
    "integration_tests/test_spark_connect.py": 39,
    "integration_tests/reference/test_reference_env.py": 36,
    "tests/connector/sinks/test_sink_sql.py": 36,
    "integration_tests/test_e2e_reader.py": 36,
    "integration_tests/test_e2e_writer.py": 35,
    "tests/broker/cluster/test_controller_failover.py": 32,
    "tests/test_cli.py": 31,
}
"""Seconds per test file (path from the repository root) in one whole-suite run on two workers."""


def longest_files_first(items: list) -> None:
    """Reorder pytest ``items`` in place: files of :data:`FILE_SECONDS`, longest first, then every other
    file in its collection order. Within a file the order is kept (pytest's grouping of parametrized
    fixtures stays intact). Idempotent, so both conftests may call it."""
    position = {}
    for index, item in enumerate(items):
        position.setdefault(_file_of(item), index)
    items.sort(key=lambda item: (-FILE_SECONDS.get(_file_of(item), 0), position[_file_of(item)]))


def _file_of(item) -> str:
    return item.nodeid.split("::", 1)[0]


def seconds_per_file(junit_xml: str) -> dict[str, float]:
    """Seconds per test file in a JUnit report (pytest's ``--junitxml``), longest first."""
    totals: collections.Counter = collections.Counter()
    for case in ET.parse(junit_xml).iter("testcase"):
        parts = case.get("classname", "").split(".")
        if parts and parts[-1][:1].isupper():  # a test class
            parts = parts[:-1]
        totals["/".join(parts) + ".py"] += float(case.get("time", 0))
    return dict(totals.most_common())


if __name__ == "__main__":
    for path, seconds in list(seconds_per_file(sys.argv[1]).items())[:20]:
        print(f'    "{path}": {round(seconds)},')
