"""Differential suite: ``format("pykafka")`` against Spark's own ``format("kafka")``, batch.

Per backend (``embedded`` and ``apache-kafka``; others are skipped), test data is written with
confluent-kafka (several partitions, keys and null keys, headers, explicit timestamps, a
committed and an aborted transaction), then ONE reference-job process
(:mod:`integration_tests.reference.reference_job`, a separate driver with Spark's connector jars
in ``spark.jars``) runs every case of :func:`cases` through both connectors. The tests assert
per case that both agree, except the differences pinned in :data:`PINNED` (listed in
docs/comparison.md, "Checked against Spark's connector"). Writes are checked with
confluent-kafka, not with either connector.

Which Spark runs the reference: :func:`pyspark_kafka.testing.reference.reference_spark` (the
installed pyspark's version, or the nearest lower one Maven Central serves, with a matching
pyspark in a cached venv); its note is printed and, when the version differs from the installed
pyspark's, given as a :class:`ReferenceVersionWarning` (pytest's warnings summary). No Java, no Maven or no
PyPI: skipped with the reason.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import uuid
import warnings
from collections import Counter
from pathlib import Path

import pytest

from integration_tests.helpers import consume_all, produce, transactions

pytestmark = pytest.mark.slow
JOB = Path(__file__).resolve().parent / "reference_job.py"
JOB_TIMEOUT_S = 600
BACKENDS = ("embedded", "apache-kafka")
BASE_MS = 1_700_000_000_000
"""Timestamp of the first record (2023-11-14); the record ``i`` of partition ``p`` of topic A has
``BASE_MS + (3 * i + p) * 1000``."""
WRITE_CASES = ("write_keyed", "write_partition_column", "write_timestamp_column", "write_topic_column",
               "write_extra_column", "stream_write")
TOPIC_CONFIG = {"retention.ms": "-1"}  # 2023 timestamps must not be deleted by retention

PINNED: dict[str, tuple[object, object, str]] = {
    "partitions_max_records": (
        3, 9, "Spark 4.2.0 splits by maxRecordsPerPartition only ranges whose both ends are given as "
              "offsets (case partitions_max_records_offsets_json: 9 and 9); from earliest to latest it "
              "keeps one input partition per Kafka partition. pykafka splits every range, as Spark's "
              "documentation describes the option"),
    "unknown_kafka_option": (
        "ok", "error at count", "the Java client logs 'supplied but isn't a known config' and ignores it; "
                       "librdkafka refuses an unknown setting and pykafka fails with an OptionError naming "
                       "it (kafka.* settings are librdkafka names)"),
    **{name: ("error at load", "error at count",
              "batch-only rules: a Python data source is not told at load() whether the read is batch or "
              "streaming (schema() is the same call for both), so pykafka checks them when the batch "
              "reader is made, at the first action; Spark's provider checks them in createRelation")
       for name in ("error_starting_latest_batch", "error_ending_earliest_batch",
                    "error_starting_json_latest_batch")},
    "write_timestamp_column": (
        "write time", "column", "Spark's sink ignores a 'timestamp' column (CreateTime = time of the write); "
                                "pykafka writes it as the record's CreateTime"),
}
"""Differences kept on purpose: case -> (Spark's outcome, pykafka's outcome, reason). The outcome
is the partition count (``partitions`` cases), ``"ok"``/``"error at load|count"`` (``error`` cases) or where
the records' timestamps came from (``write`` cases). Listed in docs/comparison.md."""


@functools.cache
def _reference_spark():
    """:func:`~pyspark_kafka.testing.reference.reference_spark` once per session (it asks Maven for
    each version not served before the one that is: a few seconds)."""
    from pyspark_kafka.testing.reference import reference_spark

    return reference_spark()


class ReferenceVersionWarning(UserWarning):
    """The reference connector is not the installed pyspark's version (Maven Central lacks it)."""


def _topic_a_records() -> list[dict]:
    """Topic A: 3 partitions x 5 records; null and empty keys, a tombstone, headers (repeated keys, a
    null value) on every other record, explicit timestamps."""
    out = []
    for p in range(3):
        for i in range(5):
            key = None if i % 3 == 2 else f"k{p}-{i}".encode()
            headers = [("h", f"v{i}".encode()), ("dup", b"1"), ("dup", b"2"), ("null", None)] if i % 2 == 0 else None
            key = b"" if (p, i) == (1, 4) else key
            value = None if (p, i) == (2, 3) else f"a{p}-{i}".encode()  # a tombstone
            out.append({"key": key, "value": value, "partition": p,
                        "timestamp": BASE_MS + (3 * i + p) * 1000, "headers": headers})
    return out


