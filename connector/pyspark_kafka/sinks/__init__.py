"""Exactly-once sinks that store the consumed Kafka offsets together with the results.

- ``pykafka-sql`` (:mod:`pyspark_kafka.sinks.sql`): rows + offsets in one database transaction.
- ``pykafka-parquet`` (:mod:`pyspark_kafka.sinks.files`): Parquet files + offsets in one
  atomically published commit manifest.
- :func:`starting_offsets`: the stored offsets as Spark's ``startingOffsets`` JSON, so a
  query or a backfill job resumes exactly where the stored results end.
- :func:`register`: register both data sources on a SparkSession (static registration
  through the ``pyspark_kafka_sql`` / ``pyspark_kafka_parquet`` packages also works).

See ``docs/exactly-once.md`` and ``docs/sinks.md``.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

from pyspark_kafka.topic_partition import TopicPartition

__all__ = ["register", "starting_offsets", "stored_offsets"]


def register(spark) -> None:
    """Register ``pykafka-sql`` and ``pykafka-parquet`` on ``spark`` (a SparkSession)."""
    from pyspark_kafka.sinks.files import ParquetSinkDataSource
    from pyspark_kafka.sinks.sql import SqlSinkDataSource

    spark.dataSource.register(SqlSinkDataSource)
    spark.dataSource.register(ParquetSinkDataSource)


def stored_offsets(
    *,
    url: Optional[str] = None,
    table: Optional[str] = None,
    sink_id: Optional[str] = None,
    offsets_table: Optional[str] = None,
    path: Optional[str] = None,
) -> dict[TopicPartition, int]:
    """Next offsets a sink stored: ``{(topic, partition): next_offset}``.

    SQL sink: ``url`` (SQLAlchemy URL; default the embedded SQLite file), ``table``
    and/or ``sink_id`` (default: table), ``offsets_table`` (default ``pykafka_offsets``).
    Parquet sink: ``path``. Raises OptionError when neither a table/sink id nor a
    path is given, SinkUnavailableError when the store cannot be opened.
    """
    from pyspark_kafka.errors import OptionError

    if path is not None:
        from pyspark_kafka.sinks.files import stored_offsets as file_offsets

        return file_offsets(path)
    if table is None and sink_id is None:
        raise OptionError("starting_offsets needs path=... (Parquet sink) or table=/sink_id=... (SQL sink)")
    from pyspark_kafka.sinks import sql

    return sql.stored_offsets(url, sink_id, table=table, offsets_table=offsets_table or sql.DEFAULT_OFFSETS_TABLE)


def _cluster_partitions(bootstrap_servers: str, topics: Iterable[str], kafka_params: Mapping[str, str]) -> dict:
    """``{topic: [partition ids]}`` from the cluster's metadata (confluent-kafka AdminClient)."""
    from pyspark_kafka.clients import client_params
    from pyspark_kafka.reachability import require_reachable
    from pyspark_kafka.sinks.common import SinkError

    options = {**{(k if k.startswith("kafka.") else f"kafka.{k}"): v for k, v in dict(kafka_params or {}).items()},
               "kafka.bootstrap.servers": bootstrap_servers}
    md = require_reachable(client_params(options), options)  # names each unreachable address
    if md is None:
        raise SinkError(f"the cluster at {bootstrap_servers} did not answer a Metadata request in time; "
                        "check that the brokers are healthy, then retry")
    out = {}
    for t in topics:
        tm = md.topics.get(t)
        if tm is None or tm.error is not None or not tm.partitions:
            raise SinkError(
                f"topic '{t}' is not known to the cluster at {bootstrap_servers}"
                f"{'' if tm is None or tm.error is None else f' ({tm.error})'}. Fix: create it or correct the name."
            )
        out[t] = sorted(tm.partitions)
    return out


def starting_offsets(
    *,
    topics: Optional[Iterable[str]] = None,
    bootstrap_servers: Optional[str] = None,
    kafka_params: Optional[Mapping[str, str]] = None,
    url: Optional[str] = None,
    table: Optional[str] = None,
    sink_id: Optional[str] = None,
    offsets_table: Optional[str] = None,
    path: Optional[str] = None,
) -> str:
    """Spark ``startingOffsets`` JSON resuming exactly after what the sink stored.

    Returns e.g. ``'{"orders":{"0":42,"1":-2}}'`` (``-2`` = earliest, Spark's
    convention) or ``"earliest"`` when nothing is stored and no partitions are known.

    - Store: as :func:`stored_offsets` (``path=`` for Parquet, ``table=``/``sink_id=``/``url=`` for SQL).
    - ``topics``: keep only these topics (a query subscribed to fewer topics than
      the sink stored); required with ``bootstrap_servers``.
    - ``bootstrap_servers`` (+ ``kafka_params`` client settings): list the topics'
      partitions so that partitions with no stored offset start at earliest; Spark's
      Kafka source requires specific offsets for every partition.

    Raises OptionError, SinkUnavailableError, or SinkError for an unknown topic.
    """
    from pyspark_kafka.errors import OptionError
    from pyspark_kafka.sinks.common import offsets_json

    stored = stored_offsets(url=url, table=table, sink_id=sink_id, offsets_table=offsets_table, path=path)
    wanted = None if topics is None else sorted(set(topics))
    if wanted is not None:
        stored = {tp: off for tp, off in stored.items() if tp[0] in wanted}
    partitions = None
    if bootstrap_servers:
        if wanted is None:
            raise OptionError("starting_offsets(bootstrap_servers=...) also needs topics=[...] (the query's topics)")
        partitions = _cluster_partitions(bootstrap_servers, wanted, kafka_params or {})
    return offsets_json(stored, partitions)
