"""Features in ApiVersions v3+ (KIP-584) and Kafka's ``kafka-features describe`` against the embedded broker.

Apache Kafka 4.4.0's own lines (one-node combined-mode KRaft cluster, formatted by ``kafka-storage format``
with static voters) are recorded in ``support.kafka_features.KAFKA_4_4_0_DESCRIBE``; the slow test in
``integration_tests/test_kafka_tools.py`` checks the recording against a live Kafka. We advertise only the
features whose levels the broker implements (docs: broker-behaviour.md, "Features"): their lines equal Kafka's
except the epoch (in both the broker's metadata image offset, so it varies) and ``kraft.version``'s supported
maximum (0 here: no dynamic quorum).

The finalized levels are the metadata image's: the active controller writes ``feature`` records (Kafka's
``FeatureLevelRecord``) for ``metadata.version`` and ``group.version`` when its log has none (Kafka 4.4's
``ActivationRecordsGenerator``), and a log without them counts as today's levels until then.
"""

from __future__ import annotations

from kio.schema.api_versions.v2.request import ApiVersionsRequest as ApiVersionsRequestV2
from kio.schema.api_versions.v2.response import ApiVersionsResponse as ApiVersionsResponseV2
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsRequestV4
from kio.schema.api_versions.v4.response import ApiVersionsResponse as ApiVersionsResponseV4
from pyspark_kafka.testing.clusters import send_request
from support.kafka_features import (
    EMBEDDED_DESCRIBE,
    FEATURES,
    describe_lines,
)


def test_api_versions_v3_and_v4_carry_the_features(bootstrap):
    v4 = send_request(bootstrap, ApiVersionsRequestV4(client_software_name="t", client_software_version="1"),
                      ApiVersionsResponseV4)
    assert [(f.name, f.min_version, f.max_version) for f in v4.supported_features] == [
        ("group.version", 0, 1), ("kraft.version", 0, 0), ("metadata.version", 7, 33)]
    finalized = [(f.name, f.min_version_level, f.max_version_level) for f in v4.finalized_features]
    assert finalized == [("group.version", 1, 1), ("metadata.version", 33, 33)]
    assert v4.finalized_features_epoch > 0  # the broker's metadata image offset
    # Kafka's v3 answer leaves out supported features whose minimum is 0 (measured on 4.4.0: metadata.version only)
    v3 = send_request(bootstrap, ApiVersionsRequestV3(client_software_name="t", client_software_version="1"),
                      ApiVersionsResponseV3)
    assert [(f.name, f.min_version, f.max_version) for f in v3.supported_features] == [("metadata.version", 7, 33)]
    assert [(f.name, f.min_version_level, f.max_version_level) for f in v3.finalized_features] == finalized
    assert v3.finalized_features_epoch >= v4.finalized_features_epoch
    v2 = send_request(bootstrap, ApiVersionsRequestV2(), ApiVersionsResponseV2)
    assert 18 in {int(k.api_key) for k in v2.api_keys}



def test_kafka_features_describe_prints_kafkas_lines(bootstrap, tools, tmp_path):
    code, out = tools.run(FEATURES, "--bootstrap-server", bootstrap, "describe", timeout_s=120)
    assert code == 0, out
    lines, epochs = describe_lines(out)
    assert lines == EMBEDDED_DESCRIBE and len(epochs) == 1 and int(epochs.pop()) > 0, out
    # the split cluster's brokers answer the same
    from pyspark_kafka.broker.cluster import EmbeddedCluster

    with EmbeddedCluster(1, data_dir=tmp_path / "cluster") as cluster:
        code, out = tools.run(FEATURES, "--bootstrap-server", cluster.bootstrap_servers, "describe", timeout_s=120)
    assert code == 0, out
    lines, epochs = describe_lines(out)
    assert lines == EMBEDDED_DESCRIBE and len(epochs) == 1 and int(epochs.pop()) > 0, out


def _feature_records(data_dir) -> list[tuple[int, str, int]]:
    """(offset, name, level) of each ``feature`` record of a combined node's one-voter metadata log file (frames of
    length, crc32, JSON record)."""
    import json
    import struct

    data = (data_dir / "__cluster_metadata-0" / "metadata.log").read_bytes()
    out, position, offset = [], 0, 0
    while position + 8 <= len(data):
        size, _ = struct.unpack_from(">iI", data, position)
        record = json.loads(data[position + 8:position + 8 + size])
        if record["type"] == "feature":
            out.append((offset, record["name"], record["level"]))
        position += 8 + size
        offset += 1
    return out


def _finalized(node) -> tuple[list[tuple[str, int]], int]:
    answer = send_request(node.bootstrap_servers, ApiVersionsRequestV4(client_software_name="t",
                                                                        client_software_version="1"),
                          ApiVersionsResponseV4)
    return [(f.name, f.max_version_level) for f in answer.finalized_features], answer.finalized_features_epoch


def test_finalized_features_are_metadata_records_and_a_log_without_them_gets_them(tmp_path, monkeypatch):
    """A log written before feature records existed answers today's levels, and its next active controller
    appends the bootstrap records once (Kafka 4.4: a log without metadata.version gets the bootstrap records at
    controller activation); the epoch is the broker's image offset (Kafka's KRaftMetadataCache.features)."""
    from pyspark_kafka.broker.controller import quorum_controller
    from pyspark_kafka.broker.embedded import EmbeddedBroker

    levels = [("group.version", 1), ("metadata.version", 33)]
    data = tmp_path / "node"
    with monkeypatch.context() as m:  # an older version: its controller wrote no feature record
        m.setattr(quorum_controller, "BOOTSTRAP_FEATURES", ())
        with EmbeddedBroker(data_dir=data) as node:
            # answered once the broker is unfenced, so after its registration (which activates the controller)
            finalized, epoch = _finalized(node)
            assert node.broker.lifecycle.image.features == {}
            assert finalized == levels and 0 < epoch <= node.broker.lifecycle.image.offset
    assert _feature_records(data) == []
    for start in range(2):
        with EmbeddedBroker(data_dir=data) as node:
            finalized, epoch = _finalized(node)
            image = node.broker.lifecycle.image
            assert image.features == dict(levels)
            records = _feature_records(data)
            assert finalized == levels and records[-1][0] < epoch <= image.offset
        # appended at the first start only
        assert [(name, level) for _, name, level in records] == [("metadata.version", 33), ("group.version", 1)]
