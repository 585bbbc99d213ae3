"""The controller quorum in process: voters and observers of one asyncio loop on real 127.0.0.1 sockets.

Elections (one leader per epoch, a higher epoch after the leader stops), majority commit, the
divergent uncommitted tail a returning leader truncates, replay after a restart, observers, the
1-voter quorum and the Raft APIs on the wire (DescribeQuorum, fenced fetches, malformed frames).
"""

from __future__ import annotations

import asyncio
import json
import struct

import pytest
from kio.schema.describe_quorum.v1 import request as dq
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.vote.v0 import request as vote_v0

from pyspark_kafka.broker.errors import ErrorCode, NotControllerError
from pyspark_kafka.broker.raft import QuorumConfigError, RaftMetadataLog, Role, parse_voters
from pyspark_kafka.broker.raft.storage import METADATA_TOPIC
from pyspark_kafka.broker.raft.transport import RaftChannel

from support.raft import Quorum

pytestmark = pytest.mark.timeout(120)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


def values(seen) -> list[bytes]:
    return [record for _, record in seen]


def test_three_voters_elect_exactly_one_leader_and_commit_on_every_node(tmp_path):
    async def scenario():
        q = Quorum(tmp_path, 3)
        await q.start()
        try:
            leader = await q.wait_leader()
            assert [n.node_id for n in q.leaders()] == [leader.node_id]
            last = await leader.append([b"r1", b"r2"])
            last = await leader.append([b"r3"])
            assert leader.committed_offset() == last + 1
            await q.wait_committed(last + 1, q.ids)
            for i in q.ids:
                assert values(q.seen[i]) == [b"r1", b"r2", b"r3"]
                assert [o for o, _ in q.seen[i]] == [1, 2, 3]  # offset 0: the LeaderChangeMessage control batch
            state = json.loads((tmp_path / f"node-{leader.node_id}" / "__cluster_metadata-0" / "quorum-state").read_text())
            assert state["leaderEpoch"] == leader.epoch and state["leaderId"] == leader.node_id
            assert state["votedId"] == leader.node_id and state["data_version"] == 0
            assert [v["voterId"] for v in state["currentVoters"]] == [0, 1, 2]
            follower = next(n for n in q.nodes.values() if n is not leader)
            with pytest.raises(NotControllerError, match="not the controller quorum's leader"):
                await follower.append([b"x"])
            assert NotControllerError.error_code == 41
        finally:
            await q.stop()

    run(scenario())


def test_append_needs_a_majority(tmp_path):
    async def scenario():
        q = Quorum(tmp_path, 3)
        await q.start()
        try:
            leader = await q.wait_leader()
            a, b = [i for i in q.ids if i != leader.node_id]
            await q.stop(a)
            await leader.append([b"two of three"])  # leader + one follower: a majority
            await q.stop(b)
            pending = asyncio.ensure_future(leader.append([b"one of three"]))
            done, _ = await asyncio.wait([pending], timeout=0.4)
            assert not done, "a record was committed by the leader alone"
            await q.start(b)
            # b comes back in time (before check-quorum): the record commits; or the leader resigned
            # and the record is kept by the next leader's log: either way it is never lost once acknowledged.
            try:
                offset = await asyncio.wait_for(pending, 10)
                await q.wait_committed(offset + 1, [leader.node_id, b])
                assert values(q.seen[b])[-1] == b"one of three"
            except NotControllerError:
                pass
        finally:
            await q.stop()

    run(scenario())


