"""The client configuration a data source's options carry.

Spark hands a data source its options as a case-insensitive string map. Options starting with ``kafka.``
are Kafka client settings and are passed through with the prefix removed, like Spark's built-in Kafka
connector (:func:`kafka_params`). Secrets (``sasl.password``, ``ssl.key.password``, ...) are never
printed: use :func:`redact` before putting a client configuration in a message or log line.
"""

from __future__ import annotations

from typing import Mapping


KAFKA_PREFIX = "kafka."

_SECRET_MARKERS = ("password", "secret", "sasl.jaas.config", "token", "credential", "key.pem", "ssl.key")


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """Return the ``kafka.*`` options as a client config dict, prefix removed.

    ``{"kafka.bootstrap.servers": "h:9092", "subscribe": "t"}`` → ``{"bootstrap.servers": "h:9092"}``.
    Keys are lower-cased (Spark's option map is case-insensitive).
    """
    out = {}
    for k, v in options.items():
        lk = k.lower()
        if lk.startswith(KAFKA_PREFIX):
            out[lk[len(KAFKA_PREFIX):]] = v
    return out


def is_secret(key: str) -> bool:
    """True when a client setting name holds a secret that must not be printed."""
    k = key.lower()
    return any(m in k for m in _SECRET_MARKERS)


def redact(config: Mapping[str, object]) -> dict[str, object]:
    """Copy of ``config`` with secret values replaced by ``"[redacted]"``."""
    return {k: ("[redacted]" if is_secret(str(k)) else v) for k, v in config.items()}
