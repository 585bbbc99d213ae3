"""The columnar decoders' coverage-guided fuzzer (``tests/support/fuzz_decoders.py``), bounded for CI.

3,000 inputs with a fixed seed (about 2 s of fuzzing after the imports): no input may make our
decoders raise anything but CorruptRecordError, make numba and numpy disagree, or return rows
that kafka-python's reader (Kafka's checks) refuses or reads differently. A longer run:
``docs/fuzzing.md``, "Fuzzing the columnar decoders".
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SUPPORT = Path(__file__).resolve().parents[2] / "support"
RUNS = 3000
SEED = 20261128


def test_decoders_survive_coverage_guided_fuzzing(tmp_path):
    pytest.importorskip("atheris", reason="atheris (libFuzzer for Python) is not installed: pip install atheris")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    cmd = [sys.executable, str(SUPPORT / "fuzz_decoders.py"), f"-runs={RUNS}", f"-seed={SEED}", "-timeout=20",
           "-rss_limit_mb=3072", f"-artifact_prefix={tmp_path}/", str(corpus)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    crashes = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-")))
    assert proc.returncode == 0 and not crashes, (
        f"libFuzzer found {crashes} (exit {proc.returncode}); reproduce with: {' '.join(cmd)}\n"
        + "\n".join(proc.stderr.splitlines()[-40:]))
    done = re.search(r"^Done (\d+) runs", proc.stderr, re.MULTILINE)
    assert done and int(done.group(1)) >= RUNS, proc.stderr[-2000:]