def test_leader_stop_elects_a_higher_epoch_and_loses_no_committed_record(tmp_path):
    # Kafka's default timeouts: without EndQuorumEpoch the followers would wait out the 2000 ms fetch timeout.
    kafka_defaults = {"controller.quorum.election.timeout.ms": "1000", "controller.quorum.fetch.timeout.ms": "2000",
                      "controller.quorum.election.backoff.max.ms": "1000", "controller.quorum.request.timeout.ms": "2000"}

    async def scenario():
        q = Quorum(tmp_path, 3, overrides=kafka_defaults)
        await q.start()
        await q.wait_leader(timeout_s=20)  # the first election waits 1-2 s (election timeout)
        leaders_by_epoch: dict[int, set[int]] = {}
        try:
            committed = []
            for round_no in range(3):
                leader = await q.wait_leader(above_epoch=max(leaders_by_epoch, default=-1))
                leaders_by_epoch.setdefault(leader.epoch, set()).add(leader.node_id)
                for n in q.nodes.values():
                    if n.role is Role.LEADER:
                        leaders_by_epoch.setdefault(n.epoch, set()).add(n.node_id)
                record = f"round {round_no}".encode()
                await leader.append([record])
                committed.append(record)
                loop = asyncio.get_running_loop()
                t0 = loop.time()
                old = leader.node_id
                await q.stop(old)  # graceful: EndQuorumEpoch, the others elect at once
                new = await q.wait_leader(above_epoch=leader.epoch)
                # Measured 26-108 ms. Without EndQuorumEpoch the followers wait for the 2 s fetch timeout since
                # their last fetch (long polls of at most 500 ms): at least 1.5 s (about 4 s measured).
                assert loop.time() - t0 < 1.2, "a graceful resign (EndQuorumEpoch) elects without the fetch timeout"
                assert new.epoch > leader.epoch
                assert values(q.seen[new.node_id])[: len(committed)] == committed
                await q.start(old)
            leader = await q.wait_leader(above_epoch=max(leaders_by_epoch))
            last = await leader.append([b"end"])
            committed.append(b"end")
            await q.wait_committed(last + 1, q.ids)
            for i in q.ids:
                assert values(q.seen[i]) == committed, i
            assert all(len(ids) == 1 for ids in leaders_by_epoch.values()), leaders_by_epoch
        finally:
            await q.stop()

    run(scenario())


def test_a_divergent_uncommitted_tail_is_truncated(tmp_path):
    async def scenario():
        q = Quorum(tmp_path, 3)
        await q.start()
        try:
            leader = await q.wait_leader()
            old, old_epoch = leader.node_id, leader.epoch
            await leader.append([b"committed"])
            others = [i for i in q.ids if i != old]
            await q.wait_committed(leader.committed_offset(), others)
            await q.stop(*others)
            stale = asyncio.ensure_future(leader.append([b"uncommitted-1", b"uncommitted-2"]))
            await asyncio.sleep(0)
            tail_end = leader.storage.end_offset
            await q.stop(old)
            with pytest.raises(NotControllerError):
                await stale
            await q.start(*others)
            new = await q.wait_leader(above_epoch=old_epoch)
            last = await new.append([b"after"])
            await q.start(old)
            await q.wait_committed(last + 1, q.ids)
            node = q.nodes[old]
            assert values(q.seen[old]) == [b"committed", b"after"]
            assert node.storage.end_offset == q.nodes[new.node_id].storage.end_offset
            assert b"uncommitted-1" not in [r for _, r in node.storage.records(0, node.storage.end_offset)]
            assert tail_end > 0
            epochs = [e.epoch for e in node.storage.epochs]
            assert epochs == [e.epoch for e in q.nodes[new.node_id].storage.epochs]
            checkpoint = (tmp_path / f"node-{old}" / "__cluster_metadata-0" / "leader-epoch-checkpoint").read_text()
            assert checkpoint.splitlines()[:2] == ["0", str(len(epochs))]
        finally:
            await q.stop()

    run(scenario())


def test_restart_replays_the_committed_log(tmp_path):
    async def scenario():
        q = Quorum(tmp_path, 3)
        await q.start()
        try:
            leader = await q.wait_leader()
            for i in range(5):
                await leader.append([f"m{i}".encode()])
            before = {i: list(q.seen[i]) for i in q.ids}
            await q.stop()
            await q.start()
            leader = await q.wait_leader()
            last = await leader.append([b"after restart"])
            await q.wait_committed(last + 1, q.ids)
            for i in q.ids:
                assert q.seen[i][: len(before[leader.node_id])] == before[leader.node_id]
                assert values(q.seen[i]) == [f"m{i}".encode() for i in range(5)] + [b"after restart"]
        finally:
            await q.stop()

    run(scenario())


def test_an_observer_follows_without_voting_and_a_listener_builds_state(tmp_path):
    async def scenario():
        q = Quorum(tmp_path, 3, observers=1)
        await q.start()
        try:
            observer = q.nodes[3]
            assert not observer.is_voter() and all(q.nodes[i].is_voter() for i in range(3))
            topics: dict[str, dict] = {}  # the shape of a controller's state machine: a dict from JSON records

            def apply(offset: int, record: bytes) -> None:
                change = json.loads(record)
                if change["type"] == "topic":
                    topics[change["name"]] = {"partitions": change["partitions"], "offset": offset}
                elif change["type"] == "delete":
                    topics.pop(change["name"], None)

            observer.subscribe(apply)
            leader = await q.wait_leader()
            await leader.append([json.dumps({"type": "topic", "name": "a", "partitions": 3}).encode()])
            await leader.append([json.dumps({"type": "topic", "name": "b", "partitions": 1}).encode(),
                                 json.dumps({"type": "delete", "name": "a"}).encode()])
            await q.wait_committed(leader.committed_offset(), [3])
            assert topics == {"b": {"partitions": 1, "offset": 2}}
            assert values(q.seen[3]) == values(q.seen[leader.node_id])
            old_epoch = leader.epoch
            await q.stop(leader.node_id)
            new = await q.wait_leader(above_epoch=old_epoch)
            assert new.node_id != 3 and observer.role is not Role.CANDIDATE and observer.voted_id == -1
            last = await new.append([json.dumps({"type": "topic", "name": "c", "partitions": 2}).encode()])
            await q.wait_committed(last + 1, [3])
            assert sorted(topics) == ["b", "c"]
        finally:
            await q.stop()

    run(scenario())


