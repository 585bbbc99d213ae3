"""Running an atheris (libFuzzer) target as a bounded CI test: the one way the fuzz tests do it.

:func:`run_bounded` starts ``python TARGET -runs=N -seed=S ... CORPUS`` in a fresh process and asserts
the run's outcome: exit status 0, no ``crash-``/``timeout-``/``oom-`` artifact written, and libFuzzer's
own count of inputs (``Done N runs``) at least ``runs``. A failure names the artifacts and the command
that reproduces them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable

import pytest


def run_bounded(target: Path, tmp_path: Path, runs: int, seed: int, libfuzzer_args: Iterable[str] = (),
                seeds: Iterable[bytes] = (), timeout_s: float = 180,
                preexec_fn: Callable[[], None] | None = None) -> subprocess.CompletedProcess:
    """Run ``target`` for ``runs`` inputs from ``seed``, with ``libfuzzer_args`` (e.g. ``-max_len=8192``) and
    a corpus of ``seeds`` (bytes) in ``tmp_path/corpus``; artifacts go to ``tmp_path``. Skips when atheris
    is not installed; raises AssertionError on a crash, timeout or out-of-memory input, a non-zero
    exit, or fewer runs than asked (libFuzzer counts the seeds' replays too, so it may report more);
    subprocess.TimeoutExpired after ``timeout_s`` seconds. Returns the finished process."""
    pytest.importorskip("atheris", reason="atheris (libFuzzer for Python) is not installed: pip install atheris")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, data in enumerate(seeds):
        (corpus / f"seed-{i:04d}").write_bytes(data)
    cmd = [sys.executable, str(target), f"-runs={runs}", f"-seed={seed}", *libfuzzer_args,
           f"-artifact_prefix={tmp_path}/", str(corpus)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp_path, preexec_fn=preexec_fn)
    crashes = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-")))
    assert proc.returncode == 0 and not crashes, (
        f"libFuzzer found {crashes} (exit {proc.returncode}); reproduce with: {' '.join(cmd)}\n"
        + "\n".join(proc.stderr.splitlines()[-40:]))
    done = re.search(r"^Done (\d+) runs", proc.stderr, re.MULTILINE)
    assert done and int(done.group(1)) >= runs, proc.stderr[-2000:]
    return proc
