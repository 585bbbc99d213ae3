"""A damaged segment, served by the embedded broker and by Apache Kafka, read through Spark (issue 34, part 5c).

Per backend (the embedded broker as a process with a data directory, and one Apache Kafka node from
Maven Central's jars, both started here: they are stopped, damaged and restarted, so the suite's shared
backends are not used): three topics of one partition, :data:`RECORDS` records of about 100 bytes in
batches of :data:`PER_BATCH` (two uncompressed, one lz4). The node is stopped cleanly (SIGTERM), one
batch in the middle of each topic's ``.log`` segment is damaged (:mod:`segment_damage`: a value byte
flipped, so the CRC-32C no longer matches; ``batchLength`` raised by 8; a byte of the lz4 frame
flipped), and the node is restarted on the damaged files. A clean shutdown leaves
``.kafka_cleanshutdown`` and a recovery point at the log end, so neither broker re-validates the
segment on restart: both keep the high watermark and serve the damaged bytes (checked, with the log
line that says so). After an unclean stop (SIGKILL, recovery point 0) both would re-validate the segment
and truncate it at the damaged batch (Kafka 4.4.0: "Corruption found in segment 0, truncating to offset
1500"; ours logs the same), leaving a shorter log and nothing for a reader to fail on: checked by hand
(2026-11-28), not here, which would cost another restart.

Then ONE job (:mod:`corrupt_job`, its own driver with Spark's ``spark-sql-kafka-0-10`` in
``spark.jars``, the pyspark of :func:`~pyspark_kafka.testing.reference.reference_spark`; started first, so
its SparkSession starts while the brokers are prepared) reads through Spark's ``format("kafka")`` and
through ``format("pykafka")`` with ``readPath=columnar`` and ``readPath=consumer``: on each backend every
topic whole with default options (CRCs checked) and the ranges just before and just after a damaged
batch; on one backend (:data:`OPTION_CASES`) the value-flip topic with ``failOnDataLoss=false`` and two
topics with ``kafka.check.crcs=false``.

Asserted: every reader fails on every damaged topic; Spark's connector names the corruption (its
kafka-clients 3.9.2 raise ``KafkaException`` "Record batch for partition T-0 at offset N is invalid,
cause: Record is corrupt (stored crc = ..., computed crc = ...)"); ours fails with a message line
naming the corruption ("corrupt", any case, outside the topic name), the topic and the partition; with
``failOnDataLoss=false`` ours does what Spark's connector does (its ``KafkaDataConsumer`` counts only
offsets out of range as data loss: both fail); the ranges around the damage read whole (the one
before it too: a Fetch answer brings the damaged batch along, but like Kafka's consumer ours checks
only the batches it reads into); without the CRC check a
flipped value byte is read by all three and a raised length still fails every reader.
The outcomes are printed (``pytest -s``) and kept in the module's ``corrupt-result.json``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from integration_tests.reference import segment_damage
from integration_tests.reference.test_reference_batch import _reference_spark

pytestmark = pytest.mark.slow
JOB = Path(__file__).resolve().parent / "corrupt_job.py"
JOB_TIMEOUT_S = 300
DEADLINE_S = 60.0
RECORDS, PER_BATCH, VALUE_BYTES = 3000, 500, 100
"""Records per topic, records per batch (one flush each: 6 batches, the 4th is damaged), value size."""
DAMAGED = {"flip": ("none", "flip_value_byte"), "length": ("none", "length_plus_8"), "lz4": ("lz4", "flip_value_byte")}
"""Topic suffix -> (compression.type of the producer, :data:`segment_damage.DAMAGES` kind)."""
NO_CRC_POLL_TIMEOUT_MS = 3000
"""``kafkaConsumer.pollTimeoutMs`` of the cases where a reader gets Fetch answers without records below the high
watermark (``*-no-crc``: librdkafka, not checking CRCs, silently drops what follows a ``batchLength`` raised by 8;
``after-length``: the brokers find nothing at the offset after that batch): the readers fail once no record came for
this long (Spark's default, 120 s, made the job 2.5 minutes)."""
READERS = ("kafka", "pykafka-columnar", "pykafka-consumer")
OURS = ("pykafka-columnar", "pykafka-consumer")
BACKENDS = ("embedded", "apache-kafka")
SEGMENT = "00000000000000000000.log"


@dataclass
class Backend:
    """One backend's topics (suffix -> name), what was damaged, its restart evidence, the bootstrap."""

    name: str
    bootstrap: str = ""
    topics: dict[str, str] = field(default_factory=dict)
    damages: dict[str, segment_damage.Damage] = field(default_factory=dict)
    restart_log: list[str] = field(default_factory=list)
    watermarks: dict[str, tuple[int, int]] = field(default_factory=dict)
    unavailable: str | None = None


class _EmbeddedNode:
    """``python -m pyspark_kafka broker --data-dir D --port 0`` (log in ``log``); :meth:`stop` is SIGTERM (a clean
    shutdown: logs closed, ``.kafka_cleanshutdown`` written), SIGKILL after :data:`DEADLINE_S`."""

    LISTENING = re.compile(r"listening on (\S+):(\d+)")

    def __init__(self, data_dir: Path, log: Path):
        self.log = log
        offset = log.stat().st_size if log.exists() else 0  # this start's lines only
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "pyspark_kafka", "broker", "--data-dir", str(data_dir),
                                          "--port", "0"], stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + DEADLINE_S
        while True:
            text = log.read_bytes()[offset:].decode(errors="replace")
            found = self.LISTENING.findall(text)
            if found:
                self.bootstrap = "%s:%s" % found[-1]
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the embedded broker did not start (exit {self.proc.returncode}):\n{text[-3000:]}")
            time.sleep(0.05)  # polling the log for the listening line, bounded by the deadline

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(DEADLINE_S)


