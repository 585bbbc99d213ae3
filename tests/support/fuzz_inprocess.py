"""Coverage-guided, in-process fuzzing of request decoding and handling (atheris / libFuzzer).

Each input is a request frame as the broker reads it after the size prefix (the captured seeds
of ``fuzz_corpus/seeds.bin`` are such frames); an (api key, version) the broker does not serve
is mapped onto one it serves, so every input reaches a decoder and a handler. The target runs the broker's own dispatch path
(``server._dispatch``: version check, :mod:`request_bounds`, kio's native decoder, the
handler) against a real :class:`~pyspark_kafka.broker.server.Broker` on a temporary data
directory, started as users run it (a one-node cluster in combined mode, served on a free loopback
port on the fuzzing loop, :func:`_start_node`). The target fails (and libFuzzer saves the input as ``crash-*``) when

- anything but ``ProtocolError`` / ``CloseConnection`` escapes the dispatch (those close the
  client's connection, which is the right answer to a frame that cannot be parsed);
- a handler raised (``_dispatch`` logs "handler for api key ... failed" and answers
  UNKNOWN_SERVER_ERROR: a missing validation);
- the process aborts in native code (libFuzzer reports the deadly signal).

Handlers that wait (Fetch long poll, JoinGroup) are bounded by :data:`HANDLER_BOUND_S`.

Run: ``python tests/broker/fuzz_inprocess.py -runs=20000 -seed=1 CORPUS_DIR`` (libFuzzer flags;
``test_fuzz_inprocess.py`` runs it bounded in CI with the captured seeds as corpus).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import sys
import tempfile

import atheris

with atheris.instrument_imports(include=["pyspark_kafka.broker", "kio"]):
    from pyspark_kafka.broker import protocol
    from pyspark_kafka.broker.handlers import CloseConnection, load_handlers
    from pyspark_kafka.broker.server import Broker, _dispatch

HANDLER_BOUND_S = 0.2


class HandlerFailed(Exception):
    """A handler raised on a request that decoded: a validation the broker lacks."""


class _FailOnHandlerError(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR and "handler for api key" in record.getMessage():
            raise HandlerFailed(record.getMessage() + "\n" + (self.format(record) if record.exc_info else ""))


_TMP = tempfile.TemporaryDirectory(prefix="fuzz-inprocess-")
_BROKER = Broker(_TMP.name, {"auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0",
                             # ACL APIs and checks fuzzed too; the in-process requests are User:ANONYMOUS
                             "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                             "super.users": "User:ANONYMOUS"})
_SERVED = sorted((api.key, v) for api in load_handlers().values() for v in range(api.min_version, api.max_version + 1))
_LOOP = asyncio.new_event_loop()
START_BOUND_S = 60


def _start_node() -> asyncio.Task:
    """Start the broker as a user runs it: ``serve`` on a free loopback port, on the fuzzing loop.

    The broker is a one-node KRaft cluster in combined mode: its controller, metadata image and
    lifecycle exist only once ``serve`` has started them (a ``Broker`` that was never served answers
    no request that needs the cluster's metadata). The node's own tasks (heartbeats, the controller)
    run whenever the loop runs, that is, during every input. Raises TimeoutError when the node is
    not ready within :data:`START_BOUND_S` seconds, RuntimeError when ``serve`` ended before."""
    from pyspark_kafka.broker.server import serve

    ready = asyncio.Event()
    stop = asyncio.Event()
    task = _LOOP.create_task(serve(_BROKER, 0, stop, lambda bootstrap: ready.set()))

    async def wait_ready() -> None:
        waiter = asyncio.ensure_future(ready.wait())
        done, _ = await asyncio.wait({waiter, task}, timeout=START_BOUND_S, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            raise RuntimeError(f"the fuzzed node stopped while starting: {task.exception()!r}")
        if waiter not in done:
            raise TimeoutError(f"the fuzzed node was not ready within {START_BOUND_S} s")

    _LOOP.run_until_complete(wait_ready())
    return task


_NODE = _start_node()
_log = logging.getLogger("pyspark_kafka.broker")
_log.addHandler(_FailOnHandlerError())
_log.propagate = False
_log.setLevel(logging.ERROR)


_SERVED_SET = set(_SERVED)


def frame_for(data: bytes) -> bytes:
    """The frame an input stands for: the input itself when its (api key, version) is served,
    else the same bytes with a served pair chosen from the unserved one (so mutations of the
    header still reach a decoder and a handler)."""
    if len(data) < 8:
        return b""
    pair = struct.unpack_from(">hh", data)
    if pair in _SERVED_SET:
        return data
    api_key, version = _SERVED[(pair[0] * 31 + pair[1]) % len(_SERVED)]
    return struct.pack(">hh", api_key, version) + data[4:]


def run_frame(frame: bytes) -> None:
    """Dispatch one frame on the shared broker; raise on anything but a refused frame."""
    async def go() -> None:
        try:
            await asyncio.wait_for(_dispatch(_BROKER, frame, "/127.0.0.1"), HANDLER_BOUND_S)
        except (protocol.ProtocolError, CloseConnection, asyncio.TimeoutError):
            pass

    _LOOP.run_until_complete(go())


def test_one_input(data: bytes) -> None:
    frame = frame_for(data)
    if frame:
        run_frame(frame)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
