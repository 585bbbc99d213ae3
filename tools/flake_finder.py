"""Flake finder: run a pytest selection N times, each in a fresh process, and report each test's failure rate.

    python tools/flake_finder.py -n 5 --hog --timeout 3600 -- tests/connector/write -k full_producer_queue

Each run is ``python -m pytest -p no:cacheprovider --junitxml=<tmp>/run-<i>.xml -q <selection>`` in the current
directory (no state carried between runs: no cache, a new process, a new junit report). ``--hog`` keeps one core
busy for the whole time (a child process spinning in a loop, pinned to the last CPU where the OS allows it),
killed by its pid at the end, also after a failure or Ctrl-C; it reproduces the "other work on the machine" of CI.
``--from-reports A.xml B.xml ...`` runs nothing and summarizes junit reports already written (whole-suite runs of
CI and of a laptop, each too long to repeat here). ``--timeout`` bounds the total time: the run in progress is killed (its whole process group) when it is reached,
and no further run starts.

The report lists every test that failed or errored at least once with its failure rate (failed runs / runs that
reported the test), then each distinct failure (test id + the first line of the exception) with the runs it
happened in and the first lines of its traceback; runs that left no junit report (killed, crashed collection) are
listed with their exit code and the end of their output. Exit status: 0 when no test failed, 1 otherwise, 2 for bad
arguments. docs/testing.md ("Finding flaky tests") says how the team uses it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

DETAIL_LINES = 8
"""Lines of a failure's traceback shown in the report (its last lines: where it failed, and why)."""


@dataclass(frozen=True)
class Outcome:
    """One test's result in one run: ``test_id`` ``path::name`` (from the junit classname), ``status`` one of
    passed/failed/error/skipped, ``first_line`` the exception's first line ("" when it passed), ``detail`` the
    traceback text."""

    test_id: str
    status: str
    first_line: str = ""
    detail: str = ""


@dataclass
class RunResult:
    """One pytest run: its number (1-based), exit code (None: killed at the total timeout), outcomes, output tail."""

    index: int
    exit_code: int | None
    outcomes: list[Outcome]
    seconds: float
    output_tail: str = ""


def _test_id(classname: str, name: str) -> str:
    """``tests/a/test_b.py::TestC::test_d`` from junit's ``tests.a.test_b.TestC`` and ``test_d``."""
    parts = classname.split(".") if classname else []
    # the module is the longest dotted prefix; pytest writes classes after it (capitalised by convention)
    split = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts))
    module = "/".join(parts[:split])
    return "::".join(x for x in (f"{module}.py" if module else "", *parts[split:], name) if x)


def parse_junit(path: Path) -> list[Outcome]:
    """The outcomes of a pytest junit-xml report (``--junitxml``). Raises ET.ParseError for a malformed file."""
    outcomes = []
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = _test_id(case.get("classname", ""), case.get("name", ""))
        status, first, detail = "passed", "", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed" if child.tag == "failure" else "error"
                message = (child.get("message") or "").strip()
                detail = (child.text or "").strip()
                first = (message or detail or child.tag).splitlines()[0]
                break
            if child.tag == "skipped":
                status = "skipped"
        outcomes.append(Outcome(test_id, status, first, detail))
    return outcomes


@dataclass
class Report:
    """Per test: runs that reported it and runs where it failed; distinct failures with their runs."""

    runs: list[RunResult]
    seen: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    distinct: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    example: dict[tuple[str, str], str] = field(default_factory=dict)


def summarize(runs: list[RunResult]) -> Report:
    """Count each test's runs and failures (failed or error), group failures by (test id, first line)."""
    report = Report(runs)
    for run in runs:
        for o in run.outcomes:
            if o.status == "skipped":
                continue
            report.seen[o.test_id] = report.seen.get(o.test_id, 0) + 1
            if o.status in ("failed", "error"):
                report.failed[o.test_id] = report.failed.get(o.test_id, 0) + 1
                key = (o.test_id, o.first_line)
                report.distinct.setdefault(key, []).append(run.index)
                report.example.setdefault(key, o.detail)
    return report


def format_report(report: Report, command: list[str], hog: bool) -> str:
    """The text report: runs, then failure rates (highest first), then each distinct failure's first lines."""
    lines = [f"flake finder: {len(report.runs)} run(s) of {' '.join(command)}" + (" with a CPU hog on one core"
                                                                                  if hog else ""),
             "run  exit  seconds  passed  failed  error  skipped"]
    for run in report.runs:
        counts = {s: sum(1 for o in run.outcomes if o.status == s) for s in ("passed", "failed", "error", "skipped")}
        code = "kill" if run.exit_code is None else str(run.exit_code)
        lines.append(f"{run.index:>3}  {code:>4}  {run.seconds:7.1f}  {counts['passed']:>6}  {counts['failed']:>6}  "
                     f"{counts['error']:>5}  {counts['skipped']:>7}")
    no_report = [r for r in report.runs if not r.outcomes]
    for run in no_report:
        lines.append(f"run {run.index}: no junit report (exit {run.exit_code}); output ends:")
        lines.extend("    " + x for x in run.output_tail.splitlines()[-DETAIL_LINES:])
    if not report.failed:
        lines.append(f"no failures: {len(report.seen)} test(s) passed in every run that reported them")
        return "\n".join(lines)
    lines.append("")
    lines.append("failure rate  test")
    for test_id, n in sorted(report.failed.items(), key=lambda kv: (-kv[1] / report.seen[kv[0]], kv[0])):
        lines.append(f"{n:>3}/{report.seen[test_id]:<3} {100 * n / report.seen[test_id]:4.0f} %  {test_id}")
    lines.append("")
    lines.append("distinct failures (test id + first line of the exception):")
    for (test_id, first), runs in sorted(report.distinct.items()):
        lines.append(f"- {test_id}: {first}  [runs {', '.join(map(str, runs))}]")
        detail = [x for x in report.example[(test_id, first)].splitlines() if x.strip()]
        lines.extend("    " + x for x in detail[-DETAIL_LINES:])
    return "\n".join(lines)


