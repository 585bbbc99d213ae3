"""Reads a Delta and an Iceberg table with Spark's own readers (delta-spark, Iceberg's Spark runtime).

Run by :mod:`integration_tests.reference.test_reference_tables` as a separate driver process with a
pyspark of the Spark version those readers are built for (:mod:`pyspark_kafka.testing.table_readers`).
It imports nothing of pyspark-kafka: what it reads is what any Spark user of these tables sees.

Arguments: ``--jars`` (comma-separated, for ``spark.jars``), ``--delta`` (table directory),
``--iceberg`` (the table's current ``*.metadata.json``: Iceberg's ``HadoopTables`` loads a table
from a metadata file path as a static, read-only table), ``--columns`` (comma-separated, the order
of the rows printed). Prints one JSON line: ``spark`` (version), ``delta_rows``, ``iceberg_rows``
(lists of lists in ``--columns`` order, timestamps as epoch microseconds), ``delta_txns``
(``{appId: version}`` of the table's ``txn`` actions as delta-spark's snapshot holds them),
``delta_version``, ``iceberg_summaries`` (the ``summary`` map of each snapshot, from Iceberg's
``snapshots`` metadata table, oldest first).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def _rows(df, columns: list[str]) -> list[list]:
    select = [f"CAST(unix_micros({c}) AS BIGINT) AS {c}" if dict(df.dtypes)[c].startswith("timestamp") else c
              for c in columns]
    return [list(r) for r in df.selectExpr(*select).collect()]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--jars", required=True)
    p.add_argument("--delta", required=True)
    p.add_argument("--iceberg", required=True)
    p.add_argument("--columns", required=True)
    args = p.parse_args(argv)
    columns = args.columns.split(",")

    from pyspark.sql import SparkSession

    start = time.monotonic()
    spark = (SparkSession.builder.master("local[1]").appName("table-reader-reference")
             .config("spark.jars", args.jars)
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
             .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
             .getOrCreate())
    try:
        delta = spark.read.format("delta").load(args.delta)
        iceberg = spark.read.format("iceberg").load(args.iceberg)
        jvm = spark.sparkContext._jvm
        log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, args.delta)
        snapshot = log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
        txns = jvm.scala.jdk.javaapi.CollectionConverters.asJava(snapshot.transactions())
        summaries = spark.read.format("iceberg").load(args.iceberg + "#snapshots") \
            .orderBy("committed_at").select("summary").collect()
        out = {
            "spark": spark.version,
            "delta_rows": _rows(delta, columns),
            "iceberg_rows": _rows(iceberg, columns),
            "delta_txns": {str(k): int(txns.get(k)) for k in txns.keySet()},
            "delta_version": int(snapshot.version()),
            "iceberg_summaries": [dict(r["summary"]) for r in summaries],
            "delta_schema": delta.schema.simpleString(),
            "iceberg_schema": iceberg.schema.simpleString(),
            "seconds": round(time.monotonic() - start, 1),
        }
    finally:
        spark.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
