"""Kafka's Java client (``kafka-clients``) as a driver of the conformance scenarios.

``integration_tests/conformance/java/ConformanceDriver.java`` is compiled once with ``javac``
against the jars of the ``apache-kafka`` backend (resolved from Maven Central by
:mod:`pyspark_kafka.testing.maven`: ``kafka-clients`` of the same version, its compression
libraries and Jackson) into ``<cache>/java-driver/<version>-<source hash>/``; every primitive is
one JVM run of it (``java -cp ... ConformanceDriver COMMAND ...``), JSON in and out, bytes in
base64. A group member is a long-running JVM that prints its assignment whenever it changes and
leaves the group when its stdin closes.

:func:`unavailable`, :func:`classpath` and one JVM run (:func:`support.java_driver.run`) live in
``tests/support/java_driver.py`` (tests of ``tests/`` use them too). :func:`unavailable` says why the driver cannot run here (no ``javac``, no jars); the matrix
then leaves the column out, as it does for a missing kcat.
"""

from __future__ import annotations

import base64
import contextlib
import subprocess

from support.java_driver import JVM, MAIN, SOURCE, classpath, run, unavailable  # noqa: F401 (re-exported)

from integration_tests.conformance.drivers import Driver, ProcessMember
from integration_tests.conformance.scenarios import WAIT_S, Fetched, Metadata, Rec

