"""``kafka-features describe`` (Kafka's ``FeatureCommand``): Apache Kafka 4.4.0's recorded lines, the embedded
broker's expected lines and a parser, shared by tests/broker/server/test_features.py and
integration_tests/test_kafka_tools.py (docs: broker-behaviour.md, "Features")."""

from __future__ import annotations

import re

FEATURES = "org.apache.kafka.tools.FeatureCommand"
"""Main class of ``kafka-features.sh``."""

#: ``kafka-features --bootstrap-server ... describe`` on Apache Kafka 4.4.0 (one combined-mode node), verbatim
#: but for the epoch (15 in that run: the broker's metadata image offset, ``KRaftMetadataCache.features``, so it
#: varies; the embedded broker answers its image offset too).
KAFKA_4_4_0_DESCRIBE = [
    "Feature: eligible.leader.replicas.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1",
    "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1",
    "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0",
    "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.4-IV2\tFinalizedVersionLevel: 4.4-IV2",
    "Feature: share.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\tFinalizedVersionLevel: 2",
    "Feature: streams.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1",
    "Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\tFinalizedVersionLevel: 2",
]

#: What the embedded broker prints: Kafka's lines for group.version and metadata.version; kraft.version with
#: supported maximum 0 (a pinned difference); the other features are not advertised (not implemented).
EMBEDDED_DESCRIBE = [
    KAFKA_4_4_0_DESCRIBE[1],
    KAFKA_4_4_0_DESCRIBE[2].replace("SupportedMaxVersion: 1", "SupportedMaxVersion: 0"),
    KAFKA_4_4_0_DESCRIBE[3],
]


def describe_lines(output: str) -> tuple[list[str], set[str]]:
    """``kafka-features describe`` output as (lines without their epoch column, the epochs printed).

    The tool pads columns with spaces; they become one tab each."""
    lines, epochs = [], set()
    for line in output.splitlines():
        if not line.startswith("Feature: "):
            continue
        fields = re.split(r"\s{2,}|\t", line.strip())
        epochs.update(f.split(": ", 1)[1] for f in fields if f.startswith("Epoch: "))
        lines.append("\t".join(f for f in fields if not f.startswith("Epoch: ")))
    return lines, epochs
