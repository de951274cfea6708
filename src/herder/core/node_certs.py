"""Node certificates signed by the cluster CA, the cluster's list of accepted ones, and join
tokens (docs/real-nodes.md "Joining a node", "noded authenticates callers").

- The cluster CA is `server.pem` (its key and self-signed `CA:TRUE` certificate,
  `core.cluster_secrets`); each node has `node.pem` beside it: its own key and a certificate
  for its name signed by the CA. noded serves with it, and herder's node-RPC clients show it.
- The cluster config lists every node's certificate digest (`cluster.node_certs`, node UUID ->
  SHA-256 of the DER certificate); every node receives the list as ssconf
  `herder_node_certs` (`<digest> <node name>` a line). noded accepts a caller only when its
  certificate is signed by the CA and its digest is listed: `node remove` takes the digest out,
  and every node refuses the removed node from then on.
- A join token is `<secret>.<sha256 of the bootstrap certificate>`: the fresh node's noded
  serves with a bootstrap certificate the master pins by that digest, and the master proves
  it knows the secret with an HMAC over the node's challenge (`proof`).

Pure functions over bytes; the files are read and written by their callers.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from herder.core.errors import HerderError

if TYPE_CHECKING:  # cryptography is imported where it is used: daemons that only need the
    # file names should not load it
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

NODE_CERT_FILE = "node.pem"  # beside the config: this node's key and certificate
JOIN_TOKEN_FILE = "join-token"  # beside the config on a node that has not joined yet
JOIN_CERT_FILE = "join.pem"  # the bootstrap key and certificate the token pins
SSCONF_NAME = "herder_node_certs"
NODE_CERT_DAYS = 5 * 365
TOKEN_SECRET_BYTES = 24


class CertificateError(HerderError):
    """A certificate, request or token that cannot be used."""


def node_certificate_beside(cluster_certificate: Path) -> Path:
    return cluster_certificate.parent / NODE_CERT_FILE


def _load_cert(pem: bytes) -> x509.Certificate:
    from cryptography import x509

    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as err:
        raise CertificateError(f"not a PEM certificate: {err}") from None


def validity(pem: bytes) -> tuple[float, float]:
    """(not before, not after) of the (first) certificate in `pem`, as POSIX times."""
    cert = _load_cert(pem)
    return cert.not_valid_before_utc.timestamp(), cert.not_valid_after_utc.timestamp()


def certificate_pem(pem: bytes) -> bytes:
    """The (first) certificate of a PEM blob that may also hold a private key."""
    from cryptography.hazmat.primitives import serialization

    return bytes(_load_cert(pem).public_bytes(serialization.Encoding.PEM))


def common_name(pem: bytes) -> str:
    """The subject's common name of the (first) certificate in `pem`."""
    from cryptography.x509.oid import NameOID

    found = _load_cert(pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not found:
        raise CertificateError("the certificate names no common name")
    return str(found[0].value)


def digest_der(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def digest(pem: bytes) -> str:
    """SHA-256 (hex) of the DER form of the first certificate in `pem`."""
    from cryptography.hazmat.primitives import serialization

    return digest_der(_load_cert(pem).public_bytes(serialization.Encoding.DER))


def bundle_digests(pem: bytes) -> list[str]:
    """SHA-256 (hex) of the DER form of each certificate of a PEM bundle (a CA file)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as err:
        raise CertificateError(f"not a PEM certificate bundle: {err}") from None
    return [digest_der(c.public_bytes(serialization.Encoding.DER)) for c in certs]


def _key_pem(key: PrivateKeyTypes) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(key.private_bytes(serialization.Encoding.PEM,
                                   serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))


def new_request(node_name: str) -> tuple[bytes, bytes]:
    """A new private key and a certificate signing request for `node_name`: (key PEM, CSR PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_name)]))
           .sign(key, hashes.SHA256()))
    return _key_pem(key), csr.public_bytes(serialization.Encoding.PEM)


