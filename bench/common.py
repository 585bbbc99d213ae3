"""Shared benchmark helpers: repetitions, summaries, machine info, server processes.

Every benchmark module (``bench/*_bench.py``) exposes ``run(quick: bool) -> list[dict]``
returning one dict per metric, built with :func:`metric`::

    {"metric": "produce 100 B acks=1", "unit": "records/s", "higher_is_better": True,
     "project": [v1, v2, v3],          # our figures, one per repetition
     "anchor": [a1, a2, a3] | None,    # the anchor's figures from the same run
     "anchor_label": "librdkafka mock cluster", "note": "..."}

``bench/run.py`` summarises each list (median/min/max) and the ratio of the medians.
Benchmarks assert nothing: they measure and report.
"""

from __future__ import annotations

import os
import platform
import queue
import statistics
import subprocess
import sys
import threading
import time
from importlib import metadata as importlib_metadata
from typing import Callable

REPETITIONS = int(os.environ.get("PYSPARK_KAFKA_BENCH_REPETITIONS") or 3)
"""Repetitions of every figure (3; the environment variable ``PYSPARK_KAFKA_BENCH_REPETITIONS``
sets another, read when this module is imported)."""


class Skipped(Exception):
    """Raised by a module's ``run`` (or a part of it) when what it measures cannot run here
    (no Java, no Maven, no reference connector); the message is the reason, which
    ``bench/run.py`` prints and records in ``results.json`` under ``skipped``."""


def repeat(fn: Callable[[], float], times: int = REPETITIONS) -> list[float]:
    """Call ``fn`` ``times`` times and return its figures in call order."""
    return [float(fn()) for _ in range(times)]


def summary(values: list[float] | None) -> dict | None:
    """``{"median", "min", "max", "n"}`` of ``values`` (``None`` when there are none)."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def ratio(project: list[float] | None, anchor: list[float] | None) -> float | None:
    """Median of ``project`` over median of ``anchor`` (``None`` without an anchor or a zero anchor)."""
    if not project or not anchor:
        return None
    a = statistics.median(anchor)
    return statistics.median(project) / a if a else None


def metric(name: str, unit: str, project: list[float], anchor: list[float] | None = None,
           anchor_label: str | None = None, higher_is_better: bool = True, note: str = "") -> dict:
    """One result row in the shape ``bench/run.py`` expects (see the module docstring)."""
    return {"metric": name, "unit": unit, "higher_is_better": higher_is_better, "project": project,
            "anchor": anchor, "anchor_label": anchor_label, "note": note}


def rate(count: float, seconds: float) -> float:
    """``count`` per second; a zero duration gives ``inf`` rather than an error."""
    return count / seconds if seconds > 0 else float("inf")


def _version(dist: str) -> str | None:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _java_version() -> str | None:
    """First line of ``java -version`` (the JVM of the Apache Kafka and Spark anchors), or None."""
    try:
        proc = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[0] if lines else None


def machine_info() -> dict:
    """Cores, RAM (bytes), CPU model, OS, Python, Java and the versions of the libraries measured."""
    import confluent_kafka

    return {
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "ram_bytes": _ram_bytes(),
        "cpu_model": _cpu_model(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": _java_version(),
        "versions": {
            "pyspark-kafka": _version("pyspark-kafka"),
            "confluent-kafka": _version("confluent-kafka"),
            "librdkafka": confluent_kafka.libversion()[0],
            "pyspark": _version("pyspark"),
            "pyarrow": _version("pyarrow"),
            "kio": _version("kio"),
        },
    }


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` in bytes (Linux ``/proc/<pid>/status`` VmRSS)."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class ServerProcess:
    """A server in its own process (so it does not share the benchmark client's GIL).

    ``with ServerProcess.embedded_broker(data_dir) as s: s.bootstrap, s.pid``. The address
    is parsed from the first output line matching ``marker``; a thread keeps draining that
    stream so the server never blocks on a full pipe. The process is terminated (killed
    after 10 s) on exit, also on error.
    """

    def __init__(self, argv: list[str], marker: str, parse: Callable[[str], str], stderr: bool):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, text=True,
                                     stdout=subprocess.DEVNULL if stderr else subprocess.PIPE,
                                     stderr=subprocess.PIPE if stderr else None)
        self.pid = self.proc.pid
        self.output: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        stream = self.proc.stderr if stderr else self.proc.stdout
        threading.Thread(target=self._drain, args=(stream,), daemon=True).start()
        try:
            self.bootstrap = parse(self._wait_for(marker, 60))
        except BaseException:
            self.stop()
            raise

    def _drain(self, stream) -> None:
        for line in stream:
            self.output.append(line.rstrip("\n"))
            self._lines.put(line)

    def _wait_for(self, marker: str, deadline_s: float) -> str:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            try:
                line = self._lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited with {self.proc.returncode}: {self.output[-5:]}") from None
                continue
            if marker in line:
                return line
        raise RuntimeError(f"server printed no {marker!r} line within {deadline_s} s: {self.output[-5:]}")

    @classmethod
    def embedded_broker(cls, data_dir: str, config: dict[str, str] | None = None) -> "ServerProcess":
        """``pyspark-kafka broker`` on a free loopback port; address from its ready log line."""
        argv = [sys.executable, "-m", "pyspark_kafka", "broker", "--data-dir", str(data_dir), "--port", "0"]
        for k, v in (config or {}).items():
            argv += ["--config", f"{k}={v}"]
        marker = " listening on "
        return cls(argv, marker, lambda line: line.split(marker, 1)[1].split()[0], stderr=True)

    @classmethod
    def mock_cluster(cls) -> "ServerProcess":
        """librdkafka's built-in mock cluster (one broker) in a process that lives until stdin closes."""
        code = (
            "import sys; from confluent_kafka import Producer\n"
            "p = Producer({'test.mock.num.brokers': 1, 'log_level': 0})\n"
            "b = p.list_topics(timeout=10).brokers\n"
            "print('mock cluster on', ','.join(f'{x.host}:{x.port}' for x in b.values()), flush=True)\n"
            "sys.stdin.read()\n"
        )
        marker = "mock cluster on "
        return cls([sys.executable, "-c", code], marker, lambda line: line.split(marker, 1)[1].strip(), stderr=False)

    def stop(self) -> None:
        """Terminate the process and wait for it (kill after 10 s)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdin:
            self.proc.stdin.close()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
