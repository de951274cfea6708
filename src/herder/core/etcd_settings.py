"""How herder reaches an etcd that requires TLS client certificates and authentication: the
client settings file of an `etcds://` config location (docs/ha.md).

TOML, every key required, paths absolute::

    # /etc/herder/etcd-client.toml (or the file HERDER_ETCD_CLIENT names)
    ca = "/etc/herder/etcd/ca.pem"            # the CA that signed the etcd members' certificates
    cert = "/etc/herder/etcd/client.pem"      # this node's client certificate (no CommonName)
    key = "/etc/herder/etcd/client.key"       # its key (not readable by others)
    user = "herder-prod"                      # herder's etcd user (`herder etcd setup` makes it)
    password_file = "/etc/herder/etcd/password"   # its password (not readable by others)

Decoded once through `core.settingsfile`; an unknown key, a wrong type, a missing or unreadable
file, a key or password file others may read, or a client certificate with a CommonName (etcd's
JSON gateway refuses those while authentication is on) is one line naming the file and the key.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import msgspec
from cryptography import x509
from cryptography.x509.oid import NameOID

from herder.core import etcd, settingsfile
from herder.core.errors import HerderError

DEFAULT_PATH = Path("/etc/herder/etcd-client.toml")
ENVIRONMENT = "HERDER_ETCD_CLIENT"  # another client settings file than DEFAULT_PATH
WHAT = "etcd client settings"
ROOT_USER = "root"

_AbsolutePath = Annotated[str, msgspec.Meta(pattern="^/")]
_User = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[^\s:]+$")]


class ClientSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    ca: _AbsolutePath
    cert: _AbsolutePath
    key: _AbsolutePath
    user: _User
    password_file: _AbsolutePath


def default_path() -> Path:
    """The client settings file of this process: HERDER_ETCD_CLIENT, else DEFAULT_PATH."""
    return Path(os.environ.get(ENVIRONMENT) or DEFAULT_PATH)


def load(path: Path | None = None) -> ClientSettings:
    """The file, decoded and checked (HerderError in one line when it is unusable)."""
    path = path if path is not None else default_path()
    settings = settingsfile.load(path, ClientSettings, WHAT)
    for key in ("ca", "cert", "key", "password_file"):
        _readable(path, key, Path(getattr(settings, key)))
    for key in ("key", "password_file"):
        _private(path, key, Path(getattr(settings, key)))
    _no_common_name(path, Path(settings.cert))
    return settings


def _readable(path: Path, key: str, target: Path) -> None:
    try:
        with target.open("rb"):
            pass
    except OSError as err:
        raise settingsfile.problem(path, WHAT, key, f"cannot read {target}: "
                                   f"{err.strerror}") from None


def _private(path: Path, key: str, target: Path) -> None:
    mode = stat.S_IMODE(target.stat().st_mode)
    if mode & 0o007:
        raise settingsfile.problem(path, WHAT, key, f"{target} is readable by every user "
                                   f"(mode {mode:04o}); chmod o-rwx {target}")


def _no_common_name(path: Path, cert: Path) -> None:
    """etcd answers 400 to a gateway request whose client certificate has a CommonName while
    its authentication is on; say so now rather than at the first request."""
    try:
        certificate = x509.load_pem_x509_certificate(cert.read_bytes())
    except ValueError as err:
        raise settingsfile.problem(path, WHAT, "cert", f"{cert} is no PEM certificate "
                                   f"({err})") from None
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if names:
        raise settingsfile.problem(
            path, WHAT, "cert", f"{cert} has the CommonName {names[0].value!r}: etcd's JSON "
            "gateway refuses such client certificates while authentication is on; issue it "
            "without a CommonName (e.g. subject O=herder)")


def read_password(settings: ClientSettings, path: Path) -> str:
    """The password file's first line (a trailing newline is no part of it)."""
    try:
        text = Path(settings.password_file).read_text()
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or "not UTF-8 text"
        raise settingsfile.problem(path, WHAT, "password_file", f"cannot read "
                                   f"{settings.password_file}: {reason}") from None
    password = text.splitlines()[0] if text.strip() else ""
    if not password:
        raise settingsfile.problem(path, WHAT, "password_file",
                                   f"{settings.password_file} is empty")
    return password


def client(endpoints: Sequence[str], path: Path | None = None, *,
           auth_required: bool = True, **options: Any) -> etcd.EtcdClient:
    """An etcd client with the TLS settings and credentials of the client settings file at
    `path` (default: `default_path()`); `options` as for `EtcdClient` (timeout, retry_for)."""
    path = path if path is not None else default_path()
    settings = load(path)
    tls = etcd.EtcdTls(ca=Path(settings.ca), cert=Path(settings.cert), key=Path(settings.key))
    auth = etcd.EtcdAuth(settings.user, read_password(settings, path),
                         source=settings.password_file, required=auth_required)
    try:
        return etcd.EtcdClient(endpoints, tls=tls, auth=auth, **options)
    except etcd.EtcdError as err:
        raise HerderError(f"{WHAT} {path}: {err}") from None
