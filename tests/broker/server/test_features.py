"""Features in ApiVersions v3+ (KIP-584) and Kafka's ``kafka-features describe`` against the embedded broker.

Apache Kafka 4.4.0's own lines (one-node combined-mode KRaft cluster, formatted by ``kafka-storage format``
with static voters) are recorded in ``support.kafka_features.KAFKA_4_4_0_DESCRIBE``; the slow test in
``integration_tests/test_kafka_tools.py`` checks the recording against a live Kafka. We advertise only the
features whose levels the broker implements (docs: broker-behaviour.md, "Features"): their lines equal Kafka's
except the epoch (a constant here, a metadata offset in Kafka) and ``kraft.version``'s supported maximum (0 here:
no dynamic quorum).
"""

from __future__ import annotations

import pytest
from kio.schema.api_versions.v2.request import ApiVersionsRequest as ApiVersionsRequestV2
from kio.schema.api_versions.v2.response import ApiVersionsResponse as ApiVersionsResponseV2
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsRequestV4
from kio.schema.api_versions.v4.response import ApiVersionsResponse as ApiVersionsResponseV4
from pyspark_kafka.testing.clusters import send_request
from support.kafka_features import (
    EMBEDDED_DESCRIBE,
    EMBEDDED_EPOCH,
    FEATURES,
    describe_lines,
)
from support.kafka_tools import ToolServer, kafka4_classpath


def test_api_versions_v3_and_v4_carry_the_features(bootstrap):
    v4 = send_request(bootstrap, ApiVersionsRequestV4(client_software_name="t", client_software_version="1"),
                      ApiVersionsResponseV4)
    assert [(f.name, f.min_version, f.max_version) for f in v4.supported_features] == [
        ("group.version", 0, 1), ("kraft.version", 0, 0), ("metadata.version", 7, 33)]
    finalized = [(f.name, f.min_version_level, f.max_version_level) for f in v4.finalized_features]
    assert finalized == [("group.version", 1, 1), ("metadata.version", 33, 33)]
    assert v4.finalized_features_epoch == EMBEDDED_EPOCH
    # Kafka's v3 answer leaves out supported features whose minimum is 0 (measured on 4.4.0: metadata.version only)
    v3 = send_request(bootstrap, ApiVersionsRequestV3(client_software_name="t", client_software_version="1"),
                      ApiVersionsResponseV3)
    assert [(f.name, f.min_version, f.max_version) for f in v3.supported_features] == [("metadata.version", 7, 33)]
    assert [(f.name, f.min_version_level, f.max_version_level) for f in v3.finalized_features] == finalized
    assert v3.finalized_features_epoch == EMBEDDED_EPOCH
    v2 = send_request(bootstrap, ApiVersionsRequestV2(), ApiVersionsResponseV2)
    assert 18 in {int(k.api_key) for k in v2.api_keys}


@pytest.fixture(scope="module")
def tools():
    """Kafka's tools in one JVM (support.kafka_tools.ToolServer); skips when the jars cannot be had."""
    kafka4_classpath()
    server = ToolServer()
    yield server
    server.close()


def test_kafka_features_describe_prints_kafkas_lines(bootstrap, tools, tmp_path):
    code, out = tools.run(FEATURES, "--bootstrap-server", bootstrap, "describe", timeout_s=120)
    assert code == 0, out
    assert describe_lines(out) == (EMBEDDED_DESCRIBE, {str(EMBEDDED_EPOCH)}), out
    # the split cluster's brokers answer the same
    from pyspark_kafka.broker.cluster import EmbeddedCluster

    with EmbeddedCluster(1, data_dir=tmp_path / "cluster") as cluster:
        code, out = tools.run(FEATURES, "--bootstrap-server", cluster.bootstrap_servers, "describe", timeout_s=120)
    assert code == 0, out
    assert describe_lines(out) == (EMBEDDED_DESCRIBE, {str(EMBEDDED_EPOCH)}), out
