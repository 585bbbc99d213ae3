"""Run the client conformance matrix and write its results and ``docs/compatibility.md``.

    python -m integration_tests.conformance                  # fresh embedded broker, all cells
    python -m integration_tests.conformance --bootstrap HOST:PORT --no-write
    python -m integration_tests.conformance --render-only    # docs from the last results.json
    python -m integration_tests.conformance --client kcat --scenario fetch.offset

Exit status 1 when a cell failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile

from integration_tests import clusters
from integration_tests.conformance import matrix


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m integration_tests.conformance", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", help="run against this cluster instead of a fresh embedded broker")
    parser.add_argument("--client", action="append", help="only this client (repeatable)")
    parser.add_argument("--scenario", action="append", help="only this scenario id (repeatable)")
    parser.add_argument("--no-write", action="store_true", help="print only; keep results.json and the docs")
    parser.add_argument("--render-only", action="store_true", help="regenerate the docs from results.json")
    args = parser.parse_args(argv)

    if args.render_only:
        results = json.loads(matrix.RESULTS_PATH.read_text())
    else:
        with contextlib.ExitStack() as stack:
            if args.bootstrap:
                cluster = clusters.Cluster("external", args.bootstrap, clusters.api_versions(args.bootstrap))
            else:
                cluster = stack.enter_context(clusters.embedded(stack.enter_context(tempfile.TemporaryDirectory())))
            results = matrix.run_matrix(cluster, args.client, args.scenario)
        if not args.no_write:
            matrix.write_results(results)
    if not args.no_write:
        matrix.DOC_PATH.write_text(matrix.render_markdown(results))
        print(f"wrote {matrix.RESULTS_PATH} and {matrix.DOC_PATH}")
    return 1 if matrix.failures(results) else 0


if __name__ == "__main__":
    sys.exit(main())
