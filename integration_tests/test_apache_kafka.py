"""The Apache Kafka launcher (``pyspark_kafka.testing.apache_kafka``): the selected version is the
one that runs, a node can be killed and restarted, and a node that cannot start says why."""

from __future__ import annotations

import os

import pytest

from integration_tests import clusters as C
from pyspark_kafka.testing import maven
from pyspark_kafka.testing.apache_kafka import ApacheKafka, KafkaStartError

OLDER_VERSION = "3.9.1"
"""The 3.9.x line many production clusters run; ``KAFKA_VERSION`` picks the default of the backends."""


def _start_or_skip(kafka: ApacheKafka) -> ApacheKafka:
    try:
        return kafka.start()
    except maven.MavenUnavailable as e:
        pytest.skip(f"Apache Kafka {kafka.version} from Maven Central unavailable: {e}")


@pytest.mark.slow
@pytest.mark.parametrize("version", [maven.DEFAULT_KAFKA_VERSION, OLDER_VERSION])
def test_the_selected_version_runs_and_a_killed_node_restarts(version):
    kafka = _start_or_skip(ApacheKafka(nodes=1, version=version))
    try:
        fetch_min = C.api_versions(kafka.bootstrap_servers)[C.FETCH][0]
        # KIP-896 (Kafka 4.0) removed Fetch v0-v3: which Kafka answers is visible on the wire.
        assert fetch_min == (4 if int(version.split(".")[0]) >= 4 else 0)
        pid = kafka.pids[1]
        kafka.kill(1)
        assert kafka.pids == {1: None}
        with pytest.raises(OSError):
            C.api_versions(kafka.bootstrap_servers, timeout_s=2)
        kafka.restart(1)
        assert kafka.pids[1] not in (None, pid)
        assert C.PRODUCE in C.api_versions(kafka.bootstrap_servers)
    finally:
        kafka.stop()
    assert kafka.pids == {1: None}


def test_a_node_that_cannot_start_shows_the_command_and_its_log(tmp_path):
    kafka = ApacheKafka(nodes=1, config={"num.io.threads": "many"})
    with pytest.raises(KafkaStartError) as e:
        _start_or_skip(kafka)
    message = str(e.value)
    assert "command: " in message and ("kafka.tools.StorageTool format" in message or " kafka.Kafka " in message)
    assert "num.io.threads" in message  # Kafka's own words about the bad value, from the log tail
    assert kafka.folder is None and all(pid is None for pid in kafka.pids.values())


@pytest.mark.slow
def test_stop_also_runs_when_the_block_raises():
    with pytest.raises(ZeroDivisionError):
        with _start_or_skip(ApacheKafka(nodes=1)) as kafka:
            pids = dict(kafka.pids)
            1 / 0
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_cluster_ids_never_read_as_an_option():
    """An id starting with ``-`` made the storage tool fail (``-t -abc...``: "expected one
    argument"), one start in 32; Kafka's Uuid.randomUuid draws again, so do we."""
    from pyspark_kafka.testing.apache_kafka import random_cluster_id

    ids = [random_cluster_id() for _ in range(5000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids) and len(set(ids)) == 5000


@pytest.mark.slow
def test_dedicated_controller_cluster_keeps_its_quorum_when_brokers_die():
    """``controllers=1``: three broker-only nodes and one controller-only node (id 3000). Metadata
    lists the three brokers and never the controller; two brokers killed together come back (the
    quorum is not theirs), and a node restarted from a thread that then ends keeps running (Linux's
    PR_SET_PDEATHSIG follows the creating thread: before the launcher thread it was SIGKILLed)."""
    import threading

    from confluent_kafka.admin import AdminClient

    kafka = _start_or_skip(ApacheKafka(nodes=3, controllers=1))
    try:
        assert kafka.node_ids == [1, 2, 3] and kafka.controller_ids == [3000]
        assert kafka.controller_pids[3000] is not None
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]
        kafka.kill(1)
        kafka.kill(2)
        assert kafka.pids[1] is None and kafka.pids[2] is None
        restarts = [threading.Thread(target=kafka.restart, args=(n,)) for n in (1, 2)]
        for t in restarts:
            t.start()
        for t in restarts:
            t.join()
        assert sorted(AdminClient({"bootstrap.servers": kafka.address(1)}).list_topics(timeout=10).brokers) == [1, 2, 3]
        assert all(kafka.pids.values()), kafka.pids  # still running after the restarting threads ended
    finally:
        kafka.stop()
    assert kafka.pids == {1: None, 2: None, 3: None} and kafka.controller_pids == {3000: None}


def test_dedicated_controller_arguments_are_checked():
    with pytest.raises(ValueError, match="controllers must be 0"):
        ApacheKafka(nodes=3, controllers=-1)
    from pyspark_kafka.testing.apache_kafka import SaslSsl

    with pytest.raises(ValueError, match="sasl_ssl with dedicated controllers"):
        ApacheKafka(nodes=3, controllers=1, sasl_ssl=SaslSsl(__file__, "pw"))
