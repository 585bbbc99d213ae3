"""Driver program for the sink kill tests: one Spark job from a pykafka topic into an exactly-once sink.

    python sink_kill_driver.py --bootstrap H:P --topic T --sink sql|parquet|delta|iceberg --target URL|DIR
        [--checkpoint DIR] [--batch] [--max-per-trigger N] [--master local[2,4]]

Streaming (default): ``readStream.format("pykafka")`` with ``startingOffsets`` from
:func:`pyspark_kafka.sinks.starting_offsets` (so it resumes from the sink even when the
checkpoint is gone), ``Trigger.AvailableNow``, exit 0 once everything available is written.
``--batch``: a backfill job ``read.format("pykafka")`` from the sink's offsets to ``latest``.
The tests kill this process with SIGKILL at random points and run it again, or kill only its
Python executor workers while it runs (``--master local[N,F]``: Spark tries a task F times).
"""

from __future__ import annotations

import argparse
import sys

from pyspark_kafka.sinks import starting_offsets
from pyspark_kafka.spark import get_spark

TABLE = "events"


def iceberg_catalog(directory: str) -> dict:
    """The Iceberg sink's catalog for a test directory: SQLite catalog + warehouse inside it."""
    return {"uri": f"sqlite:///{directory}/catalog.db", "warehouse": f"file://{directory}/warehouse"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--sink", choices=["sql", "parquet", "delta", "iceberg"], required=True)
    ap.add_argument("--target", required=True,
                    help="SQLAlchemy URL (sql), directory (parquet, delta), catalog directory (iceberg)")
    ap.add_argument("--checkpoint")
    ap.add_argument("--batch", action="store_true")
    ap.add_argument("--max-per-trigger", type=int, default=1000)
    ap.add_argument("--master", default="local[2]",
                    help="Spark master; local[N,F] lets Spark try a failed task F times (local[N]: once)")
    args = ap.parse_args(argv)

    store = {"url": args.target, "table": TABLE} if args.sink == "sql" else {"path": args.target}
    if args.sink == "iceberg":
        store = {"iceberg": f"kafka.{TABLE}", "catalog": iceberg_catalog(args.target)}
    start = starting_offsets(**store, topics=[args.topic], bootstrap_servers=args.bootstrap)
    spark = get_spark("sink-kill-driver", master=args.master, conf={"spark.default.parallelism": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    reader = spark.readStream if not args.batch else spark.read
    df = (
        reader.format("pykafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", start)
    )
    if args.batch:
        df = df.option("endingOffsets", "latest")
    else:
        df = df.option("maxOffsetsPerTrigger", str(args.max_per_trigger))
    rows = df.load().selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")

    fmt = f"pykafka-{args.sink}"
    options = {"topics": args.topic}
    if args.sink == "sql":
        options.update(url=args.target, table=TABLE)
    if args.sink == "iceberg":
        options.update(table=f"kafka.{TABLE}", **{f"catalog.{k}": v for k, v in iceberg_catalog(args.target).items()})
    by_name = args.sink in ("sql", "iceberg")
    if args.batch:
        writer = rows.write.format(fmt).options(**options).mode("append")
        writer.save() if by_name else writer.save(args.target)
    else:
        writer = (
            rows.writeStream.format(fmt)
            .options(**options)
            .option("checkpointLocation", args.checkpoint)
            .trigger(availableNow=True)
        )
        query = writer.start() if by_name else writer.start(args.target)
        query.awaitTermination()
    spark.stop()
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
