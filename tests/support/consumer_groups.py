"""KIP-848 helpers of the broker tests: a raw ConsumerGroupHeartbeat / ConsumerGroupDescribe member over
:class:`support.wire.WireClient` (exact epochs and owned partitions, which real clients do not let a
test choose), and topic ids by name (Metadata v12)."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest, TopicPartitions
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from support.wire import WireClient

REBALANCE_TIMEOUT = datetime.timedelta(seconds=30)


def topic_ids(client: WireClient, *names: str) -> dict[str, uuid.UUID]:
    """``{name: topic id}`` of existing topics (Metadata v12)."""
    md = client.request(MetadataRequest(topics=tuple(MetadataRequestTopic(topic_id=None, name=n) for n in names),
                                        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return {t.name: t.topic_id for t in md.topics if t.error_code == 0}


def assignment_of(response, names: dict[uuid.UUID, str]) -> set[tuple[str, int]] | None:
    """The ``(topic, partition)`` set of a heartbeat response's assignment (None when not sent)."""
    if response.assignment is None:
        return None
    return {(names[t.topic_id], p) for t in response.assignment.topic_partitions for p in t.partitions}


def describe(client: WireClient, *groups: str):
    """ConsumerGroupDescribe v1 of ``groups`` (the described groups, in order)."""
    return client.request(ConsumerGroupDescribeRequest(group_ids=groups, include_authorized_operations=False)).groups


class Member:
    """One KIP-848 member driven by hand: ``join``, ``beat`` (with owned partitions), ``leave``.

    Keeps its member id, last epoch and assignment; ``ids`` maps topic names to ids for the
    owned partitions it reports.
    """

    def __init__(self, client: WireClient, group: str, topics: tuple[str, ...] | None = None, *,
                 regex: str | None = None, assignor: str | None = None, instance_id: str | None = None,
                 member_id: str | None = None):
        self.client, self.group, self.topics, self.regex = client, group, topics, regex
        self.assignor, self.instance_id = assignor, instance_id
        self.member_id = member_id or str(uuid.uuid4())
        self.epoch = 0
        self.assigned: set[tuple[str, int]] = set()

    def request(self, epoch: int, owned: set[tuple[str, int]] | None, first: bool = False, **fields):
        ids = topic_ids(self.client, *{t for t, _ in owned}) if owned else {}
        parts = None if owned is None else tuple(
            TopicPartitions(topic_id=ids[t], partitions=tuple(sorted(p for tt, p in owned if tt == t)))
            for t in sorted({t for t, _ in owned}))
        values = dict(group_id=self.group, member_id=self.member_id, member_epoch=epoch, instance_id=self.instance_id,
                      rebalance_timeout=REBALANCE_TIMEOUT if first else datetime.timedelta(milliseconds=-1),
                      subscribed_topic_names=self.topics if first else None,
                      subscribed_topic_regex=self.regex if first else None,
                      server_assignor=self.assignor if first else None, topic_partitions=parts)
        values.update(fields)
        return self.client.request(ConsumerGroupHeartbeatRequest(**values))

    def _apply(self, response):
        if response.error_code == 0:
            self.epoch = response.member_epoch
            if response.assignment is not None:
                names = {v: k for k, v in topic_ids(self.client, *self._topic_names(response)).items()}
                self.assigned = assignment_of(response, names)
        return response

    def _topic_names(self, response) -> list[str]:
        from kio.schema.metadata.v12.request import MetadataRequest as Md
        md = self.client.request(Md(topics=None, allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=False))
        wanted = {t.topic_id for t in response.assignment.topic_partitions}
        return [t.name for t in md.topics if t.topic_id in wanted]

    def join(self, **fields):
        """Epoch 0 with the subscription; returns the response."""
        return self._apply(self.request(0, set(), first=True, **fields))

    def beat(self, owned: set[tuple[str, int]] | None = None, epoch: int | None = None, **fields):
        """A heartbeat at ``epoch`` (default: the last one) reporting ``owned`` (default: the assignment)."""
        return self._apply(self.request(self.epoch if epoch is None else epoch,
                                        self.assigned if owned is None else owned, **fields))

    def leave(self, epoch: int = -1):
        return self.request(epoch, None)
