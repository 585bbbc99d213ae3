"""``pyspark-kafka cluster``: starts a controller and N brokers, writes cluster.json, and on SIGINT stops every
process it started (checked by pid).

Flaky under load before issue 25: ``--port P`` binds P..P+N-1 but the test drew P with ``free_port()`` (the kernel's
ephemeral range), so another process's outgoing connection could hold P+1: node 1 exited with "address already in
use", and the test, reading one line of output, showed "node 1 exited (code 1):" without it. P now comes from
``free_port_block`` (below the ephemeral range) and a node's error names its cause on the first line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from pyspark_kafka.broker.cluster.embedded_cluster import free_port_block, metadata


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of the (still running) command counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_cluster_command_runs_until_interrupted_and_stops_every_node(tmp_path):
    port = free_port_block(2)
    proc = subprocess.Popen([sys.executable, "-m", "pyspark_kafka", "cluster", "--brokers", "2", "--data-dir",
                             str(tmp_path), "--port", str(port), "--config", "min.insync.replicas=2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids = []
    try:
        line = proc.stdout.readline()  # bounded: the command fails (exit 1) when a node does not start in 60 s
        if proc.poll() is not None or "brokers at" not in line:
            line += proc.stdout.read()  # the whole error: the node's log tail follows its first line
        assert f"2 brokers at 127.0.0.1:{port},127.0.0.1:{port + 1}" in line, line
        nodes = json.loads((tmp_path / "cluster.json").read_text())["nodes"]
        pids = [n["pid"] for n in nodes]
        assert [(n["id"], n["role"]) for n in nodes] == [(3000, "controller"), (0, "broker"), (1, "broker")]
        assert [n["port"] for n in nodes[1:]] == [port, port + 1]
        assert all(_alive(p) for p in pids)
        assert sorted(b.node_id for b in metadata(f"127.0.0.1:{port}", topics=[]).brokers) == [0, 1]
        assert "--config" in nodes[1]["command"] and "min.insync.replicas=2" in nodes[1]["command"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)


def test_cluster_command_takes_one_or_three_controllers(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pyspark_kafka", "cluster", "--controllers", "2", "--data-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--controllers: invalid choice: 2 (choose from 1, 3)" in proc.stderr
    assert not (tmp_path / "cluster.json").exists()


def test_cluster_command_names_the_cause_when_a_node_cannot_bind_its_port(tmp_path):
    port = free_port_block(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 1))  # broker 1's port (--port + 1)
        taken.listen()
        proc = subprocess.run([sys.executable, "-m", "pyspark_kafka", "cluster", "--brokers", "2", "--data-dir",
                               str(tmp_path), "--port", str(port)], capture_output=True, text=True, timeout=120)
    first = proc.stderr.strip().splitlines()[0]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"node 1 exited (code 1): OSError: [Errno 98]" in first and "address already in use" in first, first
    assert f"port {port + 1}" in first and "node.log" in first, first
