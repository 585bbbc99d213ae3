"""Apache Kafka 4's command-line tools for tests: the classpath of the cached jars, skipping the test when
they cannot be had (``pyspark_kafka.testing.maven``; docs/testing.md, "Apache Kafka from Maven Central")."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_kafka.testing import maven


def kafka4_classpath(why: str = "the tools' main classes here are Kafka 4's") -> str:
    """``java -cp`` string of Apache Kafka's libs (tools included), resolved into the Maven cache.

    Calls ``pytest.skip`` (naming ``why`` or Maven's error) when ``KAFKA_VERSION`` is older than 4 or the
    jars cannot be resolved."""
    version = maven.kafka_version()
    if int(version.split(".")[0]) < 4:
        pytest.skip(f"{why}; KAFKA_VERSION={version}")
    try:
        return maven.kafka_classpath(version)
    except maven.MavenUnavailable as e:
        pytest.skip(f"Apache Kafka {version} from Maven Central unavailable: {e}")


def tool_server_for_module(why: str = "the tools' main classes here are Kafka 4's"):
    """The body of a module-scoped fixture: ``yield from tool_server_for_module()`` yields a :class:`ToolServer`
    (Kafka's tools in one JVM) and closes it afterwards, also when the module failed; skips (naming ``why``) when
    Kafka 4's jars cannot be had (:func:`kafka4_classpath`)."""
    kafka4_classpath(why)
    server = ToolServer()
    try:
        yield server
    finally:
        server.close()


class ToolServer:
    """Kafka's tools run one after another in one JVM (``tests/support/java/ToolServer.java``): a tool call costs
    its own work, not a JVM start and class loading (about 1.5-3 s each here, measured in docs/testing.md).

    ``run(main, *args, stdin=None, timeout_s=120) -> (exit code, stdout + stderr)``. A call that does not answer
    within ``timeout_s`` kills the JVM (by pid; the next call starts a new one) and raises TimeoutError. Calls are
    serialized (a lock). :meth:`close` ends the JVM (also by pid when it does not exit)."""

    JVM = ["-Xmx384m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]

    def __init__(self) -> None:
        import threading

        from support import java_driver

        self._cp = java_driver.classpath(Path(__file__).with_name("java") / "ToolServer.java")
        self._lock = threading.Lock()
        self._proc = None

    def _start(self):
        import queue
        import subprocess
        import threading

        log_config = Path(__file__).with_name("java") / "tool-server-log4j2.xml"
        proc = subprocess.Popen(["java", *self.JVM, f"-Dlog4j2.configurationFile={log_config}", "-cp", self._cp,
                                 "ToolServer"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        answers: queue.Queue = queue.Queue()

        def pump():
            for line in proc.stdout:
                if line.startswith(MARK):
                    answers.put(line[len(MARK):].rstrip("\n"))
            answers.put(None)

        threading.Thread(target=pump, daemon=True).start()
        self._proc, self._answers = proc, answers
        self._answer(60)  # "ready"

    def _answer(self, timeout_s: float) -> str:
        import queue

        try:
            answer = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            self._kill()
            raise TimeoutError(f"Kafka's tool did not finish within {timeout_s:g} s (tool server JVM killed)") from None
        if answer is None:
            code = self._proc.wait(30)
            self._proc = None
            raise RuntimeError(f"the tool server JVM exited (code {code})")
        return answer

    def run(self, main: str, *args: str, stdin: str | None = None, timeout_s: float = 120) -> tuple[int, str]:
        import base64

        def b64(text: str) -> str:
            return base64.b64encode(text.encode()).decode()

        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            self._proc.stdin.write(" ".join([b64(stdin or ""), b64(main), *map(b64, args)]) + "\n")
            self._proc.stdin.flush()
            code, output = self._answer(timeout_s).split(" ", 1)
            return int(code), base64.b64decode(output).decode(errors="replace")

    def _kill(self) -> None:
        import os
        import signal

        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGKILL)
            self._proc.wait(30)
        self._proc = None

    def close(self) -> None:
        """Close the JVM's stdin (it halts), SIGKILL it by pid after 10 s."""
        if self._proc is None:
            return
        try:
            self._proc.stdin.close()
            self._proc.wait(10)
        except Exception:
            pass
        self._kill()


MARK = "@@tool-server@@ "
