"""The follower's side of replication (Kafka's ``ReplicaFetcherThread`` / ``AbstractFetcherThread``).

For each partition this broker follows, one task: first truncation (KIP-101/279: OffsetForLeaderEpoch v4 with
this broker's replica id and latest leader epoch; the log is cut at the smaller of the leader's end offset for
that epoch and this log's own end of it; with no epoch known, at the high watermark), then Fetch v12 as a replica
(``replica_id`` = this node, ``current_leader_epoch``, from the log end offset, long poll
``replica.fetch.wait.max.ms``, at most ``replica.fetch.max.bytes``); fetched batches are appended with their
offsets and leader epochs, the high watermark follows the leader's. Errors back off ``replica.fetch.backoff.ms``
and truncate again; the task is replaced when the controller changes the partition's leader or epoch.
"""

from __future__ import annotations

import asyncio
import datetime

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.offset_for_leader_epoch.v4.response import OffsetForLeaderEpochResponse
from kio.static.primitive import i32, i64
from kio.schema.errors import ErrorCode

from pyspark_kafka.broker.cluster.partition import Partition
from pyspark_kafka.broker.cluster.peer_client import PeerClient
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger("pyspark_kafka.broker")


class ReplicaFetcher:
    """``ReplicaFetcher(replica_manager, config, address_of)``: ``address_of(broker id)`` → (host, port) or None.

    :meth:`follow` (re)starts fetching a partition from its leader, :meth:`stop_following` stops it.
    """

    def __init__(self, replica_manager, config, address_of) -> None:
        self.replica_manager = replica_manager
        self.node_id = replica_manager.node_id
        self.address_of = address_of
        self.wait_ms = config.get_int("replica.fetch.wait.max.ms")
        self.max_bytes = config.get_int("replica.fetch.max.bytes")
        self.backoff_s = config.get_int("replica.fetch.backoff.ms") / 1000
        self._tasks: dict[tuple[str, int], asyncio.Task] = {}
        self._closed = False  # Python 3.11's wait_for can swallow a cancellation: loops also check this flag

    def follow(self, part: Partition) -> None:
        """Fetch ``part`` from its current leader (restarting any fetch of an older leader or epoch)."""
        if self._closed:
            return
        self.stop_following(part.topic, part.index)
        self._tasks[(part.topic, part.index)] = asyncio.create_task(self._run(part, part.state.leader,
                                                                               part.state.leader_epoch))

    def stop_following(self, topic: str, index: int) -> None:
        task = self._tasks.pop((topic, index), None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, part: Partition, leader: int, epoch: int) -> None:
        client = None
        truncated = False
        task = asyncio.current_task()
        try:
            while not self._closed and not task.cancelling() and self._tasks.get((part.topic, part.index)) is task:
                address = self.address_of(leader)
                if address is None:
                    await asyncio.sleep(self.backoff_s)
                    continue
                if client is None or client.address != address:
                    if client is not None:
                        client.close()
                    client = PeerClient(*address, client_id=f"broker-{self.node_id}-fetcher")
                try:
                    if not truncated:
                        truncated = await self._truncate(client, part, epoch)
                        if not truncated:
                            await asyncio.sleep(self.backoff_s)
                        continue
                    if not await self._fetch(client, part, epoch):
                        truncated = False
                        await asyncio.sleep(self.backoff_s)
                except ConnectionError as exc:
                    log.debug("%s-%d: fetch from broker %d failed: %s", part.topic, part.index, leader, exc)
                    await asyncio.sleep(self.backoff_s)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("replica fetcher of %s-%d stopped", part.topic, part.index)
        finally:
            if client is not None:
                client.close()

    async def _truncate(self, client: PeerClient, part: Partition, epoch: int) -> bool:
        latest = part.epochs.latest_epoch()
        if latest < 0:
            part.truncate_to(part.log.high_watermark)
            return True
        request = OffsetForLeaderEpochRequest(replica_id=i32(self.node_id), topics=(OffsetForLeaderTopic(
            topic=part.topic, partitions=(OffsetForLeaderPartition(
                partition=i32(part.index), current_leader_epoch=i32(epoch), leader_epoch=i32(latest)),)),))
        response = await client.send(request, OffsetForLeaderEpochResponse, 10)
        answer = response.topics[0].partitions[0]
        if answer.error_code != ErrorCode.none:
            log.debug("%s-%d: OffsetForLeaderEpoch answered %s", part.topic, part.index, answer.error_code)
            return False
        if answer.leader_epoch < 0:
            target = part.log.high_watermark
        else:
            own_end = part.epochs.end_offset_for(int(answer.leader_epoch), part.log.log_end_offset)[1]
            target = min(int(answer.end_offset), own_end if own_end >= 0 else part.log.log_end_offset)
        part.truncate_to(max(target, part.log.log_start_offset))
        return True

    async def _fetch(self, client: PeerClient, part: Partition, epoch: int) -> bool:
        request = FetchRequest(
            cluster_id=None, replica_id=i32(self.node_id), max_wait=datetime.timedelta(milliseconds=self.wait_ms), min_bytes=i32(1),
            max_bytes=i32(self.max_bytes), isolation_level=0, session_id=i32(0), session_epoch=i32(-1),
            topics=(FetchTopic(topic=part.topic, partitions=(FetchPartition(
                partition=i32(part.index), current_leader_epoch=i32(epoch), fetch_offset=i64(part.log.log_end_offset),
                last_fetched_epoch=i32(part.epochs.latest_epoch()), log_start_offset=i64(part.log.log_start_offset),
                partition_max_bytes=i32(self.max_bytes)),)),),
            forgotten_topics_data=(), rack_id="")
        response = await client.send(request, FetchResponse, self.wait_ms / 1000 + 10)
        data = response.responses[0].partitions[0]
        if data.error_code != ErrorCode.none:
            log.debug("%s-%d: replica fetch answered %s", part.topic, part.index, data.error_code)
            return False
        part.append_as_follower(bytes(data.records or b""), int(data.high_watermark))
        self.replica_manager.notify_append(part.topic, part.index)
        return True