def _write_data(cluster, run: str) -> dict:
    a = cluster.create_topic(3, TOPIC_CONFIG, prefix=f"ref-{run}-a")
    b = cluster.create_topic(2, TOPIC_CONFIG, prefix=f"ref-{run}-b")
    t = cluster.create_topic(1, TOPIC_CONFIG, prefix=f"ref-{run}-t")
    produce(cluster.bootstrap, a, [{k: v for k, v in r.items() if v is not None or k in ("key", "value")}
                                   for r in _topic_a_records()])
    produce(cluster.bootstrap, b, [{"key": f"b{i}".encode(), "value": f"b{i}".encode(), "partition": i % 2,
                                    "timestamp": BASE_MS + i} for i in range(6)])
    transactions(cluster.bootstrap, t, [([b"c1", b"c2"], True), ([b"x1", b"x2"], False), ([b"c3"], True)])
    writes = {name: {fmt: cluster.create_topic(3, TOPIC_CONFIG, prefix=f"ref-{run}-w") for fmt in ("kafka", "pykafka")}
              for name in WRITE_CASES}
    return {"a": a, "b": b, "t": t, "pattern": f"ref-{run}-[ab]-.*", "writes": writes}


def cases(bootstrap: str, topics: dict) -> list[dict]:
    """The cases of one reference job (topics from :func:`_write_data`)."""
    a, b, t = topics["a"], topics["b"], topics["t"]
    boot = {"kafka.bootstrap.servers": bootstrap}
    hdr = {**boot, "includeHeaders": "true"}

    def rows(name, **options):
        return {"name": name, "kind": "rows", "options": {**hdr, **options}}

    def parts(name, **options):
        return {"name": name, "kind": "partitions", "options": {**boot, **options}}

    def error(name, **options):
        return {"name": name, "kind": "error", "options": {**boot, **options}}

    keyed = [{"key": f"w{i}", "value": f"v{i}", "headers": [["h", f"{i}"]] * (i % 3)} for i in range(24)]
    return [
        rows("subscribe", subscribe=a),
        rows("subscribe_two_topics_no_headers", subscribe=f"{a},{b}", includeHeaders="false"),
        rows("subscribe_pattern", subscribePattern=topics["pattern"]),
        rows("assign", assign=json.dumps({a: [0, 2]})),
        rows("offsets_json", subscribe=a, startingOffsets=json.dumps({a: {"0": 1, "1": -2, "2": 2}}),
             endingOffsets=json.dumps({a: {"0": 3, "1": -1, "2": 4}})),
        rows("starting_timestamp", subscribe=a, startingTimestamp=str(BASE_MS + 6000)),
        rows("ending_timestamp", subscribe=a, endingTimestamp=str(BASE_MS + 9000)),
        rows("starting_offsets_by_timestamp", subscribe=a, startingOffsetsByTimestamp=json.dumps(
            {a: {"0": BASE_MS + 3000, "1": BASE_MS, "2": BASE_MS + 12_000}})),
        rows("ending_offsets_by_timestamp", subscribe=a, endingOffsetsByTimestamp=json.dumps(
            {a: {"0": BASE_MS + 6000, "1": BASE_MS + 4000, "2": BASE_MS + 100_000}})),
        rows("by_timestamp_strategy_latest", subscribe=a, startingOffsetsByTimestampStrategy="latest",
             startingOffsetsByTimestamp=json.dumps({a: {"0": BASE_MS + 100_000, "1": BASE_MS, "2": BASE_MS}})),
        rows("group_id_set", subscribe=a, **{"kafka.group.id": "reference-group"}),
        rows("group_id_prefix", subscribe=a, groupIdPrefix="reference-prefix"),
        rows("client_tuning_options", subscribe=a, **{"kafkaConsumer.pollTimeoutMs": "30000",
                                                        "fetchOffset.numRetries": "5",
                                                        "fetchOffset.retryIntervalMs": "20"}),
        rows("fail_on_data_loss_false", subscribe=a, failOnDataLoss="false"),
        rows("read_uncommitted_default", subscribe=t),
        rows("read_committed", subscribe=t, **{"kafka.isolation.level": "read_committed"}),
        parts("partitions_default", subscribe=f"{a},{b}"),
        parts("partitions_min_partitions", subscribe=f"{a},{b}", minPartitions="7"),
        parts("partitions_max_records", subscribe=a, maxRecordsPerPartition="2"),
        parts("partitions_min_and_max_records", subscribe=f"{a},{b}", minPartitions="12",
              maxRecordsPerPartition="3", startingOffsets=json.dumps({a: {"0": 0, "1": 0, "2": 0}, b: {"0": 0, "1": 0}}),
              endingOffsets=json.dumps({a: {"0": 5, "1": 5, "2": 5}, b: {"0": 3, "1": 3}})),
        parts("partitions_max_records_offsets_json", subscribe=a, maxRecordsPerPartition="2",
              startingOffsets=json.dumps({a: {"0": 0, "1": 0, "2": 0}}),
              endingOffsets=json.dumps({a: {"0": 5, "1": 5, "2": 5}})),
        error("error_no_subscribe"),
        error("error_subscribe_missing_topic", subscribe=f"{a},{a}-missing"),  # issue 27
        error("error_subscribe_and_assign", subscribe=a, assign=json.dumps({a: [0]})),
        error("error_bad_starting_json", subscribe=a, startingOffsets='{"' + a + '": '),
        error("error_starting_latest_batch", subscribe=a, startingOffsets="latest"),
        error("error_ending_earliest_batch", subscribe=a, endingOffsets="earliest"),
        error("error_starting_json_latest_batch", subscribe=a,
              startingOffsets=json.dumps({a: {"0": -1, "1": -2, "2": -2}})),
        error("error_starting_json_missing_partition", subscribe=a,
              startingOffsets=json.dumps({a: {"0": 0, "1": 0}})),
        error("error_by_timestamp_past_the_end", subscribe=a,
              startingOffsetsByTimestamp=json.dumps({a: {"0": BASE_MS + 100_000, "1": BASE_MS, "2": BASE_MS}})),
        error("error_value_deserializer", subscribe=a, **{"kafka.value.deserializer": "x"}),
        error("error_enable_auto_commit", subscribe=a, **{"kafka.enable.auto.commit": "true"}),
        error("error_auto_offset_reset", subscribe=a, **{"kafka.auto.offset.reset": "earliest"}),
        error("error_min_partitions_zero", subscribe=a, minPartitions="0"),
        error("error_key_deserializer", subscribe=a, **{"kafka.key.deserializer": "x"}),
        error("unknown_kafka_option", subscribe=a, **{"kafka.no.such.setting": "1"}),
        {"name": "write_keyed", "kind": "write", "options": boot, "rows": keyed,
         "topics": topics["writes"]["write_keyed"]},
        {"name": "write_partition_column", "kind": "write", "options": boot,
         "rows": [{"key": None if i % 2 else f"p{i}", "value": None if i % 4 == 3 else f"v{i}", "partition": i % 3,
                   "headers": [["n", None]] if i % 5 == 0 else []} for i in range(12)],
         "topics": topics["writes"]["write_partition_column"]},
        {"name": "write_timestamp_column", "kind": "write", "options": boot,
         "rows": [{"key": f"t{i}", "value": f"v{i}", "timestamp_ms": BASE_MS + i * 1000} for i in range(6)],
         "topics": topics["writes"]["write_timestamp_column"]},
        {"name": "write_topic_column", "kind": "write", "options": boot,
         "rows": [{"key": f"c{i}", "value": f"v{i}", "topic": "@"} for i in range(9)],
         "topics": topics["writes"]["write_topic_column"]},
        {"name": "stream_write", "kind": "stream_write", "options": boot, "source": a,
         "rows": len(_topic_a_records()), "topics": topics["writes"]["stream_write"]},
        {"name": "write_extra_column", "kind": "write", "options": boot,
         "rows": [{"key": f"e{i}", "value": f"v{i}", "extra": "x"} for i in range(6)],
         "topics": topics["writes"]["write_extra_column"]},
    ]


