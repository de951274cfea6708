"""Where the cluster config is: a file (default /var/lib/herder/config.json, or
$HERDER_CONFIG), or an etcd location (`etcds://HOST:PORT[,...]/CLUSTER`, `etcd://` on
loopback for tests). Standard library only: the CLI finds its credentials beside the config
without importing the store (docs/scale.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeGuard

DEFAULT_CONFIG_DIR = Path("/var/lib/herder")
DEFAULT_CONFIG_PATH = DEFAULT_CONFIG_DIR / "config.json"
# The config locations of the etcd backend (store_etcd): TLS and authentication, or plain HTTP
# (tests on loopback only).
ETCD_SCHEMES = ("etcds://", "etcd://")


def is_etcd_location(location: object) -> TypeGuard[str]:
    """Whether a config location names the etcd backend (else it is a file)."""
    return isinstance(location, str) and location.startswith(ETCD_SCHEMES)


def default_config_path() -> Path:
    env = os.environ.get("HERDER_CONFIG")
    return Path(env) if env else DEFAULT_CONFIG_PATH


def local_config_path(location: str | os.PathLike[str] | None = None) -> Path:
    """Where this node's files beside the config are (secrets, node certificate, join
    token): beside the config file, or, on the etcd backend, in the local directory
    (`DEFAULT_CONFIG_PATH`'s, as `EtcdStore.path` has it). `location`: default
    HERDER_CONFIG."""
    # the text itself: a Path would fold an etcd location's "//"
    found = (os.environ.get("HERDER_CONFIG") or DEFAULT_CONFIG_PATH) if location is None \
        else location
    return DEFAULT_CONFIG_PATH if is_etcd_location(str(found)) else Path(found)
