"""Quick ACKs on the TCP input of Spark's Python workers (pyspark_kafka.quick_ack).

The stall it removes (Nagle on the JVM side, delayed ACK on the worker's side, 40 ms per Python task in a
session on TCP) is measured in the benchmark, not asserted here: these tests check the mechanism on real
loopback sockets and that a plain SparkSession's workers read through it.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from pyspark_kafka import quick_ack

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_QUICKACK is Linux only")


def _quickack(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)


@pytest.fixture
def tcp_pair():
    """(client, server) sockets of one loopback TCP connection, the server's end in Linux's pingpong
    (delayed-ACK) mode after a few request/response exchanges."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname(), timeout=10)
        server, _ = listener.accept()
    try:
        for _ in range(5):
            client.sendall(b"request")
            server.recv(16)
            server.sendall(b"response")
            client.recv(16)
        yield client, server
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize("wrap, expected", [(False, 0), (True, 1)])
def test_a_read_through_the_wrapper_leaves_quick_ack_mode_on(tcp_pair, wrap, expected):
    client, server = tcp_pair
    assert _quickack(server) == 0, "precondition: the kernel delays this socket's ACKs (pingpong mode)"
    fdopen = quick_ack.quick_ack_fdopen(os.fdopen) if wrap else os.fdopen
    with fdopen(os.dup(server.fileno()), "rb", 65536) as reader:
        assert type(reader.raw).__name__ == ("QuickAckReader" if wrap else "FileIO")
        client.sendall(b"x" * 1308)
        assert reader.read(1308) == b"x" * 1308
        assert _quickack(server) == expected
        client.sendall(b"tail")
        client.shutdown(socket.SHUT_WR)
        assert reader.read() == b"tail"  # end of stream: read() returns what is left, then b""


def test_the_wrapper_closes_its_fd_once(tcp_pair):
    _, server = tcp_pair
    fd = os.dup(server.fileno())
    reader = quick_ack.quick_ack_fdopen(os.fdopen)(fd, "rb", 4096)
    reader.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    reader.close()  # a second close is a no-op


def test_everything_but_a_tcp_socket_read_in_binary_is_os_fdopen_unchanged(tmp_path, tcp_pair):
    fdopen = quick_ack.quick_ack_fdopen(os.fdopen)
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    with fdopen(os.open(path, os.O_RDONLY), "rb", 4) as f:
        assert type(f.raw) is io.FileIO and f.read() == b"abc"
    left, right = socket.socketpair()  # a Unix domain socket (spark.python.unix.domain.socket.enabled)
    with left, right, fdopen(os.dup(left.fileno()), "rb", 4) as f:
        assert type(f.raw) is io.FileIO
    _, server = tcp_pair
    with fdopen(os.dup(server.fileno()), "wb", 4) as f:  # the worker's output stream
        assert type(f.raw) is io.FileIO
    with fdopen(os.dup(server.fileno()), "rb", 0) as f:  # unbuffered
        assert type(f) is io.FileIO


@pytest.mark.parametrize("argv, expected", [
    (["python3", "-m", "pyspark.daemon", "pyspark.worker"], True),
    (["python3", "-m", "pyspark.daemon", "pyspark.sql.worker.plan_data_source_read"], True),
    (["/x/python", "-u", "-X", "faulthandler", "-m", "pyspark_kafka.worker_daemon"], True),
    (["python3", "-m", "pyspark.worker"], False),
    (["python3", "-m", "pyspark.sql.streaming.python_streaming_source_runner"], False),
    (["python3", "job.py", "-m", "pyspark.daemon"], False),
    (["python3", "-c", "pass", "-m", "pyspark.daemon"], False),
    (["python3"], False),
])
def test_only_spark_worker_daemons_are_changed(argv, expected, monkeypatch):
    monkeypatch.delenv(quick_ack.OFF_ENV, raising=False)
    assert quick_ack.wanted(argv) is expected
    monkeypatch.setenv(quick_ack.OFF_ENV, "0")
    assert quick_ack.wanted(argv) is False


JOB = """
import gc, io, os, socket, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession

def readers(_):
    found = [o for o in gc.get_objects() if isinstance(o, io.BufferedReader) and not o.closed]
    kinds = sorted({type(o.raw).__name__ for o in found
                    if type(o.raw).__name__ == "QuickAckReader" or isinstance(o.raw, io.FileIO)})
    yield ",".join(kinds)

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
print("KINDS", spark.sparkContext.parallelize([1], 1).mapPartitions(readers).collect()[0], flush=True)
spark.stop()
"""


@pytest.mark.slow
@pytest.mark.parametrize("off", [False, True])
def test_a_plain_sessions_workers_read_their_input_through_the_quick_ack_reader(off):
    """A SparkSession built without get_spark() (TCP to the workers, Spark's own daemon): the forked
    worker's input stream is a QuickAckReader; with PYSPARK_KAFKA_TCP_QUICKACK=0 it is pyspark's FileIO."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_HIDE"))}
    if off:
        env[quick_ack.OFF_ENV] = "0"
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(JOB)], capture_output=True, text=True,
                          timeout=180, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("KINDS ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-4000:]
    kinds = line.split(" ", 1)[1].split(",")
    if off:
        assert "QuickAckReader" not in kinds
    else:
        assert "QuickAckReader" in kinds
