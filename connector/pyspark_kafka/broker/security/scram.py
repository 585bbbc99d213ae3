"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677; Kafka's ``ScramSaslServer``, KIP-84).

A credential is ``ScramCredential(salt, stored_key, server_key, iterations)``: the password and
the salted password are never kept. :class:`ScramServer` runs one exchange:
client-first → server-first → client-final → server-final. Failures raise :class:`SaslFailure`
with Kafka's client-facing text, which never says whether the user or the password was wrong.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

#: mechanism name -> (hashlib name, Kafka's ScramMechanism type id on the wire, min iterations)
MECHANISMS = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}
MECHANISM_BY_ID = {v[1]: k for k, v in MECHANISMS.items()}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # Kafka's AlterUserScramCredentials upper bound
DEFAULT_ITERATIONS = 4096


class SaslFailure(Exception):
    """A failed SASL exchange; ``str()`` is the message the client is sent (SASL_AUTHENTICATION_FAILED)."""


@dataclass(frozen=True)
class ScramCredential:
    """One user's credential for one mechanism: ``salt`` (bytes), ``stored_key`` = H(ClientKey),
    ``server_key`` = HMAC(SaltedPassword, "Server Key"), ``iterations`` (≥ 4096)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(algo: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, algo).digest()


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """The stored form of ``salted_password`` = Hi(password, salt, iterations) (what AlterUserScramCredentials sends)."""
    algo = MECHANISMS[mechanism][0]
    client_key = _hmac(algo, salted_password, b"Client Key")
    return ScramCredential(salt, hashlib.new(algo, client_key).digest(),
                           _hmac(algo, salted_password, b"Server Key"), iterations)


def new_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """A fresh credential for ``password`` with a random 32-byte salt (Kafka's ScramFormatter)."""
    salt = os.urandom(32)
    salted = hashlib.pbkdf2_hmac(MECHANISMS[mechanism][0], password.encode(), salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


def _saslname(text: str) -> str:
    """RFC 5802 saslname decoding (``=2C`` → ``,``, ``=3D`` → ``=``)."""
    return text.replace("=2C", ",").replace("=3D", "=")


def _attrs(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        # one-letter RFC 5802 attributes; longer keys are Kafka's extensions (tokenauth=true)
        out.setdefault(key if sep and len(key) == 1 else "ext:" + key, value)
    return out


class ScramServer:
    """Server side of one SCRAM exchange for ``mechanism`` (``SCRAM-SHA-256``/``-512``).

    ``lookup(user) -> ScramCredential | None``; ``server_nonce`` fixes the server's nonce (tests). :meth:`evaluate` takes each client token and
    returns the server's token; :attr:`complete` and :attr:`username` once done. Raises
    SaslFailure (the client is told only that authentication failed).
    """

    def __init__(self, mechanism: str, lookup, server_nonce: str | None = None):
        self._server_nonce = server_nonce  # tests only (RFC 7677's example); else 24 random bytes
        self.mechanism = mechanism
        self.algo = MECHANISMS[mechanism][0]
        self._lookup = lookup
        self._step = 0
        self.complete = False
        self.username: str | None = None
        self._generic = f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"

    def evaluate(self, token: bytes) -> bytes:
        """One client token → the server's answer. Raises SaslFailure."""
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure(self._generic) from None
        if self._step == 0:
            return self._client_first(text)
        if self._step == 1:
            return self._client_final(text)
        raise SaslFailure(self._generic)

    def _client_first(self, text: str) -> bytes:
        # gs2-header: cbind-flag "," [authzid] ","
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and not parts[1].startswith("a=")):
            raise SaslFailure(self._generic)
        authzid = _saslname(parts[1][2:]) if parts[1] else ""
        bare = parts[2]
        attrs = _attrs(bare)
        user, nonce = attrs.get("n"), attrs.get("r")
        if not user or not nonce or not bare.startswith("n="):
            raise SaslFailure(self._generic)
        if attrs.get("ext:tokenauth", "").lower() == "true":
            raise SaslFailure(self._generic)  # delegation tokens are not supported
        user = _saslname(user)
        credential = self._lookup(user)
        if credential is None:
            raise SaslFailure(self._generic)
        if authzid and authzid != user:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is different from username")
        self._credential = credential
        self._user = user
        self._gs2 = f"{parts[0]},{parts[1]},"
        self._nonce = nonce + (self._server_nonce or base64.b64encode(os.urandom(24)).decode())
        server_first = f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        self._auth_prefix = f"{bare},{server_first}"
        self._step = 1
        return server_first.encode()

    def _client_final(self, text: str) -> bytes:
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        attrs = _attrs(without_proof)
        if not sep or attrs.get("r") != self._nonce:
            raise SaslFailure(self._generic)
        try:
            binding = base64.b64decode(attrs.get("c", ""), validate=True)
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise SaslFailure(self._generic) from None
        if binding != self._gs2.encode():
            raise SaslFailure(self._generic)
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        cred = self._credential
        signature = _hmac(self.algo, cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslFailure(self._generic)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.algo, client_key).digest(), cred.stored_key):
            raise SaslFailure(self._generic)
        self._step = 2
        self.complete = True
        self.username = self._user
        return ("v=" + base64.b64encode(_hmac(self.algo, cred.server_key, auth_message)).decode()).encode()
