"""The tables ``pykafka-delta`` and ``pykafka-iceberg`` write are real Delta and Iceberg tables: Spark's
own readers read them, row for row.

A streaming query reads a topic of the embedded broker with ``format("pykafka")`` and writes it to a
Delta table and to an Iceberg table (pyiceberg's SQL catalog on SQLite) in several micro-batches.
The checkpoint is then deleted and the query reruns from ``earliest`` over a topic that has grown:
the sinks must drop every row they already hold. A separate driver process with pyspark 4.1
(:mod:`pyspark_kafka.testing.table_readers`; :mod:`table_reader_job`) then reads both tables with
delta-spark and Iceberg's Spark runtime (the Iceberg table by its metadata file). Its rows must equal
what was produced (from the producer's delivery reports) and what deltalake and pyiceberg read:
each record exactly once. The offsets must be where Delta and Iceberg keep them, as Spark sees them
(the Delta snapshot's ``txn`` versions, the Iceberg snapshot summary).

No Java, no Maven or no PyPI: skipped with the reason.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from integration_tests.helpers import produce

pytestmark = pytest.mark.slow
deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")

JOB = Path(__file__).resolve().parent / "table_reader_job.py"
JOB_TIMEOUT_S = 600
COLUMNS = ("topic", "partition", "offset", "key", "value", "timestamp")
PARTITIONS = 3


@functools.cache
def _readers():
    from pyspark_kafka.testing.table_readers import table_reader_spark

    return table_reader_spark()


def _readers_or_skip():
    from pyspark_kafka.testing.maven import MavenUnavailable
    from pyspark_kafka.testing.reference import ReferenceUnavailable

    try:
        readers = _readers()
    except (MavenUnavailable, ReferenceUnavailable) as e:
        pytest.skip(f"Spark's Delta/Iceberg readers are not available here: {e}")
    print(readers.note)
    return readers


def _records(start: int, n: int) -> list[dict]:
    """Keyed and null-keyed records, round robin over the partitions, explicit timestamps."""
    return [{"key": None if i % 7 == 3 else f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % PARTITIONS,
             "timestamp": 1_700_000_000_000 + i} for i in range(start, start + n)]


def _run_stream(spark, bootstrap: str, topic: str, fmt: str, options: dict, checkpoint: str) -> None:
    q = (spark.readStream.format("pykafka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "300")
         .load()
         .selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                     "timestamp")
         .writeStream.format(fmt).options(**options).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    assert q.awaitTermination(240), f"{fmt}: the streaming query did not finish within 240 s"
    assert q.exception() is None, q.exception()


def _arrow_rows(table) -> list[tuple]:
    cols = [table[c].to_pylist() for c in COLUMNS]
    rows = []
    for r in zip(*cols):
        ts = r[-1]
        rows.append((*r[:-1], int(ts.timestamp() * 1_000_000) if ts is not None else None))
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


def _job_rows(rows: list[list]) -> list[tuple]:
    return sorted((tuple(r) for r in rows), key=lambda r: (r[0], r[1], r[2]))


def _read_with_spark(readers, delta_path: str, iceberg_metadata: str, workdir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON")}
    env["PYSPARK_PYTHON"] = readers.python
    cmd = [readers.python, str(JOB), "--jars", ",".join(str(j) for j in readers.jars), "--delta", delta_path,
           "--iceberg", iceberg_metadata, "--columns", ",".join(COLUMNS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, env=env, cwd=workdir)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, f"reader job failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    result = json.loads(lines[-1])
    (workdir / "spark-read.json").write_text(json.dumps(result, indent=1))
    print(f"Spark {result['spark']} read both tables in {result['seconds']} s")
    return result


def test_spark_delta_and_iceberg_readers_read_the_sinks_tables_exactly_once(spark, embedded_cluster, tmp_path):
    readers = _readers_or_skip()
    from pyspark_kafka.sinks.iceberg import load_catalog, read_table

    bootstrap = embedded_cluster.bootstrap
    topic = embedded_cluster.create_topic(PARTITIONS, {"retention.ms": "-1"}, prefix="tables")  # 2023 timestamps kept
    delta_path = str(tmp_path / "delta" / "events")
    catalog = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    sinks = {
        "pykafka-delta": {"path": delta_path, "partitionBy": "partition", "topics": topic},
        "pykafka-iceberg": {"table": "kafka.events", "catalog.uri": catalog["uri"],
                            "catalog.warehouse": catalog["warehouse"], "topics": topic},
    }
    delivered = produce(bootstrap, topic, _records(0, 450))
    for fmt, options in sinks.items():
        _run_stream(spark, bootstrap, topic, fmt, options, str(tmp_path / f"chk-{fmt}"))
    # the checkpoint is lost and the query reruns from earliest over a grown topic: 450 rows re-read
    delivered += produce(bootstrap, topic, _records(450, 150))
    for fmt, options in sinks.items():
        shutil.rmtree(tmp_path / f"chk-{fmt}")
        _run_stream(spark, bootstrap, topic, fmt, options, str(tmp_path / f"chk-{fmt}"))

    produced = sorted(((topic, p, off, k.decode() if k is not None else None, v.decode(), ts * 1000)
                       for k, v, p, off, ts in delivered), key=lambda r: (r[0], r[1], r[2]))
    assert len(produced) == 600
    by_deltalake = _arrow_rows(deltalake.DeltaTable(delta_path).to_pyarrow_table())
    by_pyiceberg = _arrow_rows(read_table("kafka.events", catalog))
    iceberg_table = load_catalog(catalog).load_table("kafka.events")

    got = _read_with_spark(readers, delta_path, iceberg_table.metadata_location, tmp_path)
    assert _job_rows(got["delta_rows"]) == produced
    assert _job_rows(got["iceberg_rows"]) == produced
    assert by_deltalake == produced and by_pyiceberg == produced

    next_offsets = {p: 200 for p in range(PARTITIONS)}
    assert got["delta_txns"] == {f"pykafka:pykafka:{topic}:{p}": n for p, n in next_offsets.items()}
    assert got["delta_version"] == deltalake.DeltaTable(delta_path).version()
    summaries = [s for s in got["iceberg_summaries"] if "pykafka.offsets" in s]
    assert len(summaries) == len(got["iceberg_summaries"]) >= 3  # every snapshot is one of the sink's commits
    assert json.loads(summaries[-1]["pykafka.offsets"]) == {topic: {str(p): n for p, n in next_offsets.items()}}
