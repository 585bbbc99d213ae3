"""ApiVersions (key 18): the API keys and version ranges this broker serves (KIP-35, KIP-511).

The ranges come from the handler registry, so they are exactly what is implemented. A request
with an unsupported ApiVersions version is answered by the server with a v0 response carrying
UNSUPPORTED_VERSION (35) and these ranges (see ``server._dispatch``).
"""

from __future__ import annotations

from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.handlers import REGISTRY, RequestContext, register


def api_versions_body(error_code: ErrorCode = ErrorCode.none) -> dict:
    """The ApiVersions response body: ``error_code`` and one entry per registered API key."""
    return {
        "error_code": error_code,
        "api_keys": [
            {"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
            for api in sorted(REGISTRY.values(), key=lambda a: a.key)
        ],
        "throttle_time": 0,
    }


@register(api_key=18, min_version=0, max_version=4)
async def api_versions(ctx: RequestContext, request) -> dict:
    """Answer with every served API key and its inclusive version range."""
    return api_versions_body()
