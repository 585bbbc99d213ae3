"""The job the distributed-Spark tests run as a separate driver process.

``python integration_tests/spark_cluster_job.py (--master spark://... | --remote sc://...)
--bootstrap HOST:PORT --topic T --workdir DIR [--rows N]``

On a standalone cluster (``--master``, a classic SparkSession whose executors run
``spark.pyspark.python`` = this interpreter) or through Spark Connect (``--remote``):

1. batch write of ``rows`` keyed rows with ``format("pykafka")`` to ``topic``;
2. batch read of the topic back;
3. a streaming query (AvailableNow, ``maxOffsetsPerTrigger``) from the topic into the
   exactly-once SQL sink ``pykafka-sql`` (SQLite file in ``workdir``).

Prints one JSON line: ``{"written": N, "read": N, "distinct_keys": N, "sink_rows": N,
"sink_distinct_offsets": N, "executors": N}`` (``executors`` only with ``--master``).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    target = ap.add_mutually_exclusive_group(required=True)
    target.add_argument("--master")
    target.add_argument("--remote")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--rows", type=int, default=1000)
    args = ap.parse_args()
    work = Path(args.workdir)

    if args.master:
        from pyspark_kafka.spark import get_spark

        spark = get_spark("pykafka-standalone", master=args.master, conf={
            "spark.pyspark.python": sys.executable,  # what the executors run: must have pyspark-kafka
            "spark.executor.cores": "1", "spark.cores.max": "2", "spark.executor.memory": "512m"})
    else:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(args.remote).getOrCreate()

    kafka = {"kafka.bootstrap.servers": args.bootstrap}
    rows = spark.range(args.rows).selectExpr("CAST(id AS STRING) AS key", "CAST(id * 2 AS STRING) AS value")
    rows.write.format("pykafka").options(**kafka).option("topic", args.topic).mode("append").save()

    read = spark.read.format("pykafka").options(**kafka).option("subscribe", args.topic).load()
    n_read = read.count()
    distinct_keys = read.select("key").distinct().count()

    db = work / "sink.db"
    query = (spark.readStream.format("pykafka").options(**kafka).option("subscribe", args.topic)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(max(1, args.rows // 3))).load()
             .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "topic", "partition", "offset")
             .writeStream.format("pykafka-sql").option("url", f"sqlite:///{db}").option("table", "out")
             .option("checkpointLocation", str(work / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(600)
    with sqlite3.connect(db) as conn:
        sink_rows = conn.execute("SELECT COUNT(*) FROM out").fetchone()[0]
        sink_distinct = conn.execute("SELECT COUNT(DISTINCT partition || ':' || offset) FROM out").fetchone()[0]
    out = {"written": args.rows, "read": n_read, "distinct_keys": distinct_keys, "sink_rows": sink_rows,
           "sink_distinct_offsets": sink_distinct}
    if args.master:
        out["executors"] = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
    print(json.dumps(out), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