RUN_TIMEOUT_S = WAIT_S + 30


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _bytes(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def _fetched(doc: dict) -> Fetched:
    return Fetched(doc["partition"], doc["offset"], _bytes(doc["key"]), _bytes(doc["value"]),
                   tuple((k, _bytes(v)) for k, v in doc["headers"]), doc["timestamp"])


def _parts(text: str) -> set[int]:
    return {int(p) for p in text.strip().split(",") if p}


class _Member(ProcessMember):
    """A ``group_member`` JVM; its ``assignment: 0,1,...`` lines give the current assignment.

    Also kept, for the rebalance tests: :attr:`events` ``[(wall-clock ms, "assigned" | "revoked" |
    "lost", {partition, ...}), ...]`` from the member's ConsumerRebalanceListener (a revoke is
    logged after the member's synchronous commit), and :attr:`records` ``[(partition, offset), ...]``
    every record the member polled."""

    what = "the Java group member"

    def __init__(self, proc, lines):
        self.events: list[tuple[int, str, set[int]]] = []
        self.records: list[tuple[int, int]] = []
        super().__init__(proc, lines)

    def update(self, line: str, owned: set[int]) -> set[int]:
        if line.startswith("record "):
            _, p, o = line.split()
            self.records.append((int(p), int(o)))
        elif line.startswith("event "):
            _, ms, kind, *rest = line.split(" ")
            self.events.append((int(ms), kind, _parts(rest[0] if rest else "")))
        elif line.startswith("assignment: "):
            return _parts(line.split(":", 1)[1])
        return owned


class JavaClientDriver(Driver):
    """The Java client; ``group_protocol`` is its ``group.protocol`` (``classic``, or ``consumer`` for KIP-848)."""

    name = "java"

    def __init__(self, bootstrap: str, group_protocol: str = "classic"):
        super().__init__(bootstrap)
        self._cp: str | None = None
        self.group_protocol = group_protocol

    def _java(self) -> list[str]:
        if self._cp is None:
            self._cp = classpath()
        return ["java", *JVM, "-cp", self._cp, MAIN]

    def _run(self, command: str, *args: str, payload=None):
        if self._cp is None:
            self._cp = classpath()
        return run(command, *args, payload=payload, timeout_s=RUN_TIMEOUT_S, cp=self._cp)

    def version(self) -> str:
        return f"Kafka Java client {self._run('version')}"

    def metadata(self, topic: str) -> Metadata:
        doc = self._run("metadata", self.bootstrap, topic)
        return Metadata({int(k): v for k, v in doc["brokers"].items()},
                        {int(k): v for k, v in doc["partitions"].items()})

    def produce(self, topic: str, records: list[Rec], codec: str = "none", idempotent: bool = False,
                acks: str = "all") -> list[list[int]]:
        """As :meth:`Driver.produce`, with ``acks`` "0", "1" or "all"; returns the delivery
        reports ``[[partition, offset, timestamp ms], ...]`` in send order (acks=0: offset -1,
        as the Java producer reports it)."""
        return self._run("produce", self.bootstrap, topic, codec, str(idempotent).lower(), acks,
                         payload=self._records(records))

    @staticmethod
    def _records(records: list[Rec]) -> list[dict]:
        return [{"value": _b64(r.value), "key": _b64(r.key), "partition": r.partition,
                 "timestamp": r.timestamp, "headers": [[k, _b64(v)] for k, v in r.headers]} for r in records]

    def produce_runs(self, topic: str, runs: list[tuple[dict, list[Rec]]]) -> list[list[list[int]]]:
        """Several :meth:`produce` runs in one JVM, one producer each: ``runs`` is ``[({codec,
        idempotent, acks}, records), ...]``; the delivery reports of each run, in order."""
        payload = [{"codec": kw.get("codec", "none"), "idempotent": kw.get("idempotent", False),
                    "acks": kw.get("acks", "all"), "records": self._records(records)} for kw, records in runs]
        return self._run("produce_runs", self.bootstrap, topic, payload=payload)

    def consume_transform_produce(self, topic: str, group: str, out: str, count: int) -> list[Fetched]:
        """Consume ``count`` records of ``topic`` in ``group`` (read_committed), copy them to the
        same partition of ``out`` in one transaction whose consumed offsets go in through
        ``sendOffsetsToTransaction`` (KIP-98, KIP-447 group metadata), commit; the records read."""
        return [_fetched(d) for d in self._run("consume_transform_produce", self.bootstrap, topic, group, out,
                                               str(count))]

    def admin(self, script: list[dict]) -> list:
        """Run admin client operations in one JVM (``AdminOps`` in ConformanceDriver.java):
        ``script`` is ``[{"op": name, ...arguments}, ...]``; the answer is one JSON value per
        operation, ``{"error": Kafka error name}`` for a failed one."""
        return self._run("admin", self.bootstrap, "-", payload=script)

    def transactions(self, topic: str, steps: list[tuple[list[bytes], bool]]) -> None:
        self._run("transactions", self.bootstrap, topic, payload=[[[_b64(v) for v in values], commit]
                                                                  for values, commit in steps])

    def fetch(self, topic: str, start: dict[int, int], count: int,
              isolation: str = "read_uncommitted") -> list[Fetched]:
        docs = self._run("fetch", self.bootstrap, topic, isolation, str(count),
                         payload={str(p): o for p, o in start.items()})
        return [_fetched(d) for d in docs]

    def fetch_timestamp_types(self, topic: str, start: dict[int, int], count: int) -> list[tuple[Fetched, str]]:
        """As :meth:`fetch` (read_uncommitted), each record with its timestamp type as the Java
        consumer reports it (``CreateTime`` or ``LogAppendTime``)."""
        docs = self._run("fetch", self.bootstrap, topic, "read_uncommitted", str(count),
                         payload={str(p): o for p, o in start.items()})
        return [(_fetched(d), d["timestamp_type"]) for d in docs]

    def offsets_for_times(self, topic: str, times: dict[int, int]) -> dict[int, int | None]:
        doc = self._run("offsets_for_times", self.bootstrap, topic, payload={str(p): t for p, t in times.items()})
        return {int(p): o for p, o in doc.items()}

    def group_consume(self, topic: str, group: str, count: int) -> list[Fetched]:
        return [_fetched(d) for d in self._run("group_consume", self.bootstrap, topic, group, str(count),
                                               self.group_protocol)]

    @contextlib.contextmanager
    def group_member(self, topic: str, group: str, assignor: str | None = None):
        """A group member JVM (``assignor``: range, roundrobin, cooperative-sticky, sticky; None:
        the Java client's default ``[range, cooperative-sticky]``; must be None under
        ``group_protocol="consumer"``, where the broker assigns)."""
        proc = subprocess.Popen([*self._java(), "group_member", self.bootstrap, topic, group, assignor or "-",
                                 self.group_protocol],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            yield _Member(proc, proc.stdout)
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # the member closes its consumer: LeaveGroup
            try:
                proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
