"""The conformance suite's Java program (``ConformanceDriver.java``, Kafka's Java clients) for any test.

Shared by ``integration_tests/conformance/drivers/java_client.py`` (the conformance driver) and tests of
``tests/`` (the ACL differential run), which must not import ``integration_tests``: ``pytest tests`` does not put
the repository root on ``sys.path`` (issue 25: ``ModuleNotFoundError: No module named 'integration_tests'``). The
Java sources stay in ``integration_tests/conformance/java/``; they are found by this file's location, never the
current directory.

:func:`classpath` compiles a source once with ``javac`` against Apache Kafka's jars (``pyspark_kafka.testing.maven``)
into ``<cache>/java-driver/<version>-<source hash>/``; :func:`run` runs one command of the driver in one JVM, JSON
in and out; :func:`unavailable` says why it cannot run here.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import threading
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "integration_tests" / "conformance" / "java" / "ConformanceDriver.java"
"""The driver's source (``RideThrough.java`` and others sit beside it)."""
MAIN = "ConformanceDriver"
JVM = ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Dlog4j2.level=ERROR"]
_build_lock = threading.Lock()


def unavailable() -> str | None:
    """Why the Java driver cannot run here (None: it can)."""
    from pyspark_kafka.testing import maven

    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH (install a JDK 17, e.g. apt-get install openjdk-17-jdk-headless)"
    try:
        maven.kafka_libs()
    except maven.MavenUnavailable as e:
        return f"Kafka's jars from Maven Central: {e}"
    return None


def classpath(source: Path = SOURCE) -> str:
    """``java -cp`` value: the compiled ``source`` (default: the conformance driver; another
    single-class program of ``java/``, e.g. ``RideThrough.java``) first, then Kafka's jars
    (compiles on first use into the cache, keyed by the source's hash). RuntimeError when javac fails."""
    from pyspark_kafka.testing import maven

    version = maven.kafka_version()
    libs = maven.kafka_classpath(version)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    out = maven.cache_root() / "java-driver" / f"{version}-{digest}"
    out.parent.mkdir(parents=True, exist_ok=True)
    # A thread lock for this process and a file lock for others (pytest-xdist workers compile the same source).
    with _build_lock, open(out.parent / f".{out.name}.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        if not (out / f"{source.stem}.class").exists():
            tmp = out.with_name(out.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            done = subprocess.run(["javac", "-nowarn", "-cp", libs, "-d", str(tmp), str(source)],
                                  capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                raise RuntimeError(f"javac {source.name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
    return f"{out}:{libs}"


def run(command: str, *args: str, payload=None, timeout_s: float = 90, cp: str | None = None):
    """Run ``ConformanceDriver COMMAND ARGS...`` in one JVM (``payload`` as JSON on stdin); the decoded JSON of its
    last output line. AssertionError naming the command and the end of stderr when it exits non-zero."""
    done = subprocess.run(["java", *JVM, "-cp", cp or classpath(), MAIN, command, *args],
                          input=json.dumps(payload) if payload is not None else "",
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise AssertionError(f"Java client {command} failed ({done.returncode}): {done.stderr.strip()[-600:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def admin(bootstrap: str, script: list[dict]) -> list:
    """Run admin client operations in one JVM (``AdminOps`` in ConformanceDriver.java): ``script`` is
    ``[{"op": name, ...arguments}, ...]``; the answer is one JSON value per operation, ``{"error": Kafka error
    name}`` for a failed one."""
    return run("admin", bootstrap, "-", payload=script)
