"""PKCS12 stores decoded into PEM text, once for both halves of the package.

The connector (:mod:`pyspark_kafka.kafka.keystores`: a client's ``kafka.ssl.*`` options for librdkafka) and the
embedded broker (:mod:`pyspark_kafka.broker.security.tls`: a listener's ``ssl.*`` configs) both read
PKCS12 key and trust stores with ``cryptography``; each turns :class:`Pkcs12Error` into its own error
naming its own option or config. This module imports neither half.
"""

from __future__ import annotations


class Pkcs12Error(ValueError):
    """The store cannot be opened (wrong password, not PKCS12); the message is the cause's type name."""


def open_pkcs12(data: bytes, password: str | None):
    """``cryptography``'s ``PKCS12KeyAndCertificates`` of the store ``data`` (bytes), opened with ``password``
    (None or empty: no password). Raises :class:`Pkcs12Error`."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        return pkcs12.load_pkcs12(data, password.encode() if password else None)
    except Exception as e:
        raise Pkcs12Error(type(e).__name__) from None


def certificates_pem(store) -> list[str]:
    """Every certificate of an opened store (its key entry's first, then the others) as PEM text."""
    from cryptography.hazmat.primitives.serialization import Encoding

    certs = ([store.cert] if store.cert is not None else []) + list(store.additional_certs)
    return [c.certificate.public_bytes(Encoding.PEM).decode() for c in certs]


def key_and_chain(store):
    """``(private key, certificate chain PEM text)`` of an opened store's key entry; None when it has none."""
    if store.key is None or store.cert is None:
        return None
    return store.key, "".join(certificates_pem(store))
