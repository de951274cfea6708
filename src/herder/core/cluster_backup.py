"""`herder cluster backup FILE` / `herder cluster restore FILE`: one file holding a consistent
copy of the cluster's config and its secrets.

The config is read as every reader sees it (a file store's snapshot with its journal folded in,
read under the writers' lock; etcd's objects at one revision), so the copy is one document at one
serial number; copying `config.json` alone would miss the journal's changes. The secrets are
the master's files beside the config: the HMAC key, the cluster certificate (the CA, with its
key), the RAPI users and the master's node certificate. The file is JSON, mode 0600 (it holds
the keys): `{"format", "version", "herder", "created", "cluster", "serial_no", "config",
"secrets": {file name: base64}}`.

A restore writes the secrets, then replaces the config (the store's own atomic replace: a new
snapshot and journal). Everything is checked before anything is written: the format, the
config (decoded, older formats upgraded, as a store loads them), the secrets' names and
encoding."""

from __future__ import annotations

import base64
import binascii
import time
from pathlib import Path

import msgspec

from herder import __version__
from herder.core import cluster_secrets, model, node_certs, untrusted, upgrade
from herder.core.errors import ConfigError, HerderError
from herder.core.store import ConfigStore, FileStore, atomic_write

FORMAT = "herder-cluster-backup"
VERSION = 1
MAX_BYTES = 1 << 30  # a backup file's size limit
SECRET_FILES = (cluster_secrets.HMAC_KEY_FILE, cluster_secrets.CERT_FILE,
                cluster_secrets.RAPI_USERS_FILE, node_certs.NODE_CERT_FILE)
REQUIRED_SECRETS = (cluster_secrets.HMAC_KEY_FILE, cluster_secrets.CERT_FILE)


class BackupError(HerderError):
    """A backup that cannot be made or restored; one line for the operator."""


class Backup(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    format: str
    version: int
    herder: str
    created: float
    cluster: str
    serial_no: int
    config: msgspec.Raw
    secrets: dict[str, str]


def make(store: ConfigStore, directory: Path) -> bytes:
    """The backup of the cluster whose config is `store` and whose secrets are in
    `directory`."""
    if isinstance(store, FileStore):
        with store.locked():  # no writer between the snapshot and its journal
            config = store.load()
    else:
        config = store.load()
    secrets: dict[str, str] = {}
    for name in SECRET_FILES:
        path = directory / name
        try:
            secrets[name] = base64.b64encode(path.read_bytes()).decode()
        except FileNotFoundError:
            if name in REQUIRED_SECRETS:
                raise BackupError(f"{path} is missing: run the backup on the master") from None
        except OSError as err:
            raise BackupError(f"cannot read {path}: {err.strerror or err}") from None
    backup = Backup(format=FORMAT, version=VERSION, herder=__version__, created=time.time(),
                    cluster=config.cluster.name, serial_no=config.serial_no,
                    config=msgspec.Raw(model.encode(config)), secrets=secrets)
    return msgspec.json.encode(backup) + b"\n"


class Checked(msgspec.Struct, kw_only=True):
    """A backup file, checked: what a restore writes."""

    backup: Backup
    config_raw: bytes
    secrets: dict[str, bytes]


def check(raw: bytes, what: str) -> Checked:
    """The backup in `raw`, checked whole (BackupError saying what is wrong)."""
    try:
        backup = untrusted.decode_bounded(raw, Backup, what=what, max_bytes=MAX_BYTES)
    except (untrusted.BadDocument, msgspec.ValidationError) as err:
        raise BackupError(f"{what} is not a herder cluster backup: {err}") from None
    if backup.format != FORMAT or backup.version != VERSION:
        raise BackupError(f"{what} is not a herder cluster backup of version {VERSION} "
                          f"(format {backup.format!r}, version {backup.version})")
    config_raw = bytes(backup.config)
    try:
        config = upgrade.load_document(config_raw)
    except ConfigError as err:
        raise BackupError(f"{what}: its config cannot be loaded: {err}") from None
    if config.serial_no != backup.serial_no or config.cluster.name != backup.cluster:
        raise BackupError(f"{what}: its config is not the one its header names")
    secrets: dict[str, bytes] = {}
    for name, text in backup.secrets.items():
        if name not in SECRET_FILES:
            raise BackupError(f"{what}: unknown secret {name!r}")
        try:
            secrets[name] = base64.b64decode(text, validate=True)
        except binascii.Error:
            raise BackupError(f"{what}: secret {name} is not base64") from None
    missing = [name for name in REQUIRED_SECRETS if name not in secrets]
    if missing:
        raise BackupError(f"{what}: secrets missing: {', '.join(missing)}")
    return Checked(backup=backup, config_raw=config_raw, secrets=secrets)


def restore(checked: Checked, store: ConfigStore, directory: Path) -> None:
    """Write the checked backup's secrets into `directory` (0600, each replaced atomically),
    then its config into `store`."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in sorted(checked.secrets.items()):
        atomic_write(directory / name, data, cluster_secrets.SECRET_MODE)
    for name in SECRET_FILES:  # a rotation's leftovers belong to the secrets replaced
        if name not in checked.secrets:
            (directory / name).unlink(missing_ok=True)
        cluster_secrets.retiring(directory / name).unlink(missing_ok=True)
    store.replace(upgrade.load_document(checked.config_raw))
