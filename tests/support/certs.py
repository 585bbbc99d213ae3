"""Test certificates made at run time with ``cryptography`` (no key is checked into the repo).

:func:`make_pki` writes into ``directory``: a CA, a server certificate for 127.0.0.1/localhost
and a client certificate (``CN=client,O=pyspark-kafka``), as PEM files (key and chain in one
file for ``ssl.keystore.type=PEM``) and as PKCS12 stores with a password.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

STORE_PASSWORD = "store-secret-7f3a"


@dataclass
class Pki:
    """Paths of the generated files; ``*_pem`` hold certificate chain + unencrypted key."""

    ca_pem: Path
    server_pem: Path
    server_p12: Path
    client_pem: Path
    client_cert: Path
    client_key: Path
    ca_p12: Path
    server_key_text: str


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pyspark-kafka"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject, issuer, public_key, signing_key, *, ca: bool, san=None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def make_pki(directory: Path) -> Pki:
    """Generate the CA, server and client certificates into ``directory`` (P-256 keys)."""
    directory.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    none = serialization.NoEncryption()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert(_name("test-ca"), _name("test-ca"), ca_key.public_key(), ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _cert(_name("localhost"), ca.subject, server_key.public_key(), ca_key, ca=False,
                   san=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert(_name("client"), ca.subject, client_key.public_key(), ca_key, ca=False)
    out = Pki(directory / "ca.pem", directory / "server.pem", directory / "server.p12", directory / "client.pem",
              directory / "client-cert.pem", directory / "client-key.pem", directory / "ca.p12",
              server_key.private_bytes(pem, pkcs8, none).decode())
    out.ca_pem.write_bytes(ca.public_bytes(pem))
    out.server_pem.write_bytes(server.public_bytes(pem) + ca.public_bytes(pem) + server_key.private_bytes(pem, pkcs8, none))
    out.client_cert.write_bytes(client.public_bytes(pem))
    out.client_key.write_bytes(client_key.private_bytes(pem, pkcs8, none))
    out.client_pem.write_bytes(client.public_bytes(pem) + client_key.private_bytes(pem, pkcs8, none))
    enc = serialization.BestAvailableEncryption(STORE_PASSWORD.encode())
    out.server_p12.write_bytes(pkcs12.serialize_key_and_certificates(b"server", server_key, server, [ca], enc))
    out.ca_p12.write_bytes(pkcs12.serialize_key_and_certificates(b"ca", None, None, [ca], enc))
    return out
