"""The stream reader's SIGTERM handler (``exit_once_on_sigterm``) lets the clean exit finish.

Spark stops a Python stream reader by signalling it twice in a row
(``PythonWorkerFactory.stopWorker``, then ``stop()``). The first SIGTERM must turn into
SystemExit so the runner's ``finally: reader.stop()`` commits and leaves the group; a second
one arriving during that cleanup must not cut it short (a flaky CI run of
``test_two_streaming_queries_in_one_group_split_partitions_and_take_over`` came from that).
The child process below stands for the runner: its ``finally`` block is the reader's stop.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from pyspark_kafka.read import stream_group
    stream_group.CLOSE_DEADLINE_S = int(sys.argv[1])
    signal.signal(signal.SIGTERM, stream_group.exit_once_on_sigterm)
    try:
        print("ready", flush=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the runner waiting for Spark's next call
            time.sleep(0.01)
        print("no signal came", flush=True)
    finally:
        print("stop started", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)  # Spark's second SIGTERM, during the reader's stop
        for _ in range(1000):  # give the interpreter many chances to run a handler
            sum(range(100))
        print("stop finished", flush=True)
        if sys.argv[2] == "hang":
            signal.pause()  # a stop that never ends (e.g. a consumer close that hangs)
""")


def run_child(deadline_s: int, mode: str) -> tuple[int, list[str]]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(deadline_s), mode],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        return proc.returncode, out.split()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_second_sigterm_does_not_interrupt_the_readers_stop():
    code, lines = run_child(30, "finish")
    assert lines == ["stop", "started", "stop", "finished"]
    assert code == 143  # SystemExit(128 + SIGTERM)


def test_the_clean_exit_is_bounded_by_an_alarm():
    code, lines = run_child(1, "hang")
    assert lines == ["stop", "started", "stop", "finished"]
    assert code == -signal.SIGALRM  # ended by the alarm, not waiting forever