def test_a_single_voter_quorum_commits_alone_and_replays_after_restart(tmp_path):
    async def scenario():
        q = Quorum(tmp_path, 1)
        await q.start()
        try:
            leader = await q.wait_leader(timeout_s=5)
            first_epoch = leader.epoch
            assert await leader.append([b"solo"]) == 1
            await q.stop()
            await q.start()
            leader = await q.wait_leader(timeout_s=5)
            assert leader.epoch == first_epoch + 1
            assert values(q.seen[0]) == [b"solo"]
            await leader.append([b"again"])
            assert values(q.seen[0]) == [b"solo", b"again"]
        finally:
            await q.stop()

    run(scenario())


def _partition_of(response):
    topics = getattr(response, "topics", None) or response.responses
    return topics[0].partitions[0]


def test_raft_apis_on_the_wire_describe_quorum_fenced_fetch_and_malformed_frames(tmp_path):
    async def scenario():
        q = Quorum(tmp_path, 3, observers=1)
        await q.start()
        try:
            leader = await q.wait_leader()
            last = await leader.append([b"x"])
            await q.wait_committed(last + 1, q.ids)
            voters = parse_voters(q.voters)
            request = dq.DescribeQuorumRequest(topics=(dq.TopicData(topic_name=METADATA_TOPIC, partitions=(
                dq.PartitionData(partition_index=0),)),))
            channel = RaftChannel(*voters[leader.node_id], "test")
            p = _partition_of(await channel.request(request, 5))
            assert p.error_code == ErrorCode.none and p.leader_id == leader.node_id and p.leader_epoch == leader.epoch
            assert p.high_watermark == last + 1
            assert sorted(v.replica_id for v in p.current_voters) == [0, 1, 2]
            assert all(v.log_end_offset == last + 1 for v in p.current_voters)
            assert [o.replica_id for o in p.observers] == [3]
            follower = next(i for i in range(3) if i != leader.node_id)
            other = RaftChannel(*voters[follower], "test")
            p = _partition_of(await other.request(request, 5))
            assert p.error_code == ErrorCode.not_leader_or_follower and p.leader_id == leader.node_id

            def fetch(epoch, topic=METADATA_TOPIC):
                return fetch_v12.FetchRequest(replica_id=-1, max_wait=__import__("datetime").timedelta(0), min_bytes=1,
                                              topics=(fetch_v12.FetchTopic(topic=topic, partitions=(
                                                  fetch_v12.FetchPartition(partition=0, current_leader_epoch=epoch,
                                                                           fetch_offset=0, partition_max_bytes=1 << 20),)),),
                                              forgotten_topics_data=())

            p = _partition_of(await channel.request(fetch(leader.epoch - 1), 5))
            assert p.error_code == ErrorCode.fenced_leader_epoch
            assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (leader.node_id, leader.epoch)
            assert _partition_of(await channel.request(fetch(leader.epoch + 1), 5)).error_code == \
                ErrorCode.unknown_leader_epoch
            assert _partition_of(await channel.request(fetch(-1, "other"), 5)).error_code == \
                ErrorCode.unknown_topic_or_partition
            p = _partition_of(await other.request(fetch(leader.epoch), 5))
            assert p.error_code == ErrorCode.not_leader_or_follower and p.current_leader.leader_id == leader.node_id
            vote = vote_v0.VoteRequest(topics=(vote_v0.TopicData(topic_name=METADATA_TOPIC, partitions=(
                vote_v0.PartitionData(partition_index=0, replica_epoch=leader.epoch + 5, replica_id=3,
                                      last_offset_epoch=99, last_offset=99),)),))
            p = _partition_of(await other.request(vote, 5))
            assert p.error_code == ErrorCode.inconsistent_voter_set and not p.vote_granted  # 3 is an observer
            assert q.nodes[follower].epoch == leader.epoch  # and its vote request changed nothing
            from kio.schema.describe_cluster.v1 import request as dc
            answer = await other.request(dc.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                                   endpoint_type=2), 5)
            assert answer.error_code == ErrorCode.none and answer.controller_id == leader.node_id
            assert [(b.broker_id, b.port) for b in answer.brokers] == [(v, voters[v][1]) for v in range(3)]
            answer = await other.request(dc.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                                   endpoint_type=1), 5)
            assert answer.error_code == ErrorCode.mismatched_endpoint_type and not answer.brokers
            channel.close()
            other.close()

            host, port = voters[follower]
            garbage = [
                struct.pack(">i", 4) + b"\x00\x34\x00\x00",  # shorter than a request header
                struct.pack(">i", 20) + struct.pack(">hhi", 52, 0, 7) + b"\x00\x01x" + b"\xff\xff\xff\x7f" * 2 + b"\x00",
                struct.pack(">i", 12) + struct.pack(">hhi", 99, 0, 7) + b"\x00\x00\x00\x00",  # unknown api key
                struct.pack(">i", -5),
            ]
            for frame in garbage:
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(frame)
                await writer.drain()
                assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, no answer
                writer.close()
            last = await leader.append([b"still serving"])
            await q.wait_committed(last + 1, q.ids)
        finally:
            await q.stop()

    run(scenario())


