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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