def _produce(bootstrap: str, topic: str, codec: str) -> None:
    """:data:`RECORDS` records to partition 0, one batch per :data:`PER_BATCH` (a flush each), all acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "batch.num.messages": PER_BATCH,
                         "compression.type": codec, "enable.idempotence": False})
    errors = []
    for first in range(0, RECORDS, PER_BATCH):
        for i in range(first, first + PER_BATCH):
            value = f"value-{i:06d}-".encode().ljust(VALUE_BYTES, b"x")
            producer.produce(topic, value=value, key=f"k{i}".encode(), partition=0,
                             on_delivery=lambda err, _m: err and errors.append(err))
        assert producer.flush(DEADLINE_S) == 0 and not errors, f"produce to {topic} failed: {errors}"


def _create_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept in a variable (FIELD_NOTES: _DESTROY)
    for future in admin.create_topics([NewTopic(n, 1, 1, config={"retention.ms": "-1"}) for n in names]).values():
        future.result(DEADLINE_S)


def _wait_watermarks(bootstrap: str, topics: dict[str, str]) -> dict[str, tuple[int, int]]:
    """``{suffix: (log start, high watermark)}`` once every partition has a leader again (bounded)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"corrupt-{uuid.uuid4().hex}"})
    try:
        out, deadline = {}, time.monotonic() + DEADLINE_S
        for suffix, topic in topics.items():
            while suffix not in out:
                try:
                    out[suffix] = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
        return out
    finally:
        consumer.close()


def _damage_all(data_dir: Path, backend: Backend) -> None:
    assert (data_dir / ".kafka_cleanshutdown").exists(), f"{backend.name}: no clean-shutdown marker in {data_dir}"
    for suffix, (_codec, kind) in DAMAGED.items():
        backend.damages[suffix] = segment_damage.damage(data_dir / f"{backend.topics[suffix]}-0" / SEGMENT, kind)


def _prepare(backend: Backend, run: str) -> None:
    backend.topics = {s: f"seg34-{run}-{s}" for s in DAMAGED}
    _create_topics(backend.bootstrap, list(backend.topics.values()))
    for suffix, (codec, _kind) in DAMAGED.items():
        _produce(backend.bootstrap, backend.topics[suffix], codec)


def _embedded(tmp: Path, stack, run: str) -> Backend:
    backend, data_dir, log = Backend("embedded"), tmp / "embedded-data", tmp / "embedded.log"
    node = _EmbeddedNode(data_dir, log)
    stack.callback(node.stop)
    backend.bootstrap = node.bootstrap
    _prepare(backend, run)
    node.stop()
    _damage_all(data_dir, backend)
    mark = log.stat().st_size
    node = _EmbeddedNode(data_dir, log)
    stack.callback(node.stop)
    backend.bootstrap = node.bootstrap
    backend.restart_log = [ln for ln in log.read_text()[mark:].splitlines() if "loaded" in ln and "shutdown" in ln]
    backend.watermarks = _wait_watermarks(backend.bootstrap, backend.topics)
    return backend


