"""SASL/PLAIN, server side (RFC 4616; Kafka's ``PlainSaslServer``).

Users and passwords come from the ``user_<name>="<password>"`` options of the listener's PLAIN
JAAS config (:mod:`.jaas`). Failures raise :class:`~.scram.SaslFailure` with Kafka's texts.
"""

from __future__ import annotations

import hmac

from pyspark_kafka.broker.security.scram import SaslFailure


class PlainServer:
    """Server side of SASL/PLAIN (RFC 4616) against ``users`` ``{name: password}`` (Kafka's PlainSaslServer)."""

    def __init__(self, users: dict[str, str]):
        self._users = users
        self.complete = False
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        """``authzid NUL user NUL password`` → empty answer. Raises SaslFailure with Kafka's text."""
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslFailure(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = (p.decode("utf-8", errors="replace") for p in parts)
        if not user:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslFailure("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is different from username")
        self.complete, self.username = True, user
        return b""
