"""Per-client drivers of the conformance scenarios: the few primitives a scenario needs.

Every driver implements :class:`Driver` with one Kafka client and nothing else (no helper
from another client), so a scenario's outcome is that client's. A driver lists what its
client cannot do in :attr:`Driver.unsupported` (``{scenario id: reason}``); the matrix
reports those cells as ``unsupported`` without running them. A limitation that depends on the
client's version is detected at run time (the driver raises ``Unsupported``) and listed in
:attr:`Driver.unsupported_when`.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from integration_tests.conformance.scenarios import Fetched, Metadata, Rec


class GroupMember:
    """A running group member; :meth:`assignment` lets the client make progress (poll) and
    returns the partitions it owns now."""

    def assignment(self) -> set[int]:
        raise NotImplementedError


class ProcessMember(GroupMember):
    """A group member that is a client process: a thread follows ``lines`` (its stdout or
    stderr) and :meth:`update` turns each line into the partitions owned now."""

    what = "the member process"

    def __init__(self, proc, lines):
        import threading

        self.proc = proc
        self._owned: set[int] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._follow, args=(lines,), daemon=True).start()

    def update(self, line: str, owned: set[int]) -> set[int]:
        """The partitions owned after ``line`` (``owned``: before it)."""
        raise NotImplementedError

    def _follow(self, lines) -> None:
        for line in lines:
            with self._lock:
                self._owned = self.update(line.strip(), self._owned)

    def assignment(self) -> set[int]:
        assert self.proc.poll() is None, f"{self.what} exited with {self.proc.returncode}"
        with self._lock:
            return set(self._owned)


class Driver:
    """The primitives of the scenario script, for one client. ``bootstrap`` is "host:port".

    All waits are bounded (``scenarios.WAIT_S``); a primitive raises on any client error.
    """

    name = "driver"
    unsupported: dict[str, str] = {}
    """Scenarios this client cannot do at all: ``{scenario id: reason}`` (not run)."""
    unsupported_when: dict[str, str] = {}
    """Scenarios where the driver may raise Unsupported at run time: ``{scenario id: condition}``."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap

    def version(self) -> str:
        """The client and its version, e.g. ``kafka-python 3.0.12``."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the driver holds between scenarios (nothing by default)."""

    def metadata(self, topic: str) -> Metadata:
        """Brokers and partition leaders of ``topic`` from a Metadata request."""
        raise NotImplementedError

    def produce(self, topic: str, records: list[Rec], codec: str = "none", idempotent: bool = False) -> None:
        """Produce ``records`` in order with ``compression.type=codec``, acks=all; wait for every
        acknowledgement. ``idempotent``: enable.idempotence (KIP-98), else off."""
        raise NotImplementedError

    def transactions(self, topic: str, steps: list[tuple[list[bytes], bool]]) -> None:
        """One transaction per step: produce the values to partition 0, commit (True) or abort."""
        raise NotImplementedError

    def fetch(self, topic: str, start: dict[int, int], count: int,
              isolation: str = "read_uncommitted") -> list[Fetched]:
        """Exactly ``count`` records of the partitions in ``start`` ({partition: offset}),
        each partition read from its offset, without a group; AssertionError when fewer
        arrive in time."""
        raise NotImplementedError

    def offsets_for_times(self, topic: str, times: dict[int, int]) -> dict[int, int | None]:
        """{partition: first offset whose timestamp is >= times[partition], or None}."""
        raise NotImplementedError

    def group_consume(self, topic: str, group: str, count: int) -> list[Fetched]:
        """Subscribe to ``topic`` in ``group`` (no committed offset: earliest), consume
        ``count`` records, commit their offsets synchronously, leave the group."""
        raise NotImplementedError

    @contextlib.contextmanager
    def group_member(self, topic: str, group: str) -> Iterator[GroupMember]:
        """A member of ``group`` subscribed to ``topic`` for the ``with`` block; leaves on exit."""
        raise NotImplementedError
        yield


def all_drivers() -> dict[str, type[Driver]]:
    """``{client name: driver class}`` of every client in the matrix, in column order."""
    from integration_tests.conformance.drivers.aiokafka_driver import AiokafkaDriver
    from integration_tests.conformance.drivers.confluent import ConfluentDriver
    from integration_tests.conformance.drivers.java_client import JavaClientDriver
    from integration_tests.conformance.drivers.kafka_python import KafkaPythonDriver
    from integration_tests.conformance.drivers.kcat import KcatDriver

    return {d.name: d for d in (ConfluentDriver, KafkaPythonDriver, AiokafkaDriver, KcatDriver, JavaClientDriver)}
