"""Building a CollectContext from the cluster config and node-local settings."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

from herder.core.cluster_secrets import HMAC_KEY_FILE
from herder.core.store import ConfigCache
from herder.mond.collector import CollectContext, MondSettings


class KeyCache:
    def __init__(self, path: Path | None) -> None:
        self.path = path

    def __call__(self) -> bytes | None:
        if self.path is None:
            return None
        try:
            return self.path.read_bytes()
        except OSError:
            return None


def make_context(
    config_path: str | os.PathLike[str] | None,
    *,
    node_name: str | None = None,
    settings: MondSettings | None = None,
    inputs: Mapping[str, Path] | None = None,
) -> CollectContext:
    path = Path(config_path) if config_path is not None else None
    settings = settings or MondSettings()
    key_file = settings.hmac_key_file
    if key_file is None and path is not None:
        key_file = path.parent / HMAC_KEY_FILE
    return CollectContext(
        node_name=node_name or socket.getfqdn(),
        settings=settings,
        inputs=dict(inputs or {}),
        config_loader=ConfigCache(path),
        hmac_key_loader=KeyCache(key_file),
        ssconf_dir=path.parent if path is not None else None,
    )
