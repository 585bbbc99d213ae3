"""Java key stores (JKS, PKCS12, PEM) read into PEM text for librdkafka, in memory.

librdkafka takes CA certificates as ``ssl.ca.pem`` and a client certificate and key as
``ssl.certificate.pem`` / ``ssl.key.pem``; Java clients name key store files instead. These
functions read the stores with well-kept libraries (``cryptography`` for PKCS12 and PEM,
``pyjks`` for JKS) and return PEM strings: nothing is written to disk, and no message names a
password or shows key material. As Java 9+ does, a store declared JKS that holds PKCS12 (what
``keytool -storetype JKS`` may write) is read as PKCS12, and the reverse (:func:`stored_format`).
Raises :class:`~pyspark_kafka.errors.OptionError` naming the option and the cause (missing file,
wrong password, no certificate or key inside).
"""

from __future__ import annotations

from pathlib import Path

from pyspark_kafka.errors import OptionError
from pyspark_kafka.kafka.pkcs12 import Pkcs12Error, certificates_pem, key_and_chain, open_pkcs12


def _read(option: str, location: str | None) -> bytes:
    if not location:
        raise OptionError(f"option 'kafka.{option}' is required for this key store type")
    try:
        return Path(location).read_bytes()
    except OSError as e:
        raise OptionError(f"option 'kafka.{option}' = {location!r}: cannot read the key store ({e.strerror or e}); "
                          "the file must exist at this path on the driver and on every executor") from None


_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS


def stored_format(declared: str, data: bytes) -> str:
    """The format a JKS or PKCS12 store is really in, as Java reads it.

    Since Java 9 (``keystore.type.compat=true``) a key store of type JKS or PKCS12 reads a file of
    either format: ``keytool -storetype JKS`` on Java 9+ may write PKCS12. JKS/JCEKS files start with
    their magic number; anything else starting with a DER SEQUENCE (``0x30``) is PKCS12.
    """
    if declared not in ("JKS", "PKCS12"):
        return declared
    if data[:4] in _JKS_MAGIC:
        return "JKS"
    if data[:1] == b"\x30":
        return "PKCS12"
    return declared


def _pem(der: bytes) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    return x509.load_der_x509_certificate(der).public_bytes(Encoding.PEM).decode()


def _jks(option: str, data: bytes, password: str | None):
    try:
        import jks
    except ImportError:
        raise OptionError(f"option 'kafka.{option}' names a JKS key store, which needs the pyjks package "
                          "(pip install \"pyspark-kafka[jks]\"), or convert it: keytool -importkeystore -deststoretype PKCS12") from None
    try:
        return jks.KeyStore.loads(data, password or "")
    except Exception as e:  # pyjks raises its own errors for bad passwords and formats
        raise OptionError(f"option 'kafka.{option}': cannot open the JKS key store ({type(e).__name__}); check "
                          "the key store password and type") from None


def _pkcs12(option: str, data: bytes, password: str | None):
    try:
        return open_pkcs12(data, password)
    except Pkcs12Error as e:
        raise OptionError(f"option 'kafka.{option}': cannot open the PKCS12 key store ({e}); check "
                          "the key store password and type") from None


def truststore_pem(store_type: str, location: str | None, password: str | None, inline: str | None = None) -> str:
    """The CA certificates of a Java trust store as PEM text (``ssl.ca.pem``).

    ``store_type``: JKS, PKCS12 or PEM (``inline`` = ``ssl.truststore.certificates``, or the
    PEM file at ``location``). Raises OptionError when nothing can be read or no certificate is inside.
    """
    option = "ssl.truststore.location"
    if store_type == "PEM":
        text = inline if inline is not None else _read(option, location).decode()
        if "BEGIN CERTIFICATE" not in text:
            raise OptionError(f"option 'kafka.{option}': no PEM certificate found")
        return text
    data = _read(option, location)
    store_type = stored_format(store_type, data)
    if store_type == "JKS":
        store = _jks(option, data, password)
        pems = [_pem(c.cert) for c in store.certs.values()]
        pems += [_pem(der) for entry in store.private_keys.values() for _, der in entry.cert_chain]
    elif store_type == "PKCS12":
        pems = certificates_pem(_pkcs12(option, data, password))
    else:
        raise OptionError(f"option 'kafka.ssl.truststore.type' = {store_type!r}: use JKS, PKCS12 or PEM")
    if not pems:
        raise OptionError(f"option 'kafka.{option}' = {location!r} holds no certificate")
    return "".join(pems)


def keystore_pem(store_type: str, location: str | None, store_password: str | None, key_password: str | None,
                 inline_key: str | None = None, inline_chain: str | None = None) -> tuple[str, str]:
    """``(certificate chain PEM, unencrypted private key PEM)`` of a JKS or PEM key store.

    JKS: the first private key entry, decrypted with ``ssl.key.password`` (else the store
    password). PEM: ``ssl.keystore.key`` / ``ssl.keystore.certificate.chain`` inline, or one PEM
    file at ``location`` holding both. PKCS12 key stores are handed to librdkafka as files
    instead. Raises OptionError when the key or certificate cannot be read.
    """
    from cryptography.hazmat.primitives import serialization

    option = "ssl.keystore.location"
    data = _read(option, location) if store_type == "JKS" else b""
    if store_type == "JKS" and stored_format("JKS", data) == "PKCS12":  # keytool -storetype JKS on Java 9+
        entry = key_and_chain(_pkcs12(option, data, store_password))
        if entry is None:
            raise OptionError(f"option 'kafka.{option}' = {location!r} holds no private key entry")
        key, chain = entry
    elif store_type == "JKS":
        store = _jks(option, data, store_password)
        if not store.private_keys:
            raise OptionError(f"option 'kafka.{option}' = {location!r} holds no private key entry")
        entry = next(iter(store.private_keys.values()))
        if not entry.is_decrypted():
            try:
                entry.decrypt(key_password or store_password or "")
            except Exception:
                raise OptionError("option 'kafka.ssl.key.password': cannot decrypt the private key of the JKS "
                                  "key store; check the key password") from None
        key = serialization.load_der_private_key(entry.pkey_pkcs8, None)
        chain = "".join(_pem(der) for _, der in entry.cert_chain)
    elif store_type == "PEM":
        text = None if inline_key is not None else _read(option, location).decode()
        key_text = inline_key if inline_key is not None else text
        try:
            key = serialization.load_pem_private_key(key_text.encode(), key_password.encode() if key_password else None)
        except Exception:
            raise OptionError("option 'kafka.ssl.keystore.key': cannot read the PEM private key; check "
                              "'kafka.ssl.key.password'") from None
        chain = inline_chain if inline_chain is not None else text
    else:
        raise OptionError(f"option 'kafka.ssl.keystore.type' = {store_type!r}: use JKS, PKCS12 or PEM")
    if not chain or "BEGIN CERTIFICATE" not in chain:
        raise OptionError(f"option 'kafka.{option}': the key store holds no certificate for its key")
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return chain, key_pem