def _apache_kafka(stack, run: str) -> Backend:
    from pyspark_kafka.testing.apache_kafka import ApacheKafka
    from pyspark_kafka.testing.maven import MavenUnavailable

    backend = Backend("apache-kafka")
    kafka = ApacheKafka(nodes=1)
    try:
        stack.enter_context(kafka)
    except MavenUnavailable as e:
        backend.unavailable = f"Apache Kafka is not available here: {e}"
        return backend
    backend.bootstrap = kafka.bootstrap_servers
    _prepare(backend, run)
    kafka.kill(1, signal.SIGTERM)  # a controlled, clean shutdown: .kafka_cleanshutdown, recovery point = log end
    _damage_all(kafka.folder / "node-1" / "data", backend)
    mark = kafka.log_path(1).stat().st_size
    kafka.restart(1)
    with open(kafka.log_path(1), "rb") as f:
        f.seek(mark)
        lines = f.read().decode(errors="replace").splitlines()
    backend.restart_log = [ln for ln in lines if "Skipping recovery" in ln or "segment recovery" in ln
                           or any(f"{t}-0" in ln and ("truncat" in ln.lower() or "corrupt" in ln.lower())
                                  for t in backend.topics.values())]
    backend.watermarks = _wait_watermarks(backend.bootstrap, backend.topics)
    return backend


OPTION_CASES = ("flip-no-fail", "flip-no-crc", "length-no-crc")
"""Cases of reader options, run on one backend (:func:`_option_backend`): both brokers serve the same damaged
bytes, so the options' effect is the readers' alone."""


def _option_backend(backends: dict[str, Backend]) -> str:
    """Apache Kafka (the reference broker) when it runs here, else the embedded broker."""
    return "apache-kafka" if not backends["apache-kafka"].unavailable else "embedded"


def _around(b: Backend) -> dict[str, tuple[str, int, int]]:
    """Ranges next to the damaged batch of the value-flip topic, read by every reader: ``before`` up to it,
    ``after`` from the next batch to the end: ``{side: (suffix, start, end)}``."""
    flip = b.damages["flip"].batch
    return {"before": ("flip", 0, flip.base_offset), "after": ("flip", flip.last_offset + 1, RECORDS)}


def _after_length(b: Backend) -> int:
    """The first offset after the lengthened batch: a Fetch there finds nothing (:func:`test_after_a_raised_length_
    no_reader_ends_silently`)."""
    return b.damages["length"].batch.last_offset + 1


def _cases(backends: dict[str, Backend]) -> list[dict]:
    cases = []
    for b in backends.values():
        if b.unavailable:
            continue
        base = {"kafka.bootstrap.servers": b.bootstrap, "startingOffsets": "earliest", "endingOffsets": "latest"}
        for suffix, topic in b.topics.items():
            cases.append({"name": f"{b.name}/{suffix}", "options": {**base, "subscribe": topic}})
        for side, (suffix, start, end) in _around(b).items():
            topic = b.topics[suffix]
            cases.append({"name": f"{b.name}/{side}", "options": {
                **base, "subscribe": topic, "startingOffsets": json.dumps({topic: {"0": start}}),
                "endingOffsets": json.dumps({topic: {"0": end}})}})
        length = b.topics["length"]
        cases.append({"name": f"{b.name}/after-length", "options": {
            **base, "subscribe": length, "startingOffsets": json.dumps({length: {"0": _after_length(b)}}),
            "kafkaConsumer.pollTimeoutMs": str(NO_CRC_POLL_TIMEOUT_MS)}})
        if b.name == _option_backend(backends):
            flip, length = b.topics["flip"], b.topics["length"]
            no_crc = {"kafka.check.crcs": "false", "kafkaConsumer.pollTimeoutMs": str(NO_CRC_POLL_TIMEOUT_MS)}
            cases += [{"name": f"{b.name}/flip-no-fail", "options": {**base, "subscribe": flip, "failOnDataLoss": "false"}},
                      {"name": f"{b.name}/flip-no-crc", "options": {**base, "subscribe": flip, **no_crc}},
                      {"name": f"{b.name}/length-no-crc", "options": {**base, "subscribe": length, **no_crc}}]
    return cases


