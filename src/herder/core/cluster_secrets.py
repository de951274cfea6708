"""The cluster's secrets, created beside the config at `herder cluster init` (all mode 0600).

- `hmac.key`: the cluster HMAC key (Ganeti's format: 40 hex digits and a newline), used by
  `herder.core.envelope` for confd, mond's diagnose report and maintd.
- `server.pem`: a self-signed certificate and its private key, for TLS between herder daemons
  (one PEM file with key and certificate, as Ganeti's `server.pem`); the cluster CA that
  issues the node certificates.
- `rapi_users`: the remote API users file (Ganeti's format: `user password [write]`).
- `cluster-domain-secret`: Ganeti's cluster domain secret (40 hex digits and a newline), which
  signs the messages of a move between clusters (`core.remote_export`): two clusters that move
  instances between them hold the same one (copy one cluster's file to the other).
- `node.pem` (not one of the cluster-wide secrets: each node has its own): the master's node
  certificate, issued by `server.pem` (`core.node_certs`).
"""

from __future__ import annotations

import datetime
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from herder.core import envelope
from herder.core.errors import StoreError

SECRET_MODE = 0o600
HMAC_KEY_FILE = "hmac.key"
CERT_FILE = "server.pem"
RAPI_USERS_FILE = "rapi_users"
DOMAIN_SECRET_FILE = "cluster-domain-secret"
CERT_VALIDITY_DAYS = 5 * 365
RETIRING = ".retiring"  # beside hmac.key and server.pem during a rotation (renew-crypto)


@dataclass(frozen=True)
class SecretPaths:
    hmac_key: Path
    certificate: Path
    rapi_users: Path

    @classmethod
    def beside(cls, config_path: Path) -> SecretPaths:
        directory = config_path.parent
        return cls(
            directory / HMAC_KEY_FILE, directory / CERT_FILE, directory / RAPI_USERS_FILE
        )

    def all(self) -> tuple[Path, Path, Path]:
        return (self.hmac_key, self.certificate, self.rapi_users)

    def hmac_keys(self) -> list[bytes]:
        """The HMAC keys a signed message may carry: the key (none when it is absent), and
        during a rotation the previous one beside it."""
        return [envelope.load_key(path) for path in (self.hmac_key, retiring(self.hmac_key))
                if path.exists()]


def retiring(path: Path) -> Path:
    """Where a rotation keeps the previous file, accepted until it is retired."""
    return path.with_name(path.name + RETIRING)


def write_secret(path: Path, data: bytes) -> None:
    """Create a file readable by its owner only; refuses to replace an existing one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, SECRET_MODE)
    except FileExistsError:
        raise StoreError(f"{path} already exists; refusing to overwrite a cluster secret") from None
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def self_signed_certificate(common_name: str) -> bytes:
    """A private key and a self-signed certificate for `common_name`, as one PEM blob."""
    # Imported here: daemons that only need the file names should not load cryptography.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERT_VALIDITY_DAYS))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(common_name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        # a renewed CA has the same name: certificates find theirs by the key identifier
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem + cert.public_bytes(serialization.Encoding.PEM)


def rapi_users_file(user: str = "admin") -> tuple[bytes, str]:
    """A users file with one write-enabled user; returns (file content, password)."""
    password = secrets.token_urlsafe(18)
    content = (
        "# herder remote API users: <user> <password> [write]\n"
        f"{user} {password} write\n"
    )
    return content.encode(), password


def create_all(paths: SecretPaths, cluster_name: str, hmac_key: bytes | None = None,
               node_name: str | None = None) -> str | None:
    """Create every secret; refuses (before writing any) if one already exists. With
    `node_name` (the master), also its node certificate (`node.pem`, issued by the cluster
    certificate, `core.node_certs`); returns its digest."""
    from herder.core import node_certs

    node_pem = node_certs.node_certificate_beside(paths.certificate)
    existing = [str(p) for p in (*paths.all(), node_pem) if p.exists()]
    if existing:
        raise StoreError(f"cluster secrets already exist: {', '.join(existing)}")
    write_secret(paths.hmac_key, hmac_key if hmac_key is not None else envelope.generate_key())
    write_secret(paths.certificate, self_signed_certificate(cluster_name))
    write_secret(paths.rapi_users, rapi_users_file()[0])
    domain_secret = paths.certificate.with_name(DOMAIN_SECRET_FILE)
    if not domain_secret.exists():  # another cluster's, copied here before: kept
        write_secret(domain_secret, secrets.token_hex(20).encode() + b"\n")
    if node_name is None:
        return None
    write_secret(node_pem, node_certs.issue(paths.certificate.read_bytes(), node_name))
    return node_certs.digest(node_pem.read_bytes())
