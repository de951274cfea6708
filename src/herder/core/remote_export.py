"""The signed messages of a remote export/import between two clusters (Ganeti's `RIE`
protocol, lib/masterd/instance.py and utils/x509.py; `tools/move-instance` carries them from
one cluster's RAPI to the other's): both clusters hold the same cluster domain secret, and
every piece one cluster hands the other is HMAC-SHA1 signed with it, salted, as Ganeti signs
it, so a herder cluster and a Ganeti 3.0 cluster check each other's messages.

- the handshake: `(version, hmac("version:Hi, I'm Ganeti"), salt)`;
- the X509 key name: `(name, hmac(name), salt)`;
- an X509 CA certificate: PEM preceded by `X-Ganeti-Signature: salt/hmac(pem)` and a blank
  line;
- the destination of one disk's stream: `(host, port, magic, hmac("index:host:port:magic"),
  salt)`.

Pure logic: the secret is read by the caller (`read_domain_secret`)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from herder.core.cluster_secrets import DOMAIN_SECRET_FILE

RIE_VERSION = 0
RIE_HANDSHAKE = "Hi, I'm Ganeti"
SIGNATURE_HEADER = "X-Ganeti-Signature"
_SALT = re.compile(r"^[a-zA-Z0-9]+$")
_SIGNATURE = re.compile(rf"^{re.escape(SIGNATURE_HEADER)}:\s*(?P<salt>[a-zA-Z0-9]+)/"
                        r"(?P<sign>[a-zA-Z0-9]+)$", re.I)


class RemoteExportError(ValueError):
    """A message of the other cluster that does not check (one line)."""


def generate_salt() -> str:
    """Ganeti's `GenerateSecret(8)`: 16 hex digits."""
    return secrets.token_hex(8)


def sha1_hmac(key: str, message: str, salt: str = "") -> str:
    """Ganeti's `utils.Sha1Hmac`: HMAC-SHA1 of salt + message, hex."""
    return hmac.new(key.encode(), (salt + message).encode(), hashlib.sha1).hexdigest()


def verify_sha1_hmac(key: str, message: str, digest: str, salt: str = "") -> bool:
    return hmac.compare_digest(digest.lower(), sha1_hmac(key, message, salt))


def read_domain_secret(config_dir: Path) -> str:
    """The cluster domain secret (Ganeti's file: one line); a clear error when the cluster
    has none."""
    path = config_dir / DOMAIN_SECRET_FILE
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or "not text"
        raise RemoteExportError(f"cannot read the cluster domain secret {path}: {reason} "
                                "(both clusters need the same one)") from None
    if len(lines) != 1 or not lines[0].strip():
        raise RemoteExportError(f"the cluster domain secret {path} is not one line")
    return lines[0].strip()


def _handshake_message(version: object) -> str:
    return f"{version}:{RIE_HANDSHAKE}"


def compute_handshake(cds: str) -> tuple[int, str, str]:
    salt = generate_salt()
    return (RIE_VERSION, sha1_hmac(cds, _handshake_message(RIE_VERSION), salt), salt)


def check_handshake(cds: str, handshake: object) -> None:
    """Ganeti's CheckRemoteExportHandshake: the other cluster's handshake, or a clear error."""
    if not isinstance(handshake, (list, tuple)) or len(handshake) != 3:
        raise RemoteExportError("invalid handshake: (version, hmac, salt) expected")
    version, digest, salt = handshake
    if not isinstance(digest, str) or not isinstance(salt, str) or \
            not verify_sha1_hmac(cds, _handshake_message(version), digest, salt):
        raise RemoteExportError("hash didn't match, clusters don't share the same domain "
                                "secret")
    if version != RIE_VERSION:
        raise RemoteExportError("clusters don't have the same remote import/export protocol "
                                f"(local={RIE_VERSION}, remote={version})")


def sign_key_name(cds: str, name: str) -> tuple[str, str, str]:
    salt = generate_salt()
    return (name, sha1_hmac(cds, name, salt), salt)


def check_key_name(cds: str, key_name: object) -> str:
    """The name of a signed X509 key name (Ganeti's LUBackupExport check)."""
    if not isinstance(key_name, (list, tuple)) or len(key_name) != 3 or \
            not all(isinstance(part, str) for part in key_name):
        raise RemoteExportError("invalid X509 key name: (name, hmac, salt) expected")
    name, digest, salt = key_name
    if not verify_sha1_hmac(cds, name, digest, salt):
        raise RemoteExportError("HMAC for X509 key name is wrong")
    return str(name)


def _sane_pem(pem: str) -> tuple[x509.Certificate, str]:
    """The certificate and its PEM as Ganeti dumps it (loaded and dumped again)."""
    try:
        cert = x509.load_pem_x509_certificate(pem.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise RemoteExportError("the X509 certificate is not a PEM certificate") from None
    return cert, cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def sign_certificate(cds: str, pem: str, salt: str | None = None) -> str:
    """Ganeti's SignX509Certificate: the signature header, a blank line, the PEM."""
    salt = salt if salt is not None else generate_salt()
    if not _SALT.match(salt):
        raise RemoteExportError(f"invalid salt {salt!r}")
    _, sane = _sane_pem(pem)
    return f"{SIGNATURE_HEADER}: {salt}/{sha1_hmac(cds, sane, salt)}\n\n{sane}"


def load_signed_certificate(cds: str, signed: str) -> x509.Certificate:
    """Ganeti's LoadSignedX509Certificate: the certificate, its signature checked."""
    found = None
    for line in signed.splitlines():
        if line.startswith("---"):
            break
        found = _SIGNATURE.match(line.strip()) or found
    if found is None:
        raise RemoteExportError("X509 certificate signature is missing")
    cert, sane = _sane_pem(signed[signed.find("-----BEGIN"):])
    if not verify_sha1_hmac(cds, sane, found.group("sign"), found.group("salt")):
        raise RemoteExportError("X509 certificate signature is invalid")
    return cert


def _disk_message(index: int, host: str, port: int, magic: str) -> str:
    return f"{index}:{host}:{port}:{magic}"


def compute_disk_info(cds: str, salt: str, index: int, host: str, port: int, magic: str
                      ) -> tuple[str, int, str, str, str]:
    """Ganeti's ComputeRemoteImportDiskInfo: where one disk's stream goes, signed."""
    return (host, port, magic, sha1_hmac(cds, _disk_message(index, host, port, magic), salt),
            salt)


def check_disk_info(cds: str, index: int, disk_info: object) -> tuple[str, int, str]:
    """Ganeti's CheckRemoteExportDiskInfo: (host, port, magic) of disk `index`'s destination."""
    if not isinstance(disk_info, (list, tuple)) or len(disk_info) != 5:
        raise RemoteExportError(f"disk {index}: invalid destination: (host, port, magic, "
                                "hmac, salt) expected")
    host, port, magic, digest, salt = disk_info
    if not (host and port and magic):
        raise RemoteExportError(f"disk {index}: missing destination host, port or magic")
    if not isinstance(host, str) or not isinstance(port, int) or isinstance(port, bool) or \
            not isinstance(magic, str) or not isinstance(digest, str) or \
            not isinstance(salt, str):
        raise RemoteExportError(f"disk {index}: invalid destination types")
    if not verify_sha1_hmac(cds, _disk_message(index, host, port, magic), digest, salt):
        raise RemoteExportError(f"disk {index}: HMAC is wrong")
    if not 0 < port < 65536:
        raise RemoteExportError(f"disk {index}: invalid port {port}")
    return host, port, magic
