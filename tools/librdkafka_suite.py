"""Run librdkafka's own test suite (its broker tests) against one target, test by test, and write the results.

    python tools/librdkafka_suite.py --librdkafka /tmp/librdkafka --target cluster --out cluster.json
    python tools/librdkafka_suite.py --librdkafka /tmp/librdkafka --target kafka --tests 0011,0081
    python tools/librdkafka_suite.py --compare broker.json cluster.json kafka.json

Targets, all with the same broker settings (librdkafka's default test scenario: topics auto-created with 4
partitions; Kafka's ACL authorizer with ``allow.everyone.if.no.acl.found=true``, as librdkafka's own test clusters
run), see :data:`BROKER_CONFIG`:

- ``broker``: ``pyspark-kafka broker`` (one node);
- ``cluster``: ``pyspark-kafka cluster`` (3 brokers, one controller; ``default.replication.factor=3`` and Kafka's
  default ``min.insync.replicas=1``, as librdkafka's 3-broker test clusters: some tests create topics with
  replication factor 1 and produce with ``acks=all``);
- ``kafka``: Apache Kafka (one combined node, ``KAFKA_VERSION`` or the testing default, from Maven Central's jars,
  :class:`pyspark_kafka.testing.apache_kafka.ApacheKafka`); ``--kafka-nodes 3``: three combined nodes with the
  cluster target's replication settings, to compare with it (``User:ANONYMOUS`` a super user there: the voters
  need it, so the suite's ACL tests do not compare).

``--repeat N`` runs each selected number N times against the one target (a timing-dependent test's pass rate);
``--broker-config KEY=VALUE`` changes a broker setting of the target (e.g. ``group.initial.rebalance.delay.ms=3000``,
Kafka's default, as trivup's test clusters leave it); ``--client-debug CONTEXTS`` gives every client of the tests librdkafka's ``debug`` contexts (e.g. ``cgrp,protocol``).
The logs folder (printed at start, ``logs`` in the JSON) is kept: each number's output ``NNNN.log`` (``NNNN-k.log``
with ``--repeat``) and the target's log.

librdkafka must be built first (``./configure --no-download --disable-gssapi && make libs`` and ``make -C tests
test-runner``; docs/compatibility-tests.md). Each test number runs as its own ``tests/test-runner -L -Q`` process (broker
tests only, quick mode, ``TEST_KAFKA_VERSION=4.0.0``) with a wall-clock bound, ``--parallel`` at a time; its result
per test name comes from the runner's JSON report (``TEST_REPORT``), and a process killed at the bound counts its
tests as ``TIMEOUT``. The suite's admin steps call ``$KAFKA_PATH/bin/kafka-*.sh``: :func:`kafka_home` makes a folder
with thin wrappers that run Kafka's tool main classes from the Maven jars, and ``libs/`` with those jars (the suite's
``tests/java`` helpers compile against its ``kafka-clients`` jar).

The output JSON: ``{"target", "kafka_version", "seconds", "tests": {name: {"state", "seconds", "number"}}}``;
``--compare`` prints a table of every test whose state differs between the files, and each file's counts.
Processes started here (the target, the runners) are stopped by pid, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TEST_KAFKA_VERSION = "4.0.0"
"""The broker version the suite is told (``TEST_KAFKA_VERSION``): every API of Kafka 4.0; share-group tests
(which ask 4.2) skip."""
BROKER_CONFIG = {
    "auto.create.topics.enable": "true",
    "num.partitions": "4",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "group.initial.rebalance.delay.ms": "0",
}
"""Settings every target gets (Kafka's names): librdkafka's default scenario (``tests/scenarios/default.json``), the
authorizer its test clusters run with, and no initial rebalance delay (this harness's choice, for speed: trivup's
test clusters keep Kafka's default of 3000 ms; at 0 ms test 0118 depends on which consumer joins first, on
Apache Kafka too, docs/compatibility-tests.md). No ``super.users``: the suite's clients are ``User:ANONYMOUS`` on
PLAINTEXT, and its ACL tests (0109, 0115, 0119) deny ``User:*`` and expect the denial; brokers and controllers get
their cluster permissions from ``allow.everyone.if.no.acl.found``."""
TOOLS = {
    "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
    "kafka-acls.sh": "org.apache.kafka.tools.AclCommand",
    "kafka-configs.sh": "org.apache.kafka.tools.ConfigCommand",  # kafka.admin.ConfigCommand before 4.4
    "kafka-consumer-groups.sh": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
}
"""Kafka's scripts the suite calls, and the main class each runs (Kafka 4.x ``kafka-tools``)."""
_STOP = threading.Event()
"""Set on SIGINT/SIGTERM: no further test number starts; the running ones are killed (:data:`_RUNNING`)."""
_RUNNING: set[subprocess.Popen] = set()


def _on_signal(*_) -> None:
    _STOP.set()
    for proc in list(_RUNNING):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def broker_tests(librdkafka: Path) -> list[tuple[str, str]]:
    """``[(number, name)]`` of the suite's broker tests: every ``_TEST(...)`` of ``tests/test.c`` without
    ``TEST_F_LOCAL`` or ``TEST_F_MANUAL``, in the suite's order. Raises FileNotFoundError without the source."""
    text = (librdkafka / "tests" / "test.c").read_text()
    table = text[text.index("struct test tests[]"):]
    out = []
    for m in re.finditer(r"_TEST\((\d{4})_(\w+),\s*([^,)]*)", table):
        flags = m.group(3)
        if "TEST_F_LOCAL" in flags or "TEST_F_MANUAL" in flags:
            continue
        out.append((m.group(1), f"{m.group(1)}_{m.group(2)}"))
    return out


def kafka_home(folder: Path, version: str) -> Path:
    """A ``KAFKA_PATH`` for the suite: ``libs`` (Apache Kafka ``version``'s jars, resolved by Maven) and ``bin/``
    with ``kafka-run-class.sh`` (``java -cp "$CLASSPATH:libs/*" MAIN ARGS``) and the scripts of :data:`TOOLS`.
    Raises MavenUnavailable when the jars cannot be had."""
    from pyspark_kafka.testing import maven

    libs = maven.kafka_libs(version)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "libs").mkdir(exist_ok=True)
    for jar in libs:
        link = folder / "libs" / jar.name
        if not link.exists():
            link.symlink_to(jar)
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    run_class = bin_dir / "kafka-run-class.sh"
    run_class.write_text('#!/bin/sh\nexec java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC '
                         '-Dlog4j2.rootLogger.level=WARN '
                         f'-cp "$CLASSPATH:{folder}/libs/*" "$@"\n')
    for script, main in TOOLS.items():
        if script == "kafka-configs.sh":
            main = maven.config_command_main(version)
        (bin_dir / script).write_text(f'#!/bin/sh\nexec "{run_class}" {main} "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return folder


class Target:
    """One broker target for the life of a ``with`` block: ``bootstrap`` once started; stopped by pid."""

    def __init__(self, kind: str, folder: Path, kafka_version: str, kafka_nodes: int = 1,
                 broker_config: dict[str, str] | None = None):
        self.kind, self.folder, self.kafka_version, self.kafka_nodes = kind, folder, kafka_version, kafka_nodes
        self.broker_config = {**BROKER_CONFIG, **(broker_config or {})}
        self.bootstrap = ""
        self._proc: subprocess.Popen | None = None
        self._kafka = None

    def __enter__(self) -> "Target":
        configs = [a for k, v in self.broker_config.items() for a in ("--config", f"{k}={v}")]
        log = open(self.folder / f"{self.kind}.log", "wb")
        if self.kind == "kafka":
            from pyspark_kafka.testing.apache_kafka import ApacheKafka

            config = dict(self.broker_config)
            if self.kafka_nodes > 1:
                # As the cluster target: Kafka's default min.insync.replicas=1. The voters' Raft fetches go over
                # PLAINTEXT as User:ANONYMOUS, which Kafka's StandardAuthorizer refuses (AuthorizerNotReadyException)
                # until the metadata is loaded unless it is a super user: so ANONYMOUS is one here, and the
                # suite's ACL denials (0109, 0115, 0119) do not apply to its clients on this target.
                config.update({"default.replication.factor": str(min(3, self.kafka_nodes)),
                               "min.insync.replicas": "1", "super.users": "User:ANONYMOUS"})
            self._kafka = ApacheKafka(nodes=self.kafka_nodes, version=self.kafka_version, config=config).start()
            self.bootstrap = self._kafka.bootstrap_servers
        elif self.kind == "broker":
            port = _free_port()
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "pyspark_kafka", "broker", "--data-dir", str(self.folder / "data"),
                 "--port", str(port), "--log-level", "warning", *configs],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self.bootstrap = f"127.0.0.1:{port}"
            self._wait_accepts(port)
        elif self.kind == "cluster":
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "pyspark_kafka", "cluster", "--brokers", "3", "--data-dir",
                 str(self.folder / "data"), *configs, "--config", "default.replication.factor=3"],
                stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
            line = self._proc.stdout.readline()  # "pyspark-kafka cluster: 3 brokers at H:P,H:P,H:P, ..."
            m = re.search(r"brokers at (\S+),", line)
            if not m:
                self.__exit__()
                raise RuntimeError(f"the cluster did not start: {line!r} (log {log.name})")
            self.bootstrap = m.group(1)
        else:
            raise ValueError(f"unknown target {self.kind!r}: broker, cluster or kafka")
        log.close()
        return self

    def _wait_accepts(self, port: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the broker exited with {self._proc.returncode} (log in {self.folder})")
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"the broker did not listen on {port} within {timeout_s:g} s")

    def __exit__(self, *exc) -> None:
        if self._kafka is not None:
            self._kafka.stop()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)


