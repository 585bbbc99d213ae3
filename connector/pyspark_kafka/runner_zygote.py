"""A pre-started Python process that forks the source runner of each new streaming query.

Spark starts a new Python process for every streaming query of a Python data source
(``pyspark.sql.streaming.python_streaming_source_runner``): the interpreter's start and the
imports of pyspark, pyarrow, numpy and this package cost about 0.35 s of CPU and as much wall time
before the query's first micro-batch can be planned (docs/benchmark-analysis.md), where Spark's
own Kafka connector starts nothing. The zygote pays that once per session: started by
:func:`pyspark_kafka.spark.get_spark` (Linux; :func:`start`), it imports those modules, then listens
on a Unix socket in a private directory (mode 0700). The launcher that Spark runs as the driver-side
Python (:func:`pyspark_kafka.worker_daemon.launcher`) hands each runner start to
:mod:`pyspark_kafka.runner_zygote_client`, and the zygote forks a process that runs the module with
the client's arguments, environment, working directory and standard streams. The JVM keeps
talking to the forked runner over its own socket exactly as to a process it started.

Rules:

- only the modules in :data:`MODULES` (or those given to :func:`serve`) are run; others are refused
  (the client then starts Python itself);
- one thread: the zygote never forks while another thread could hold a lock;
- the forked process gets default signal handlers and runs the module as ``__main__``;
- when a client's connection closes before its process ended (Spark killed the client), the
  process gets SIGTERM; when the zygote's parent (the driver) exits, the zygote stops and its
  running children get SIGTERM;
- every forked process is reaped by the zygote (its CPU time reaches the zygote's, and so the
  driver's, cutime/cstime: process-tree accounting stays complete).

Set ``PYSPARK_KAFKA_RUNNER_ZYGOTE=0`` before the session starts to turn it off.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from typing import Callable

from pyspark_kafka.runner_zygote_client import (  # noqa: F401 - the client side, re-exported for its callers
    ENV,
    RUNNER_MODULE,
    _argv_is,
    hand_off_runner,
    parent_of,
    peer,
    session_address,
    supported,
)

MODULES = (RUNNER_MODULE,)
"""What the zygote runs: Spark's streaming source runner only."""

PRELOAD = ("pyspark", "pyarrow", "numpy", RUNNER_MODULE, "pyspark_kafka.source", "pyspark_kafka.read.stream",
           "confluent_kafka", "confluent_kafka.admin", "pyspark_kafka.kafka.keystores")
"""Imported once by the zygote before it listens, so each forked runner has them already: every module a
stream reader's calls import (its creation, ``initialOffset``, ``latestOffset``, ``partitions``,
``commit``, ``stop``; ``confluent_kafka.admin`` and the key-store helpers cost a forked runner 3-6 ms
more per query when left to the first call)."""

SINGLE_THREADED = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
"""Set in the zygote's environment before its imports (unless set): numpy's OpenBLAS and pyarrow's jemalloc otherwise start
a thread each at import, and a process must not fork while other threads run (a lock held by one of
them stays locked in the child). The forked runners do no BLAS work and allocate little."""

_LEN = struct.Struct(">I")
_STATUS = struct.Struct(">ii")
_MAX_MESSAGE = 1 << 22  # 4 MiB of arguments and environment is far more than a real one


def _run_child(module: str, argv: list[str], env: dict, cwd: str, fds: list[int]) -> int:
    """In the forked process: take the client's streams, environment and directory, run ``module``."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGPIPE else signal.SIG_IGN)
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [module, *argv]
    import runpy

    # preloaded for its imports: run a fresh copy as __main__, as python -m does (runpy otherwise warns on
    # stderr, in every streaming query's output, that the module "found in sys.modules ... prior to execution")
    sys.modules.pop(module, None)

    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:  # noqa: BLE001 - as an uncaught exception in a script: traceback, status 1
        import traceback

        traceback.print_exc()
        return 1
    return 0


def _read_request(conn: socket.socket) -> tuple[dict, list[int]] | None:
    """The client's message and file descriptors; None for a malformed or truncated one (fds closed)."""
    conn.settimeout(10)
    fds: list[int] = []
    try:
        data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
        while len(data) < _LEN.size or len(data) < _LEN.size + _LEN.unpack_from(data)[0]:
            if len(data) >= _LEN.size and _LEN.unpack_from(data)[0] > _MAX_MESSAGE:
                raise ValueError("message too long")
            more = conn.recv(65536)
            if not more:
                raise ValueError("truncated message")
            data += more
        size = _LEN.unpack_from(data)[0]
        request = json.loads(data[_LEN.size:_LEN.size + size])
        if not (isinstance(request, dict) and isinstance(request.get("argv"), list)
                and all(isinstance(a, str) for a in request["argv"]) and isinstance(request.get("env"), dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in request["env"].items())
                and isinstance(request.get("cwd"), str) and len(fds) == 3):
            raise ValueError("malformed message")
        return request, fds
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        return None
    finally:
        conn.settimeout(None)


