"""kcat driver of the conformance scenarios: every primitive is one or more ``kcat`` processes.

kcat (``/usr/bin/kcat``, built on its own copy of librdkafka) is driven only through its
command line: ``-L -J`` (metadata), ``-P`` (produce from stdin, ``-K`` key delimiter, ``-H``
headers, ``-z`` codec, ``-X transactional.id`` commits at end of input and aborts on SIGINT),
``-C -J -e`` (consume to the end of a partition), ``-Q`` (offsets for times) and ``-G``
(balanced consumer group; its ``% Group ... rebalanced ... assigned:/revoked:`` lines on
stderr give the assignment). Every process is bounded by a timeout and killed on exit.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import uuid
from itertools import groupby

from integration_tests.conformance.drivers import Driver, ProcessMember
from integration_tests.conformance.scenarios import WAIT_S, Fetched, Metadata, Rec, Unsupported

KEY_DELIMITER = "|"
_REBALANCE = re.compile(r"rebalanced \(memberid [^)]*\): (assigned|revoked): (.*)$")


def _binary() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        raise Unsupported("kcat is not installed (Debian package kcat)")
    return path


def _fetched(doc: dict) -> Fetched:
    raw = doc.get("headers") or []
    headers = tuple((raw[i], None if raw[i + 1] is None else raw[i + 1].encode()) for i in range(0, len(raw), 2))
    key, value = doc.get("key"), doc.get("payload")
    return Fetched(doc["partition"], doc["offset"], None if key is None else key.encode(),
                   None if value is None else value.encode(), headers, doc.get("ts", -1))


def _parse_partitions(text: str) -> set[int]:
    """``"t [0], t [1]"`` → ``{0, 1}``."""
    return {int(p) for p in re.findall(r"\[(\d+)\]", text)}


class _Member(ProcessMember):
    """A ``kcat -G`` process; its stderr's rebalance lines give the current assignment."""

    what = "kcat -G"

    def update(self, line: str, owned: set[int]) -> set[int]:
        m = _REBALANCE.search(line)
        if not m:
            return owned
        parts = _parse_partitions(m.group(2))
        return parts if m.group(1) == "assigned" else owned - parts


