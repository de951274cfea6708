"""This node's own node parameters (what differs between nodes: the libvirt URI, ...), as noded
finds them: the ssconf file `herder_ndparams` every node receives, else the config copy a
master candidate holds; never a daemon option."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from herder.core import ssconf
from herder.core.errors import HerderError
from herder.core.store import FileStore


def filled(node: str, data_dir: Path) -> dict[str, Any] | None:
    """`node`'s filled node parameters, or None when this node has neither source yet."""
    found = ssconf.node_params(node, data_dir)
    if found is not None:
        return found
    store = FileStore(data_dir / "config.json")
    if not store.exists():
        return None
    with contextlib.suppress(HerderError, OSError, ValueError):
        config = store.load()
        match = next((n for n in config.nodes.values()
                      if n.name == node or n.name.split(".")[0] == node), None)
        if match is not None:
            return dict(config.filled_ndparams(match))
    return None


def libvirt_uri(node: str, data_dir: Path, default: str) -> str:
    values = filled(node, data_dir) or {}
    uri = values.get("libvirt_uri")
    return str(uri) if uri else default
