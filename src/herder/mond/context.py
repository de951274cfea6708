"""Building a CollectContext from the cluster config and node-local settings."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

from herder.core import model as M
from herder.core.cluster_secrets import HMAC_KEY_FILE
from herder.core.errors import HerderError
from herder.core.store import FileStore
from herder.mond.collector import CollectContext, MondSettings


class ConfigCache:
    """The cluster config, reloaded only when the file changes; None when there is none."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._config: M.ConfigData | None = None
        self.error: str | None = None

    def __call__(self) -> M.ConfigData | None:
        if self.path is None:
            return None
        try:
            st = self.path.stat()
        except OSError:
            self._config, self._stamp = None, None
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            try:
                self._config = FileStore(self.path).load()
                self.error = None
            except HerderError as err:  # keep the last good config; say why
                self.error = str(err)
            self._stamp = stamp
        return self._config


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
    return CollectContext(
        node_name=node_name or socket.getfqdn(),
        settings=settings or MondSettings(),
        inputs=dict(inputs or {}),
        config_loader=ConfigCache(path),
        hmac_key_loader=KeyCache(path.parent / HMAC_KEY_FILE if path else None),
    )
