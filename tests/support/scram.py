"""SASL/SCRAM logins for tests: does a user authenticate on a listener (librdkafka, bounded wait)."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient


def logs_in(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> bool:
    """Whether a librdkafka client bootstrapped on ``bootstrap`` (a SASL_PLAINTEXT listener) authenticates as
    ``user`` with ``mechanism``: True once a Metadata request is answered, False at the first authentication error.
    AssertionError when neither comes within 10 s."""
    errors = []
    admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password,
                         "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.2)
            return True
        except KafkaException:
            admin.poll(0)  # serves error_cb
            if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
                return False
    raise AssertionError(f"no answer and no authentication error within 10 s: {errors}")
