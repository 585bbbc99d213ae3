"""ApiVersions (key 18): the API keys and version ranges this broker serves (KIP-35, KIP-511), and
from v3 on the features it supports and has finalized (KIP-584).

The ranges come from the handler registry, so they are exactly what is implemented. A request
with an unsupported ApiVersions version is answered by the server with a v0 response carrying
UNSUPPORTED_VERSION (35) and these ranges (see ``server._dispatch``).

Features (``kafka-features describe`` reads them through the admin client's describeFeatures):
only the features whose levels this broker implements are listed, at the levels Apache Kafka 4.4.0
reports where ours match (measured on a one-node combined-mode Kafka 4.4.0; the choices and the
differences are in docs/broker-behaviour.md, "Features"). Kafka's other features
(``transaction.version``, ``eligible.leader.replicas.version``, ``share.version``,
``streams.version``) are left out: a finalized level changes what clients do (``transaction.version``
2 makes Java 4.x producers use KIP-890 transactions, which need Produce v12 and EndTxn v5), and this
broker does not implement them.
"""

from __future__ import annotations

from pyspark_kafka.broker.controller.image import BOOTSTRAP_FEATURES, METADATA_VERSION_4_4_IV2
from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.handlers import REGISTRY, RequestContext, register

SUPPORTED_FEATURES: tuple[tuple[str, int, int], ...] = (
    ("group.version", 0, 1),        # 1: KIP-848 consumer groups (ConsumerGroupHeartbeat 68, ConsumerGroupDescribe 69)
    ("kraft.version", 0, 0),        # 0: static voters only; no KIP-853 dynamic quorum (AddRaftVoter 80) here
    ("metadata.version", 7, METADATA_VERSION_4_4_IV2),
)
"""``(name, min level, max level)`` this broker supports, in the order Kafka 4.4.0 lists them."""

FINALIZED_FEATURES: tuple[tuple[str, int], ...] = tuple(sorted(BOOTSTRAP_FEATURES))
"""``(name, level)`` finalized by the transitional single node (no metadata image): a new cluster's levels. A
cluster broker answers its metadata image's levels instead. A level-0 feature (``kraft.version``) is not listed,
as Kafka leaves level-0 features out of FinalizedFeatures; ``kafka-features describe`` prints it as level 0."""

FINALIZED_FEATURES_EPOCH = 1
"""The transitional single node's FinalizedFeaturesEpoch (a constant: its set is fixed in code). A cluster broker
answers its metadata image's offset, as Kafka's ``KRaftMetadataCache.features`` does
(``image.highestOffsetAndEpoch().offset()``); a client that sees two epochs keeps the features of the higher one."""


def api_versions_body(error_code: ErrorCode = ErrorCode.none, version: int = 0,
                      finalized: tuple[dict[str, int], int] | None = None) -> dict:
    """The ApiVersions response body for response ``version`` (int, 0-4).

    ``error_code`` and one entry per registered API key; from v3 on also ``supported_features``,
    ``finalized_features`` and ``finalized_features_epoch`` (tagged fields, KIP-584): ``finalized`` is
    (name -> level, epoch) from the metadata image, None for the fixed :data:`FINALIZED_FEATURES` and
    :data:`FINALIZED_FEATURES_EPOCH`. Below v4 a supported feature whose minimum level is 0 is left out,
    as Kafka does (the schema's note on SupportedFeatures: "in v0-v3, features with MinSupportedVersion = 0
    are omitted"); v0-v2 have no feature fields (the encoder drops them)."""
    body = {
        "error_code": error_code,
        "api_keys": [
            {"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
            for api in sorted(REGISTRY.values(), key=lambda a: a.key)
        ],
        "throttle_time": 0,
    }
    if version >= 3:
        body["supported_features"] = [
            {"name": name, "min_version": low, "max_version": high}
            for name, low, high in SUPPORTED_FEATURES if version >= 4 or low > 0
        ]
        levels, epoch = (dict(FINALIZED_FEATURES), FINALIZED_FEATURES_EPOCH) if finalized is None else finalized
        body["finalized_features"] = [
            {"name": name, "min_version_level": level, "max_version_level": level}
            for name, level in sorted(levels.items()) if level > 0
        ]
        body["finalized_features_epoch"] = epoch
    return body


@register(api_key=18, min_version=0, max_version=4)
async def api_versions(ctx: RequestContext, request) -> dict:
    """Answer with every served API key and its inclusive version range, and (v3+) the features: a cluster
    broker's finalized levels and epoch come from its metadata image (Kafka's ``DefaultApiVersionManager`` over
    ``MetadataCache.features``)."""
    lifecycle = getattr(ctx.broker, "lifecycle", None)
    finalized = None
    if lifecycle is not None and ctx.api_version >= 3:
        finalized = (lifecycle.image.finalized_features(), max(lifecycle.image.offset, 0))
    return api_versions_body(version=ctx.api_version, finalized=finalized)
