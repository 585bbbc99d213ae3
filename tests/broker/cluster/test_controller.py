"""The controller state machine on the single-voter metadata log, in-process (no sockets): registration and
broker epochs, fencing and elections from the ISR, unclean election, AlterPartition epochs, replay after a
restart; Kafka's rack-unaware replica assignment; the leader-epoch cache."""

from __future__ import annotations

import asyncio

import pytest

from pyspark_kafka.broker.cluster.leader_epoch import LeaderEpochCache
from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.controller.assignment import assign_replicas
from pyspark_kafka.broker.controller.single_voter_log import SingleVoterMetadataLog
from pyspark_kafka.broker.controller.quorum_controller import QuorumController
from pyspark_kafka.broker.errors import ErrorCode, InvalidReplicationFactorError, NotControllerError


# --- replica assignment (Kafka's AdminUtils.assignReplicasToBrokersRackUnaware) ------------------

def test_assignment_matches_kafkas_documented_example():
    # AdminUtils' comment: 5 brokers, 10 partitions, RF 3, start 0, shift 0
    expected = [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1],
                [0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2]]
    assert assign_replicas([0, 1, 2, 3, 4], 10, 3, start=0, shift=0) == expected


@pytest.mark.parametrize("brokers,partitions,rf,start", [([0, 1, 2], 6, 3, 1), ([5, 7], 3, 2, 0), ([3], 4, 1, 0)])
def test_assignment_spreads_leaders_and_never_repeats_a_broker(brokers, partitions, rf, start):
    out = assign_replicas(brokers, partitions, rf, start=start)
    assert all(len(set(r)) == rf and set(r) <= set(brokers) for r in out)
    assert [r[0] for r in out] == [sorted(brokers)[(start + p) % len(brokers)] for p in range(partitions)]


def test_assignment_refuses_a_factor_above_the_broker_count():
    with pytest.raises(InvalidReplicationFactorError, match="only 2 broker"):
        assign_replicas([0, 1], 1, 3)


# --- leader-epoch cache ---------------------------------------------------------------------------

