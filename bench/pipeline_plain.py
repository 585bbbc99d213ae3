"""The flights job without Spark: the anchor of ``bench/pipeline_bench.py``.

    python bench/pipeline_plain.py --bootstrap-servers HOST:PORT --work-dir DIR [--rows N]
                                   [--topic NAME] [--micro-batch 200000]

Does the work of ``examples/flights_pipeline.py`` as a one-thread script would: the same
load code (:func:`flights_load.load_flights`, idempotent producer, 8 partitions), then a
confluent-kafka consumer assigned to every partition from offset 0 up to the end offsets
seen at the start (like ``Trigger.AvailableNow``), ``json.loads`` of each value, the
airline's name from a dict, and ``sqlite3`` ``executemany`` into ``DIR/flights.db`` table
``flights_enriched`` (the job's columns) with the next offset per partition stored in the
same transaction, one transaction per ``--micro-batch`` records; then the same report,
check and chart (:mod:`flights_report`).

It has no checkpoint, no staging table, no restart logic (it stores the offsets but never
reads them back) and no parallelism. The broker is an existing one (``--bootstrap-servers``).

Prints the report, then one line ``times: {"load": s, "stream": s, "total": s}`` (JSON,
seconds; ``total`` from the start of :func:`main`, like the job's ``total``). Exit code 0
when every flight is in the table exactly once, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

import flights_load  # noqa: E402  (examples/)
import flights_pipeline  # noqa: E402
import flights_report  # noqa: E402

DEADLINE_S = 600  # bound on the consume loop


def flight_row(flight: dict, names: dict[str, str], source: dict) -> tuple:
    """One ``flights_enriched`` row (columns of ``flights_pipeline.OUTPUT_COLUMNS``) from a parsed
    flight (JSON object as a dict), the airline names by code, and the source record's
    ``kafka_partition``/``kafka_offset``. A carrier missing from ``names`` gets ``None``, like
    the job's left join."""
    values = {**flight, "carrier_name": names.get(flight["carrier"]), **source}
    return tuple(values[name] for name in flights_pipeline.OUTPUT_COLUMNS)


def _create_tables(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"CREATE TABLE {flights_report.TABLE} ({', '.join(flights_pipeline.OUTPUT_COLUMNS)})")
    conn.execute("CREATE TABLE offsets (topic TEXT, partition INTEGER, next_offset INTEGER, "
                 "PRIMARY KEY (topic, partition))")


def stream(bootstrap: str, topic: str, db_path: Path, micro_batch: int) -> int:
    """Consume ``topic`` from offset 0 to its current end offsets into SQLite; records written.

    Raises RuntimeError on a fetch error or when the end is not reached within
    :data:`DEADLINE_S` seconds.
    """
    from confluent_kafka import Consumer, TopicPartition

    names = dict(flights_load.read_airlines()[["carrier", "name"]].itertuples(index=False))
    columns = flights_pipeline.OUTPUT_COLUMNS
    insert = f"INSERT INTO {flights_report.TABLE} VALUES ({', '.join('?' * len(columns))})"
    upsert = ("INSERT INTO offsets VALUES (?, ?, ?) "
              "ON CONFLICT (topic, partition) DO UPDATE SET next_offset = excluded.next_offset")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-bench-plain",
                         "enable.auto.commit": False, "log_level": 0})
    conn = sqlite3.connect(db_path)
    try:
        _create_tables(conn)
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        target, written, pending, next_offsets = sum(ends.values()), 0, [], {}
        deadline = time.monotonic() + DEADLINE_S
        while written < target:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{written} of {target} records read within {DEADLINE_S} s")
            for m in consumer.consume(5000, 1.0):
                if m.error() is not None:
                    raise RuntimeError(f"fetch error: {m.error()}")
                source = {"kafka_partition": m.partition(), "kafka_offset": m.offset()}
                pending.append(flight_row(json.loads(m.value()), names, source))
                next_offsets[m.partition()] = m.offset() + 1
            if len(pending) >= micro_batch or written + len(pending) >= target:
                with conn:
                    conn.executemany(insert, pending)
                    conn.executemany(upsert, [(topic, p, o) for p, o in next_offsets.items()])
                written += len(pending)
                pending = []
    finally:
        conn.close()
        consumer.close()
    return written


def main(argv: list[str] | None = None) -> int:
    """Load, stream, report (see the module docstring); 0 when every flight is in the table once."""
    started = time.perf_counter()
    p = argparse.ArgumentParser(prog="pipeline_plain", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT")
    p.add_argument("--work-dir", required=True, type=Path, help="a new or empty directory")
    p.add_argument("--rows", type=int, default=None, help="the first N flights (default all)")
    p.add_argument("--topic", default=flights_load.DEFAULT_TOPIC)
    p.add_argument("--micro-batch", type=int, default=flights_pipeline.MAX_OFFSETS_PER_TRIGGER,
                   help="records per transaction (default: the job's maxOffsetsPerTrigger)")
    args = p.parse_args(argv)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    db_path = args.work_dir / "flights.db"

    df = flights_load.read_flights(args.rows)
    t = time.perf_counter()
    flights_load.load_flights(args.bootstrap_servers, df, args.topic, progress=False)
    load = time.perf_counter() - t
    t = time.perf_counter()
    stream(args.bootstrap_servers, args.topic, db_path, args.micro_batch)
    streamed = time.perf_counter() - t
    stats = flights_report.carrier_stats(db_path)
    chk = flights_report.check(db_path, expected=len(df))
    print(flights_report.format_report(stats, chk))
    flights_report.write_chart(stats, args.work_dir / "delays_by_carrier.png")
    total = time.perf_counter() - started
    print("times:", json.dumps({"load": load, "stream": streamed, "total": total}), flush=True)
    return 0 if chk.ok else 1


if __name__ == "__main__":
    sys.exit(main())