def test_bad_quorum_settings_are_refused_with_the_setting_named(tmp_path):
    with pytest.raises(QuorumConfigError, match="id@host:port"):
        parse_voters("0@127.0.0.1")
    with pytest.raises(QuorumConfigError, match="twice"):
        parse_voters("0@h:1,0@h:2")
    with pytest.raises(QuorumConfigError, match="node.id"):
        RaftMetadataLog(tmp_path, {"controller.quorum.voters": "0@127.0.0.1:1"})
    with pytest.raises(QuorumConfigError, match="controller.quorum.election.timeout.ms"):
        RaftMetadataLog(tmp_path, {"node.id": "0", "controller.quorum.voters": "0@127.0.0.1:1",
                                   "controller.quorum.election.timeout.ms": "soon"})


def test_mutated_raft_frames_never_stop_the_quorum(tmp_path):
    """Fuzz: 200 valid Raft requests with 1-4 random bytes changed, each on its own connection to a voter.
    Every one is answered or closed within the bound; afterwards the quorum elects and commits as before."""
    import datetime
    import random

    from kio.schema.begin_quorum_epoch.v0 import request as bqe
    from kio.schema.end_quorum_epoch.v0 import request as eqe

    from pyspark_kafka.broker.raft.transport import encode_request

    async def scenario():
        q = Quorum(tmp_path, 3)
        await q.start()
        try:
            leader = await q.wait_leader()
            await leader.append([b"before"])
            voters = parse_voters(q.voters)
            part = dict(partition_index=0)
            requests = [
                vote_v0.VoteRequest(topics=(vote_v0.TopicData(topic_name=METADATA_TOPIC, partitions=(
                    vote_v0.PartitionData(**part, replica_epoch=1, replica_id=0, last_offset_epoch=1,
                                          last_offset=3),)),)),
                bqe.BeginQuorumEpochRequest(topics=(bqe.TopicData(topic_name=METADATA_TOPIC, partitions=(
                    bqe.PartitionData(**part, leader_id=1, leader_epoch=1),)),)),
                eqe.EndQuorumEpochRequest(topics=(eqe.TopicData(topic_name=METADATA_TOPIC, partitions=(
                    eqe.PartitionData(**part, leader_id=1, leader_epoch=1, preferred_successors=(0, 2)),)),)),
                dq.DescribeQuorumRequest(topics=(dq.TopicData(topic_name=METADATA_TOPIC, partitions=(
                    dq.PartitionData(**part),)),)),
                fetch_v12.FetchRequest(replica_id=2, max_wait=datetime.timedelta(0), min_bytes=1, topics=(
                    fetch_v12.FetchTopic(topic=METADATA_TOPIC, partitions=(fetch_v12.FetchPartition(
                        partition=0, current_leader_epoch=1, fetch_offset=1, last_fetched_epoch=1,
                        partition_max_bytes=1 << 20),)),), forgotten_topics_data=()),
            ]
            frames = [encode_request(r, 9, "fuzz") for r in requests]
            rng = random.Random(595)
            answered = closed = 0
            for _ in range(200):
                frame = bytearray(rng.choice(frames))
                for _ in range(rng.randint(1, 4)):
                    frame[rng.randrange(4, len(frame))] = rng.randrange(256)
                reader, writer = await asyncio.open_connection(*voters[rng.randrange(3)])
                writer.write(bytes(frame))
                await writer.drain()
                head = await asyncio.wait_for(reader.read(4), 5)
                answered, closed = (answered + 1, closed) if head else (answered, closed + 1)
                writer.close()
            assert answered and closed, (answered, closed)
            leader = await q.wait_leader(timeout_s=20)
            last = await leader.append([b"after"])
            await q.wait_committed(last + 1, q.ids, timeout_s=20)
            for i in q.ids:
                assert values(q.seen[i])[-1] == b"after" and b"before" in values(q.seen[i])
        finally:
            await q.stop()

    run(scenario())