def sign_request(ca_pem: bytes, csr_pem: bytes, node_name: str) -> bytes:
    """The node certificate (PEM) for a CSR, issued by the CA in `ca_pem` (its key and
    certificate: `server.pem`). The subject is `node_name` whatever the request says: the
    master decides which node this is."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    try:
        csr = x509.load_pem_x509_csr(csr_pem)
    except ValueError as err:
        raise CertificateError(f"not a certificate signing request: {err}") from None
    if not csr.is_signature_valid:
        raise CertificateError("the certificate signing request's signature is invalid")
    try:
        ca_key = serialization.load_pem_private_key(ca_pem, password=None)
    except ValueError as err:
        raise CertificateError(f"cannot load the cluster CA's key: {err}") from None
    ca_cert = _load_cert(ca_pem)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(csr.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=NODE_CERT_DAYS))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(node_name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # the CA by its key, not its name: a renewed CA has the same name (renew-crypto)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca_cert.public_key()), critical=False)  # type: ignore[arg-type]  # an EC key
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]  # the CA key is EC (ours)
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def issue(ca_pem: bytes, node_name: str) -> bytes:
    """A key and node certificate for `node_name` as one PEM (`node.pem`): `cluster init`
    issues the master's itself."""
    key_pem, csr_pem = new_request(node_name)
    return key_pem + sign_request(ca_pem, csr_pem, node_name)


def is_issued_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """Whether the certificate's signature is the CA's (and it is not the CA itself)."""
    cert, ca_cert = _load_cert(cert_pem), _load_cert(ca_pem)
    if cert == ca_cert:
        return False
    from cryptography.exceptions import InvalidSignature

    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def issued_by_another(der: bytes) -> bool:
    """Whether a certificate (DER) was issued by someone else (a node certificate of some
    cluster), not self-signed (a join's bootstrap certificate)."""
    from cryptography import x509

    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return False
    return bool(cert.issuer != cert.subject)


def matches_key(cert_pem: bytes, key_pem: bytes) -> bool:
    """Whether the certificate is for this private key."""
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError:
        return False
    encoding, public = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(_load_cert(cert_pem).public_key().public_bytes(encoding, public)
                == key.public_key().public_bytes(encoding, public))


# --- the cluster's list (ssconf herder_node_certs) ----------------------------------------------


def format_list(rows: Iterable[tuple[str, str]]) -> str:
    """The ssconf value: `<digest> <node name>` a line, from (node name, digest) rows."""
    return "".join(f"{cert_digest} {name}\n" for name, cert_digest in sorted(rows))


def parse_list(text: str) -> dict[str, str]:
    """digest -> node name from the ssconf value (malformed lines skipped)."""
    accepted: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and len(fields[0]) == 64:
            accepted[fields[0].lower()] = fields[1]
    return accepted


def list_rows(node_certs: Mapping[str, str],
              names: Mapping[str, str]) -> list[tuple[str, str]]:
    """(node name, digest) for the config's `node_certs` (node UUID -> digest); `names`: UUID ->
    name. A digest of a node no longer in the config is left out."""
    return [(names[uuid], cert_digest) for uuid, cert_digest in node_certs.items()
            if uuid in names]


# --- join tokens --------------------------------------------------------------------------------


def make_token(bootstrap_pem: bytes) -> str:
    return f"{secrets.token_urlsafe(TOKEN_SECRET_BYTES)}.{digest(bootstrap_pem)}"


def parse_token(token: str) -> tuple[str, str]:
    """(secret, certificate digest); CertificateError when it is no join token."""
    secret, dot, pinned = token.strip().rpartition(".")
    if not dot or not secret or len(pinned) != 64 \
            or any(ch not in "0123456789abcdef" for ch in pinned.lower()):
        raise CertificateError("not a join token (expected <secret>.<64 hex digits>; "
                               "`herder node join-token` on the node prints it)")
    return secret, pinned.lower()


def proof(secret: str, *parts: str) -> str:
    """HMAC-SHA256 with the token's secret over the parts (a challenge and what it is for)."""
    return hmac.new(secret.encode(), "\0".join(parts).encode(), hashlib.sha256).hexdigest()


def proof_matches(secret: str, given: str, *parts: str) -> bool:
    return hmac.compare_digest(proof(secret, *parts), given.lower())