def serve(path: str, modules: tuple[str, ...] = MODULES, preload: tuple[str, ...] = PRELOAD) -> None:
    """Import ``preload``, listen on the Unix socket ``path`` and fork a process per client that asks
    for one of ``modules`` (``-m MODULE ARGS...``), until the parent process exits or SIGTERM.

    Protocol (per connection): the client sends a 4-byte big-endian length and a JSON object
    ``{"argv": ["-m", MODULE, ...], "env": {...}, "cwd": "..."}`` with its fds 0, 1, 2 attached
    (``SCM_RIGHTS``); the zygote answers ``(pid, 0)`` once forked and ``(pid, exit status)`` when the
    process ended (two big-endian int32s). A refused request is closed without an answer."""
    if not _preload(preload):
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    os.replace(path + ".tmp", path)  # clients see the socket only once it listens
    listener.listen(16)
    try:
        _serve_on(listener, modules, os.getppid())
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def _preload(preload: tuple[str, ...]) -> bool:
    """Import ``preload`` (single-threaded libraries first); False when a thread exists afterwards."""
    import importlib

    for key, value in SINGLE_THREADED.items():  # read by the libraries when they load: before the imports
        os.environ.setdefault(key, value)
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing optional module only makes the runner import it itself
            pass
    if _threads() > 1:  # something started a thread: forking is not safe, let runners start as before
        print(f"pyspark_kafka.runner_zygote: {_threads()} threads after the imports; not forking runners",
              file=sys.stderr, flush=True)
        return False
    return True


def _serve_on(listener: socket.socket, modules: tuple[str, ...], parent: int,
              accept: Callable[[socket.socket, dict], bool] | None = None,
              before_fork: Callable[[], bool] | None = None) -> None:
    """The zygote's loop on a listening ``listener`` until ``parent`` is no longer this process's parent
    or SIGTERM. ``accept(conn, request)``: a further check of each well-formed request (False: refused);
    ``before_fork()``: run before the first fork (the session zygote's lazy imports; False: refuse all)."""
    children: dict[int, socket.socket | None] = {}  # pid -> its client's connection (None: client gone)
    stopping = []
    ready: list[bool] = []  # before_fork's answer, once asked
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        while not stopping and os.getppid() == parent:
            watched = [listener, *(c for c in children.values() if c is not None)]
            readable, _, _ = select.select(watched, [], [], 0.5)
            for sock in readable:
                if sock is listener:
                    conn, _ = listener.accept()
                    got = _read_request(conn)
                    argv = got[0]["argv"] if got else []
                    wanted = bool(got) and len(argv) >= 2 and argv[0] == "-m" and argv[1] in modules
                    if wanted and accept is not None:
                        wanted = accept(conn, got[0])
                    if wanted and before_fork is not None:
                        if not ready:
                            ready.append(before_fork())
                        wanted = ready[0]
                    if not wanted:
                        for fd in (got[1] if got else []):
                            os.close(fd)
                        conn.close()
                        continue
                    request, fds = got
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:
                        code = 1
                        try:
                            listener.close()
                            conn.close()
                            for other in children.values():
                                if other is not None:
                                    other.close()
                            code = _run_child(argv[1], argv[2:], request["env"], request["cwd"], fds)
                        finally:
                            try:
                                sys.stdout.flush()
                                sys.stderr.flush()
                            finally:
                                os._exit(code)
                    for fd in fds:
                        os.close(fd)
                    try:
                        conn.sendall(_STATUS.pack(pid, 0))
                    except OSError:
                        os.kill(pid, signal.SIGTERM)
                    children[pid] = conn
                else:  # a client's connection closed or sent something: its process is not wanted any more
                    for pid, conn in list(children.items()):
                        if conn is sock:
                            conn.close()
                            children[pid] = None
                            try:
                                os.kill(pid, signal.SIGTERM)
                            except OSError:
                                pass
            _reap(children)
    finally:
        listener.close()
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass


def _threads() -> int:
    """Threads of this process (``/proc/self/task``; Python's count where that does not exist)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def _reap(children: dict[int, socket.socket | None]) -> None:
    """Wait for every ended child; tell its client the exit status."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(_STATUS.pack(pid, os.waitstatus_to_exitcode(status)))
            except OSError:
                pass
            conn.close()


def start(python: str = sys.executable) -> str | None:
    """Start a zygote for this process (once) and set :data:`ENV` to its socket's path; returns the path,
    or None when not :func:`supported` or it cannot start. The zygote is a child of this process: it
    stops when this process exits. The socket appears once its imports are done; until then runners
    start as without it."""
    if not supported():
        return None
    current = os.environ.get(ENV)
    if current and _started.get("path") == current:
        return current
    try:
        directory = tempfile.mkdtemp(prefix="pyspark-kafka-zygote-")  # mode 0700
        path = os.path.join(directory, "runner.sock")
        proc = subprocess.Popen([python, "-m", "pyspark_kafka.runner_zygote", path], stdin=subprocess.DEVNULL,
                                close_fds=True)
    except OSError:
        return None
    _started.update(path=path, proc=proc)
    os.environ[ENV] = path
    import atexit

    atexit.register(_stop, proc, directory)
    return path


