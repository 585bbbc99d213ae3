"""Differential run: every observation of ``conformance/differential.py`` on the embedded broker
and on Apache Kafka (one node from Maven Central's jars), compared field by field.

A field that differs fails the test unless it is in :data:`PINNED` (field -> embedded value,
Apache Kafka value, reason), the deliberate differences also listed in docs/testing.md
("Differences found between the embedded broker and Apache Kafka"). About 40 s here for the
confluent-kafka observations, about 60 s more for those through Kafka's Java client and about
45 s for the KIP-848 observation.
"""

from __future__ import annotations

import json

import pytest

from integration_tests import clusters as C
from integration_tests.conformance import differential as D
from integration_tests.conformance import java_observations as J

pytestmark = pytest.mark.slow

MAX = "9223372036854775807"
PINNED: dict[tuple[str, str], tuple[object, object, str]] = {
    ("describe_configs", "configs.file.delete.delay.ms"): (
        ["0", "5", False, False], ["60000", "5", False, False],
        "the embedded broker deletes segment files at once (log.segment.delete.delay.ms=0); "
        "Kafka renames them .deleted and removes them 60 s later"),
    ("describe_configs", "configs.message.timestamp.after.max.ms"): (
        [MAX, "5", False, False], ["3600000", "5", False, False],
        "default of Kafka 3.x kept (no bound on future timestamps); Kafka 4.0 bounds CreateTime "
        "at 1 h in the future (KIP-1030), Kafka 3.9 answers Long.MAX_VALUE like the embedded broker"),
    ("consumer_groups", "two_members.classic_join"): (
        23, 79,
        "no mixed groups: a classic JoinGroup into a KIP-848 group with members gets INCONSISTENT_GROUP_PROTOCOL; "
        "Kafka 4.3.1 and 4.4.0 (group.consumer.migration.policy=bidirectional) take the classic member in "
        "(MEMBER_ID_REQUIRED first)"),
}
"""Deliberate differences: (observation, field) -> (embedded value, Apache Kafka value, reason)."""


@pytest.fixture(scope="module")
def embedded_cluster(tmp_path_factory):
    from pyspark_kafka.broker import EmbeddedBroker

    config = {**C.EMBEDDED_CONFIG, **D.EMBEDDED_CONFIG}  # no initial rebalance delay, as Apache Kafka's TEST_DEFAULTS
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("differential"), config=config) as broker:
        bootstrap = broker.bootstrap_servers
        yield C.Cluster("embedded", bootstrap, C.api_versions(bootstrap), broker)


@pytest.fixture(scope="module")
def apache_cluster():
    from pyspark_kafka.testing.apache_kafka import ApacheKafka
    from pyspark_kafka.testing.maven import MavenUnavailable

    kafka = ApacheKafka(nodes=1, config=D.APACHE_CONFIG)
    try:
        kafka.start()
    except (MavenUnavailable, C.BackendUnavailable) as e:
        pytest.skip(f"backend apache-kafka unavailable: Apache Kafka {kafka.version} from Maven Central: {e}")
    try:
        bootstrap = kafka.bootstrap_servers
        yield C.Cluster("apache-kafka", bootstrap, C.api_versions(bootstrap), kafka=kafka)
    finally:
        kafka.stop()


OBSERVATIONS = {**D.OBSERVATIONS, **J.OBSERVATIONS}
"""Observations through confluent-kafka (``differential.py``) and Kafka's Java client (``java_observations.py``)."""


@pytest.mark.parametrize("name", list(OBSERVATIONS))
def test_same_observables(name, embedded_cluster, apache_cluster):
    from pyspark_kafka.testing import maven

    if name in J.OBSERVATIONS:
        from integration_tests.conformance.drivers import java_client

        why = java_client.unavailable()
        if why:
            pytest.skip(f"Kafka's Java client cannot run here: {why}")
    embedded = OBSERVATIONS[name](embedded_cluster)
    apache = OBSERVATIONS[name](apache_cluster)
    json.dumps([embedded, apache])  # JSON-able, as documented
    found = D.differences(name, embedded, apache)
    unexpected = {f: v for f, v in found.items() if (name, f) not in PINNED}
    assert not unexpected, "embedded vs Apache Kafka: " + "; ".join(
        f"{f}: embedded {a!r}, apache-kafka {b!r}" for f, (a, b) in unexpected.items())
    default_version = apache_cluster.kafka.version == maven.DEFAULT_KAFKA_VERSION
    for (observation, field), (want_embedded, want_apache, _) in PINNED.items():
        if observation != name:
            continue
        got_embedded, got_apache = D.flatten(embedded)[field], D.flatten(apache).get(field)
        assert got_embedded == want_embedded, f"{field}: the embedded broker changed: {got_embedded!r}"
        if default_version:  # another KAFKA_VERSION may not differ (e.g. 3.9 and timestamp.after.max.ms)
            assert got_apache == want_apache, f"{field}: Apache Kafka answers {got_apache!r}, pinned {want_apache!r}"


def test_compaction_removes_superseded_values(embedded_cluster):
    # the cleaner really ran (equal observables could also be "nothing compacted" on both)
    observed = D.compaction(embedded_cluster)
    assert observed["superseded_left"] == [] and observed["tombstones_left"] == []
    assert {k: v for k, (_, v) in observed["latest_per_key"].items()} == observed["expected_latest"]
    assert observed["lagged_topic_complete"]  # min.compaction.lag.ms of an hour: nothing removed
    assert observed["ratio_one_topic_complete"]  # a dirty ratio is never above 1
    assert observed["max_lag_forced_superseded_left"] == []  # max.compaction.lag.ms cleaned it anyway
