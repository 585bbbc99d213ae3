"""tools/flake_finder.py on a tiny synthetic test module: one test fails on odd runs (a counter file), one always
passes, one is skipped. Each run is a fresh pytest process of a one-file module outside the repository (about 1 s)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "flake_finder.py"


@pytest.fixture(scope="module")
def ff():
    spec = importlib.util.spec_from_file_location("flake_finder", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["flake_finder"] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["flake_finder"]
    return module


SAMPLE = '''
import pytest
from pathlib import Path

COUNTER = Path(__file__).with_name("counter.txt")


def test_odd_runs_fail():
    n = int(COUNTER.read_text()) + 1 if COUNTER.exists() else 1
    COUNTER.write_text(str(n))
    assert n % 2 == 0, f"odd run {n}"


def test_always_passes():
    assert COUNTER.parent.is_dir()


@pytest.mark.skip(reason="never runs")
def test_skipped():
    pass
'''


def test_failure_rate_and_distinct_failures_of_a_flaky_test(ff, tmp_path, capsys):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    lines = []
    report = ff.find_flakes([str(tmp_path / "test_sample.py")], 3, report_dir=tmp_path / "reports", echo=lines.append)
    assert [r.exit_code for r in report.runs] == [1, 0, 1]
    flaky = next(t for t in report.seen if t.endswith("::test_odd_runs_fail"))
    assert (report.failed, report.seen[flaky]) == ({flaky: 2}, 3)
    assert {t.rsplit("::", 1)[1] for t in report.seen} == {"test_odd_runs_fail", "test_always_passes"}
    # two distinct failures: the first line names the run's counter
    assert sorted(report.distinct.items()) == [((flaky, "AssertionError: odd run 1"), [1]),
                                               ((flaky, "AssertionError: odd run 3"), [3])]
    text = ff.format_report(report, ["pytest", "test_sample.py"], hog=False)
    assert f"  2/3     67 %  {flaky}" in text
    assert f"- {flaky}: AssertionError: odd run 1  [runs 1]" in text
    assert "assert (1 % 2) == 0" in text  # the traceback's last lines follow
    assert len(lines) == 3 and lines[0].startswith("run 1/3: exit 1, 3 tests, 1 failed")
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == ["run-1.xml", "run-2.xml", "run-3.xml"]

    # the same reports summarized again without running anything (e.g. whole-suite runs of CI and of a laptop)
    capsys.readouterr()
    assert ff.main(["--from-reports", *(str(tmp_path / "reports" / f"run-{i}.xml") for i in (1, 2, 3))]) == 1
    assert f"  2/3     67 %  {flaky}" in capsys.readouterr().out


def test_the_hog_is_killed_and_the_total_timeout_stops_the_runs(ff, tmp_path, monkeypatch):
    # the sample blocks on a FIFO nobody writes (no sleep): only the tool's total timeout ends it
    os.mkfifo(tmp_path / "never")
    (tmp_path / "test_slow.py").write_text(f"def test_blocks():\n    open({str(tmp_path / 'never')!r}).read()\n")
    hogs = []
    real = ff.Hog

    class Spy(real):
        def __init__(self):
            super().__init__()
            hogs.append(self)

    monkeypatch.setattr(ff, "Hog", Spy)
    report = ff.find_flakes([str(tmp_path / "test_slow.py")], 5, hog=True, timeout_s=3, report_dir=tmp_path / "r",
                            echo=lambda _: None)
    assert [r.exit_code for r in report.runs] == [None]  # killed at the total timeout; no second run started
    assert report.runs[0].seconds < 30
    (hog,) = hogs
    assert hog.proc.poll() is not None  # killed by pid and reaped
    with pytest.raises(ProcessLookupError):
        os.kill(hog.pid, 0)
    assert "run 1: no junit report (exit None)" in ff.format_report(report, ["pytest"], hog=True)


def test_bad_arguments_are_refused(ff, capsys):
    with pytest.raises(SystemExit) as e:
        ff.main(["-n", "0", "tests"])
    assert e.value.code == 2 and "-n/--runs must be at least 1, got 0" in capsys.readouterr().err


def test_junit_classnames_become_pytest_ids(ff):
    assert ff._test_id("tests.connector.write.test_writer_kafka", "test_a[plain]") == \
        "tests/connector/write/test_writer_kafka.py::test_a[plain]"
    assert ff._test_id("tests.x.test_y.TestGroup", "test_z") == "tests/x/test_y.py::TestGroup::test_z"