CONSUMER = "@consumer"
"""Suffix of a case's ``readPath=consumer`` variant: the job runs it through pykafka only, and it is
compared with its base case's ``kafka`` outcome (the base case itself reads with the default path,
``auto``, which is the columnar path on these backends)."""
CONSUMER_ROWS = ("subscribe", "offsets_json", "ending_offsets_by_timestamp", "read_committed")
"""Batch cases also run with ``readPath=consumer``: every column with headers, tombstones and null keys;
offset and timestamp bounds; aborted transactions (a few seconds of the suite's budget)."""


def with_consumer_variants(all_cases: list[dict], names) -> list[dict]:
    """``all_cases`` plus, for each case named in ``names``, its :data:`CONSUMER` variant (pykafka
    only, ``readPath=consumer``)."""
    extra = [{**c, "name": c["name"] + CONSUMER, "formats": ["pykafka"],
              "options": {**c["options"], "readPath": "consumer"}} for c in all_cases if c["name"] in names]
    return all_cases + extra


def sides(result: dict, name: str) -> dict:
    """``{"kafka": ..., "pykafka": ...}`` outcomes of case ``name``; a :data:`CONSUMER` variant
    takes Spark's from its base case."""
    got = result["cases"][name]
    if name.endswith(CONSUMER):
        return {"kafka": result["cases"][name.removesuffix(CONSUMER)]["kafka"], "pykafka": got["pykafka"]}
    return got


