"""The server ``ssl.SSLContext`` of an SSL or SASL_SSL listener, from Kafka's ``ssl.*`` broker configs.

Each config is read per listener (``listener.name.<listener>.ssl.*`` over ``ssl.*``, as Kafka):

- key store: ``ssl.keystore.type`` PEM (``ssl.keystore.location`` = one PEM file with the
  certificate chain and the private key, or ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``
  inline; an encrypted key needs ``ssl.key.password``) or PKCS12 (``ssl.keystore.location`` +
  ``ssl.keystore.password``). JKS is refused with a fix (convert to PKCS12).
- trust store (client certificates' CAs): ``ssl.truststore.type`` PEM (file or
  ``ssl.truststore.certificates``) or PKCS12 (with ``ssl.truststore.password``).
- ``ssl.client.auth``: none / requested / required; ``ssl.enabled.protocols``: TLSv1.2, TLSv1.3;
  ``ssl.cipher.suites``: OpenSSL cipher names (TLS 1.2 only), empty = OpenSSL's defaults.

The key never reaches the disk: it is handed to OpenSSL through an anonymous memory file.
Errors are :class:`~pyspark_kafka.broker.errors.ConfigError` naming the config, never a
password or key material.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path

from pyspark_kafka.broker.errors import ConfigError
from pyspark_kafka.kafka.pkcs12 import Pkcs12Error, certificates_pem, key_and_chain, open_pkcs12

_PROTOCOL_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _read(config_name: str, location: str | None) -> bytes:
    if not location:
        raise ConfigError(f"broker config {config_name} is required for this listener's key or trust store")
    try:
        return Path(location).read_bytes()
    except OSError as e:
        raise ConfigError(f"broker config {config_name}={location!r}: cannot read the file ({e.strerror or e})") from None


def _pkcs12(config_name: str, data: bytes, password: str | None):
    try:
        return open_pkcs12(data, password)
    except Pkcs12Error as e:
        raise ConfigError(f"broker config {config_name}: cannot open the PKCS12 store ({e}); "
                          "check its password and ssl.*store.type") from None


def keystore(get) -> tuple[bytes, bytes]:
    """``(certificate chain PEM, unencrypted PKCS8 key PEM)`` from the key store configs read by ``get(name)``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import Encoding

    kind = get("ssl.keystore.type")
    if kind == "PKCS12":
        p12 = _pkcs12("ssl.keystore.location", _read("ssl.keystore.location", get("ssl.keystore.location")),
                      get("ssl.keystore.password"))
        entry = key_and_chain(p12)
        if entry is None:
            raise ConfigError("broker config ssl.keystore.location: the PKCS12 key store holds no private key entry")
        key, chain = entry[0], entry[1].encode()
    elif kind == "PEM":
        inline_key = get("ssl.keystore.key")
        text = None if inline_key is not None else _read("ssl.keystore.location", get("ssl.keystore.location"))
        key_text = inline_key.encode() if inline_key is not None else text
        password = get("ssl.key.password")
        try:
            key = serialization.load_pem_private_key(key_text, password.encode() if password else None)
        except Exception:
            raise ConfigError("broker config ssl.keystore.key/ssl.keystore.location: cannot read the PEM private "
                              "key; check that it is PEM (PKCS8) and ssl.key.password") from None
        inline_chain = get("ssl.keystore.certificate.chain")
        chain = inline_chain.encode() if inline_chain is not None else text
        if b"BEGIN CERTIFICATE" not in (chain or b""):
            raise ConfigError("broker config ssl.keystore.certificate.chain/ssl.keystore.location: "
                              "no PEM certificate found for the key")
    else:
        raise ConfigError(f"broker config ssl.keystore.type={kind}: this broker reads PEM and PKCS12 key stores; "
                          "convert a JKS store with keytool -importkeystore -deststoretype PKCS12")
    key_pem = key.private_bytes(Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return chain, key_pem


def truststore(get) -> str | None:
    """The trusted CA certificates as PEM text, or None when no trust store is configured."""
    kind = get("ssl.truststore.type")
    inline = get("ssl.truststore.certificates")
    location = get("ssl.truststore.location")
    if inline is None and location is None:
        return None
    if kind == "PEM":
        text = inline if inline is not None else _read("ssl.truststore.location", location).decode()
        if "BEGIN CERTIFICATE" not in text:
            raise ConfigError("broker config ssl.truststore.location/ssl.truststore.certificates: no PEM certificate found")
        return text
    if kind == "PKCS12":
        p12 = _pkcs12("ssl.truststore.location", _read("ssl.truststore.location", location),
                      get("ssl.truststore.password"))
        certs = certificates_pem(p12)
        if not certs:
            raise ConfigError("broker config ssl.truststore.location: the PKCS12 trust store holds no certificate")
        return "".join(certs)
    raise ConfigError(f"broker config ssl.truststore.type={kind}: this broker reads PEM and PKCS12 trust stores; "
                      "convert a JKS store with keytool -importkeystore -deststoretype PKCS12")


def _load_chain(context: ssl.SSLContext, chain: bytes, key_pem: bytes) -> None:
    """Load cert + key into ``context`` without writing the key to disk (memfd on Linux)."""
    blob = chain + b"\n" + key_pem
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("pyspark-kafka-keystore", os.MFD_CLOEXEC)
        try:
            os.write(fd, blob)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory() as d:  # 0700 directory, removed at once
        path = Path(d) / "keystore.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        context.load_cert_chain(str(path))


def server_context(config, listener: str) -> ssl.SSLContext:
    """The TLS server context of ``listener`` (name as in ``listeners``) from ``config`` (BrokerConfig).

    Raises ConfigError for a missing/unreadable store, a wrong password, an unknown protocol.
    """

    def get(name: str) -> str | None:
        return config.for_listener(listener, name)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    chain, key_pem = keystore(get)
    try:
        _load_chain(context, chain, key_pem)
    except ssl.SSLError as e:
        raise ConfigError(f"listener {listener}: the key store's certificate and key do not load ({e.reason}); "
                          "check that the key belongs to the first certificate") from None
    protocols = [p.strip() for p in (get("ssl.enabled.protocols") or "").split(",") if p.strip()]
    unknown = [p for p in protocols if p not in _PROTOCOL_VERSIONS]
    if unknown or not protocols:
        raise ConfigError(f"broker config ssl.enabled.protocols={get('ssl.enabled.protocols')!r}: use TLSv1.2 "
                          "and/or TLSv1.3")
    versions = sorted(_PROTOCOL_VERSIONS[p] for p in protocols)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        try:
            context.set_ciphers(":".join(c.strip() for c in ciphers.split(",")))
        except ssl.SSLError:
            raise ConfigError(f"broker config ssl.cipher.suites={ciphers!r}: no cipher OpenSSL knows") from None
    auth = get("ssl.client.auth") or "none"
    cas = truststore(get)
    if auth != "none":
        if cas is None:
            raise ConfigError(f"listener {listener}: ssl.client.auth={auth} needs a trust store "
                              "(ssl.truststore.location or ssl.truststore.certificates) holding the clients' CA")
        context.load_verify_locations(cadata=cas)
        context.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    return context


def certificate_principal(ssl_object) -> str | None:
    """``User:<subject DN>`` of the peer's verified certificate (RFC 2253 order, as Java's
    ``X500Principal.getName()`` used by Kafka's ``DefaultKafkaPrincipalBuilder``), or None."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    from cryptography import x509

    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()
