"""Differential observations through Kafka's Java client (``kafka-clients``, the ``java`` driver).

Like :mod:`integration_tests.conformance.differential`, each observation is ``(cluster) -> dict``
of what the broker made observable, normalized so that two correct brokers give equal dicts
(topic, group and transactional id names become ``T``/``G``/``X``; wall-clock timestamps become
``"now"`` or an offset from a fixed base); here the client that observes is the Java one:

- :func:`java_producer`: acks 0/1/all, idempotent, every codec, headers, a ~1 MB record;
  delivery reports (partition, offset, timestamp) and what the Java consumer reads back
  (timestamp types, a LogAppendTime topic too);
  consume-transform-produce with ``sendOffsetsToTransaction`` (output, committed offsets).
- :func:`java_assignors`: the classic protocol with ``range``, ``roundrobin`` and
  ``cooperative-sticky`` (two Java members each): assignment shapes and DescribeGroups.
- :func:`java_admin`: the admin client (topics, partitions, configs describe and incremental
  alter, list/describe/delete groups and their offsets, list offsets incl. by timestamp, delete
  records, describe cluster, log dirs, producers, transactions), including its error names.

``integration_tests/test_differential.py`` runs them on the embedded broker and on Apache Kafka.
"""

from __future__ import annotations

import contextlib
import time
import uuid

from integration_tests import clusters as C
from integration_tests import helpers
from integration_tests.conformance.scenarios import Rec, wait_until
from pyspark_kafka.testing.clusters import _wait_for_leaders

BASE_TS = 1_700_000_000_000
"""Base CreateTime (ms) of explicit timestamps (topics using it have ``retention.ms=-1``)."""
WAIT_S = 30.0
LARGE = 1_000_000
"""Value size (bytes) of the large record: under Kafka's default ``max.message.bytes`` (1048588)."""


def _driver(cluster: C.Cluster):
    from integration_tests.conformance.drivers.java_client import JavaClientDriver

    return JavaClientDriver(cluster.bootstrap)


