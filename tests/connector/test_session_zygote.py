"""The session zygote of a SparkSession built without get_spark() (pyspark_kafka.runner_zygote:
start_session_zygote in the create_data_source daemon, hand_off_runner in each new source runner).

The protocol is checked with stand-in processes (this test process plays the JVM: the fake daemon and the
fake runner are its children, as Spark's are the JVM's); a real plain session checks that a streaming
query's source runner is forked by the zygote, reads every record, and ends with its query."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from pyspark_kafka import runner_zygote
from support.waiting import wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote runs on Linux only")

PROBE = """
import os, sys
print("PROBE", os.getpid(), os.getppid(), os.environ.get("ZPROBE"), sys.argv[1:], flush=True)
sys.exit(3)
"""

DAEMON = """
import sys, time
from pyspark_kafka import runner_zygote
started = runner_zygote.start_session_zygote(
    [sys.executable, "-m", "pyspark.daemon", "pyspark.sql.worker.create_data_source"], modules=("zprobe",))
again = runner_zygote.start_session_zygote(
    [sys.executable, "-m", "pyspark.daemon", "pyspark.sql.worker.create_data_source"], modules=("zprobe",))
print("DAEMON", started, again, flush=True)
sys.stdin.read()  # until the test closes stdin, as Spark's daemon lives until the JVM closes its stdin
"""

RUNNER = """
import sys
from pyspark_kafka import runner_zygote
status = runner_zygote.hand_off_runner([sys.executable, "-m", "zprobe", "a b"], module="zprobe")
print("STATUS", status, flush=True)
"""


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and runner_zygote.parent_of(int(entry)) == pid:
            found.append(int(entry))
    return found


@pytest.fixture()
def fake_daemon(tmp_path, monkeypatch):
    """A child of this process calling start_session_zygote as Spark's create_data_source daemon would."""
    (tmp_path / "zprobe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != runner_zygote.ENV}
    env["PYTHONPATH"] = str(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", DAEMON], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    zygotes: list[int] = []
    try:
        assert proc.stdout.readline().split() == ["DAEMON", "True", "False"]  # the bind is the lock
        zygotes = _children(proc.pid)
        assert len(zygotes) == 1, zygotes
        yield proc, zygotes[0], env
    finally:
        if not proc.stdin.closed:
            proc.stdin.close()
        proc.wait(30)
        for zygote in zygotes:  # it holds this process's address until it has seen its daemon go
            wait_until(lambda: _gone(zygote), timeout_s=30, what="the session zygote to stop after its daemon")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _runner(env):
    return subprocess.run([sys.executable, "-c", RUNNER], capture_output=True, text=True, timeout=120,
                          env={**env, "ZPROBE": "from-runner"})


def test_a_runner_of_the_same_jvm_is_forked_by_the_session_zygote(fake_daemon):
    _, zygote, env = fake_daemon
    done = _runner(env)
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["STATUS"] == "3", done.stdout + done.stderr  # the forked process's exit status came back
    _pid, ppid, zprobe, argv = lines["PROBE"].split(" ", 3)
    assert int(ppid) == zygote and zprobe == "from-runner" and argv == "['a b']"


def test_a_runner_with_another_pythonpath_or_interpreter_or_the_zygote_off_starts_as_before(fake_daemon, tmp_path):
    _, _, env = fake_daemon
    other = _runner({**env, "PYTHONPATH": f"{env['PYTHONPATH']}:{tmp_path}/elsewhere"})
    assert "STATUS None" in other.stdout, other.stdout + other.stderr
    # another environment of the same interpreter: a virtualenv (sys.prefix differs) that sees this one's packages
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(os.path.realpath(sys.executable), venv / "bin" / "python3")
    (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(os.path.realpath(sys.executable))}\n"
                                     "include-system-site-packages = true\n")
    in_venv = subprocess.run([str(venv / "bin" / "python3"), "-c", RUNNER], capture_output=True, text=True,
                             timeout=120, env={**env, "ZPROBE": "from-runner"})
    assert "STATUS None" in in_venv.stdout, in_venv.stdout + in_venv.stderr
    # the same interpreter under another name (Spark runs "python3" for one process and "python" for another)
    (tmp_path / "bin").mkdir()
    os.symlink(sys.executable, tmp_path / "bin" / "python-other-name")
    same = subprocess.run([str(tmp_path / "bin" / "python-other-name"), "-c", RUNNER], capture_output=True,
                          text=True, timeout=120, env={**env, "ZPROBE": "from-runner"})
    assert "STATUS 3" in same.stdout, same.stdout + same.stderr
    off = _runner({**env, runner_zygote.ENV: "0"})
    assert "STATUS None" in off.stdout and "PROBE" not in off.stdout


def test_a_runner_hands_nothing_to_a_listener_that_is_not_a_child_of_its_jvm(tmp_path):
    """Abstract socket names have no file permissions: a process that is not the JVM's daemon (here this
    test process itself, the runner's parent) may hold the name. The runner must refuse it before it
    sends its environment (the JVM's auth secret) and its fds."""
    import socket
    import threading

    received: list[bytes] = []
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(runner_zygote.session_address(os.getpid()))
    squatter.listen(1)
    squatter.settimeout(60)

    def serve():
        try:
            conn, _ = squatter.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            try:
                received.append(conn.recv(65536))
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        (tmp_path / "zprobe.py").write_text(PROBE)
        env = {k: v for k, v in os.environ.items() if k != runner_zygote.ENV}
        done = _runner({**env, "PYTHONPATH": str(tmp_path)})
        assert "STATUS None" in done.stdout, done.stdout + done.stderr
        thread.join(10)
        assert received in ([], [b""]), "the runner sent its request to a process that is not its JVM's"
    finally:
        squatter.close()


def test_the_zygote_stops_with_its_daemon(fake_daemon):
    proc, zygote, _ = fake_daemon
    proc.stdin.close()
    proc.wait(30)
    wait_until(lambda: _gone(zygote), timeout_s=30, what="the session zygote to stop after its daemon")


JOB = """
import json, os, sys, time
os.environ["PYSPARK_PYTHON"] = sys.executable
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark_kafka import runner_zygote
from pyspark_kafka.testing.clusters import embedded

def zygote_and_children():
    jvm = [p for p in map(int, filter(str.isdigit, os.listdir("/proc")))
           if runner_zygote.parent_of(p) == os.getpid() and b"java" in open(f"/proc/{p}/cmdline", "rb").read()][0]
    for p in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read()
        except OSError:
            continue
        if b"runner_zygote\\0--session-fd" in cmd and runner_zygote.parent_of(runner_zygote.parent_of(p) or 0) == jvm:
            kids = [c for c in map(int, filter(str.isdigit, os.listdir("/proc"))) if runner_zygote.parent_of(c) == p]
            return p, kids
    return None, []

with embedded() as cluster:
    topic = cluster.create_topic(partitions=2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(300):
        producer.produce(topic, value=str(i).encode(), partition=i % 2)
    producer.flush()
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    out = {}
    for name in ("first", "second"):
        q = (spark.readStream.format("pykafka").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").load()
             .selectExpr("CAST(value AS STRING) AS v").writeStream.format("memory").queryName(name)
             .trigger(processingTime="200 milliseconds").start())
        deadline = time.monotonic() + 120
        while spark.table(name).count() < 300 and time.monotonic() < deadline and q.isActive:
            time.sleep(0.1)
        zygote, kids = zygote_and_children()
        out[name] = {"rows": sorted(int(r.v) for r in spark.table(name).collect()), "zygote": zygote, "forked": kids}
        q.stop()
        deadline = time.monotonic() + 30
        while zygote and zygote_and_children()[1] and time.monotonic() < deadline:
            time.sleep(0.05)
        out[name]["left_after_stop"] = zygote_and_children()[1]
    # another library's Python data source: its runner is forked the same way and reads the same rows
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class CountReader(DataSourceStreamReader):
        def initialOffset(self):
            return {"n": 0}

        def latestOffset(self):
            return {"n": 50}

        def partitions(self, start, end):
            return [InputPartition((start["n"], end["n"]))]

        def read(self, partition):
            yield from ((i,) for i in range(*partition.value))

        def commit(self, end):
            pass

    class CountSource(DataSource):
        @classmethod
        def name(cls):
            return "counting"

        def schema(self):
            return "i int"

        def streamReader(self, schema):
            return CountReader()

    spark.dataSource.register(CountSource)
    q = (spark.readStream.format("counting").load().writeStream.format("memory").queryName("other")
         .trigger(processingTime="200 milliseconds").start())
    deadline = time.monotonic() + 120
    while spark.table("other").count() < 50 and time.monotonic() < deadline and q.isActive:
        time.sleep(0.1)
    zygote, kids = zygote_and_children()
    out["other"] = {"rows": sorted(r.i for r in spark.table("other").collect()), "zygote": zygote, "forked": kids}
    q.stop()
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()
"""


@pytest.mark.slow
def test_a_plain_sessions_streaming_query_runs_its_source_runner_in_the_session_zygote():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_HIDE"))}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(JOB)], capture_output=True, text=True,
                          timeout=300, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-6000:]
    result = json.loads(line.split(" ", 1)[1])
    assert result["other"]["rows"] == list(range(50)), "another data source's streaming query"
    assert len(result["other"]["forked"]) == 1, "another data source's runner was not forked by the zygote"
    for name in ("first", "second"):
        assert result[name]["rows"] == list(range(300)), name  # every record once
        assert result[name]["zygote"], f"{name}: no session zygote under the create_data_source daemon"
        assert len(result[name]["forked"]) == 1, f"{name}: the source runner was not forked by the zygote"
        assert result[name]["left_after_stop"] == [], f"{name}: the forked runner outlived its query"


def test_pythonpaths_compare_by_their_entries():
    """Spark gives its daemons the same PYTHONPATH entries twice and a registered data source's runner once."""
    assert runner_zygote.path_entries("a:b:a::c") == ["a", "b", "c"]
    assert runner_zygote.path_entries("a:b:a:b") == runner_zygote.path_entries("a:b")
    assert runner_zygote.path_entries("b:a") != runner_zygote.path_entries("a:b")
