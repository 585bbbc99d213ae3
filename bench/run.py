"""Run every benchmark module present, print a table, write ``bench/results.json``.

Usage: ``python bench/run.py [--quick] [--only broker,read] [--output PATH]``;
``python bench/run.py --markdown bench/results.json`` prints an earlier run's table in Markdown.

Modules: ``bench/<name>_bench.py`` for name in :data:`MODULES`, each exposing
``run(quick: bool) -> list[dict]`` (rows built with :func:`common.metric`). A module
that is not there is skipped, one that raises :class:`common.Skipped` is recorded with the
reason (``skipped`` in the JSON), as is each part a module leaves out and lists in its
``SKIPPED`` dict (``{part: reason}``); one that fails is reported and the others still run.
``--quick`` uses small data (5 min 16 s at load 4-8 on the shared 2 cores: the Apache Kafka and
Spark-connector anchors start JVMs and a second Spark driver; under 3 without them). The JSON also
records the run's duration and the 1/5/15-minute load averages before and after it (a
shared machine makes every figure slower and noisier).
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

MODULES = ("broker", "read", "write", "pipeline", "spark_connector", "read_paths", "replication")


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
    if s is None:
        return "-"
    fewer = f" (n={s['n']})" if s["n"] < common.REPETITIONS else ""
    return f"{_fmt(s['median'])} [{_fmt(s['min'])}..{_fmt(s['max'])}]{fewer}"


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


def markdown(rows: list[dict]) -> str:
    """The same table in Markdown (for ``docs/benchmarks.md``), from rows as ``results.json`` holds them."""
    lines = ["| module | metric | unit | pyspark-kafka median [min..max] | anchor median [min..max] | ratio | anchor |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['module']} | {r['metric']} | {r['unit']} | {_spread(r['project_summary'])} | "
              f"{_spread(r['anchor_summary'])} | {_fmt(r['ratio'])} | {r.get('anchor_label') or '-'} |" for r in rows]
    return "\n".join(lines)


def finite(value):
    """``value`` with every NaN or infinite float (anywhere in dicts and lists) replaced by ``None``,
    so that ``results.json`` is strict JSON (``rate()`` gives ``inf`` for a zero duration)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, timeout=10).stdout.rstrip("\n")
    except (OSError, subprocess.SubprocessError):
        return None


def _git_commit() -> str | None:
    return (_git("rev-parse", "HEAD") or "").strip() or None


def _git_modified() -> list[str] | None:
    """Tracked files that differ from the commit (the run measured those, not the commit's)."""
    out = _git("status", "--porcelain", "--untracked-files=no")
    return None if out is None else [line[3:] for line in out.splitlines()]


def main(argv: list[str] | None = None) -> int:
    """Run the selected modules; exit code 1 when one of them failed (its error is in the JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small data, finishes in about 5-6 minutes")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(MODULES)}")
    parser.add_argument("--output", default=os.path.join(HERE, "results.json"))
    parser.add_argument("--markdown", metavar="RESULTS_JSON",
                        help="run nothing: print the table of an earlier run's results file in Markdown")
    args = parser.parse_args(argv)
    if args.markdown:
        with open(args.markdown, encoding="utf-8") as f:
            print(markdown(json.load(f)["metrics"]))
        return 0
    wanted = args.only.split(",") if args.only else list(MODULES)

    load_before = os.getloadavg()
    run_started = time.monotonic()
    rows: list[dict] = []
    failures: dict[str, str] = {}
    skipped: dict[str, str] = {}
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
            for part, reason in getattr(module, "SKIPPED", {}).items():  # parts left out, with the reason
                skipped[f"{name}/{part}"] = reason
                print(f"[skip] {name}_bench {part}: {reason}", file=sys.stderr)
        except common.Skipped as e:
            skipped[name] = str(e)
            print(f"[skip] {name}_bench: {e}", file=sys.stderr)
        except Exception:  # one broken module must not hide the others' numbers
            failures[name] = traceback.format_exc()
            print(f"[fail] {name}_bench:\n{failures[name]}", file=sys.stderr)
        durations[name] = round(time.monotonic() - started, 1)

    print(table(rows))
    result = {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "git_commit": _git_commit(),
        "git_modified_files": _git_modified(),
        "machine": common.machine_info(),
        "duration_s": round(time.monotonic() - run_started, 1),
        "durations_s": durations,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "failures": failures,
        "skipped": skipped,
        "metrics": rows,
    }
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(finite(result), f, indent=2, allow_nan=False)
    print(f"wrote {args.output}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
