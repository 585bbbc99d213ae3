"""One writer's driver process of :mod:`delta_sink_bench`: caches the input, then appends it to a
fresh Delta table each time it is told to, and reports the seconds of each write.

``--spec`` names a JSON file: ``writer`` (``pykafka-delta`` or ``delta``), ``source`` (``pykafka`` or
``kafka``: the connector that reads the input), ``bootstrap``, ``topic``, ``records``, ``jars`` (list,
may be empty), ``workdir``. The process:

1. starts a ``local[2]`` SparkSession (with delta-spark's extension and catalog when ``writer`` is
   ``delta``), reads the topic with ``spark.read.format(source)`` (topic, partition, offset, key and
   value as strings, timestamp), caches and counts it (must be ``records``);
2. writes it once, untimed (warm-up), prints ``{"ready": ..., "spark": ..., "partitions": ...}``;
3. for each line ``<name>`` read from stdin: ``df.write.mode("append")`` into ``workdir/<writer>-<name>``
   (``format("pykafka-delta")`` with option ``path``, or ``format("delta").save(path)``: a new,
   unpartitioned table, snappy Parquet), timed around the write call alone; the table is read back
   (delta-spark, or deltalake for ``pykafka-delta``) and must hold ``records`` rows; prints
   ``{"seconds": s}``. Ends at end of input.

An error ends the process with exit code 1 and the traceback on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--spec", required=True)
    spec = json.load(open(p.parse_args(argv).spec))
    writer, n = spec["writer"], spec["records"]

    import pyspark_kafka
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName(f"delta-sink-bench-{writer}")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    if spec["jars"]:
        builder = builder.config("spark.jars", ",".join(spec["jars"]))
    if writer == "delta":
        builder = (builder.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                   .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        src = (spark.read.format(spec["source"]).option("kafka.bootstrap.servers", spec["bootstrap"])
               .option("subscribe", spec["topic"]).load()
               .selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key",
                           "CAST(value AS STRING) AS value", "timestamp")
               .cache())
        got = src.count()
        if got != n:
            raise RuntimeError(f"the input holds {got} rows, not {n}")

        def write(name: str) -> float:
            path = os.path.join(spec["workdir"], f"{writer}-{name}")
            w = src.write.mode("append")
            start = time.perf_counter()
            if writer == "delta":
                w.format("delta").save(path)
            else:
                w.format("pykafka-delta").option("path", path).save()
            seconds = time.perf_counter() - start
            if writer == "delta":
                rows = spark.read.format("delta").load(path).count()
            else:
                import deltalake

                rows = deltalake.DeltaTable(path).to_pyarrow_dataset().count_rows()
            if rows != n:
                raise RuntimeError(f"{writer}: the table holds {rows} rows, not {n}")
            return seconds

        write("warmup")
        print(json.dumps({"ready": True, "spark": spark.version, "pykafka_module": pyspark_kafka.__file__,
                          "partitions": src.rdd.getNumPartitions()}), flush=True)
        for line in sys.stdin:
            print(json.dumps({"seconds": round(write(line.strip()), 3)}), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
