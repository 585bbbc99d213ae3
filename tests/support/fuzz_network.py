"""Network-level mutation fuzzing of a broker process, with liveness and integrity checks.

:class:`BrokerProcess` runs ``pyspark-kafka broker`` as a child process (so a native abort is
seen as a dead process, not a dead test runner), on 127.0.0.1 and a free port, its log in a
file. :func:`fuzz` sends ``count`` mutated seed frames (:mod:`fuzz_mutate`) over a few
connections, reading and discarding what comes back, reopening connections the broker closes,
and every ``check_every`` frames asks a fresh connection for ApiVersions: the broker must be
alive and answer within :data:`ANSWER_TIMEOUT_S`. On a failure it raises :class:`FuzzFailure`
with the seed, the frame index and the last frames sent (to turn into a regression file).

Used by ``test_fuzz_network.py`` (a few thousand frames in CI) and ``bench/fuzz_soak.py``
(20,000+ frames, memory reported).
"""

from __future__ import annotations

import re
import resource
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from support.fuzz_mutate import Mutator
from support.wire import WireClient

START_TIMEOUT_S = 60.0
ANSWER_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 30.0
CONNECTIONS = 4
LISTENING = re.compile(r"listening on (\S+):(\d+)")
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 424242, -1)  # size, key 18, v0, correlation id, null client id


class FuzzFailure(AssertionError):
    """The broker died or stopped answering; ``recent`` holds the last (strategy, wire bytes) sent."""

    def __init__(self, message: str, recent: list[tuple[str, bytes]]):
        super().__init__(message)
        self.recent = recent


class BrokerProcess:
    """``with BrokerProcess(data_dir, config, nofile=None) as b: b.bootstrap, b.pid, b.rss_kib()``.

    Starts ``python -m pyspark_kafka broker --port 0`` (the ``pyspark-kafka broker`` command),
    waits for its listening line (at most :data:`START_TIMEOUT_S`), stops it with SIGTERM
    (SIGKILL after :data:`STOP_TIMEOUT_S`) by pid on exit, also when the test failed.
    """

    def __init__(self, data_dir: Path, config: dict[str, str] | None = None, nofile: int | None = None):
        self.data_dir = Path(data_dir)
        self.config = config or {}
        self.nofile = nofile  # the child's open-file limit (RLIMIT_NOFILE), None = inherited
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"
        self.proc: subprocess.Popen | None = None
        self.bootstrap = ""

    def __enter__(self) -> "BrokerProcess":
        cmd = [sys.executable, "-m", "pyspark_kafka", "broker", "--data-dir", str(self.data_dir), "--port", "0",
               "--log-level", "info"]
        for k, v in self.config.items():
            cmd += ["--config", f"{k}={v}"]
        self._log = open(self.log_path, "w")
        limit = None if self.nofile is None else (
            lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile)))
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=limit)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            match = LISTENING.search(self.log_path.read_text(errors="replace"))
            if match:
                self.bootstrap = f"{match.group(1)}:{match.group(2)}"
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"broker did not start: {self.log_tail()}")

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss_kib(self) -> int:
        """Resident set size of the broker process in KiB (``VmRSS`` from /proc)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)
        self._log.close()


def answers_api_versions(bootstrap: str, timeout_s: float = ANSWER_TIMEOUT_S) -> bool:
    """True when a fresh connection gets an ApiVersions v0 response within ``timeout_s``."""
    try:
        with WireClient(bootstrap, timeout_s) as client:
            client.send_raw(API_VERSIONS_V0)
            frame = client.recv_frame()
            return frame is not None and struct.unpack_from(">i", frame)[0] == 424242
    except (OSError, struct.error):
        return False


@dataclass
class FuzzStats:
    """What one run did: frames sent per strategy, connections the broker closed, max RSS seen."""

    sent: dict[str, int] = field(default_factory=dict)
    closed_by_broker: int = 0
    rss_max_kib: int = 0
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.sent.values())


class _InFlight:
    """One mutated frame on its own connection, waiting for an answer, a close or its deadline."""

    def __init__(self, bootstrap: str, wire: bytes, deadline: float):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        try:
            self.sock.sendall(wire)
        except OSError:
            pass  # the broker closed early (e.g. after a bad size prefix): that is an answer too
        self.sock.setblocking(False)
        self.deadline = deadline
        self.received = 0


def fuzz(broker: BrokerProcess, seeds: list[bytes], seed: int, count: int, check_every: int = 500,
         time_limit_s: float = 600.0, answer_wait_s: float = 1.0) -> FuzzStats:
    """Send ``count`` mutations of ``seeds`` (seeded by ``seed``) to ``broker``, each on its own
    connection (:data:`CONNECTIONS` in flight), waiting up to ``answer_wait_s`` for a response
    or a close; check the broker after every ``check_every`` frames and at the end. Stops
    early after ``time_limit_s`` seconds. Raises :class:`FuzzFailure` when the broker dies or
    stops answering."""
    mutator = Mutator(seed, seeds)
    stats = FuzzStats()
    recent: deque[tuple[str, bytes]] = deque(maxlen=64)
    sel = selectors.DefaultSelector()
    flying: set[_InFlight] = set()
    started = time.monotonic()

    def finish(f: _InFlight) -> None:
        sel.unregister(f.sock)
        f.sock.close()
        flying.discard(f)

    def wait(until_below: int) -> None:
        while len(flying) >= until_below and flying:
            now = time.monotonic()
            for key, _ in sel.select(max(0.0, min(f.deadline for f in flying) - now)):
                f = key.data
                try:
                    data = f.sock.recv(1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    stats.closed_by_broker += 1
                    finish(f)
                    continue
                f.received += len(data)
                if f.received >= 8:
                    finish(f)  # a response came back; the connection is done with
            now = time.monotonic()
            for f in [f for f in flying if f.deadline <= now]:
                finish(f)

    def check(i: int) -> None:
        if not broker.alive():
            raise FuzzFailure(f"broker process died (exit {broker.proc.returncode}) after frame {i} of seed {seed}:\n"
                              f"{broker.log_tail()}", list(recent))
        if not answers_api_versions(broker.bootstrap):
            raise FuzzFailure(f"broker stopped answering after frame {i} of seed {seed}:\n{broker.log_tail()}",
                              list(recent))
        stats.rss_max_kib = max(stats.rss_max_kib, broker.rss_kib())

    try:
        for i in range(count):
            if time.monotonic() - started > time_limit_s:
                break
            name, wire = mutator.mutate(mutator.rng.choice(seeds))
            recent.append((name, wire))
            stats.sent[name] = stats.sent.get(name, 0) + 1
            wait(CONNECTIONS)
            if not broker.alive():
                check(i)
            try:
                f = _InFlight(broker.bootstrap, wire, time.monotonic() + answer_wait_s)
            except OSError as e:
                check(i)
                raise FuzzFailure(f"broker did not accept a connection after frame {i} of seed {seed} ({e}): "
                                  f"its event loop was blocked", list(recent)) from None
            flying.add(f)
            sel.register(f.sock, selectors.EVENT_READ, f)
            if (i + 1) % check_every == 0:
                wait(1)
                check(i)
        wait(1)
        check(count)
    finally:
        for f in list(flying):
            finish(f)
        sel.close()
        stats.seconds = time.monotonic() - started
    return stats