class _Job:
    """:mod:`corrupt_job` started at once (its SparkSession starts while the brokers are prepared); it
    reads the cases when :meth:`result` writes them. Killed by pid when the fixture ends early."""

    def __init__(self, ref, workdir: Path):
        import pyspark_kafka

        self.connector = str(Path(pyspark_kafka.__file__).resolve().parent.parent)  # this checkout's pykafka
        env = {**{k: v for k, v in os.environ.items() if k != "PYSPARK_DRIVER_PYTHON"},
               "PYTHONPATH": os.pathsep.join([self.connector, str(JOB.parent.parent.parent)]),
               "PYSPARK_PYTHON": ref.python}
        self.cases, self.workdir = workdir / "cases.json", workdir
        self.out, self.err = open(workdir / "job.out", "w+"), open(workdir / "job.err", "w+")
        self.proc = subprocess.Popen([ref.python, str(JOB), "--cases", str(self.cases), "--jars",
                                      ",".join(str(j) for j in ref.jars), "--wait-s", str(JOB_TIMEOUT_S)],
                                     stdout=self.out, stderr=self.err, stdin=subprocess.DEVNULL, env=env)

    def result(self, cases: list[dict]) -> dict:
        partial = self.workdir / "cases.json.partial"
        partial.write_text(json.dumps(cases))
        partial.rename(self.cases)  # the job sees the whole file or none
        try:
            rc = self.proc.wait(JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"the corrupt job did not finish within {JOB_TIMEOUT_S} s") from None
        self.out.seek(0)
        self.err.seek(0)
        lines = [ln for ln in self.out.read().splitlines() if ln.startswith("{")]
        assert rc == 0 and lines, f"corrupt job failed (exit {rc}):\n{self.err.read()[-4000:]}"
        result = json.loads(lines[-1])
        assert result["pykafka_module"].startswith(self.connector), f"the job ran another pykafka: {result['pykafka_module']}"
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(DEADLINE_S)
        self.out.close()
        self.err.close()


def _reference_or_skip():
    """The reference connector (shared with the other reference modules), or a skip naming what is missing."""
    from pyspark_kafka.testing.maven import MavenUnavailable
    from pyspark_kafka.testing.reference import ReferenceUnavailable

    try:
        return _reference_spark()
    except (MavenUnavailable, ReferenceUnavailable) as e:
        pytest.skip(f"Spark's Kafka connector is not available here: {e}")


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory):
    """``(backends by name, job result)``; the brokers run until the module ends."""
    import contextlib

    ref = _reference_or_skip()
    tmp, run = tmp_path_factory.mktemp("corrupt"), uuid.uuid4().hex[:6]
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        job = _Job(ref, tmp)
        stack.callback(job.stop)
        backends = {"embedded": _embedded(tmp, stack, run), "apache-kafka": _apache_kafka(stack, run)}
        prepared = time.monotonic()
        result = job.result(_cases(backends))
        result["timing"] = {"brokers_s": round(prepared - started, 1),
                            "job_after_brokers_s": round(time.monotonic() - prepared, 1)}
        result["backends"] = {n: {"topics": b.topics, "restart_log": b.restart_log, "watermarks": b.watermarks,
                                  "damages": {s: d.description for s, d in b.damages.items()},
                                  "unavailable": b.unavailable} for n, b in backends.items()}
        (tmp / "corrupt-result.json").write_text(json.dumps(result, indent=1))
        print(f"\n{ref.note}\ncorrupt job: Spark {result['spark']}, timing {result['timing']}, "
              f"result in {tmp / 'corrupt-result.json'}")
        for name, by_reader in sorted(result["cases"].items()):
            for reader, outcome in sorted(by_reader.items()):
                print(f"  {name:28} {reader:17} {_summary(outcome)}")
        yield backends, result