def _answer(leader_id: int, epoch: int):
    """A voter's ``CurrentLeader`` as a Fetch response carries it."""
    from kio.schema.fetch.v12.response import LeaderIdAndEpoch
    from kio.static.primitive import i32

    return LeaderIdAndEpoch(leader_id=i32(leader_id), leader_epoch=i32(epoch))


@pytest.mark.parametrize("answers, followed", [
    # (voter, (leader named, epoch)) answers of one discovery round -> (leader followed, epoch) or None
    ([(1, (0, 5))], None),  # a lagging voter names the leader whose fetches timed out, same epoch: not followed
    ([(0, (0, 5))], (0, 5)),  # that leader answers itself: followed (it was slow, not gone)
    ([(1, (0, 5)), (2, (2, 6))], (2, 6)),  # the newest epoch wins whatever the order
    ([(2, (2, 6)), (1, (0, 5))], (2, 6)),
    ([(1, (1, 4))], None),  # an older epoch changes nothing
    ([(1, (1, 5))], (1, 5)),  # another leader named in our epoch (we know of none now)
])
def test_an_observer_follows_the_newest_leader_the_voters_name(tmp_path, answers, followed):
    # Issue #38: a voter not yet aware of an election still names the paused old leader; following it again
    # left the broker a whole fetch timeout more on a silent controller (Kafka: an observer learns the leader from
    # the quorum, a higher epoch wins, an answer that is not newer changes nothing).
    observer = RaftMetadataLog(tmp_path, {"node.id": "7", "controller.quorum.voters":
                                          "0@127.0.0.1:1,1@127.0.0.1:2,2@127.0.0.1:3"})
    (tmp_path / f"{METADATA_TOPIC}-0").mkdir()  # where the quorum state is written (start() makes it)
    observer.epoch, observer._unreachable = 5, (0, 5)  # fetches to leader 0 in epoch 5 timed out
    changed = observer._follow_newest([(voter, _answer(*named)) for voter, named in answers])
    assert changed == (followed is not None)
    if followed is not None:
        assert observer.leader() == followed and observer.role is Role.FOLLOWER
    else:
        assert observer.leader() == (None, 5)


def test_last_caught_up_timestamp_follows_kip_836(tmp_path, monkeypatch):
    """KIP-836 (Kafka's ``LeaderState.ReplicaState.updateFollowerState``): a fetch reaching the leader's log end
    makes the replica caught up now; a fetch reaching the leader's log end *of the replica's previous fetch*
    makes it caught up at that previous fetch's time; a fetch below both changes nothing. The last fetch
    time never goes back."""
    from types import SimpleNamespace

    from pyspark_kafka.broker.raft import raft_apis

    log = RaftMetadataLog(tmp_path, {"node.id": "0", "controller.quorum.voters": "0@127.0.0.1:1"})
    log.role, log.storage = Role.LEADER, SimpleNamespace(end_offset=10)
    observer = 7
    clock = iter([1000, 2000, 3000, 4000, 3500])
    monkeypatch.setattr(raft_apis, "_now_ms", lambda: next(clock))

    def fetch(offset: int, leader_end: int) -> tuple[int, int]:
        log.storage.end_offset = leader_end
        log._record_fetch(observer, offset)
        p = log._observers[observer]
        return p.last_fetch_ms, p.last_caught_up_ms

    assert fetch(5, 10) == (1000, -1)  # behind, nothing known before
    assert fetch(8, 12) == (2000, -1)  # below the leader's end of the previous fetch (10)
    assert fetch(12, 15) == (3000, 2000)  # reached the previous fetch's leader end (12): caught up then
    assert fetch(15, 15) == (4000, 4000)  # at the leader's end: caught up now
    assert fetch(15, 15) == (4000, 4000)  # a clock step back moves neither time back
