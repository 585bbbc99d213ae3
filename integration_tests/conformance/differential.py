"""Differential observations: the same deterministic actions on two clusters, compared field by field.

Each observation is a function ``(cluster) -> dict`` that creates its own topics, drives the
cluster with the reference client (confluent-kafka; raw Kafka requests through
:func:`pyspark_kafka.testing.clusters.send_request` where a client would hide the broker's answer)
and returns a JSON-able dict of what the broker made observable. Run-specific noise is
normalized away: topic and group names are never returned, producer ids are left out,
wall-clock timestamps become booleans ("within the produce window") or offsets relative to a
fixed base, member ids become sorted assignment shapes. Two correct brokers return equal
dicts; :func:`differences` lists the fields that differ (``"path": (a, b)``).

``integration_tests/test_differential.py`` runs every observation on the embedded broker and on
Apache Kafka and asserts equality, with the deliberate differences in an explicit table.
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Callable

from integration_tests import clusters as C
from integration_tests import helpers
from integration_tests.conformance.differential_kip848 import consumer_groups

BASE_TS = 1_700_000_000_000
"""Base CreateTime (ms) of the explicit timestamps (2023: topics that use it have ``retention.ms=-1``)."""
WAIT_S = 30.0
COMPACTION_WAIT_S = 40.0
"""Bound of the wait for the log cleaner (Kafka's cleaner backs off ``log.cleaner.backoff.ms``)."""
APACHE_CONFIG = {"log.retention.check.interval.ms": "500", "log.cleaner.backoff.ms": "500",
                 "group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "1000"}
"""Broker settings of the Apache Kafka node of the differential run: the cleaner checks every
0.5 s (Kafka's default backoff is 15 s), as the embedded broker's cleaner does
(``log.cleaner.backoff.ms`` in ``clusters.EMBEDDED_CONFIG``). KIP-848 members heartbeat every second (Kafka's
default and minimum are 5 s) so the Java client's rebalances take seconds, not tens of them."""
EMBEDDED_CONFIG = {"group.consumer.heartbeat.interval.ms": "1000"}
"""The embedded broker's settings of the differential run beside ``clusters.EMBEDDED_CONFIG``."""


# --------------------------------------------------------------------------- helpers


def _admin(cluster: C.Cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def _topic(cluster: C.Cluster, partitions: int = 1, config: dict | None = None) -> str:
    return cluster.create_topic(partitions, config=config, prefix="differential")


def _list_offsets(cluster: C.Cluster, topic: str, partitions: int, spec, isolation: str = "read_uncommitted") -> dict:
    """``{partition: [offset, timestamp ms]}`` of AdminClient.list_offsets (KIP-396) for one OffsetSpec."""
    from confluent_kafka import IsolationLevel, TopicPartition

    level = IsolationLevel.READ_COMMITTED if isolation == "read_committed" else IsolationLevel.READ_UNCOMMITTED
    admin = _admin(cluster)  # kept referenced until the futures resolve
    futures = admin.list_offsets({TopicPartition(topic, p): spec for p in range(partitions)},
                                           isolation_level=level, request_timeout=15)
    out = {}
    for tp, future in futures.items():
        info = future.result(WAIT_S)
        out[str(tp.partition)] = [info.offset, info.timestamp]
    return dict(sorted(out.items()))


def _records(cluster: C.Cluster, topic: str, isolation: str = "read_uncommitted") -> list:
    """``[partition, offset, key, value]`` of every record a from-beginning reader sees (str or None)."""
    def s(b):
        return None if b is None else b.decode()
    return [[m.partition(), m.offset(), s(m.key()), s(m.value())]
            for m in helpers.consume_all(cluster.bootstrap, topic, isolation)]


def _kafka_error_code(future) -> int:
    """The Kafka error code a confluent admin future failed with (0: it succeeded)."""
    try:
        future.result(WAIT_S)
        return 0
    except Exception as e:  # KafkaException carrying a KafkaError
        err = e.args[0] if e.args else None
        return err.code() if hasattr(err, "code") else -999


# --------------------------------------------------------------------------- observations


def produce_keyed(cluster: C.Cluster) -> dict:
    """Produced offsets per partition for keyed records (librdkafka's partitioner on both sides)."""
    topic = _topic(cluster, 3)
    reports = helpers.produce(cluster.bootstrap, topic,
                              [{"key": b"k%d" % (i % 7), "value": b"v%d" % i} for i in range(30)])
    delivered = sorted([k.decode(), v.decode(), p, o] for k, v, p, o, _ in reports)
    hw = {str(p): helpers.watermarks(cluster.bootstrap, topic, p) for p in range(3)}
    return {"delivered": delivered, "watermarks": {p: list(w) for p, w in hw.items()}}


def timestamps(cluster: C.Cluster) -> dict:
    """Explicit CreateTime timestamps and a LogAppendTime topic: timestamp types and values,
    ListOffsets earliest / latest / by timestamp / max timestamp (-3)."""
    from confluent_kafka.admin import OffsetSpec

    out = {}
    offsets = [0, 1, 5, 2, 5, 3]  # seconds after BASE_TS; the max (5) twice, not last: the first wins
    for kind, config, codec in (
            ("create_time", {"retention.ms": "-1"}, "none"),
            ("create_time_gzip", {"retention.ms": "-1"}, "gzip"),  # one compressed batch
            ("log_append_time", {"retention.ms": "-1", "message.timestamp.type": "LogAppendTime"}, "none")):
        topic = _topic(cluster, 1, config)
        before = int(time.time() * 1000)
        reports = helpers.produce(cluster.bootstrap, topic,
                                  [{"value": b"v%d-" % i + b"x" * 200, "partition": 0, "timestamp": BASE_TS + s * 1000}
                                   for i, s in enumerate(offsets)], **{"compression.type": codec, "linger.ms": 50})
        after = int(time.time() * 1000) + 1

        def ts(t: int) -> object:
            if t >= BASE_TS + 86_400_000:  # wall clock: only whether it is in the produce window
                return "now" if before - 1000 <= t <= after + 1000 else f"outside the produce window ({t})"
            return t - BASE_TS if t >= BASE_TS else t

        def listed(spec) -> dict:
            return {p: [o, ts(t)] for p, (o, t) in _list_offsets(cluster, topic, 1, spec).items()}

        consumed = [[m.offset(), m.timestamp()[0], ts(m.timestamp()[1])]
                    for m in helpers.consume_all(cluster.bootstrap, topic)]
        out[kind] = {
            "batches": [[h.base_offset, h.codec] for h in C.batch_headers(cluster.bootstrap, topic, 0)],
            "delivery_timestamps": [ts(r[4]) for r in reports],
            "consumed": consumed,
            "earliest": listed(OffsetSpec.earliest()),
            "latest": listed(OffsetSpec.latest()),
            "max_timestamp": listed(OffsetSpec.max_timestamp()),
            "by_timestamp": {str(s): listed(OffsetSpec.for_timestamp(BASE_TS + s)) for s in (0, 2500, 5000, 5001, 99_000)},
        }
    out["first_segment_only"] = _timestamp_search_commits_to_one_segment(cluster)
    return out


EIGHT_DAYS_MS = 8 * 86_400_000


def _timestamp_search_commits_to_one_segment(cluster: C.Cluster) -> dict:
    """ListOffsets by timestamp answers only from the first segment whose largest timestamp reaches
    the target (Kafka's ``UnifiedLog.searchOffsetInLocalLog``): segment 0 holds one batch of two
    records (offsets 0 and 1, at +5 s and +1 s); offset 2 at +8 days rolls a segment (its timestamp
    is more than ``segment.ms``, 7 days, past the segment's first batch: Kafka's ``timeWaitedForRoll``);
    DeleteRecords then moves the log start offset to 1. At +4 s segment 0 still counts the deleted
    +5 s record, has no record at or after +4 s from offset 1 on, and the answer is -1, not offset 2."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    topic = _topic(cluster, 1, {"retention.ms": "-1"})
    helpers.produce(cluster.bootstrap, topic, [{"value": b"a", "partition": 0, "timestamp": BASE_TS + 5000},
                                               {"value": b"b", "partition": 0, "timestamp": BASE_TS + 1000}],
                    **{"linger.ms": 50})
    helpers.produce(cluster.bootstrap, topic, [{"value": b"c", "partition": 0, "timestamp": BASE_TS + EIGHT_DAYS_MS}])
    batches = [h.base_offset for h in C.batch_headers(cluster.bootstrap, topic, 0)]
    admin = _admin(cluster)
    future = list(admin.delete_records([TopicPartition(topic, 0, 1)], request_timeout=15).values())[0]
    future.result(WAIT_S)

    def listed(spec) -> list:
        (o, t), = _list_offsets(cluster, topic, 1, spec).values()
        return [o, t - BASE_TS if t >= BASE_TS else t]

    return {"batches": batches,
            "by_timestamp": {str(s): listed(OffsetSpec.for_timestamp(BASE_TS + s)) for s in (0, 4000, 5000, 5500)}}


def groups(cluster: C.Cluster) -> dict:
    """A 2-member group: DescribeGroups state, protocol, assignment shape; committed offsets and
    lag after a commit; the state once both members left."""
    from confluent_kafka import Consumer, TopicPartition

    topic, group = _topic(cluster, 4), f"differential-{uuid.uuid4().hex[:8]}"
    helpers.produce(cluster.bootstrap, topic, [{"value": b"v%d" % i, "partition": i % 4} for i in range(20)])
    admin = _admin(cluster)
    members, assigned = [], {}

    def make(i: int):
        def on_assign(consumer, partitions):
            assigned[i] = sorted(tp.partition for tp in partitions)
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "client.id": f"member-{i}",
                      "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
        c.subscribe([topic], on_assign=on_assign)
        return c

    out = {}
    try:
        members = [make(0), make(1)]
        deadline = time.monotonic() + WAIT_S
        while True:
            for c in members:
                c.poll(0.2)
            a, b = set(assigned.get(0, ())), set(assigned.get(1, ()))
            if a and b and not (a & b) and (a | b) == {0, 1, 2, 3}:
                desc = admin.describe_consumer_groups([group], request_timeout=15)[group].result(WAIT_S)
                if str(desc.state).endswith("STABLE") and len(desc.members) == 2:
                    break
            assert time.monotonic() < deadline, f"the 2-member group did not settle: {assigned}"
        out["described"] = {
            "state": str(desc.state).rsplit(".", 1)[-1],
            "protocol": desc.partition_assignor,
            "simple": desc.is_simple_consumer_group,
            "members": sorted([m.client_id, m.host.lstrip("/"), sorted(tp.partition for tp in m.assignment.topic_partitions)]
                              for m in desc.members),
        }
        # commit: partition p at p + 1 (each member its own partitions, as the group's owners)
        for i, c in enumerate(members):
            c.commit(offsets=[TopicPartition(topic, p, p + 1) for p in assigned[i]], asynchronous=False)
    finally:
        for c in members:
            c.close()
    committed = helpers.committed_offsets(cluster.bootstrap, group, topic, 4)
    out["committed"] = {str(p): o for p, o in sorted(committed.items())}
    out["lag"] = {str(p): helpers.watermarks(cluster.bootstrap, topic, p)[1] - o for p, o in sorted(committed.items())}
    desc = admin.describe_consumer_groups([group], request_timeout=15)[group].result(WAIT_S)
    out["after_leave"] = {"state": str(desc.state).rsplit(".", 1)[-1], "members": len(desc.members),
                          "protocol": desc.partition_assignor}
    return out


def transactions(cluster: C.Cluster) -> dict:
    """LSO (ListOffsets latest, read_committed) with an open transaction and after commit and
    abort; records visible under read_committed and read_uncommitted; stored batch flags."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import OffsetSpec

    topic = _topic(cluster, 1)
    out = {}

    def offsets(label: str, settle: bool = False) -> None:
        # Kafka's coordinator writes the markers after EndTxn has answered (the embedded broker
        # before): after a commit or abort wait (bounded) until the LSO reaches the high watermark
        deadline = time.monotonic() + WAIT_S
        while True:
            lso = _list_offsets(cluster, topic, 1, OffsetSpec.latest(), "read_committed")["0"][0]
            hw = _list_offsets(cluster, topic, 1, OffsetSpec.latest())["0"][0]
            if not settle or lso == hw or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        out[label] = {"lso": lso, "hw": hw}

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"differential-{uuid.uuid4()}"})
    producer.init_transactions(WAIT_S)
    helpers.produce(cluster.bootstrap, topic, [{"value": b"plain", "partition": 0}])
    offsets("before")
    for values, end in (([b"a1", b"a2"], "commit"), ([b"b1", b"b2", b"b3"], "abort"), ([b"c1"], "commit")):
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, value=v, partition=0)
        assert producer.flush(WAIT_S) == 0
        offsets(f"open {values[0].decode()[0]}")
        out[f"open {values[0].decode()[0]}"]["read_committed"] = _records(cluster, topic, "read_committed")
        producer.commit_transaction(WAIT_S) if end == "commit" else producer.abort_transaction(WAIT_S)
        offsets(f"after {end} {values[0].decode()[0]}", settle=True)
    out["read_committed"] = _records(cluster, topic, "read_committed")
    out["read_uncommitted"] = _records(cluster, topic)
    out["batches"] = [[h.base_offset, h.transactional, h.control, h.producer_id >= 0]
                      for h in C.batch_headers(cluster.bootstrap, topic, 0)]
    return out