def _rename(value, names: dict[str, str]):
    """``value`` with every occurrence of the keys of ``names`` in strings (and dict keys) replaced."""
    if isinstance(value, dict):
        return {_rename(k, names): _rename(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename(v, names) for v in value]
    if isinstance(value, str):
        for old, new in names.items():
            value = value.replace(old, new)
    return value


def _ts(t: int, before: int, after: int) -> object:
    if t >= BASE_TS + 86_400_000:
        return "now" if before - 1000 <= t <= after + 1000 else f"outside the produce window ({t})"
    return t - BASE_TS if t >= BASE_TS else t


def java_producer(cluster: C.Cluster) -> dict:
    """Delivery reports and read-back of the Java producer under acks 0/1/all, idempotence,
    every codec, headers and a ~1 MB record; consume-transform-produce with
    sendOffsetsToTransaction."""
    d = _driver(cluster)
    out: dict = {}
    topic = cluster.create_topic(1, config={"retention.ms": "-1"}, prefix="differential")
    before = int(time.time() * 1000)
    runs = [("acks0", dict(acks="0")), ("acks1", dict(acks="1")), ("acks_all", dict(acks="all")),
            ("idempotent", dict(idempotent=True)),
            *((f"codec_{c}", dict(codec=c)) for c in ("gzip", "snappy", "lz4", "zstd"))]
    batches = [(kwargs, [Rec(b"%s-%d-" % (label.encode(), i) + b"x" * 100, b"k%d" % i, (("h", b"%d" % i), ("n", None)),
                             partition=0, timestamp=BASE_TS + i * 1000 if i % 2 else None) for i in range(4)])
               for label, kwargs in runs]
    batches.append(({"acks": "all"}, [Rec(b"L" * LARGE, b"large", partition=0)]))
    reports = d.produce_runs(topic, batches)
    after = int(time.time() * 1000)
    for (label, _), run in zip(runs, reports):
        out[f"reports_{label}"] = [[p, o, _ts(t, before, after)] for p, o, t in run]
    out["reports_large"] = [[p, o] for p, o, _ in reports[-1]]
    read = d.fetch(topic, {0: 0}, 4 * len(runs) + 1)
    out["read"] = [[f.offset, len(f.value), f.value[:12].decode(), f.key.decode() if f.key else None,
                    [[k, None if v is None else v.decode()] for k, v in f.headers], _ts(f.timestamp, before, after)]
                   for f in read]
    # batch boundaries depend on the producer's timing (linger), not on the broker: per produce
    # run, the codecs and producer-id presence of the batches holding its records
    label_at = {f.offset: "large" if f.key == b"large" else f.value.split(b"-", 1)[0].decode() for f in read}
    stored: dict = {}
    for h in C.batch_headers(cluster.bootstrap, topic, 0):
        stored.setdefault(label_at.get(h.base_offset, "?"), set()).add((h.codec, h.producer_id >= 0))
    out["batches"] = {label: sorted(map(list, kinds)) for label, kinds in sorted(stored.items())}

    appended = cluster.create_topic(1, config={"message.timestamp.type": "LogAppendTime"}, prefix="differential")
    before = int(time.time() * 1000)
    reports = d.produce(appended, [Rec(b"a%d" % i, partition=0, timestamp=BASE_TS + i) for i in range(3)])
    read_types = d.fetch_timestamp_types(appended, {0: 0}, 3)
    after = int(time.time() * 1000)
    out["log_append_time_reports"] = [[p, o, _ts(t, before, after)] for p, o, t in reports]
    out["log_append_time_read"] = [[f.offset, _ts(f.timestamp, before, after), kind] for f, kind in read_types]
    out["create_time_read_types"] = sorted({kind for _, kind in d.fetch_timestamp_types(topic, {0: 0}, 2)})

    source = cluster.create_topic(2, prefix="differential")
    sink = cluster.create_topic(2, prefix="differential")
    group = f"differential-{uuid.uuid4().hex[:8]}"
    helpers.produce(cluster.bootstrap, source, [{"value": b"s%d" % i, "partition": i % 2} for i in range(6)])
    copied = d.consume_transform_produce(source, group, sink, 6)
    out["ctp_read"] = sorted([f.partition, f.offset, f.value.decode()] for f in copied)
    out["ctp_sink_committed"] = sorted([m.partition(), m.value().decode()]
                                       for m in helpers.consume_all(cluster.bootstrap, sink, "read_committed"))
    out["ctp_group_offsets"] = {str(p): o for p, o in
                                sorted(helpers.committed_offsets(cluster.bootstrap, group, source, 2).items())}
    return out


ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")


def java_assignors(cluster: C.Cluster) -> dict:
    """Two Java members per assignor on a 5-partition topic: the assignment shapes once
    stable, and DescribeGroups (state, assignor) as the Java admin client reports it."""
    d = _driver(cluster)
    topic = cluster.create_topic(5, prefix="differential")
    groups = {a: f"differential-{a}-{uuid.uuid4().hex[:8]}" for a in ASSIGNORS}
    out: dict = {}
    with contextlib.ExitStack() as stack:
        members = {a: [stack.enter_context(d.group_member(topic, groups[a], a)) for _ in range(2)] for a in ASSIGNORS}

        def settled() -> bool:
            for ms in members.values():
                owned = [m.assignment() for m in ms]
                if not all(owned) or set().union(*owned) != set(range(5)) or sum(map(len, owned)) != 5:
                    return False
            return True

        wait_until(settled, "every group of 2 Java members to own the 5 partitions once", timeout_s=60)
        for a, ms in members.items():
            shapes = sorted(sorted(m.assignment()) for m in ms)
            # cooperative-sticky keeps what a member owned: which partitions move depends on
            # which member joined first, only the balance is the assignor's rule
            out[f"{a}.shapes"] = sorted(map(len, shapes)) if a == "cooperative-sticky" else shapes
        deadline = time.monotonic() + WAIT_S
        while True:  # the group is Stable once every member's SyncGroup is answered
            described = d.admin([{"op": "describe_groups", "groups": list(groups.values())}])[0]
            if all(str(g.get("state")).lower() == "stable" for g in described.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for a in ASSIGNORS:
            g = described[groups[a]]
            shapes = sorted(sorted(map(int, filter(None, p.split(",")))) for _, p in g["members"])
            out[f"{a}.described"] = {"state": g["state"], "type": g["type"], "assignor": g["assignor"],
                                     "simple": g["simple"], "same_as_members": shapes == sorted(
                                         sorted(m.assignment()) for m in members[a])}
        for ms in members.values():  # all leave at once (each waits for its LeaveGroup)
            for m in ms:
                m.proc.stdin.close()
    return out


CONFIG_KEYS = ["retention.ms", "cleanup.policy", "segment.bytes", "compression.type", "max.message.bytes"]
"""Topic configs described (min.insync.replicas is left out: the Apache Kafka harness sets it as a
dynamic broker default, so its source differs by set-up, not by broker)."""
CENTURY_MS = 100 * 365 * 86_400_000
"""retention.ms set by the alter: long enough that no retention check races the observation
(the records' 2023 timestamps are older than a day)."""


def _labelled(d, ops: list[tuple[str, dict]]) -> dict:
    """``{label: result}`` of one admin script (labels keep the comparison field by field)."""
    return dict(zip([label for label, _ in ops], d.admin([op for _, op in ops])))


def java_admin(cluster: C.Cluster) -> dict:
    """The Java admin client's answers to one script of operations on a topic with data, a
    group with committed offsets and an open transaction (see the module docstring)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    d = _driver(cluster)
    topic = f"differential-{uuid.uuid4().hex[:12]}"
    group = f"differential-{uuid.uuid4().hex[:8]}"
    txn_id = f"differential-{uuid.uuid4().hex[:8]}"
    missing = f"differential-missing-{uuid.uuid4().hex[:8]}"
    names = {topic: "T", group: "G", txn_id: "X", missing: "M"}

    first = _labelled(d, [
        ("create", {"op": "create_topic", "topic": topic, "partitions": 2,
                    # segment.ms: the 2023 timestamps are older than the default 7 days, so the
                    # next append would roll the segment, and once cleanup.policy gains compact the
                    # log cleaner (every 15 s) could drop the old segment's null-key records between
                    # two observations, on either broker: a race, not a difference
                    "configs": {"retention.ms": "-1", "segment.bytes": "1048576",
                                "segment.ms": str(CENTURY_MS)}}),
        ("create_existing", {"op": "create_topic", "topic": topic, "partitions": 2}),
        ("create_invalid_config", {"op": "create_topic", "topic": missing, "partitions": 1,
                                   "configs": {"cleanup.policy": "bogus"}}),
        ("create_replication_too_large", {"op": "create_topic", "topic": missing, "partitions": 1,
                                          "replication_factor": 5}),
    ])
    _wait_for_leaders(cluster.bootstrap, topic, 2)
    helpers.produce(cluster.bootstrap, topic, [{"value": b"v%d" % i, "partition": i % 2,
                                                "timestamp": BASE_TS + i * 1000} for i in range(10)])
    # a group with committed offsets and no member (Empty), as a manual-assign consumer leaves it
    committer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 5)], asynchronous=False)
    committer.close()
    # an open transaction on partition 1
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(WAIT_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=1)
    assert producer.flush(WAIT_S) == 0

    both = [0, 1]
    lo = {"op": "list_offsets", "topic": topic, "partitions": both}
    second = _labelled(d, [
        ("describe_topic", {"op": "describe_topic", "topic": topic}),
        ("create_partitions_3", {"op": "create_partitions", "topic": topic, "total": 3}),
        ("create_partitions_2", {"op": "create_partitions", "topic": topic, "total": 2}),
        ("describe_topic_3", {"op": "describe_topic", "topic": topic}),
        ("describe_topic_missing", {"op": "describe_topic", "topic": missing}),
        ("describe_configs", {"op": "describe_configs", "topic": topic, "keys": CONFIG_KEYS}),
        ("alter_configs", {"op": "alter_configs", "topic": topic, "ops": [
            ["retention.ms", str(CENTURY_MS), "SET"], ["segment.bytes", None, "DELETE"],
            ["cleanup.policy", "compact", "APPEND"]]}),
        ("describe_configs_altered", {"op": "describe_configs", "topic": topic, "keys": CONFIG_KEYS}),
        ("alter_invalid_value", {"op": "alter_configs", "topic": topic, "ops": [["cleanup.policy", "bogus", "SET"]]}),
        ("alter_unknown_config", {"op": "alter_configs", "topic": topic, "ops": [["no.such.config", "1", "SET"]]}),
        ("alter_missing_topic", {"op": "alter_configs", "topic": missing, "ops": [["retention.ms", "1", "SET"]]}),
        ("offsets_earliest", {**lo, "spec": "earliest"}),
        ("offsets_latest", {**lo, "spec": "latest"}),
        ("offsets_latest_committed", {**lo, "spec": "latest", "isolation": "READ_COMMITTED"}),
        ("offsets_max_timestamp", {**lo, "spec": "max_timestamp"}),
        ("offsets_by_timestamp", {**lo, "spec": str(BASE_TS + 4500)}),
        ("offsets_after_last_timestamp", {**lo, "spec": str(BASE_TS + 99_000)}),
        ("offsets_missing_topic", {"op": "list_offsets", "topic": missing, "partitions": [0], "spec": "latest"}),
        ("delete_records", {"op": "delete_records", "topic": topic, "before": {"0": 2}}),
        ("delete_records_beyond_hw", {"op": "delete_records", "topic": topic, "before": {"0": 100}}),
        ("offsets_earliest_after_delete", {**lo, "spec": "earliest"}),
        ("list_groups", {"op": "list_groups", "groups": [group, missing]}),
        ("describe_group", {"op": "describe_groups", "groups": [group]}),
        ("describe_missing_group", {"op": "describe_groups", "groups": [missing]}),
        ("group_offsets", {"op": "list_group_offsets", "group": group}),
        ("group_offsets_missing_group", {"op": "list_group_offsets", "group": missing}),
        ("describe_cluster", {"op": "describe_cluster"}),
        ("log_dirs", {"op": "describe_log_dirs", "topic": topic}),
        ("producers_open_txn", {"op": "describe_producers", "topic": topic, "partitions": both}),
        ("list_transactions_open", {"op": "list_transactions", "ids": [txn_id]}),
        ("describe_transaction_open", {"op": "describe_transactions", "ids": [txn_id]}),
    ])
    producer.commit_transaction(WAIT_S)
    def committed() -> bool:
        state = d.admin([{"op": "describe_transactions", "ids": [txn_id]}])[0].get(txn_id, {}).get("state")
        return str(state).replace("_", "").lower() == "completecommit"

    wait_until(committed, "the transaction to complete its commit", every_s=0.5)
    third = _labelled(d, [
        ("describe_transaction", {"op": "describe_transactions", "ids": [txn_id]}),
        ("list_transactions", {"op": "list_transactions", "ids": [txn_id]}),
        ("producers", {"op": "describe_producers", "topic": topic, "partitions": [1]}),
        ("delete_groups", {"op": "delete_groups", "groups": [group, missing]}),
        ("list_groups_deleted", {"op": "list_groups", "groups": [group]}),
        ("delete_topic", {"op": "delete_topic", "topic": topic}),
        ("delete_topic_again", {"op": "delete_topic", "topic": topic}),
    ])
    before = int(time.time() * 1000) - 120_000  # wall clock (the open transaction's record): "now"
    for label, listed in second.items():
        if label.startswith("offsets_") and "error" not in listed:
            second[label] = {p: [o, _ts(t, before, int(time.time() * 1000))] for p, (o, t) in listed.items()}
    return _rename({"setup": first, "ops": second, "after_commit": third}, names)


OBSERVATIONS = {"java_producer": java_producer, "java_assignors": java_assignors, "java_admin": java_admin}
"""The Java client observations by name (the differential test runs each on both brokers)."""
