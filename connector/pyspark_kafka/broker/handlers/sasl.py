"""SaslHandshake (key 17, v0–v1) and SaslAuthenticate (key 36, v0–v2): KIP-43, KIP-152, KIP-368.

The connection's state machine is :class:`~pyspark_kafka.broker.security.session.Session`;
these handlers drive it as Kafka's ``SaslServerAuthenticator`` does:

- on a PLAINTEXT/SSL listener, or after authentication (SaslAuthenticate), the answer is
  ILLEGAL_SASL_STATE and the connection stays (Kafka's ``KafkaApis`` answers the same);
- a mechanism not in ``sasl.enabled.mechanisms`` → UNSUPPORTED_SASL_MECHANISM with the enabled
  list, then the connection is closed;
- a failed exchange → SASL_AUTHENTICATION_FAILED with Kafka's text (PLAIN: "Authentication
  failed: Invalid username or password"; SCRAM: "Authentication failed during authentication
  due to invalid credentials with SASL mechanism SCRAM-SHA-256"), then the connection is closed.
"""

from __future__ import annotations

from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.handlers import RequestContext, register
from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.security.scram import SaslFailure

log = get_logger("pyspark_kafka.broker.sasl")


@register(api_key=17, min_version=0, max_version=1)
async def sasl_handshake(ctx: RequestContext, request) -> dict:
    """Pick the mechanism of the exchange that follows (v0: raw tokens; v1: SaslAuthenticate)."""
    session = ctx.session
    if session is None or not session.listener.sasl:
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}
    enabled = ctx.broker.security.mechanisms[session.listener.name]
    if session.state not in ("HANDSHAKE", "AUTHENTICATED"):
        session.close_after_response = True
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": list(enabled)}
    mechanism = request.mechanism
    if mechanism not in enabled:
        log.info("closing connection from %s: SASL mechanism %r is not enabled on listener %s (enabled: %s)",
                 ctx.client_host, mechanism[:64], session.listener.name, ", ".join(enabled))
        session.close_after_response = True
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": list(enabled)}
    if session.state == "AUTHENTICATED" and mechanism != session.mechanism:
        session.close_after_response = True  # KIP-368: re-authentication keeps the mechanism
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": list(enabled)}
    session.begin(ctx.broker.security, mechanism, raw=ctx.api_version == 0)
    return {"error_code": ErrorCode.none, "mechanisms": list(enabled)}


@register(api_key=36, min_version=0, max_version=2)
async def sasl_authenticate(ctx: RequestContext, request) -> dict:
    """One SASL token of the exchange chosen by SaslHandshake v1; the answer carries the server's token."""
    session = ctx.session
    if session is None or session.state != "AUTHENTICATE":
        if session is not None and not session.authenticated:
            session.close_after_response = True
        return {"error_code": ErrorCode.illegal_sasl_state, "auth_bytes": b"", "session_lifetime": 0,
                "error_message": "SaslAuthenticate request received after successful authentication"
                if session is None or session.authenticated else "Unexpected SaslAuthenticate request"}
    reauth_ms = ctx.broker.config.get_int("connections.max.reauth.ms")
    try:
        answer = session.evaluate(bytes(request.auth_bytes), reauth_ms)
    except SaslFailure as exc:
        # The reason stays out of the log and the answer beyond Kafka's text (it may name a user).
        log.info("failed authentication with %s (%s on listener %s)", ctx.client_host, session.mechanism,
                 session.listener.name)
        session.close_after_response = True
        return {"error_code": ErrorCode.sasl_authentication_failed, "error_message": str(exc), "auth_bytes": b"",
                "session_lifetime": 0}
    if session.authenticated:
        log.debug("%s on listener %s authenticated as %s with %s", ctx.client_host, session.listener.name,
                  session.principal, session.mechanism)
    lifetime = reauth_ms if session.authenticated and reauth_ms > 0 else 0
    return {"error_code": ErrorCode.none, "error_message": "", "auth_bytes": answer, "session_lifetime": lifetime}
