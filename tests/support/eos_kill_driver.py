"""Driver program for the exactly-once kill test: a streaming Kafka → Kafka query.

    python eos_kill_driver.py --bootstrap H:P --source T --sink T --checkpoint DIR
        [--max-per-trigger N] [--slow-ms MS]

``readStream.format("pykafka")`` from ``--source`` (``maxOffsetsPerTrigger`` = N, so several
micro-batches), ``writeStream.format("pykafka")`` to ``--sink`` with
``deliveryGuarantee=exactly-once``, ``Trigger.AvailableNow``; exits 0 once everything
available is written. ``--slow-ms`` adds an enrichment step that takes that long per Arrow
batch of 50 rows (a slow transformation), so each task's transaction stays open long enough
for the test to kill the process inside it. The test kills this process with SIGKILL and
runs it again on the same checkpoint.
"""

from __future__ import annotations

import argparse
import sys
import time

from pyspark_kafka.spark import get_spark


def slow_enrichment(pause_s: float):
    """An identity ``mapInArrow`` function that takes ``pause_s`` per Arrow batch."""

    def enrich(batches):
        for batch in batches:
            time.sleep(pause_s)  # stands for per-batch work (a lookup, a model call)
            yield batch

    return enrich


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--max-per-trigger", type=int, default=600)
    ap.add_argument("--slow-ms", type=int, default=0)
    args = ap.parse_args(argv)

    # local[1]: tasks of a micro-batch run one after the other, so kills often find some tasks of
    # the batch committed and others not. Arrow batches of 50 rows and a small stream buffer let
    # the rows reach the writer while the enrichment step is still working on later ones.
    conf = {"spark.sql.execution.arrow.maxRecordsPerBatch": "50", "spark.buffer.size": "1024"}
    spark = get_spark("eos-kill-driver", master="local[1]", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    rows = (
        spark.readStream.format("pykafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_per_trigger))
        .load()
        .selectExpr("key", "value")
    )
    if args.slow_ms:
        rows = rows.mapInArrow(slow_enrichment(args.slow_ms / 1000), rows.schema)
    query = (
        rows.writeStream.format("pykafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
