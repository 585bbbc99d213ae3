"""The zygote that forks streaming queries' source runners (:mod:`pyspark_kafka.runner_zygote`): the
protocol with its client (arguments, environment, directory, streams, exit status, signals, the
fall-back when it cannot fork) on a stand-in module, and a real streaming query of the session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from support.waiting import wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote runs on Linux only")

CLIENT = os.path.join(os.path.dirname(__import__("pyspark_kafka").__file__), "runner_zygote_client.py")

PROBE = """
import os, signal, sys
if "wait" in sys.argv:  # stand for a runner waiting for Spark: until SIGTERM arrives (bounded at 60 s)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
print(os.getpid(), os.getppid(), os.environ.get("ZPROBE"), os.getcwd(), sys.argv[1:], sys.stdin.read().strip(), flush=True)
if "wait" in sys.argv:
    sys.exit(143 if signal.sigtimedwait([signal.SIGTERM], 60) else 4)
sys.exit(3)
"""


@pytest.fixture()
def zygote(tmp_path):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "zprobe.py").write_text(PROBE)
    path = str(tmp_path / "z.sock")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "mods")}
    proc = subprocess.Popen([sys.executable, "-m", "pyspark_kafka.runner_zygote", path, "zprobe"], env=env)
    try:
        wait_until(lambda: os.path.exists(path) or proc.poll() is not None, timeout_s=60, what="the zygote's socket")
        assert proc.poll() is None, "the zygote exited"
        yield proc, path, tmp_path
    finally:
        proc.terminate()
        proc.wait(10)


def _client(path, *args, stdin="", cwd=None, env=None, wait=True):
    env = {**os.environ, "ZPROBE": "from-client", "PYSPARK_KAFKA_ZYGOTE_PYTHON": sys.executable, **(env or {})}
    argv = [sys.executable, "-I", "-S", CLIENT, path, "-m", *args]
    if not wait:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=cwd, env=env)
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, cwd=cwd, env=env, timeout=60)


def test_the_zygote_runs_the_module_with_the_clients_arguments_environment_directory_streams_and_status(zygote):
    proc, path, tmp_path = zygote
    done = _client(path, "zprobe", "a b", "c", stdin="hello", cwd=str(tmp_path))
    assert done.returncode == 3, done.stderr
    pid, ppid, env, cwd, argv, stdin = done.stdout.split(" ", 5)
    assert int(ppid) == proc.pid  # forked by the zygote, not started by the client
    assert (env, cwd) == ("from-client", str(tmp_path))
    assert stdin.strip().endswith("hello") and "['a b', 'c']" in done.stdout


def test_a_signal_to_the_client_reaches_the_forked_process(zygote):
    proc, path, _ = zygote
    client = _client(path, "zprobe", "wait", wait=False)
    client.stdin.close()
    pid = int(client.stdout.readline().split()[0])
    os.kill(client.pid, signal.SIGTERM)
    assert client.wait(30) == 143  # the forked process got the signal and its status came back
    wait_until(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z",
               timeout_s=30, what="the forked process to end")


def test_a_module_the_zygote_does_not_run_or_no_zygote_starts_python_as_before(zygote, tmp_path):
    proc, path, mods = zygote
    env = {"PYTHONPATH": str(mods / "mods")}
    (mods / "mods" / "other.py").write_text(PROBE)
    done = _client(path, "other", env=env)  # not in the zygote's modules: refused, run by the client itself
    assert done.returncode == 3 and int(done.stdout.split()[1]) == os.getpid(), done.stdout + done.stderr
    done = _client(str(tmp_path / "missing.sock"), "zprobe", env=env)
    assert done.returncode == 3 and int(done.stdout.split()[1]) == os.getpid(), done.stdout + done.stderr


def test_a_streaming_query_of_the_session_gets_its_source_runner_from_the_zygote(spark, bootstrap, make_topic, tmp_path):
    """``get_spark`` started the zygote; a query's runner is its child and the query reads every record."""
    from pyspark_kafka import runner_zygote
    from support.streams import produce

    started = runner_zygote._started.get("proc")
    if started is None:
        pytest.skip("the session was not made by get_spark with its launcher here")
    assert os.environ.get(runner_zygote.ENV) == runner_zygote._started["path"]
    topic = make_topic(partitions=2)
    produce(bootstrap, topic, 50)
    seen = set()
    query = (spark.readStream.format("pykafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").load().writeStream.format("memory").queryName("zygote_probe")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    try:
        deadline = time.monotonic() + 60
        while query.isActive and time.monotonic() < deadline:
            for name in os.listdir("/proc"):
                if name.isdigit():
                    try:
                        if int(open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()[1]) == started.pid:
                            seen.add(int(name))
                    except (OSError, ValueError):
                        pass
            time.sleep(0.01)
        query.awaitTermination(60)
    finally:
        query.stop()
    assert spark.sql("SELECT count(*) FROM zygote_probe").collect()[0][0] == 50
    assert seen, "no process forked by the zygote while the query ran"


def test_a_preloaded_module_runs_without_runpy_s_warning(tmp_path):
    """The zygote preloads the runner module it runs (PRELOAD): the forked process runs it as ``__main__``
    with nothing on stderr (runpy warned "found in sys.modules ... prior to execution" in every
    streaming query's output). About 2 s."""
    (tmp_path / "mods" / "zpkg").mkdir(parents=True)  # runpy warns for a module of a package, as Spark's runner
    (tmp_path / "mods" / "zpkg" / "__init__.py").write_text("")
    (tmp_path / "mods" / "zpkg" / "zmain.py").write_text("import sys\nif __name__ == '__main__':\n    sys.exit(3)\n")
    path = str(tmp_path / "z.sock")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "mods")}
    serve = f"from pyspark_kafka.runner_zygote import serve; serve({path!r}, ('zpkg.zmain',), preload=('zpkg.zmain',))"
    proc = subprocess.Popen([sys.executable, "-c", serve], env=env)
    try:
        wait_until(lambda: os.path.exists(path) or proc.poll() is not None, timeout_s=60, what="the zygote's socket")
        done = _client(path, "zpkg.zmain", cwd=str(tmp_path))
        assert done.returncode == 3 and done.stderr == "", done.stderr
    finally:
        proc.terminate()
        proc.wait(10)