def _stop(proc: subprocess.Popen, directory: str) -> None:
    """At the driver's exit: stop the zygote (by its pid; killed after 5 s) and remove its directory."""
    import shutil

    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    shutil.rmtree(directory, ignore_errors=True)


_started: dict = {}


# --------------------------------------------------------------------------- the session zygote (a plain SparkSession)

SESSION_DAEMON = ("-m", "pyspark.daemon", "pyspark.sql.worker.create_data_source")
"""The process that starts a session zygote: the daemon of Spark's ``create_data_source`` planner workers
(started by the JVM when a Python data source is first loaded, alive until the SparkContext stops)."""


def start_session_zygote(argv: list[str] | None = None, modules: tuple[str, ...] = ()) -> bool:
    """In the daemon of ``SESSION_DAEMON`` (called by the package's start-up ``.pth``): start the session's
    runner zygote unless one serves this JVM already; True when this call started it.

    For a SparkSession built without :func:`pyspark_kafka.spark.get_spark` (no :data:`ENV` in the
    environment; ``0`` there turns it off), on Linux. The daemon binds :func:`session_address` of its
    parent (the JVM) and listens: the bind is the lock, so one zygote per JVM. It then forks, and the
    child replaces itself with ``python -m pyspark_kafka.runner_zygote --session-fd FD:PARENT``, a fresh
    interpreter (whole ``site`` set-up) that is the daemon's child: it is in the application's process
    tree, and stops when the daemon does (the SparkContext's stop). It imports pyspark, pyarrow and this
    package only when the first runner asks (:func:`serve_session`), so a session that never starts a
    streaming query of a Python data source pays one idle interpreter (about 10 MB, 20 ms of CPU).
    ``modules``: what it may run (default :data:`MODULES`; tests pass a stand-in). Never raises."""
    try:
        argv = list(getattr(sys, "orig_argv", []) if argv is None else argv)
        if not (supported() and not os.environ.get(ENV) and _argv_is(argv, SESSION_DAEMON)):
            return False
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(session_address(os.getppid()))
        except OSError:  # another daemon of this JVM serves one already
            listener.close()
            return False
        listener.listen(16)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - replaced by exec
            try:
                devnull = os.open(os.devnull, os.O_RDWR)
                os.dup2(devnull, 0)
                os.dup2(devnull, 1)  # the JVM reads the daemon's stdout for its port: keep out of it
                os.set_inheritable(listener.fileno(), True)
                os.execv(sys.executable, [sys.executable, "-m", "pyspark_kafka.runner_zygote", "--session-fd",
                                          f"{listener.fileno()}:{os.getppid()}", *modules])
            finally:
                os._exit(1)
        listener.close()
        return True
    except Exception:  # noqa: BLE001 - an interpreter start must not fail because of this
        return False


def serve_session(fd: int, parent: int, modules: tuple[str, ...] = MODULES,
                  preload: tuple[str, ...] = PRELOAD) -> None:
    """The session zygote (``python -m pyspark_kafka.runner_zygote --session-fd FD:PARENT``): serve on the
    listening socket ``fd`` until ``parent`` (the daemon, pid taken before the ``exec``: it may have exited
    since) is no longer this process's parent. Imports ``preload`` when the first request comes.

    A request is served only from a process of this user (``SO_PEERCRED``) running this interpreter
    (``sys.executable`` with symlinks resolved: ``python`` and ``python3`` are one) in this environment
    (``sys.prefix``: another virtualenv is refused) with this ``PYTHONPATH`` (what the preloaded modules
    were found on; compared by :func:`path_entries`); else it is refused and the runner starts as
    before."""
    listener = socket.socket(fileno=fd)
    own_path = path_entries(os.environ.get("PYTHONPATH", ""))

    def accept(conn: socket.socket, request: dict) -> bool:
        try:
            _, uid = peer(conn)
        except OSError:
            return False
        return (uid == os.getuid() and path_entries(request["env"].get("PYTHONPATH", "")) == own_path
                and request.get("executable") == os.path.realpath(sys.executable)
                and request.get("prefix") == sys.prefix)

    _serve_on(listener, modules, parent, accept=accept, before_fork=lambda: _preload(preload))


def path_entries(pythonpath: str) -> list[str]:
    """The entries of a ``PYTHONPATH`` value in order, each once and none empty: what ``sys.path`` gets
    from it (Spark gives some of its processes the same entries twice)."""
    seen: dict[str, None] = {}
    for entry in pythonpath.split(os.pathsep):
        if entry:
            seen.setdefault(entry, None)
    return list(seen)


if __name__ == "__main__":
    # python -m pyspark_kafka.runner_zygote SOCKET [MODULE ...]: the modules it may run (default: MODULES)
    # python -m pyspark_kafka.runner_zygote --session-fd FD:PARENT [MODULE ...]: the session zygote
    if sys.argv[1] == "--session-fd":
        fd, _, parent = sys.argv[2].partition(":")
        serve_session(int(fd), int(parent), tuple(sys.argv[3:]) or MODULES)
    else:
        serve(sys.argv[1], tuple(sys.argv[2:]) or MODULES)