class KcatDriver(Driver):
    name = "kcat"
    unsupported = {
        "produce.transactional": "kcat commits at end of input and aborts only on SIGINT, before its buffered "
        "stdin is sent: it cannot write an aborted transaction whose records reach the log",
    }
    unsupported_when = {
        f"produce.{codec}": "librdkafka older than its KIP-896 fix (issue 4956) does not compress this codec "
        "for a broker without Produce v0-2" for codec in ("gzip", "snappy", "lz4")
    }

    def version(self) -> str:
        out = subprocess.run([_binary(), "-V"], capture_output=True, text=True, timeout=10).stdout
        m = re.search(r"Version (\S+).*?librdkafka (\S+)", out, re.S)
        return f"kcat {m.group(1)} (librdkafka {m.group(2)})" if m else "kcat"

    def _run(self, args: list[str], stdin: str | None = None) -> str:
        return self._run_full(args, stdin)[0]

    def _run_full(self, args: list[str], stdin: str | None = None) -> tuple[str, str]:
        """``(stdout, stderr)`` of one kcat run; AssertionError when it fails or logs an error."""
        done = subprocess.run([_binary(), "-b", self.bootstrap, *args], input=stdin, capture_output=True,
                              text=True, timeout=WAIT_S)
        if done.returncode != 0 or "ERROR" in done.stderr:
            raise AssertionError(f"kcat {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
        return done.stdout, done.stderr

    def metadata(self, topic: str) -> Metadata:
        doc = json.loads(self._run(["-L", "-J", "-t", topic]))
        (tm,) = [t for t in doc["topics"] if t["topic"] == topic]
        assert not tm.get("error"), tm["error"]
        return Metadata({b["id"]: b["name"] for b in doc["brokers"]},
                        {p["partition"]: p["leader"] for p in tm["partitions"]})

    def produce(self, topic: str, records: list[Rec], codec: str = "none", idempotent: bool = False) -> None:
        args = ["-P", "-t", topic, "-X", "acks=all", "-X", f"enable.idempotence={str(idempotent).lower()}"]
        if codec != "none":
            args += ["-z", codec, "-d", "msg"]  # msg debug: librdkafka says when it does not compress
        # one kcat run per run of records sharing partition, key presence and headers (kcat's
        # -p, -K and -H apply to a whole run)
        for (partition, keyed, headers), run in groupby(records, lambda r: (r.partition, r.key is not None, r.headers)):
            run = list(run)
            if any(r.timestamp is not None or r.value is None for r in run):
                raise Unsupported("kcat -P cannot set a record timestamp or produce a null value per line")
            extra = ["-p", str(partition)] if partition is not None else []
            extra += ["-K", KEY_DELIMITER] if keyed else []
            for k, v in headers:
                extra += ["-H", f"{k}={v.decode()}"]
            lines = [(f"{r.key.decode()}{KEY_DELIMITER}" if keyed else "") + r.value.decode() for r in run]
            _, log = self._run_full(args + extra, stdin="\n".join(lines) + "\n")
            refused = re.search(r"Broker does not support compression type \w+", log)
            if refused:
                raise Unsupported(
                    f"kcat's librdkafka: '{refused.group(0)}': it infers codec support from old Produce "
                    "versions, and this broker (like Apache Kafka 4.0, KIP-896) serves Produce 3+ only, so it "
                    "sends the batch uncompressed (a librdkafka bug, fixed in later librdkafka)")

    def transactions(self, topic: str, steps: list[tuple[list[bytes], bool]]) -> None:
        for values, commit in steps:
            if not commit:
                raise Unsupported(self.unsupported["produce.transactional"])
            args = ["-P", "-t", topic, "-p", "0", "-X", f"transactional.id=conformance-{uuid.uuid4()}"]
            self._run(args, stdin="\n".join(v.decode() for v in values) + "\n")  # end of input commits

    def _consume(self, topic: str, partition: int, offset: int, isolation: str) -> list[Fetched]:
        out = self._run(["-C", "-t", topic, "-p", str(partition), "-o", str(offset), "-e", "-J", "-q",
                         "-X", f"isolation.level={isolation}"])
        return [_fetched(json.loads(line)) for line in out.splitlines() if line.strip()]

    def fetch(self, topic: str, start: dict[int, int], count: int,
              isolation: str = "read_uncommitted") -> list[Fetched]:
        got = [f for p, offset in start.items() for f in self._consume(topic, p, offset, isolation)]
        assert len(got) >= count, f"fetch {topic}: got {len(got)} of {count} records"
        return got

    def offsets_for_times(self, topic: str, times: dict[int, int]) -> dict[int, int | None]:
        args = ["-Q", "-J"]
        for p, ts in times.items():
            args += ["-t", f"{topic}:{p}:{ts}"]
        doc = json.loads(self._run(args))[topic]
        found = {int(k): v["offset"] for k, v in doc.items() if k != "topic"}
        return {p: (o if o >= 0 else None) for p, o in found.items()}

    def group_consume(self, topic: str, group: str, count: int) -> list[Fetched]:
        # -c exits after count records; closing the consumer commits the consumed offsets
        out = self._run(["-G", group, topic, "-J", "-q", "-c", str(count),
                         "-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=true"])
        return [_fetched(json.loads(line)) for line in out.splitlines() if line.strip()]

    @contextlib.contextmanager
    def group_member(self, topic: str, group: str):
        proc = subprocess.Popen([_binary(), "-b", self.bootstrap, "-G", group, topic,
                                 "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=10000"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            yield _Member(proc, proc.stderr)
        finally:
            proc.send_signal(signal.SIGINT)  # kcat closes the consumer: LeaveGroup
            try:
                proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
