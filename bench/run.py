"""Run every benchmark module present, print a table, write ``bench/results.json``.

Usage: ``python bench/run.py [--quick] [--only broker,read] [--output PATH]``

Modules: ``bench/<name>_bench.py`` for name in :data:`MODULES`, each exposing
``run(quick: bool) -> list[dict]`` (rows built with :func:`common.metric`). A module
that is not there is skipped; one that fails is reported and the others still run.
``--quick`` uses small data (target: under 3 minutes on 2 cores in total).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402

MODULES = ("broker", "read", "write", "pipeline")


def summarise(row: dict) -> dict:
    """A module's row plus ``project_summary``/``anchor_summary`` (median/min/max) and ``ratio``."""
    return {**row, "project_summary": common.summary(row["project"]),
            "anchor_summary": common.summary(row.get("anchor")),
            "ratio": common.ratio(row["project"], row.get("anchor"))}


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def _spread(s: dict | None) -> str:
    return "-" if s is None else f"{_fmt(s['median'])} [{_fmt(s['min'])}..{_fmt(s['max'])}]"


def table(rows: list[dict]) -> str:
    """Fixed-width table: metric, unit, ours median [min..max], anchor, ratio."""
    header = ("module", "metric", "unit", "pyspark-kafka median [min..max]", "anchor median [min..max]", "ratio",
              "anchor")
    lines = [header] + [
        (r["module"], r["metric"], r["unit"], _spread(r["project_summary"]), _spread(r["anchor_summary"]),
         _fmt(r["ratio"]), r.get("anchor_label") or "-")
        for r in rows
    ]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv: list[str] | None = None) -> int:
    """Run the selected modules; exit code 1 when one of them failed (its error is in the JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small data, finishes in about 3 minutes")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(MODULES)}")
    parser.add_argument("--output", default=os.path.join(HERE, "results.json"))
    args = parser.parse_args(argv)
    wanted = args.only.split(",") if args.only else list(MODULES)

    rows: list[dict] = []
    failures: dict[str, str] = {}
    durations: dict[str, float] = {}
    for name in wanted:
        if not os.path.exists(os.path.join(HERE, f"{name}_bench.py")):
            print(f"[skip] bench/{name}_bench.py not present", file=sys.stderr)
            continue
        print(f"[run] {name}_bench (quick={args.quick})", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            module = importlib.import_module(f"{name}_bench")
            rows += [summarise({**row, "module": name}) for row in module.run(args.quick)]
        except Exception:  # one broken module must not hide the others' numbers
            failures[name] = traceback.format_exc()
            print(f"[fail] {name}_bench:\n{failures[name]}", file=sys.stderr)
        durations[name] = round(time.monotonic() - started, 1)

    print(table(rows))
    result = {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "git_commit": _git_commit(),
        "machine": common.machine_info(),
        "durations_s": durations,
        "failures": failures,
        "metrics": rows,
    }
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.output}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
