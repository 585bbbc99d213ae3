"""The client side of :mod:`pyspark_kafka.runner_zygote`: run as a script (``python -I -S <this file>
SOCKET -m MODULE ...``) by the launcher of :func:`pyspark_kafka.worker_daemon.launcher` in place of a
new Python process of ``MODULE``.

It connects to the zygote's Unix socket ``SOCKET``, hands it this process's arguments, environment,
working directory and standard streams (the file descriptors themselves, ``SCM_RIGHTS``), and the
zygote forks a process that runs ``MODULE`` with them. This process stays as its stand-in for
Spark, which started it and watches it: SIGTERM and SIGINT are passed on to the forked process,
and this process exits with the forked process's exit status. When the zygote cannot be reached
(not started yet, gone) it replaces itself with ``python -m MODULE ...`` as the launcher would have.

Standard library only, nothing imported from the package, no ``site`` (``-S``): it must start in
a few milliseconds.
"""

import json
import os
import signal
import socket
import struct
import sys

ENV = "PYSPARK_KAFKA_RUNNER_ZYGOTE"
"""Path of the zygote's Unix socket, in the environment of the driver (and so of Spark's JVM and the
launcher); ``0`` there before :func:`pyspark_kafka.runner_zygote.start` turns the zygote off."""

RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"
"""The module Spark runs as each streaming query's source runner."""

_LEN = struct.Struct(">I")
_STATUS = struct.Struct(">ii")  # (pid, 0) once forked, then (pid, exit status)


def _fallback(argv):
    python = os.environ.get("PYSPARK_KAFKA_ZYGOTE_PYTHON") or sys.executable
    os.execv(python, [python, *argv])


def _recv_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def main(argv):
    path, rest = argv[0], argv[1:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        _fallback(rest)
    status = run_through(sock, rest)
    if status is None:  # nothing was started: run the module here
        _fallback(rest)
    return status


def run_through(sock, rest):
    """Ask the zygote on the connected ``sock`` to run ``rest`` (``["-m", MODULE, ...]``) with this process's
    environment, directory and fds 0-2; pass SIGTERM and SIGINT on; return the process's exit status
    (1 when the zygote went away while it ran), or None when nothing was started (``sock`` closed)."""
    try:
        message = json.dumps({"argv": rest, "env": dict(os.environ), "cwd": os.getcwd(),
                              "executable": os.path.realpath(sys.executable), "prefix": sys.prefix}).encode()
        socket.send_fds(sock, [_LEN.pack(len(message)) + message], [0, 1, 2])
        forked = _recv_exactly(sock, _STATUS.size)
    except OSError:
        forked = None
    if forked is None:
        sock.close()
        return None
    pid = _STATUS.unpack(forked)[0]

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    done = _recv_exactly(sock, _STATUS.size)
    if done is None:  # the zygote went away: the forked process cannot be waited for here
        return 1
    status = _STATUS.unpack(done)[1]
    return status if 0 <= status < 256 else 1


# ---------------------------------------------------------------- a plain session's runner (the start-up .pth)

def supported() -> bool:
    """True on Linux (``fork`` after importing pyarrow and numpy is what the zygote does; macOS is not
    tested and keeps starting runners as before) when ``PYSPARK_KAFKA_RUNNER_ZYGOTE`` is not ``0``."""
    return sys.platform.startswith("linux") and os.environ.get(ENV) != "0"


def session_address(jvm_pid: int, uid: int | None = None) -> str:
    """The session zygote's socket: an abstract Unix socket name (Linux; no file, gone with its process)
    for the JVM ``jvm_pid`` of the user ``uid`` (default: this process's)."""
    return f"\0pyspark-kafka-runner-zygote-{os.getuid() if uid is None else uid}-{jvm_pid}"


def peer(sock: socket.socket) -> tuple[int, int]:
    """``(pid, uid)`` of the process at the other end of the Unix socket ``sock`` (``SO_PEERCRED``; for a
    connection to a listener: the process that called ``listen``)."""
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         struct.calcsize("3i")))
    return pid, uid


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid`` from ``/proc/<pid>/stat``, None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _argv_is(argv: list[str], expected: tuple[str, ...]) -> bool:
    return tuple(argv[1:1 + len(expected)]) == expected


def hand_off_runner(argv: list[str] | None = None, module: str = RUNNER_MODULE) -> int | None:
    """In a new ``python -m pyspark.sql.streaming.python_streaming_source_runner`` process of a plain
    session (called by the start-up ``.pth``): have the session zygote of the parent JVM fork the runner
    and wait for it; its exit status, or None when nothing was started (no zygote, refused, not Linux,
    :data:`ENV` set: the launcher of ``get_spark()`` does this instead) and the process goes on as before.

    The zygote must be this user's and its listener a child of this process's parent (the JVM):
    ``SO_PEERCRED``, ``/proc``. ``module``: the ``-m`` module this process must run (tests pass a
    stand-in). Never raises."""
    try:
        argv = list(getattr(sys, "orig_argv", []) if argv is None else argv)
        if not (supported() and not os.environ.get(ENV) and _argv_is(argv, ("-m", module))):
            return None
        jvm = os.getppid()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(session_address(jvm))
            pid, uid = peer(sock)
        except OSError:
            sock.close()
            return None
        if uid != os.getuid() or parent_of(pid) != jvm:
            sock.close()
            return None
        return run_through(sock, argv[1:])
    except Exception:  # noqa: BLE001 - the runner then starts as before
        return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