def reference_or_skip(kafka_cluster):
    """The :class:`~pyspark_kafka.testing.reference.ReferenceSpark` to run the job with, or a skip
    (a backend other than :data:`BACKENDS`; no java, mvn or PyPI)."""
    if kafka_cluster.name not in BACKENDS:
        pytest.skip(f"the differential suite runs on {', '.join(BACKENDS)} only (time budget)")
    from pyspark_kafka.testing.maven import MavenUnavailable
    from pyspark_kafka.testing.reference import ReferenceUnavailable

    try:
        ref = _reference_spark()
    except (MavenUnavailable, ReferenceUnavailable) as e:
        pytest.skip(f"Spark's Kafka connector is not available here: {e}")
    print(ref.note)
    if ref.version != ref.installed:  # shown in pytest's warnings summary: the reference is another Spark
        warnings.warn(ref.note, ReferenceVersionWarning, stacklevel=1)
    return ref


def run_job(ref, all_cases: list[dict], workdir: Path) -> dict:
    """Run :mod:`reference_job` once over ``all_cases`` (this checkout's pykafka on its path); its
    output, also written to ``workdir/result.json``."""
    path = workdir / "cases.json"
    path.write_text(json.dumps(all_cases))
    import pyspark_kafka

    connector = str(Path(pyspark_kafka.__file__).resolve().parent.parent)  # this checkout's pykafka
    # PYSPARK_DRIVER_PYTHON is left to the job's get_spark (the launcher of its interpreter, as for a user)
    env = {**{k: v for k, v in os.environ.items() if k != "PYSPARK_DRIVER_PYTHON"},
           "PYTHONPATH": os.pathsep.join([connector, str(JOB.parent.parent.parent)]), "PYSPARK_PYTHON": ref.python}
    cmd = [ref.python, str(JOB), "--cases", str(path), "--jars", ",".join(str(j) for j in ref.jars),
           "--workdir", str(workdir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, f"reference job failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    result = json.loads(lines[-1])
    result["note"] = ref.note
    assert result["pykafka_module"].startswith(connector), f"the job ran another pykafka: {result['pykafka_module']}"
    (workdir / "result.json").write_text(json.dumps(result, indent=1))
    print(f"reference job: Spark {result['spark']}, {result['seconds']} s, result in {workdir / 'result.json'}")
    return result


def reference_run(kafka_cluster, workdir_factory, write_data, make_cases) -> tuple[dict, dict]:
    """``(cases by name, job output)``: ``write_data(cluster, run id) -> topics``, then
    ``make_cases(bootstrap, topics)`` through one reference job (or a skip, :func:`reference_or_skip`)."""
    ref = reference_or_skip(kafka_cluster)
    all_cases = make_cases(kafka_cluster.bootstrap, write_data(kafka_cluster, uuid.uuid4().hex[:8]))
    return {c["name"]: c for c in all_cases}, run_job(ref, all_cases, workdir_factory())


@pytest.fixture(scope="module")
def reference(kafka_cluster, tmp_path_factory):
    """``(cases by name, job output, cluster)`` of the one reference job of this backend."""
    by_name, result = reference_run(kafka_cluster, lambda: tmp_path_factory.mktemp("reference"), _write_data,
                                    lambda bootstrap, topics: with_consumer_variants(cases(bootstrap, topics),
                                                                                     CONSUMER_ROWS))
    return by_name, result, kafka_cluster


def _outcome(side: dict) -> str:
    """``"ok"`` or ``"error at load"`` / ``"error at count"`` (the class and text are kept in the
    job's output for the report)."""
    return "ok" if "ok" in side else f"error at {side['error'].get('stage')}"


def _case_names(kind: str) -> list[str]:
    all_cases = with_consumer_variants(cases("", {"a": "a", "b": "b", "t": "t", "pattern": "",
                                                  "writes": {n: {} for n in WRITE_CASES}}), CONSUMER_ROWS)
    return [c["name"] for c in all_cases if c["kind"] in kind]


def _pinned_or_equal(name: str, kafka, pykafka) -> None:
    name = name.removesuffix(CONSUMER)
    if name in PINNED:
        expected_kafka, expected_pykafka, reason = PINNED[name]
        assert (kafka, pykafka) == (expected_kafka, expected_pykafka), f"pinned difference changed ({reason})"
    else:
        assert pykafka == kafka


@pytest.mark.parametrize("name", _case_names(("rows", "partitions")))
def test_read_same_rows_and_partitions(reference, name):
    _, result, _ = reference
    got = sides(result, name)
    assert "ok" in got["kafka"], f"Spark's connector failed: {got['kafka']}"
    assert "ok" in got["pykafka"], f"pykafka failed: {got['pykafka']}"
    if isinstance(got["kafka"]["ok"], list):
        assert got["kafka"]["ok"], "the case reads nothing: it proves nothing"
    _pinned_or_equal(name, got["kafka"]["ok"], got["pykafka"]["ok"])


@pytest.mark.parametrize("name", _case_names(("error",)))
def test_bad_options_refused_by_both(reference, name):
    _, result, _ = reference
    got = result["cases"][name]
    print(name, json.dumps(got))
    _pinned_or_equal(name, _outcome(got["kafka"]), _outcome(got["pykafka"]))
    if "error" in got["pykafka"]:  # pyspark wraps it in AnalysisException [PYTHON_DATA_SOURCE_ERROR]
        assert got["pykafka"]["error"]["cause"] == "pyspark_kafka.errors.OptionError"


@pytest.mark.parametrize("name", _case_names(("stream_write",)))
def test_stream_write_lands_the_same(reference, name):
    """``writeStream`` of topic A (read by Spark's source in both queries: ``key``, ``value``,
    ``headers``, ``partition``) under ``Trigger.AvailableNow``: the same records land."""
    all_cases, result, cluster = reference
    case, got = all_cases[name], result["cases"][name]
    assert got["kafka"] == {"ok": "terminated"}, f"Spark's connector failed: {got['kafka']}"
    assert got["pykafka"] == {"ok": "terminated"}
    landed = {fmt: _landed(cluster.bootstrap, case["topics"][fmt]) for fmt in ("kafka", "pykafka")}
    assert sum(landed["kafka"][0].values()) == case["rows"]
    assert landed["pykafka"][0] == landed["kafka"][0]  # same partitions, keys, values (tombstone), headers


def _landed(bootstrap: str, topic: str) -> tuple[Counter, list[int]]:
    """``(Counter of (key, value, partition, headers), timestamps)`` read with confluent-kafka."""
    records, timestamps = Counter(), []
    for m in consume_all(bootstrap, topic):
        records[(m.key(), m.value(), m.partition(), tuple(m.headers() or ()))] += 1
        timestamps.append(m.timestamp()[1])
    return records, sorted(timestamps)


def _timestamp_source(case: dict, timestamps: list[int], written_after_ms: int) -> str:
    column = sorted(r["timestamp_ms"] for r in case["rows"] if "timestamp_ms" in r)
    if column and timestamps == column:
        return "column"
    return "write time" if all(t >= written_after_ms for t in timestamps) else f"other: {timestamps}"


@pytest.mark.parametrize("name", _case_names(("write",)))
def test_write_lands_the_same(reference, name):
    all_cases, result, cluster = reference
    case, got = all_cases[name], result["cases"][name]
    assert got["kafka"] == {"ok": len(case["rows"])}, f"Spark's connector failed: {got['kafka']}"
    assert got["pykafka"] == {"ok": len(case["rows"])}
    landed = {fmt: _landed(cluster.bootstrap, case["topics"][fmt]) for fmt in ("kafka", "pykafka")}
    assert sum(landed["kafka"][0].values()) == len(case["rows"])
    assert landed["pykafka"][0] == landed["kafka"][0]  # same partitions, keys, values, headers
    sources = {fmt: _timestamp_source(case, landed[fmt][1], result["started_ms"]) for fmt in landed}
    _pinned_or_equal(name, sources["kafka"], sources["pykafka"])
