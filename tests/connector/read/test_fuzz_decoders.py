"""The columnar decoders' coverage-guided fuzzer (``tests/support/fuzz_decoders.py``), bounded for CI.

3,000 inputs with a fixed seed (about 2 s of fuzzing after the imports): no input may make our
decoders raise anything but CorruptRecordError, make numba and numpy disagree, or return rows
that kafka-python's reader (Kafka's checks) refuses or reads differently. A longer run:
``docs/fuzzing.md``, "Fuzzing the columnar decoders".
"""

from __future__ import annotations

from pathlib import Path

from support.libfuzzer import run_bounded

SUPPORT = Path(__file__).resolve().parents[2] / "support"
RUNS = 3000
SEED = 20261128


def test_decoders_survive_coverage_guided_fuzzing(tmp_path):
    run_bounded(SUPPORT / "fuzz_decoders.py", tmp_path, RUNS, SEED, ["-timeout=20", "-rss_limit_mb=3072"], timeout_s=120)
