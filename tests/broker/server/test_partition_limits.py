"""What one request may create, what the broker can hold, and a start on any data directory.

A CreateTopics or CreatePartitions asking for 2^31 partitions once made the broker create
partitions until it ran out of file descriptors, after which it could not start on that data
directory again. Kafka's answer (measured on Apache Kafka 4.3.1) is POLICY_VIOLATION
"Excessively large number of partitions per request." above 10,000 partitions per request.
"""

from __future__ import annotations

import datetime
import json
import uuid

import pytest
from kio.schema.create_partitions.v1.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_topics.v5.request import DeleteTopicsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from support.fuzz_network import BrokerProcess
from support.client_records import RECORDS, as_tuples, consume, expected, produce
from support.wire import WireClient

POLICY_VIOLATION = 44
EXCESSIVE = "Excessively large number of partitions per request."
TIMEOUT = datetime.timedelta(seconds=10)


def _create(client: WireClient, *topics: tuple[str, int]):
    request = CreateTopicsRequest(topics=tuple(
        CreatableTopic(name=name, num_partitions=n, replication_factor=1, assignments=(), configs=())
        for name, n in topics), timeout=TIMEOUT, validate_only=False)
    return client.request(request).topics


def test_more_than_ten_thousand_partitions_per_request_is_a_policy_violation(bootstrap, broker):
    a, b, c = (f"huge-{uuid.uuid4().hex[:8]}" for _ in range(3))
    with WireClient(bootstrap) as client:
        (one,) = _create(client, (a, 2**31 - 1))
        split = _create(client, (b, 6000), (c, 6000))  # 12,000 in all: Kafka refuses both
    assert (one.error_code, one.error_message) == (POLICY_VIOLATION, EXCESSIVE)
    assert [(t.error_code, t.error_message) for t in split] == [(POLICY_VIOLATION, EXCESSIVE)] * 2
    assert broker.broker.replica_manager.logs.topic(a) is None and broker.broker.replica_manager.logs.topic(b) is None
    assert not list(broker.data_dir.glob(f"{a}-*"))


def test_create_partitions_is_bounded_too(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    with WireClient(bootstrap) as client:
        (res,) = client.request(CreatePartitionsRequest(
            topics=(CreatePartitionsTopic(name=topic, count=2**31 - 1, assignments=None),),
            timeout=TIMEOUT, validate_only=False)).results
    assert (res.error_code, res.error_message) == (POLICY_VIOLATION, EXCESSIVE)
    produce(bootstrap, topic, RECORDS[:3])
    assert as_tuples(consume(bootstrap, topic, 3)) == expected(RECORDS[:3])


@pytest.mark.parametrize("internal", ["__consumer_offsets", "__transaction_state"])
def test_internal_topics_cannot_be_deleted(bootstrap, internal):
    """A deliberate difference: Apache Kafka 4.3.1 deletes __transaction_state when asked."""
    with WireClient(bootstrap) as client:
        (res,) = client.request(DeleteTopicsRequest(topic_names=(internal,), timeout=TIMEOUT)).responses
    assert res.error_code == POLICY_VIOLATION and "cannot be deleted" in res.error_message


def test_the_open_file_limit_bounds_the_partitions_with_a_clear_error(tmp_path):
    with BrokerProcess(tmp_path / "data", nofile=800) as b, WireClient(b.bootstrap) as client:  # capacity 96
        (ok,) = _create(client, ("fits", 60))
        (refused,) = _create(client, ("too-many", 60))
        assert ok.error_code == 0
        assert refused.error_code == POLICY_VIOLATION
        assert "ulimit -n 800" in refused.error_message and "raise the open-file limit" in refused.error_message
        # CreatePartitions is bounded the same way (also validate_only), as the single node's LogManager does
        for validate_only in (True, False):
            (grown,) = _grow(client, "fits", 100, validate_only)
            assert grown.error_code == POLICY_VIOLATION
            assert "has 60; 40 more do not fit" in grown.error_message and "ulimit -n 800" in grown.error_message
        (grown,) = _grow(client, "fits", 90, False)
        assert grown.error_code == 0
        assert len(client.request(MetadataRequest(topics=(MetadataRequestTopic(name="fits", topic_id=None),),
                                                  allow_auto_topic_creation=False,
                                                  include_topic_authorized_operations=False)).topics[0].partitions) == 90


def _grow(client: WireClient, name: str, count: int, validate_only: bool):
    return client.request(CreatePartitionsRequest(
        topics=(CreatePartitionsTopic(name=name, count=count, assignments=None),),
        timeout=TIMEOUT, validate_only=validate_only)).results


def test_start_survives_what_a_previous_run_left(tmp_path):
    """Metadata listing more partitions than fit, a partition directory that is a file, stray files:
    the broker starts, serves what it can, and says in its log what is offline and why."""
    data = tmp_path / "data"
    with BrokerProcess(data) as b:
        from support.topics import create_topic

        create_topic(b.bootstrap, "kept", partitions=1)
        produce(b.bootstrap, "kept", RECORDS[:10])
        create_topic(b.bootstrap, "broken", partitions=2)
    meta = json.loads((data / "__topics.json").read_text())
    meta["topics"]["giant"] = {"topic_id": str(uuid.uuid4()), "partitions": 1_000_000, "configs": {}}
    (data / "__topics.json").write_text(json.dumps(meta))
    import shutil

    shutil.rmtree(data / "broken-1")
    (data / "broken-1").write_text("not a directory")
    (data / "stray-file.txt").write_text("left behind")
    (data / "no-such-topic-7").mkdir()
    with BrokerProcess(data, nofile=1100) as b:  # capacity 196 partitions
        assert as_tuples(consume(b.bootstrap, "kept", 10)) == expected(RECORDS[:10])
        produce(b.bootstrap, "broken", RECORDS[:2])  # partition 0 is served
        log_text = b.log_path.read_text()
    assert "partition broken-1 is offline" in log_text
    assert "partitions are offline: the topic metadata lists more partitions than this process can keep open" \
        in log_text

