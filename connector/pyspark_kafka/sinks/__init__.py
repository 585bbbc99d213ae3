"""Exactly-once sinks that store the consumed Kafka offsets together with the results.

- ``pykafka-sql`` (:mod:`pyspark_kafka.sinks.sql`): rows + offsets in one database transaction.
- ``pykafka-parquet`` (:mod:`pyspark_kafka.sinks.files`): Parquet files + offsets in one
  atomically published commit manifest.
- ``pykafka-delta`` (:mod:`pyspark_kafka.sinks.delta`): data files + offsets (``txn`` app
  transactions) in one Delta Lake commit.
- ``pykafka-iceberg`` (:mod:`pyspark_kafka.sinks.iceberg`): one Iceberg append per commit, the
  offsets in its snapshot summary.
- :func:`starting_offsets`: the stored offsets as Spark's ``startingOffsets`` JSON, so a
  query or a backfill job resumes exactly where the stored results end.
- :func:`register`: register the sinks on a SparkSession (static registration through the
  ``pyspark_kafka_sql`` / ``_parquet`` / ``_delta`` / ``_iceberg`` packages also works).

See ``docs/exactly-once.md`` and ``docs/sinks.md``.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

from pyspark_kafka.kafka.topic_partition import TopicPartition

__all__ = ["register", "starting_offsets", "stored_offsets"]


def register(spark) -> None:
    """Register ``pykafka-sql``, ``pykafka-parquet``, ``pykafka-delta`` and ``pykafka-iceberg`` on ``spark``.

    The Delta and Iceberg sources are registered even without their libraries installed: using
    them then fails with the pip command to run.
    """
    from pyspark_kafka.sinks.delta import DeltaSinkDataSource
    from pyspark_kafka.sinks.files import ParquetSinkDataSource
    from pyspark_kafka.sinks.iceberg import IcebergSinkDataSource
    from pyspark_kafka.sinks.sql import SqlSinkDataSource

    for source in (SqlSinkDataSource, ParquetSinkDataSource, DeltaSinkDataSource, IcebergSinkDataSource):
        spark.dataSource.register(source)


def stored_offsets(
    *,
    url: Optional[str] = None,
    table: Optional[str] = None,
    sink_id: Optional[str] = None,
    offsets_table: Optional[str] = None,
    path: Optional[str] = None,
    delta: Optional[str] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    iceberg: Optional[str] = None,
    catalog: Optional[Mapping[str, str]] = None,
) -> dict[TopicPartition, int]:
    """Next offsets a sink stored: ``{(topic, partition): next_offset}``.

    - SQL sink: ``url`` (SQLAlchemy URL; default the embedded SQLite file), ``table``
      and/or ``sink_id`` (default: table), ``offsets_table`` (default ``pykafka_offsets``).
    - Parquet sink: ``path``.
    - Delta sink: ``delta`` (table URI, with ``storage_options`` for object stores), or ``path``
      of a local directory holding a ``_delta_log``; ``sink_id`` (default ``pykafka``).
    - Iceberg sink: ``iceberg`` (table ``namespace.name``), ``catalog`` (the sink's ``catalog.*``
      options without the prefix; default the embedded SQLite catalog), ``sink_id`` (default ``pykafka``).

    Raises OptionError when no store is named, SinkUnavailableError when the store cannot be
    opened, SinkError when the Delta/Iceberg library is missing (naming the pip command).
    """
    from pyspark_kafka.errors import OptionError

    if iceberg is not None:
        from pyspark_kafka.sinks import iceberg as ice

        return ice.stored_offsets(iceberg, sink_id or ice.DEFAULT_SINK_ID, catalog)
    if delta is None and path is not None:
        from pyspark_kafka.sinks.delta import is_delta_table

        if is_delta_table(path):
            delta = path
    if delta is not None:
        from pyspark_kafka.sinks import delta as dl

        return dl.stored_offsets(delta, sink_id or dl.DEFAULT_SINK_ID, storage_options)
    if path is not None:
        from pyspark_kafka.sinks.files import stored_offsets as file_offsets

        return file_offsets(path)
    if table is None and sink_id is None:
        raise OptionError("starting_offsets needs path=... (Parquet sink) or table=/sink_id=... (SQL sink)")
    from pyspark_kafka.sinks import sql

    return sql.stored_offsets(url, sink_id, table=table, offsets_table=offsets_table or sql.DEFAULT_OFFSETS_TABLE)


def _cluster_partitions(bootstrap_servers: str, topics: Iterable[str], kafka_params: Mapping[str, str]) -> dict:
    """``{topic: [partition ids]}`` from the cluster's metadata (confluent-kafka AdminClient)."""
    from pyspark_kafka.kafka.clients import client_params
    from pyspark_kafka.kafka.reachability import require_reachable
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
    delta: Optional[str] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    iceberg: Optional[str] = None,
    catalog: Optional[Mapping[str, str]] = None,
) -> str:
    """Spark ``startingOffsets`` JSON resuming exactly after what the sink stored.

    Returns e.g. ``'{"orders":{"0":42,"1":-2}}'`` (``-2`` = earliest, Spark's
    convention) or ``"earliest"`` when nothing is stored and no partitions are known.

    - Store: as :func:`stored_offsets` (``path=`` for Parquet or a local Delta table, ``delta=`` for
      a Delta table URI, ``iceberg=``/``catalog=`` for Iceberg, ``table=``/``sink_id=``/``url=`` for SQL).
    - ``topics``: keep only these topics (a query subscribed to fewer topics than
      the sink stored); required with ``bootstrap_servers``.
    - ``bootstrap_servers`` (+ ``kafka_params`` client settings): list the topics'
      partitions so that partitions with no stored offset start at earliest; Spark's
      Kafka source requires specific offsets for every partition.

    Raises OptionError, SinkUnavailableError, or SinkError for an unknown topic.
    """
    from pyspark_kafka.errors import OptionError
    from pyspark_kafka.sinks.common import offsets_json

    stored = stored_offsets(url=url, table=table, sink_id=sink_id, offsets_table=offsets_table, path=path,
                            delta=delta, storage_options=storage_options, iceberg=iceberg, catalog=catalog)
    wanted = None if topics is None else sorted(set(topics))
    if wanted is not None:
        stored = {tp: off for tp, off in stored.items() if tp[0] in wanted}
    partitions = None
    if bootstrap_servers:
        if wanted is None:
            raise OptionError("starting_offsets(bootstrap_servers=...) also needs topics=[...] (the query's topics)")
        partitions = _cluster_partitions(bootstrap_servers, wanted, kafka_params or {})
    return offsets_json(stored, partitions)