def _summary(outcome: dict) -> str:
    if "ok" in outcome:
        return f"ok {outcome['ok']}"
    e = outcome["error"]
    raised = f" | raised {e['raised'][0]}: {e['raised'][1][:300]}" if e["raised"] else ""
    java = f" | java {[c for c, _ in e['java']]}" if e["java"] else ""
    return f"error {e['class']}: {e['first_line'][:200]}{raised}{java}"


def _backend(corrupt, name: str) -> Backend:
    backend = corrupt[0][name]
    if backend.unavailable:
        pytest.skip(backend.unavailable)
    return backend


def _names_partition(line: str, topic: str) -> bool:
    """Whether ``line`` names partition 0 of ``topic`` (``topic-0``, ``topic[0]``, ``topic ... partition 0``)."""
    return topic in line and bool(re.search(rf"{re.escape(topic)}(?:-|\[|\s*,?\s*partition\s*)0\b", line)
                                  or re.search(r"\bpartition\W{0,3}0\b", line))


def _says_corrupt(text: str, topic: str) -> bool:
    """"corrupt" (any case) in ``text`` outside the topic's name."""
    return "corrupt" in text.replace(topic, "<topic>").lower()


def _ours_names_corruption(outcome: dict, topic: str) -> None:
    """Our error's message line (the innermost exception the Python worker raised) names the corruption, the
    topic and the partition."""
    assert "error" in outcome, f"the read did not fail: it returned {outcome['ok']}"
    e = outcome["error"]
    line = e["raised"][1] if e["raised"] else e["first_line"]
    assert _says_corrupt(line, topic), f"the message does not name the corruption: {_summary(outcome)}"
    assert _names_partition(line, topic), f"the message does not name {topic} partition 0: {line}"


def _spark_names_corruption(outcome: dict, topic: str) -> None:
    """Spark's connector (kafka-clients 3.9.2) fails with KafkaException "Received exception when fetching the next
    record from T-0 ..." caused by KafkaException "Record batch for partition T-0 at offset N is invalid, cause:
    Record is corrupt (stored crc = ..., computed crc = ...)" (the client wraps CorruptRecordException's message)."""
    assert "error" in outcome, f"Spark's connector did not fail: it returned {outcome['ok']}"
    text = outcome["error"]["text"]
    assert "CorruptRecordException" in text or _says_corrupt(text, topic), _summary(outcome)


@pytest.mark.parametrize("backend", BACKENDS)
def test_restart_serves_the_damaged_segment(corrupt, backend):
    """After a clean shutdown neither broker re-validates the segment: the log end and the high watermark stay
    at :data:`RECORDS` and the restart log says why (no recovery, nothing truncated)."""
    b = _backend(corrupt, backend)
    assert b.watermarks == {s: (0, RECORDS) for s in DAMAGED}, b.watermarks
    if backend == "apache-kafka":  # "Skipping recovery of 3 logs from <dir> since clean shutdown file was found"
        assert any("Skipping recovery" in ln for ln in b.restart_log), b.restart_log
    else:  # "loaded 3 topics, 3 partitions from <dir> in 2 ms (clean shutdown; re-validated 0 segments, truncated 0 bytes)"
        assert any("(clean shutdown" in ln and "truncated 0 bytes" in ln for ln in b.restart_log), b.restart_log


def _around_params():
    for backend in BACKENDS:
        for side in ("before", "after"):
            for reader in READERS:
                yield pytest.param(backend, side, reader, id=f"{backend}-{side}-{reader}")


@pytest.mark.parametrize("backend, side, reader", list(_around_params()))
def test_reads_around_the_damage(corrupt, backend, side, reader):
    """The batches before the damaged one (``endingOffsets`` = its base offset) and those after it
    (``startingOffsets`` = the next batch) are read whole, as Spark's connector reads them."""
    suffix, start, end = _around(_backend(corrupt, backend))[side]
    got = corrupt[1]["cases"][f"{backend}/{side}"][reader]
    rows = end - start
    assert got == {"ok": {"rows": rows, "distinct_offsets": rows, "min_offset": start, "max_offset": end - 1,
                          "value_bytes": rows * VALUE_BYTES}}, _summary(got)


@pytest.mark.parametrize("damage", list(DAMAGED))
@pytest.mark.parametrize("backend", BACKENDS)
def test_spark_connector_fails_naming_corruption(corrupt, backend, damage):
    b = _backend(corrupt, backend)
    _spark_names_corruption(corrupt[1]["cases"][f"{backend}/{damage}"]["kafka"], b.topics[damage])


