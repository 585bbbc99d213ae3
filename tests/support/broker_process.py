"""The broker as a separate process to SIGKILL: ``python -m pyspark_kafka broker`` with small segments.

(:class:`support.fuzz_network.BrokerProcess` is the context manager of the fuzz and limit tests:
SIGTERM on exit, optional open-file limit, output to a log file.)
"""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

DEADLINE_S = 60.0
LISTENING = re.compile(r"listening on (\S+):(\d+)")
LISTENER = re.compile(r"listener (\w+) \(\w+\) on [\d.]+:(\d+)")


class BrokerProcess:
    """``python -m pyspark_kafka broker`` on ``port`` (0: a free one); always killed by :meth:`kill`.

    ``config``: more broker configs (``--config NAME=VALUE``); ``bootstrap`` is the first
    listener's address, ``lines`` the output (the broker's log) as it comes.
    """

    def __init__(self, data_dir: Path, port: int = 0, config: dict[str, str] | None = None):
        extra = [arg for name, value in (config or {}).items() for arg in ("--config", f"{name}={value}")]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyspark_kafka", "broker", "--data-dir", str(data_dir), "--port", str(port),
             "--config", "log.segment.bytes=4096", "--config", "log.index.interval.bytes=256", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        try:
            self.bootstrap = self._wait_listening()
        except BaseException:
            self.kill()
            raise

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")

    def _wait_listening(self) -> str:
        seen = []
        while True:
            try:
                line = self.lines.get(timeout=DEADLINE_S)
            except queue.Empty:
                raise AssertionError(f"broker did not start within {DEADLINE_S} s: {''.join(seen)}") from None
            if not line:
                raise AssertionError(f"broker exited: {''.join(seen)}")
            seen.append(line)
            m = LISTENING.search(line)
            if m:
                return f"{m.group(1)}:{m.group(2)}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(DEADLINE_S)

    def listener_ports(self, count: int, timeout_s: float = 30.0) -> dict[str, int]:
        """``{listener name: bound port}`` of the first ``count`` listeners, from the log lines
        (bounded wait); the lines read are kept in ``seen``."""
        self.seen = getattr(self, "seen", [])
        ports, deadline = {}, time.monotonic() + timeout_s
        while len(ports) < count and time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            self.seen.append(line)
            m = LISTENER.search(line)
            if m:
                ports[m.group(1)] = int(m.group(2))
        assert len(ports) == count, self.seen
        return ports

    def output(self) -> str:
        """Everything the process wrote (call after :meth:`kill`; waits at most 5 s for more lines)."""
        self.seen = getattr(self, "seen", [])
        while True:
            try:
                self.seen.append(self.lines.get(timeout=5))
            except queue.Empty:
                break
            if self.seen[-1] == "":
                break
        return "".join(self.seen)