DESCRIBED_TOPIC_CONFIG = {"retention.ms": "123456789", "cleanup.policy": "compact,delete",
                          "max.message.bytes": "200000", "segment.bytes": "2097152",
                          "message.timestamp.type": "LogAppendTime", "min.insync.replicas": "1"}


def describe_configs(cluster: C.Cluster) -> dict:
    """DescribeConfigs of a topic with overrides: ``{name: [value, source, read_only, sensitive]}``
    (compare only the names both brokers list: :func:`differences` does)."""
    from confluent_kafka.admin import ConfigResource

    topic = _topic(cluster, 1, DESCRIBED_TOPIC_CONFIG)
    resource = ConfigResource("TOPIC", topic)
    admin = _admin(cluster)
    entries = admin.describe_configs([resource], request_timeout=15)[resource].result(WAIT_S)
    return {"configs": {name: [e.value, str(e.source), e.is_read_only, e.is_sensitive]
                        for name, e in sorted(entries.items())}}


def _raw_batch(values: list[bytes], codec: int = 0, keys: list[bytes] | None = None,
               timestamps: list[int] | None = None) -> bytes:
    """One RecordBatch v2 written by kafka-python (an independent encoder), ``codec`` 0-4."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, v in enumerate(values):
        builder.append(i, timestamp=timestamps[i] if timestamps else int(time.time() * 1000),
                       key=keys[i] if keys else None, value=v, headers=[])
    return bytes(builder.build())


def _raw_produce(cluster: C.Cluster, topic: str, partition: int, value: bytes = b"x", batch: bytes | None = None) -> int:
    from kio.schema.produce.v8.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.schema.produce.v8.response import ProduceResponse

    records = batch if batch is not None else _raw_batch([value])
    request = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition, records=records),)),))
    response = C.send_request(cluster.bootstrap, request, ProduceResponse)
    return [int(p.error_code) for t in response.responses for p in t.partition_responses][0]


def _raw_fetch(cluster: C.Cluster, topic: str, partition: int, offset: int) -> int:
    from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.fetch.v11.response import FetchResponse

    request = FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=-1, topics=(FetchTopic(topic=topic, partitions=(
                               FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                                              log_start_offset=-1, partition_max_bytes=1 << 20),)),),
                           forgotten_topics_data=(), rack_id="")
    response = C.send_request(cluster.bootstrap, request, FetchResponse)
    return [int(p.error_code) for t in response.responses for p in t.partitions][0]


def _raw_list_offsets(cluster: C.Cluster, topic: str, partition: int, timestamp: int) -> list:
    from kio.schema.list_offsets.v5.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
    from kio.schema.list_offsets.v5.response import ListOffsetsResponse

    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(name=topic, partitions=(
        ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=timestamp),)),))
    response = C.send_request(cluster.bootstrap, request, ListOffsetsResponse)
    p = [p for t in response.topics for p in t.partitions][0]
    return [int(p.error_code), int(p.offset)]


def errors(cluster: C.Cluster) -> dict:
    """Kafka error codes (never messages) of bad requests."""
    from confluent_kafka.admin import NewTopic

    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

    topic = _topic(cluster, 1, {"max.message.bytes": "1000"})
    helpers.produce(cluster.bootstrap, topic, [{"value": b"v%d" % i, "partition": 0} for i in range(3)])
    missing = f"differential-missing-{uuid.uuid4().hex[:8]}"
    out = {
        "produce_ok": _raw_produce(cluster, topic, 0),
        "produce_missing_partition": _raw_produce(cluster, topic, 5),
        "produce_unknown_topic": _raw_produce(cluster, missing, 0),
        "produce_too_large": _raw_produce(cluster, topic, 0, b"x" * 2000),
        "produce_two_batches": _raw_produce(cluster, topic, 0, batch=_raw_batch([b"a"]) + _raw_batch([b"b"])),
        "fetch_unknown_topic": _raw_fetch(cluster, missing, 0, 0),
        "fetch_ok": _raw_fetch(cluster, topic, 0, 0),
        "fetch_out_of_range": _raw_fetch(cluster, topic, 0, 1000),
        "fetch_missing_partition": _raw_fetch(cluster, topic, 5, 0),
        "list_offsets_latest": _raw_list_offsets(cluster, topic, 0, -1),
        "list_offsets_unknown_topic": _raw_list_offsets(cluster, missing, 0, -1),
        "list_offsets_missing_partition": _raw_list_offsets(cluster, topic, 5, -1),
    }
    admin = _admin(cluster)
    creates = {
        "create_existing": NewTopic(topic, 1, 1),
        "create_invalid_config_value": NewTopic(f"{missing}-a", 1, 1, config={"cleanup.policy": "bogus"}),
        "create_unknown_config": NewTopic(f"{missing}-b", 1, 1, config={"no.such.config": "1"}),
        "create_zero_partitions": NewTopic(f"{missing}-c", 0, 1),
        "create_replication_factor_too_large": NewTopic(f"{missing}-d", 1, 5),
        "create_invalid_name": NewTopic("bad name!", 1, 1),
    }
    for label, new in creates.items():
        futures = admin.create_topics([new], request_timeout=15, operation_timeout=10)
        out[label] = _kafka_error_code(futures[new.topic])
    fewer = NewPartitions(topic, 1)
    out["create_partitions_not_more"] = _kafka_error_code(admin.create_partitions([fewer], request_timeout=15)[topic])
    beyond = TopicPartition(topic, 0, 100)
    out["delete_records_beyond_high_watermark"] = _kafka_error_code(
        list(admin.delete_records([beyond], request_timeout=15).values())[0])
    bad = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "bogus", incremental_operation=AlterConfigOpType.SET)])
    out["alter_config_invalid_value"] = _kafka_error_code(admin.incremental_alter_configs([bad], request_timeout=15)[bad])
    unknown = ConfigResource("TOPIC", missing, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    out["alter_config_unknown_topic"] = _kafka_error_code(
        admin.incremental_alter_configs([unknown], request_timeout=15)[unknown])
    group = f"differential-missing-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + WAIT_S
    while True:  # a fresh Kafka answers COORDINATOR_LOAD_IN_PROGRESS (14) until __consumer_offsets is loaded
        desc = admin.describe_consumer_groups([group], request_timeout=15)[group]
        code = _kafka_error_code(desc)
        if code not in (14, 15, 16) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    out["describe_unknown_group"] = str(desc.result().state).rsplit(".", 1)[-1] if code == 0 else code
    return out


COMPACTION_CONFIG = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                     "delete.retention.ms": "100", "min.compaction.lag.ms": "0"}
"""Topic settings of the compaction observation: a segment rolls 100 ms after its first record, a
log is cleanable as soon as 1 % of it is dirty, tombstones live 100 ms past their first cleaning."""


def _raw_headers(cluster: C.Cluster, topic: str) -> list:
    """Full stored batch headers of partition 0 (one raw Fetch v4, read_uncommitted)."""
    import datetime

    from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.fetch.v4.response import FetchResponse

    from pyspark_kafka.broker.log.record_batch import parse_header

    request = FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=4 << 20,
                           isolation_level=0, topics=(FetchTopic(topic=topic, partitions=(
                               FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=4 << 20),)),))
    (data,) = [p for t in C.send_request(cluster.bootstrap, request, FetchResponse).responses for p in t.partitions]
    records, pos, out = bytes(data.records or b""), 0, []
    while pos + 61 <= len(records):
        header = parse_header(records, pos)
        if pos + header.size > len(records):
            break
        out.append(header)
        pos += header.size
    return out


def compaction(cluster: C.Cluster) -> dict:
    """Log compaction outcome under the same settings (:data:`COMPACTION_CONFIG`): keys with updates
    and tombstones, segments rolled (one ``roll`` record every 0.3 s: past ``segment.ms``, and new
    dirty bytes for the next cleaning) until a from-beginning reader sees no superseded value and no
    tombstone (bounded, 40 s). Compared: the offset and value of the latest record per key (offsets
    never change), the superseded values and tombstones left; and the same writes into topics where
    nothing may be removed (``min.compaction.lag.ms`` of one hour; ``min.cleanable.dirty.ratio=1``,
    since a log is cleaned only when its dirty ratio is *above* the minimum) and one where
    ``max.compaction.lag.ms=1000`` forces the cleaning the ratio of 1 would never allow."""
    topic = _topic(cluster, 1, COMPACTION_CONFIG)
    kept = {"lagged": {**COMPACTION_CONFIG, "min.compaction.lag.ms": "3600000"},
            "ratio_one": {**COMPACTION_CONFIG, "min.cleanable.dirty.ratio": "1"}}
    kept_topics = {name: _topic(cluster, 1, config) for name, config in kept.items()}
    forced = _topic(cluster, 1, {**COMPACTION_CONFIG, "min.cleanable.dirty.ratio": "1", "max.compaction.lag.ms": "1000"})
    everything = [topic, forced, *kept_topics.values()]
    writes = [(b"k%d" % (i % 5), b"v%d-1" % (i % 5)) for i in range(5)]
    writes += [(b"k%d" % i, b"v%d-2" % i) for i in range(4)]
    writes += [(b"k0", None), (b"k1", None), (b"k2", b"v2-3")]
    for t in everything:
        helpers.produce(cluster.bootstrap, t, [{"key": k, "value": v, "partition": 0} for k, v in writes])
    latest = {}
    for k, v in writes:
        latest[k.decode()] = None if v is None else v.decode()
    superseded = {(k.decode(), None if v is None else v.decode()) for k, v in writes} - set(latest.items())

    def read(t: str) -> list:
        return [(o, k, v) for _, o, k, v in _records(cluster, t) if k != "roll"]

    deadline = time.monotonic() + COMPACTION_WAIT_S
    rolls = 0
    while True:
        time.sleep(0.3)  # past segment.ms: the next append rolls the segment (the active one is never cleaned)
        for t in everything:
            helpers.produce(cluster.bootstrap, t, [{"key": b"roll", "value": b"r%d" % rolls, "partition": 0}])
        rolls += 1
        seen, seen_forced = read(topic), read(forced)
        pairs = {(k, v) for _, k, v in seen}
        done = not pairs & superseded and all(v is not None for _, _, v in seen)
        if (done and not {(k, v) for _, k, v in seen_forced} & superseded) or time.monotonic() > deadline:
            break
    final = {k: [o, v] for o, k, v in seen}
    complete = [[i, k.decode(), None if v is None else v.decode()] for i, (k, v) in enumerate(writes)]
    out = {"latest_per_key": {k: ov for k, ov in sorted(final.items()) if ov[1] is not None},
           "superseded_left": sorted(pairs & superseded, key=repr),
           "tombstones_left": sorted(k for k, (_, v) in final.items() if v is None),
           "expected_latest": {k: v for k, v in sorted(latest.items()) if v is not None},
           "max_lag_forced_superseded_left": sorted({(k, v) for _, k, v in seen_forced} & superseded, key=repr)}
    for name, t in kept_topics.items():
        out[f"{name}_topic_complete"] = [list(r) for r in read(t)] == complete
    return out


def compaction_transactions(cluster: C.Cluster) -> dict:
    """Compaction of a topic with transactions (:data:`COMPACTION_CONFIG`): plain records, a
    committed transaction updating ``a``, an aborted one updating ``b``; segments rolled as in
    :func:`compaction` until a read_uncommitted reader sees neither the superseded ``a`` nor the
    aborted ``b`` (bounded, 40 s). Compared: what read_uncommitted and read_committed readers see
    (offsets, keys, values)."""
    from confluent_kafka import Producer

    topic = _topic(cluster, 1, COMPACTION_CONFIG)
    helpers.produce(cluster.bootstrap, topic, [{"key": b"a", "value": b"plain-a", "partition": 0},
                                               {"key": b"b", "value": b"plain-b", "partition": 0}])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"differential-{uuid.uuid4()}"})
    producer.init_transactions(WAIT_S)
    for key, value, commit in ((b"a", b"committed-a", True), (b"b", b"aborted-b", False)):
        producer.begin_transaction()
        producer.produce(topic, key=key, value=value, partition=0)
        producer.flush(WAIT_S)
        producer.commit_transaction(WAIT_S) if commit else producer.abort_transaction(WAIT_S)
    gone = {("a", "plain-a"), ("b", "aborted-b")}
    deadline = time.monotonic() + COMPACTION_WAIT_S
    rolls = 0
    while True:
        time.sleep(0.3)  # past segment.ms: the next append rolls the segment
        helpers.produce(cluster.bootstrap, topic, [{"key": b"roll", "value": b"r%d" % rolls, "partition": 0}])
        rolls += 1
        seen = [[o, k, v] for _, o, k, v in _records(cluster, topic) if k != "roll"]
        if not {(k, v) for _, k, v in seen} & gone or time.monotonic() > deadline:
            break
    committed = [[o, k, v] for _, o, k, v in _records(cluster, topic, "read_committed") if k != "roll"]
    return {"read_uncommitted": seen, "read_committed": committed}


def topic_compression(cluster: C.Cluster) -> dict:
    """Topic ``compression.type``: one lz4 batch of 5 records (kafka-python's encoder, a raw Produce)
    into a topic of each setting, and a gzip LogAppendTime topic; the stored batches' codec,
    timestamp type, record count and offsets, and the records a reader gets back."""
    out = {}
    batch = _raw_batch([b"value-%d-" % i + b"x" * 100 for i in range(5)], codec=3,
                       keys=[b"k%d" % i for i in range(5)], timestamps=[BASE_TS + i for i in range(5)])
    for setting, extra in (("gzip", {}), ("snappy", {}), ("lz4", {}), ("zstd", {}), ("uncompressed", {}),
                           ("producer", {}), ("gzip", {"message.timestamp.type": "LogAppendTime"})):
        topic = _topic(cluster, 1, {"compression.type": setting, "retention.ms": "-1", **extra})
        before = int(time.time() * 1000)
        assert _raw_produce(cluster, topic, 0, batch=batch) == 0
        after = int(time.time() * 1000) + 1
        headers = _raw_headers(cluster, topic)
        name = setting + ("_log_append_time" if extra else "")
        out[name] = {
            "batches": [[h.base_offset, h.last_offset_delta, h.record_count, h.compression, h.timestamp_type,
                         h.base_timestamp - BASE_TS,
                         "now" if before - 1000 <= h.max_timestamp <= after + 1000 else h.max_timestamp - BASE_TS]
                        for h in headers],
            "consumed": [[m.offset(), m.key().decode(), len(m.value()), m.timestamp()[0]]
                         for m in helpers.consume_all(cluster.bootstrap, topic)],
        }
    return out


def describe_topic_partitions(cluster: C.Cluster) -> dict:
    """DescribeTopicPartitions (API 75) answers for two topics (3 and 2 partitions): pages of 4, 2 and
    3 partitions with their cursors, limits 0 and -1, a cursor past the last partition, unknown and
    illegal names, a cursor outside the requested topics. Topic names become ``A``/``B``, ids a
    flag, the leader and replicas ``self`` (node ids differ)."""
    from kio.schema.describe_topic_partitions.v0.request import Cursor, DescribeTopicPartitionsRequest, TopicRequest
    from kio.schema.describe_topic_partitions.v0.response import DescribeTopicPartitionsResponse
    from kio.static.primitive import i32

    a = cluster.create_topic(3, prefix="differential-dtpa")
    b = cluster.create_topic(2, prefix="differential-dtpb")
    alias = {a: "A", b: "B"}

    def node(n: int) -> str:
        return "self" if n >= 0 else str(n)

    def ask(names, limit=2000, cursor=None) -> dict:
        request = DescribeTopicPartitionsRequest(
            topics=tuple(TopicRequest(name=n) for n in names), response_partition_limit=i32(limit),
            cursor=None if cursor is None else Cursor(topic_name=cursor[0], partition_index=i32(cursor[1])))
        response = C.send_request(cluster.bootstrap, request, DescribeTopicPartitionsResponse)
        nxt = response.next_cursor
        return {
            "topics": [[alias.get(t.name, t.name), int(t.error_code), t.topic_id is not None, t.is_internal,
                        t.topic_authorized_operations,
                        [[p.partition_index, int(p.error_code), node(p.leader_id), p.leader_epoch,
                          [node(r) for r in p.replica_nodes], [node(r) for r in p.isr_nodes],
                          None if p.eligible_leader_replicas is None else list(p.eligible_leader_replicas),
                          None if p.last_known_elr is None else list(p.last_known_elr), list(p.offline_replicas)]
                         for p in t.partitions]]
                       for t in response.topics if t.name in alias or t.error_code],
            "next_cursor": None if nxt is None else [alias.get(nxt.topic_name, nxt.topic_name), nxt.partition_index],
        }

    return {
        "two_topics_limit_4": ask([b, a], 4),
        "from_cursor": ask([b, a], 4, (b, 1)),
        "limit_at_topic_boundary": ask([a, b], 3),
        "limit_0": ask([a], 0),
        "limit_negative": ask([a], -1),
        "cursor_past_the_end": ask([a], 2000, (a, 7)),
        "named_twice": ask([b, b]),
        "unknown_and_illegal": ask([a, "bad name!", "zz-differential-missing"]),
        "cursor_not_requested": ask([b, b], 4, (a, 0)),
    }


OBSERVATIONS: dict[str, Callable[[C.Cluster], dict]] = {
    "produce_keyed": produce_keyed,
    "timestamps": timestamps,
    "groups": groups,
    "transactions": transactions,
    "describe_configs": describe_configs,
    "errors": errors,
    "compaction": compaction,
    "compaction_transactions": compaction_transactions,
    "topic_compression": topic_compression,
    "describe_topic_partitions": describe_topic_partitions,
    "consumer_groups": consumer_groups,
}
"""Every observation by name (the test runs each on both brokers)."""


def flatten(value, path: str = "") -> dict:
    """``{"a.b.0": leaf}`` of a nested JSON-able value (lists of scalars stay whole)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(flatten(v, f"{path}.{k}" if path else str(k)))
        return out
    return {path: value}


def differences(name: str, a: dict, b: dict) -> dict:
    """``{field path: (a value, b value)}`` of the fields that differ; for ``describe_configs``
    only the configs both list are compared."""
    fa, fb = flatten(a), flatten(b)
    if name == "describe_configs":
        common = fa.keys() & fb.keys()
        fa, fb = {k: fa[k] for k in common}, {k: fb[k] for k in common}
    return {k: (fa.get(k), fb.get(k)) for k in sorted(fa.keys() | fb.keys()) if fa.get(k) != fb.get(k)}