def test_leader_epoch_cache_end_offsets_and_truncation(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    cache.assign(0, 0)
    cache.assign(2, 10)
    cache.assign(1, 5)  # older than the latest: ignored
    assert cache.entries == [(0, 0), (2, 10)]
    assert cache.end_offset_for(0, 25) == (0, 10)
    assert cache.end_offset_for(1, 25) == (0, 10)  # the largest epoch <= 1 is 0
    assert cache.end_offset_for(2, 25) == (2, 25)
    assert cache.end_offset_for(-1, 25) == (-1, -1)
    assert cache.end_offset_for(3, 25) == (-1, -1)  # newer than every known epoch: undefined (Kafka's endOffsetFor)
    later = LeaderEpochCache(tmp_path / "later")
    later.path.parent.mkdir()
    later.assign(4, 7)
    assert later.end_offset_for(3, 25) == (3, 7)  # older than every known epoch: ends where the first one starts
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n2 10\n"  # Kafka's file format
    cache.truncate_from_end(10)
    assert LeaderEpochCache(tmp_path).entries == [(0, 0)]  # durable


# --- the controller ----------------------------------------------------------------------------

def run(coro):
    return asyncio.run(coro)


async def _controller(tmp_path, **config):
    log = SingleVoterMetadataLog(3000, tmp_path, 3000)
    await log.start()
    controller = QuorumController(log, BrokerConfig({"broker.session.timeout.ms": "100000", **config}))
    return log, controller


async def _live_brokers(controller, ids):
    epochs = {}
    for i in ids:
        answer = await controller.handle({"op": "register", "node_id": i, "host": "127.0.0.1", "port": 9000 + i})
        epochs[i] = answer["broker_epoch"]
    for i in ids:
        answer = await controller.handle({"op": "heartbeat", "node_id": i, "broker_epoch": epochs[i],
                                          "want_fence": False, "caught_up_offset": controller.image.offset})
        assert answer == {"error_code": 0, "is_fenced": False}
    return epochs


def test_fencing_the_leader_elects_the_next_isr_member_at_a_new_leader_epoch(tmp_path):
    async def scenario():
        log, c = await _controller(tmp_path)
        epochs = await _live_brokers(c, [0, 1, 2])
        answer = await c.handle({"op": "create_topics", "topics": [{"name": "t", "partitions": 3,
                                                                     "replication_factor": 3}]})
        assert answer["topics"][0]["error_code"] == 0
        st = c.image.partition("t", 0)
        assert set(st.replicas) == {0, 1, 2} and st.isr == st.replicas and st.leader == st.replicas[0]
        old = st.leader
        await c.handle({"op": "shutdown", "node_id": old, "broker_epoch": epochs[old]})
        st2 = c.image.partition("t", 0)
        assert st2.leader == st.replicas[1] and st2.leader_epoch == st.leader_epoch + 1
        assert old not in st2.isr and st2.partition_epoch == st.partition_epoch + 1
        # a stale broker epoch is refused (STALE_BROKER_EPOCH)
        stale = await c.handle({"op": "heartbeat", "node_id": old, "broker_epoch": epochs[old] - 1})
        assert stale["error_code"] == ErrorCode.stale_broker_epoch
        await log.stop()
    run(scenario())


def test_last_isr_member_fenced_leaves_the_partition_offline_without_unclean_election(tmp_path):
    async def scenario():
        log, c = await _controller(tmp_path)
        epochs = await _live_brokers(c, [0, 1])
        await c.handle({"op": "create_topics", "topics": [{"name": "t", "partitions": 1, "replication_factor": 2}]})
        st = c.image.partition("t", 0)
        leader, follower = st.replicas
        # the leader shrinks the ISR to itself (AlterPartition), then dies
        answer = await c.handle({"op": "alter_partition", "node_id": leader, "broker_epoch": epochs[leader],
                                 "topic": "t", "partition": 0, "leader_epoch": st.leader_epoch,
                                 "partition_epoch": st.partition_epoch, "isr": [leader]})
        assert answer["error_code"] == 0 and c.image.partition("t", 0).isr == (leader,)
        await c.handle({"op": "shutdown", "node_id": leader, "broker_epoch": epochs[leader]})
        st2 = c.image.partition("t", 0)
        assert st2.leader == -1 and st2.isr == (leader,)  # Kafka keeps the last ISR member
        # the old leader comes back: it is in the ISR, so it leads again
        new_epoch = (await c.handle({"op": "register", "node_id": leader, "host": "h", "port": 1}))["broker_epoch"]
        await c.handle({"op": "heartbeat", "node_id": leader, "broker_epoch": new_epoch, "want_fence": False,
                        "caught_up_offset": c.image.offset})
        st3 = c.image.partition("t", 0)
        assert st3.leader == leader and st3.leader_epoch == st2.leader_epoch + 1
        await log.stop()
    run(scenario())


def test_unclean_election_picks_a_live_replica_outside_the_isr_and_logs_the_loss(tmp_path, caplog):
    async def scenario():
        log, c = await _controller(tmp_path, **{"unclean.leader.election.enable": "true"})
        epochs = await _live_brokers(c, [0, 1])
        await c.handle({"op": "create_topics", "topics": [{"name": "t", "partitions": 1, "replication_factor": 2}]})
        st = c.image.partition("t", 0)
        leader, follower = st.replicas
        await c.handle({"op": "alter_partition", "node_id": leader, "broker_epoch": epochs[leader], "topic": "t",
                        "partition": 0, "leader_epoch": st.leader_epoch, "partition_epoch": st.partition_epoch,
                        "isr": [leader]})
        await c.handle({"op": "shutdown", "node_id": leader, "broker_epoch": epochs[leader]})
        st2 = c.image.partition("t", 0)
        assert st2.leader == follower and st2.isr == (follower,)
        await log.stop()
    with caplog.at_level("WARNING", logger="pyspark_kafka.controller"):
        run(scenario())
    assert "unclean leader election" in caplog.text and "lost" in caplog.text


def test_alter_partition_with_stale_epochs_is_refused(tmp_path):
    async def scenario():
        log, c = await _controller(tmp_path)
        epochs = await _live_brokers(c, [0, 1, 2])
        await c.handle({"op": "create_topics", "topics": [{"name": "t", "partitions": 1, "replication_factor": 3}]})
        st = c.image.partition("t", 0)
        base = {"op": "alter_partition", "node_id": st.leader, "broker_epoch": epochs[st.leader], "topic": "t",
                "partition": 0, "isr": [st.leader]}
        stale_leader = await c.handle({**base, "leader_epoch": st.leader_epoch - 1,
                                       "partition_epoch": st.partition_epoch})
        assert stale_leader["error_code"] == ErrorCode.fenced_leader_epoch
        stale_version = await c.handle({**base, "leader_epoch": st.leader_epoch,
                                        "partition_epoch": st.partition_epoch + 5})
        assert stale_version["error_code"] == ErrorCode.invalid_update_version
        assert c.image.partition("t", 0) == st  # nothing changed
        await log.stop()
    run(scenario())


def test_alter_partition_that_changes_nothing_writes_no_record(tmp_path):
    """Issue 28 item 1: a fenced replica asked into the ISR is INELIGIBLE_REPLICA (Kafka's 107) and an ISR equal to
    the current one is answered without a record: the metadata log never grows without a change."""
    async def scenario():
        log, c = await _controller(tmp_path)
        epochs = await _live_brokers(c, [0, 1, 2])
        await c.handle({"op": "create_topics", "topics": [{"name": "t", "partitions": 1, "replication_factor": 3}]})
        st = c.image.partition("t", 0)
        leader, f1, f2 = st.replicas
        base = {"op": "alter_partition", "node_id": leader, "broker_epoch": epochs[leader], "topic": "t",
                "partition": 0, "leader_epoch": st.leader_epoch}
        assert (await c.handle({**base, "partition_epoch": st.partition_epoch, "isr": [leader]}))["error_code"] == 0
        await c.handle({"op": "shutdown", "node_id": f1, "broker_epoch": epochs[f1]})  # f1 fenced
        st = c.image.partition("t", 0)
        before = c.image.offset
        answer = await c.handle({**base, "partition_epoch": st.partition_epoch, "isr": [leader, f1]})
        assert answer["error_code"] == ErrorCode.ineligible_replica and "fenced" in answer["error_message"]
        same = await c.handle({**base, "partition_epoch": st.partition_epoch, "isr": [leader]})
        assert same["error_code"] == 0 and same["state"]["partition_epoch"] == st.partition_epoch
        foreign = await c.handle({**base, "partition_epoch": st.partition_epoch, "isr": [leader, 7]})
        assert foreign["error_code"] == ErrorCode.invalid_request
        assert c.image.offset == before and c.image.partition("t", 0) == st  # no record written
        ok = await c.handle({**base, "partition_epoch": st.partition_epoch, "isr": [leader, f2]})  # a live one
        assert ok["error_code"] == 0 and c.image.partition("t", 0).isr == tuple(r for r in st.replicas
                                                                                 if r in (leader, f2))
        assert c.image.offset == before + 1
        await log.stop()
    run(scenario())


def test_topics_over_the_live_broker_count_and_duplicates_are_refused_with_kafkas_codes(tmp_path):
    async def scenario():
        log, c = await _controller(tmp_path, **{"default.replication.factor": "2"})
        await _live_brokers(c, [0, 1])
        answer = await c.handle({"op": "create_topics", "topics": [
            {"name": "big", "partitions": 1, "replication_factor": 3}, {"name": "dflt"}, {"name": "dflt"}]})
        codes = [t["error_code"] for t in answer["topics"]]
        assert codes == [ErrorCode.invalid_replication_factor, 0, ErrorCode.topic_already_exists]
        internal = await c.handle({"op": "create_topics", "topics": [{"name": "__consumer_offsets"}]})
        assert internal["topics"][0]["error_code"] == ErrorCode.invalid_request
        assert len(c.image.partition("dflt", 0).replicas) == 2  # default.replication.factor
        await log.stop()
    run(scenario())


def test_more_than_10000_partitions_in_one_request_are_refused_and_nothing_is_written(tmp_path):
    """Kafka's controller: over 10,000 partitions in one CreateTopics request is POLICY_VIOLATION for every topic
    ("Excessively large number of partitions per request."); a 2^31-partition request must not be tried."""
    async def scenario():
        log, c = await _controller(tmp_path)
        await _live_brokers(c, [0])
        before = c.image.offset
        answer = await c.handle({"op": "create_topics", "topics": [
            {"name": "a", "partitions": 6000, "replication_factor": 1},
            {"name": "b", "partitions": 4001, "replication_factor": 1}]})
        assert [t["error_code"] for t in answer["topics"]] == [ErrorCode.policy_violation] * 2
        assert answer["topics"][0]["error_message"] == "Excessively large number of partitions per request."
        huge = await c.handle({"op": "create_topics", "topics": [{"name": "h", "partitions": 2**31 - 1,
                                                                  "replication_factor": 1}]})
        assert huge["topics"][0]["error_code"] == ErrorCode.policy_violation
        assert c.image.offset == before and "a" not in c.image.topics and "h" not in c.image.topics
        ok = await c.handle({"op": "create_topics", "topics": [{"name": "a", "partitions": 3, "replication_factor": 1}]})
        assert ok["topics"][0]["error_code"] == 0
        await log.stop()
    run(scenario())


def test_the_metadata_log_is_durable_and_replayed(tmp_path):
    async def first():
        log, c = await _controller(tmp_path)
        await _live_brokers(c, [0, 1, 2])
        await c.handle({"op": "create_topics", "topics": [{"name": "t", "partitions": 2, "replication_factor": 3}]})
        await log.stop()
        return {p: s for p, s in c.image.topics["t"].partitions.items()}, c.image.offset

    async def second():
        log, c = await _controller(tmp_path)
        await log.stop()
        return {p: s for p, s in c.image.topics["t"].partitions.items()}, c.image.offset

    before = run(first())
    # a torn tail (a crash in the middle of an append) is cut on load
    with open(tmp_path / "__cluster_metadata-0" / "metadata.log", "ab") as f:
        f.write(b"\x00\x00\x00\x40garbage")
    assert run(second()) == before


def test_an_observer_cannot_append(tmp_path):
    async def scenario():
        observer = SingleVoterMetadataLog(0, None, 3000, ("127.0.0.1", 1))
        with pytest.raises(NotControllerError):
            await observer.append([b"{}"])
    run(scenario())