@pytest.mark.parametrize("reader", OURS)
@pytest.mark.parametrize("damage", list(DAMAGED))
@pytest.mark.parametrize("backend", BACKENDS)
def test_pykafka_fails_naming_corruption(corrupt, backend, damage, reader):
    b = _backend(corrupt, backend)
    _ours_names_corruption(corrupt[1]["cases"][f"{backend}/{damage}"][reader], b.topics[damage])


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_after_a_raised_length_no_reader_ends_silently(corrupt, backend, reader):
    """From the batch after the lengthened one, both brokers answer Fetch with no records (their offset index's floor
    entry is the damaged batch's position, and walking its length lands 8 bytes into the next batch: no batch
    found) while the high watermark is :data:`RECORDS`. No reader may end the range there as if it were empty:
    each fails after ``kafkaConsumer.pollTimeoutMs``; ours names the partition and the offset it waited at."""
    b = _backend(corrupt, backend)
    got = corrupt[1]["cases"][f"{backend}/after-length"][reader]
    assert "error" in got, f"the read did not fail: it returned {got['ok']}"
    if reader in OURS:
        e = got["error"]
        line = e["raised"][1] if e["raised"] else e["first_line"]
        assert _names_partition(line, b.topics["length"]) and str(_after_length(b)) in line, _summary(got)


def _option_case(corrupt, name: str) -> tuple[Backend, dict]:
    backend = _option_backend(corrupt[0])
    b = _backend(corrupt, backend)
    return b, corrupt[1]["cases"][f"{backend}/{name}"]


@pytest.mark.parametrize("reader", OURS)
def test_fail_on_data_loss_false_does_what_spark_does(corrupt, reader):
    """``failOnDataLoss=false``: ours does what Spark's connector does. Spark's ``KafkaDataConsumer`` counts
    only offsets out of range as data loss, so a corrupt batch still fails the read there; ours too."""
    b, got = _option_case(corrupt, "flip-no-fail")
    if "error" in got["kafka"]:
        _spark_names_corruption(got["kafka"], b.topics["flip"])
        _ours_names_corruption(got[reader], b.topics["flip"])
    else:  # Spark's connector skipped or returned something: ours must return the same
        assert got[reader] == got["kafka"], f"Spark's connector: {_summary(got['kafka'])}; ours: {_summary(got[reader])}"


@pytest.mark.parametrize("reader", READERS)
def test_without_crc_check_the_flipped_value_is_read(corrupt, reader):
    """``kafka.check.crcs=false`` (Kafka's ``check.crcs``): a flipped value byte is not seen by any reader; every
    record comes back (one value damaged), as with Spark's connector."""
    _b, got = _option_case(corrupt, "flip-no-crc")
    assert got[reader] == {"ok": {"rows": RECORDS, "distinct_offsets": RECORDS, "min_offset": 0,
                                  "max_offset": RECORDS - 1, "value_bytes": RECORDS * VALUE_BYTES}}, _summary(got[reader])


@pytest.mark.parametrize("reader", READERS)
def test_without_crc_check_a_raised_length_still_fails(corrupt, reader):
    """``kafka.check.crcs=false`` and ``batchLength`` raised by 8: the batch's records parse, the 8 bytes after them
    do not, and the next batch is misaligned. Spark's connector fails (kafka-clients: InvalidRecordException); the
    columnar reader fails naming the corruption (bytes left after ``recordsCount`` records); librdkafka drops the
    rest of the answer silently, so the consumer path sees no record below the high watermark and fails after
    ``kafkaConsumer.pollTimeoutMs`` naming the partition and offset. No reader returns a short result."""
    b, got = _option_case(corrupt, "length-no-crc")
    topic = b.topics["length"]
    assert "error" in got[reader], f"the read did not fail: it returned {got[reader]['ok']}"
    if reader == "pykafka-columnar":
        _ours_names_corruption(got[reader], topic)
    elif reader == "pykafka-consumer":
        e = got[reader]["error"]
        assert _names_partition(e["raised"][1] if e["raised"] else e["first_line"], topic), _summary(got[reader])