def run_number(librdkafka: Path, number: str, names: set[str], env: dict, out_dir: Path, timeout_s: float,
               run: int = 0) -> dict:
    """Run the broker tests of one number (``TESTS=<number>``) in their own ``test-runner -L -Q`` process; returns
    ``{name: {"state", "seconds", "number", "extra"}}`` for the ``names`` its report lists (``seconds``: the
    process's wall time), ``{number: TIMEOUT}`` for a process killed at ``timeout_s``, ``CRASHED`` without a
    report. ``run`` > 0 (``--repeat``): the ``run``-th repetition, its log ``NNNN-<run>.log`` and its names
    ``name#<run>``."""
    tag = f"{number}-{run}" if run else number
    report = out_dir / f"report-{tag}.json"
    env = dict(env, TESTS=number, TEST_REPORT=str(report))
    started = time.monotonic()
    if _STOP.is_set():
        return {}
    with open(out_dir / f"{tag}.log", "wb") as log:
        proc = subprocess.Popen([str(librdkafka / "tests" / "test-runner"), "-L", "-Q", "-S"], cwd=librdkafka / "tests",
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _RUNNING.add(proc)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            return {tag: {"state": "TIMEOUT", "seconds": round(time.monotonic() - started, 1),
                                  "number": number}}
        finally:
            _RUNNING.discard(proc)
    if _STOP.is_set():
        return {}
    try:
        tests = json.loads(report.read_text())["tests"]
    except (OSError, ValueError, KeyError):
        return {tag: {"state": "CRASHED", "seconds": round(time.monotonic() - started, 1),
                              "number": number, "exit": proc.returncode}}
    seconds = round(time.monotonic() - started, 1)  # the report's durations are not filled in for every test
    suffix = f"#{run}" if run else ""
    return {name + suffix: {"state": t.get("state"), "seconds": seconds, "number": number, "extra": t.get("extra", "")}
            for name, t in tests.items() if name in names and name.startswith(number)}


def run_suite(args) -> dict:
    """Start the target, run every selected number (``--parallel`` at a time), stop the target; the results dict."""
    librdkafka = Path(args.librdkafka).resolve()
    tests = broker_tests(librdkafka)
    names = {name for _, name in tests}
    numbers = sorted({n for n, _ in tests})
    if args.tests:
        wanted = set(args.tests.split(","))
        numbers = [n for n in numbers if n in wanted]
    folder = Path(tempfile.mkdtemp(prefix=f"rdk-suite-{args.target}-"))
    home = kafka_home(folder / "kafka-home", args.kafka_version)
    results: dict = {}
    started = time.monotonic()
    with Target(args.target, folder, args.kafka_version, args.kafka_nodes, broker_configs(args.broker_config)) as target:
        (folder / "test.conf").write_text(f"metadata.broker.list={target.bootstrap}\ntest.topic.random=true\n"
                                          f"test.timeout.multiplier={args.timeout_multiplier}\n"
                                          + (f"debug={args.client_debug}\n" if args.client_debug else ""))
        env = dict(os.environ, KAFKA_PATH=str(home), BROKERS=target.bootstrap,
                   TEST_KAFKA_VERSION=TEST_KAFKA_VERSION, RDKAFKA_TEST_CONF=str(folder / "test.conf"),
                   LD_LIBRARY_PATH=f"{librdkafka / 'src'}:{librdkafka / 'src-cpp'}")
        print(f"{args.target} at {target.bootstrap}; {len(numbers)} test numbers; logs in {folder}", flush=True)
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            runs = range(1, args.repeat + 1) if args.repeat > 1 else [0]
            futures = {pool.submit(run_number, librdkafka, n, names, env, folder, args.timeout, k): n
                       for k in runs for n in numbers}
            for f in concurrent.futures.as_completed(futures):
                for name, r in f.result().items():
                    results[name] = r
                    print(f"  {name:50} {r['state']:8} {r['seconds']:6.1f} s", flush=True)
    return {"target": args.target, "kafka_version": args.kafka_version, "logs": str(folder),
            "seconds": round(time.monotonic() - started), "tests": dict(sorted(results.items()))}


def broker_configs(pairs: list[str]) -> dict[str, str]:
    """``{key: value}`` of ``--broker-config KEY=VALUE`` arguments (Kafka's names, over :data:`BROKER_CONFIG`).
    Raises ValueError naming an argument without ``=``."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--broker-config {pair!r}: give KEY=VALUE with Kafka's name, e.g. "
                             "group.initial.rebalance.delay.ms=3000")
        out[key] = value
    return out


def counts(result: dict) -> dict:
    """``{state: number of tests}`` of one results dict."""
    out: dict = {}
    for r in result["tests"].values():
        out[r["state"]] = out.get(r["state"], 0) + 1
    return out


def compare(paths: list[str]) -> str:
    """A text table: each file's counts, then every test whose state differs between the files."""
    results = [json.loads(Path(p).read_text()) for p in paths]
    lines = [f"{r['target']:8} {r['seconds']:5} s  " + ", ".join(f"{k} {v}" for k, v in sorted(counts(r).items()))
             for r in results]
    names = sorted({n for r in results for n in r["tests"]})
    lines.append("test".ljust(50) + "".join(r["target"].ljust(10) for r in results))
    for name in names:
        states = [r["tests"].get(name, {}).get("state", "-") for r in results]
        if len(set(states)) > 1:
            lines.append(name.ljust(50) + "".join(s.ljust(10) for s in states))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring); returns the exit code (0, or 2 for bad arguments)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--librdkafka", help="librdkafka source folder, built (tests/test-runner)")
    parser.add_argument("--target", choices=("broker", "cluster", "kafka"))
    parser.add_argument("--tests", default="", help="comma-separated test numbers (default: every broker test)")
    parser.add_argument("--kafka-version", default=None, help="Apache Kafka for tools and the kafka target")
    parser.add_argument("--parallel", type=int, default=2, help="test numbers run at once (default 2)")
    parser.add_argument("--timeout", type=float, default=300.0, help="bound per test number, seconds (300)")
    parser.add_argument("--timeout-multiplier", type=float, default=3.0, help="the suite's test.timeout.multiplier (3)")
    parser.add_argument("--client-debug", default="", metavar="CONTEXTS",
                        help="librdkafka debug contexts for every client of the tests, e.g. cgrp,protocol (their "
                             "lines go to each number's log, NNNN.log in the logs folder)")
    parser.add_argument("--kafka-nodes", type=int, default=1,
                        help="combined nodes of the kafka target (default 1; 3 to compare with the cluster target)")
    parser.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for the target over the defaults (repeatable), e.g. "
                             "group.initial.rebalance.delay.ms=3000")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each selected number this many times against the one target (results name#k)")
    parser.add_argument("--out", help="results JSON file")
    parser.add_argument("--compare", nargs="+", metavar="RESULTS", help="compare results files instead of running")
    args = parser.parse_args(argv)
    try:
        broker_configs(args.broker_config)
    except ValueError as e:
        parser.error(str(e))
    if args.compare:
        print(compare(args.compare))
        return 0
    if not args.librdkafka or not args.target:
        parser.error("--librdkafka and --target are required to run the suite")
    from pyspark_kafka.testing import maven

    args.kafka_version = args.kafka_version or maven.kafka_version()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    result = run_suite(args)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{args.target}: {result['seconds']} s, " + ", ".join(f"{k} {v}" for k, v in sorted(counts(result).items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