class Hog:
    """A child process that keeps one core busy (``while True: pass``) until :meth:`stop` kills it by pid."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if len(cpus) > 1:
            try:
                os.sched_setaffinity(self.proc.pid, {cpus[-1]})  # one core, as "another job" would use it
            except OSError:
                pass

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """Kill the hog (SIGKILL by its pid) and reap it; safe to call twice."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def run_once(index: int, selection: list[str], report_dir: Path, timeout_s: float | None) -> RunResult:
    """One fresh ``python -m pytest`` of ``selection`` writing ``run-<index>.xml``; killed (its process group) when
    ``timeout_s`` passes (exit code None then)."""
    xml = report_dir / f"run-{index}.xml"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={xml}", "-q", *selection]
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own group: a timeout kills its brokers and JVMs too
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    outcomes = []
    if xml.exists():
        try:
            outcomes = parse_junit(xml)
        except ET.ParseError:
            outcomes = []
    return RunResult(index, code, outcomes, time.monotonic() - started, (out or "")[-4000:])


def result_from_report(index: int, xml: Path) -> RunResult:
    """A :class:`RunResult` read from an existing junit report (exit code 0 when it has no failure, else 1).
    FileNotFoundError or ``xml.etree.ElementTree.ParseError`` for a missing or broken report."""
    outcomes = parse_junit(xml)
    failed = any(o.status in ("failed", "error") for o in outcomes)
    suites = [ET.parse(xml).getroot()]
    seconds = sum(float(s.get("time", 0)) for s in (suites[0].iter("testsuite") if suites[0].tag != "testsuite"
                                                    else suites))
    return RunResult(index, 1 if failed else 0, outcomes, seconds)


def find_flakes(selection: list[str], runs: int, hog: bool = False, timeout_s: float | None = None,
                report_dir: Path | None = None, echo=print) -> Report:
    """Run ``selection`` ``runs`` times (bounded by ``timeout_s`` in total, None: unbounded), optionally beside a
    :class:`Hog`; returns the :class:`Report`. The hog is killed on every exit path (also KeyboardInterrupt)."""
    report_dir = Path(report_dir or tempfile.mkdtemp(prefix="flake-finder-"))
    report_dir.mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    results: list[RunResult] = []
    hogger = Hog() if hog else None
    try:
        for i in range(1, runs + 1):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                echo(f"flake finder: --timeout reached after {len(results)} run(s)")
                break
            result = run_once(i, selection, report_dir, left)
            results.append(result)
            failed = sum(1 for o in result.outcomes if o.status in ("failed", "error"))
            echo(f"run {i}/{runs}: exit {result.exit_code}, {len(result.outcomes)} tests, {failed} failed, "
                 f"{result.seconds:.0f} s")
    finally:
        if hogger is not None:
            hogger.stop()
    return summarize(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/flake_finder.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=5, help="how many pytest runs (default 5)")
    parser.add_argument("--hog", action="store_true", help="keep one core busy with a spinning child process")
    parser.add_argument("--timeout", type=float, default=None, help="total seconds for all runs (default: none)")
    parser.add_argument("--report-dir", default=None, help="where the junit reports go (default: a new temp dir)")
    parser.add_argument("--from-reports", nargs="+", metavar="JUNIT_XML", default=None,
                        help="run nothing: summarize these junit reports (e.g. whole-suite runs of CI and of your machine)")
    parser.add_argument("selection", nargs="*", help="pytest arguments: paths, -k, -m ... (after --)")
    args = parser.parse_args(argv)
    if args.from_reports:
        report = summarize([result_from_report(i, Path(p)) for i, p in enumerate(args.from_reports, 1)])
        print(format_report(report, ["pytest (reports: " + ", ".join(args.from_reports) + ")"], False))
        return 1 if report.failed else 0
    if args.runs < 1:
        parser.error(f"-n/--runs must be at least 1, got {args.runs}")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    report = find_flakes(args.selection, args.runs, args.hog, args.timeout, args.report_dir)
    print(format_report(report, ["pytest", *args.selection], args.hog))
    return 1 if report.failed or any(r.exit_code not in (0, 5) for r in report.runs) else 0


if __name__ == "__main__":
    sys.exit(main())
