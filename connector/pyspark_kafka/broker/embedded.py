"""EmbeddedBroker: the Kafka-compatible broker in a background thread, for tests and notebooks."""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import tempfile
import threading
import traceback
from pathlib import Path

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
STALL_CHECK_S = 5.0
"""How often the watchdog asks the broker's event loop to run a no-op (s)."""
STALL_REPORT_S = 30.0
"""A loop that has not run the no-op after this long (s) is reported, with its thread's stack."""

log = logging.getLogger(__name__)


class EmbeddedBroker:
    """Run a broker on ``host:port`` with its own event loop thread for the life of a ``with`` block.

    ``EmbeddedBroker(data_dir=None, port=0, host="127.0.0.1", config=None)``: ``data_dir`` None
    → a temporary directory, removed on :meth:`stop`; ``port`` 0 → a free port; ``config`` uses
    Kafka's broker config names (``{"message.max.bytes": "2097152"}``).

    Attributes once started: ``bootstrap_servers`` ("127.0.0.1:PORT", the first listener),
    ``listeners`` (``{"SASL_SSL": "127.0.0.1:PORT", ...}`` with a ``listeners`` config), ``port``, ``data_dir``
    (Path), ``broker`` (the :class:`~pyspark_kafka.broker.server.Broker`; read-only use from
    other threads, e.g. ``replica_manager.waiting_fetches`` in tests). :meth:`start` raises what the broker raised while starting (ConfigError for a bad
    config, OSError for a taken port) or TimeoutError; :meth:`stop` closes the logs cleanly.
    """

    def __init__(self, data_dir: str | Path | None = None, port: int = 0, host: str = "127.0.0.1",
                 config: dict[str, str] | None = None):
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="pyspark-kafka-broker-")) if data_dir is None else Path(data_dir)
        self.host = host
        self.port = port
        self.config = dict(config or {})
        self._requested_port = port
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.broker = None

    @property
    def listeners(self) -> dict[str, str]:
        """``{listener name: "host:port"}`` of every bound listener (``listeners`` config), advertised."""
        return {lst.name: "%s:%d" % lst.advertised() for lst in self.broker.security.listeners}

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    def start(self) -> "EmbeddedBroker":
        """Start the broker thread and wait until it serves requests (at most 60 s): it listens and, as a
        combined node (the default roles), is unfenced, as Kafka's ``BrokerServer.startup`` returns only then. The
        leaders of its partitions may still be taking their leadership (a produce sent at once can be answered
        NOT_LEADER_OR_FOLLOWER, which clients retry), as on Kafka.

        Raises KafkaStorageError naming ``data_dir`` when it is a file or cannot be created."""
        if self._thread is not None:
            raise RuntimeError("EmbeddedBroker is already started")
        from pyspark_kafka.broker.log.manager import prepare_data_dir

        prepare_data_dir(self.data_dir)  # a file given as data_dir: KafkaStorageError naming it
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(target=self._run, name=f"pyspark-kafka-broker-{self.data_dir.name}",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            try:
                self.stop()  # the broker thread does not outlive the failed start
            except Exception as exc:  # noqa: BLE001 - the timeout below is the error to report
                log.warning("embedded broker %s: stopping after the failed start: %s", self.data_dir, exc)
            raise TimeoutError(f"embedded broker did not start within {START_TIMEOUT_S:g} s (not unfenced by its "
                               "controller: see the log)")
        if self._error is not None:
            self._thread.join(STOP_TIMEOUT_S)
            self._thread = None
            error, self._error = self._error, None
            self._remove_own_dir()
            raise error
        threading.Thread(target=self._watch, args=(self._thread, self._loop), daemon=True,
                         name=f"{self._thread.name}-watchdog").start()
        return self

    def _watch(self, thread: threading.Thread, loop: asyncio.AbstractEventLoop) -> None:
        """Log an error with the broker thread's stack when its event loop stops running callbacks
        for :data:`STALL_REPORT_S` (a blocked loop answers no client), and when it runs again."""
        async def noop() -> None:
            return None

        while self._thread is thread and thread.is_alive():
            try:
                done = asyncio.run_coroutine_threadsafe(noop(), loop)
            except RuntimeError:  # the loop is closed: the broker stopped
                return
            try:
                done.result(STALL_REPORT_S)
            except TimeoutError:
                if not thread.is_alive():
                    return
                log.error("embedded broker %s: its event loop has not run for %g s; its thread is at:\n%s",
                          self.bootstrap_servers, STALL_REPORT_S, _stack_of(thread))
                try:
                    done.result(STOP_TIMEOUT_S * 10)
                    log.error("embedded broker %s: its event loop runs again", self.bootstrap_servers)
                except BaseException:
                    return
            except BaseException:  # cancelled as the loop shut down
                return
            thread.join(STALL_CHECK_S)

    def _remove_own_dir(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _run(self) -> None:
        from pyspark_kafka.broker.server import Broker, serve

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            broker = self.broker = Broker(self.data_dir, self.config, self.host)

            def ready(bootstrap: str) -> None:
                self.port = broker.port
                self._ready.set()

            await serve(broker, self._requested_port, self._stop, ready)

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to start() or kept for stop()
            self._error = exc
        finally:
            self._ready.set()

    def stop(self) -> None:
        """Stop the broker, close its logs and remove the temporary data directory if we made it."""
        thread, self._thread = self._thread, None
        if thread is not None:
            if self._loop is not None and self._stop is not None:
                try:
                    self._loop.call_soon_threadsafe(self._stop.set)
                except RuntimeError:  # loop already closed
                    pass
            thread.join(STOP_TIMEOUT_S)
            if thread.is_alive():
                raise TimeoutError(f"embedded broker did not stop within {STOP_TIMEOUT_S:g} s; its thread is at:\n"
                                   + _stack_of(thread))
        self._remove_own_dir()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _stack_of(thread: threading.Thread) -> str:
    """The current Python stack of ``thread`` (for the error of a broker thread that will not stop)."""
    frame = sys._current_frames().get(thread.ident)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(no frame: the thread has ended)"
