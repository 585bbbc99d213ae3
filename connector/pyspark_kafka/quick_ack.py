"""Quick ACKs on the TCP sockets Spark's Python workers read from (Linux).

Spark's JVM writes a Python task's input to the worker in several writes on a loopback TCP socket
without ``TCP_NODELAY``: first the task's header and pickled function (about 12 kB for a
``format("pykafka")`` read), then the input partition as an Arrow stream (about 1.3 kB). Linux
delays the worker's ACK of the first write (the worker has nothing to send back yet), and Nagle's
algorithm on the JVM side holds the second, small write until that ACK comes: the delayed-ACK
timer, 40 ms, on every Python task of a session that uses TCP (Spark's default; with
``spark.python.unix.domain.socket.enabled`` there is no TCP and no stall). Measured with ``strace``
on the worker: each task's Arrow input arrived 39-43 ms after its header; a 1,000-record
micro-batch's ``addBatch`` went from 72-79 ms to 34-38 ms with the fix below. Spark fixed the same
Nagle/delayed-ACK pair between the Python worker and the state server by setting ``TCP_NODELAY``
(SPARK-51667); the worker's data socket has no such setting in Spark 4.2 or 4.3.

The fix from the Python side: the worker asks for an immediate ACK (``TCP_QUICKACK``, which Linux
clears again after use) before each read of its input. pyspark's daemon reads a worker's input
through ``os.fdopen(fd, "rb", bufsize)`` (``pyspark/daemon.py``, ``worker``), so :func:`install`
wraps ``os.fdopen`` in Spark's worker daemons: a read-only binary open of a TCP socket becomes a
``BufferedReader`` over :class:`QuickAckReader`; every other open is ``os.fdopen``'s own. One
``setsockopt`` per buffered read (64 KiB by default), about 1 µs.

:func:`install` runs from the package's start-up ``.pth``
(:func:`pyspark_kafka.worker_daemon.startup_hook`) only in a process started as
``python -m pyspark.daemon`` or ``python -m pyspark_kafka.worker_daemon`` (Spark's executor and
planner worker daemons and their forked workers), on Linux. ``PYSPARK_KAFKA_TCP_QUICKACK=0`` turns it
off. Not covered: workers started without the daemon (``spark.python.use.daemon=false``), which
read through ``socket.makefile``.
"""

from __future__ import annotations

import io
import os
import socket
import stat
import sys
from typing import Callable

OFF_ENV = "PYSPARK_KAFKA_TCP_QUICKACK"
"""Set to ``0`` to leave ``os.fdopen`` alone in Spark's worker daemons."""

DAEMON_MODULES = ("pyspark.daemon", "pyspark_kafka.worker_daemon")
"""The ``-m`` modules of the processes :func:`install` acts in (Spark's worker daemons)."""


def tcp_socket(fd: int) -> socket.socket | None:
    """A ``socket.socket`` on a duplicate of ``fd`` when ``fd`` is an IPv4/IPv6 stream socket (the
    caller closes it), else None (a pipe, a file, a Unix domain socket, a closed fd)."""
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return None
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return None
    if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
        return sock
    sock.close()
    return None


class QuickAckReader(io.RawIOBase):
    """A raw, blocking reader of the TCP socket ``fd`` that sets ``TCP_QUICKACK`` before each read.

    ``sock`` is a ``socket.socket`` on a duplicate of ``fd`` (from :func:`tcp_socket`), used only for
    ``setsockopt``. Reads are ``os.readv`` on ``fd``, as ``FileIO`` reads; :meth:`close` closes ``fd``
    and ``sock`` (``os.fdopen``'s ``closefd=True``). A failing ``setsockopt`` is ignored: the read
    goes on, as without this class.
    """

    def __init__(self, fd: int, sock: socket.socket) -> None:
        super().__init__()
        self._fd = fd
        self._sock = sock

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def readinto(self, buffer) -> int:
        """Ask for an immediate ACK, then read up to ``len(buffer)`` bytes; 0 at end of stream."""
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        except OSError:
            pass
        return os.readv(self._fd, [buffer])

    def close(self) -> None:
        if not self.closed:
            try:
                self._sock.close()
                os.close(self._fd)
            finally:
                super().close()


def quick_ack_fdopen(fdopen: Callable[..., object]) -> Callable[..., object]:
    """``os.fdopen`` that opens a TCP socket ``fd`` read-only in binary (``mode="rb"``, buffered, no
    other argument) as ``io.BufferedReader(QuickAckReader(fd), buffering)``; everything else is
    ``fdopen(...)`` unchanged."""

    def wrapped(fd, mode="r", buffering=-1, *args, **kwargs):
        if mode == "rb" and buffering != 0 and not args and not kwargs and isinstance(fd, int):
            sock = tcp_socket(fd)
            if sock is not None:
                size = buffering if buffering > 0 else io.DEFAULT_BUFFER_SIZE
                return io.BufferedReader(QuickAckReader(fd, sock), size)
        return fdopen(fd, mode, buffering, *args, **kwargs)

    wrapped.__wrapped__ = fdopen
    return wrapped


def wanted(argv: list[str] | None = None) -> bool:
    """Whether :func:`install` should act in this process: Linux, ``TCP_QUICKACK`` known, not turned
    off by :data:`OFF_ENV`, and started as ``python -m <one of DAEMON_MODULES>`` (``argv`` defaults to
    ``sys.orig_argv``)."""
    argv = list(getattr(sys, "orig_argv", []) if argv is None else argv)
    if not sys.platform.startswith("linux") or not hasattr(socket, "TCP_QUICKACK"):
        return False
    if os.environ.get(OFF_ENV, "") == "0":
        return False
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return i + 1 < len(argv) and argv[i + 1] in DAEMON_MODULES
        if not arg.startswith("-") or arg == "-c":
            return False  # a script or a command, not -m
        i += 2 if arg in ("-X", "-W") else 1
    return False


def install(argv: list[str] | None = None) -> bool:
    """Wrap ``os.fdopen`` with :func:`quick_ack_fdopen` when :func:`wanted`; True when it did (or had).
    Never raises."""
    try:
        if not wanted(argv):
            return False
        if getattr(os.fdopen, "__wrapped__", None) is None:
            os.fdopen = quick_ack_fdopen(os.fdopen)
        return True
    except Exception:  # noqa: BLE001 - an interpreter start must not fail because of this
        return False