def test_malformed_requests_are_refused_and_the_zygote_keeps_serving(zygote):
    """What reaches the zygote's socket is checked: a message with no streams attached, a truncated one, a
    length over the bound, JSON of the wrong shape and a module it does not run are closed without an
    answer (nothing forked); a good request afterwards is served."""
    import json
    import socket
    import struct

    proc, path, tmp_path = zygote

    def send(payload: bytes, fds=(0, 1, 2)) -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(path)
            if fds:
                socket.send_fds(s, [payload], list(fds))
            else:
                s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            return s.recv(8)

    good = {"argv": ["-m", "zprobe"], "env": {}, "cwd": str(tmp_path)}
    message = json.dumps(good).encode()
    assert send(struct.pack(">I", len(message)) + message, fds=()) == b""  # no fds
    assert send(struct.pack(">I", len(message) + 10) + message) == b""  # truncated
    assert send(struct.pack(">I", 1 << 30) + b"{}") == b""  # over the bound
    for bad in ({"argv": "-m zprobe", "env": {}, "cwd": "/"}, {"argv": ["-m", "os"], "env": {}, "cwd": "/"}, [1, 2]):
        data = json.dumps(bad).encode()
        assert send(struct.pack(">I", len(data)) + data) == b"", bad
    assert send(b"\xff\xff") == b""  # not even a length
    assert proc.poll() is None
    done = _client(path, "zprobe", stdin="after")
    assert done.returncode == 3 and int(done.stdout.split()[1]) == proc.pid, done.stdout + done.stderr


def test_a_stream_readers_calls_import_nothing_the_zygote_did_not_preload(bootstrap, make_topic):
    """A forked runner starts with the zygote's PRELOAD imported: a stream reader's whole life (creation,
    initialOffset, latestOffset, partitions, reportLatestOffset, commit, stop) must import no other module,
    or every streaming query pays that import again."""
    topic = make_topic(partitions=2)
    code = f"""
import importlib, json, sys
from pyspark_kafka.runner_zygote import PRELOAD
for name in PRELOAD:
    importlib.import_module(name)
before = set(sys.modules)
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark_kafka.source import KafkaDataSource
source = KafkaDataSource({{"kafka.bootstrap.servers": {bootstrap!r}, "subscribe": {topic!r}, "startingOffsets": "earliest"}})
reader = source.streamReader(source.schema())
reader.prepareForTriggerAvailableNow()
start = reader.initialOffset()
end = reader.latestOffset(start, ReadAllAvailable())
reader.partitions(start, end)
reader.reportLatestOffset()
reader.commit(end)
reader.stop()
print(json.dumps(sorted(set(sys.modules) - before)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert [m for m in imported if not m.startswith("encodings.")] == []
