"""Where the embedded broker and Apache Kafka differ on purpose, pinned per backend (each one is
listed in docs/testing.md, "Differences")."""

from __future__ import annotations

import pytest


def _kafka_major(kafka_cluster) -> int | None:
    """Major version of the Apache Kafka backends, None for the embedded broker."""
    kafka = kafka_cluster.kafka
    return int(kafka.version.split(".")[0]) if kafka is not None else None


def test_segment_bytes_below_one_mebibyte(kafka_cluster):
    """Kafka 4 (KIP-1030) refuses ``segment.bytes`` below 1 MiB (1048576); Kafka 3.9 and the
    embedded broker accept down to 14 bytes, which the embedded broker's own tests use to roll
    segments quickly."""
    from confluent_kafka import KafkaException

    if kafka_cluster.name == "env":
        pytest.skip("an existing cluster's version is not known here")
    major = _kafka_major(kafka_cluster)
    if major is not None and major >= 4:
        with pytest.raises(KafkaException, match="Invalid value 1024 for configuration segment.bytes: "
                                                 "Value must be at least 1048576"):
            kafka_cluster.create_topic(1, config={"segment.bytes": "1024"})
    else:
        kafka_cluster.create_topic(1, config={"segment.bytes": "1024"})
