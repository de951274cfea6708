"""A node's ssconf files (Ganeti's `ssconf_<name>` in the data directory): the read-only facts the
master pushes to every node (`masterd.redist`, noded's `write_ssconf`), for the daemons and
commands of a node without the cluster config.

Ganeti's names and formats (one value, or one item a line), plus herder's `herder_ndparams`:
every node's filled node parameters, one JSON object a line
(`{"name": NODE, "ndparams": {...}}`), so what differs between nodes (the libvirt URI, ...)
reaches each node as data, never as a daemon option.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path("/var/lib/herder")
NDPARAMS = "herder_ndparams"


def path(name: str, directory: Path = DEFAULT_DIR) -> Path:
    return directory / f"ssconf_{name}"


def read(name: str, directory: Path = DEFAULT_DIR) -> str | None:
    """The value (stripped), or None when the file is not there or unreadable."""
    try:
        return path(name, directory).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_lines(name: str, directory: Path = DEFAULT_DIR) -> list[str] | None:
    text = read(name, directory)
    if text is None:
        return None
    return [line.strip() for line in text.splitlines() if line.strip()]


def master_node(directory: Path = DEFAULT_DIR) -> str | None:
    return read("master_node", directory) or None


def master_ip(directory: Path = DEFAULT_DIR) -> str | None:
    return read("master_ip", directory) or None


def master_candidates_ips(directory: Path = DEFAULT_DIR) -> list[str]:
    return read_lines("master_candidates_ips", directory) or []


def format_ndparams(rows: Iterable[tuple[str, Mapping[str, Any]]]) -> str:
    """The `herder_ndparams` value: one JSON object per (node name, filled ndparams)."""
    return "".join(json.dumps({"name": name, "ndparams": dict(values)}, sort_keys=True) + "\n"
                   for name, values in rows)


def node_params(node: str, directory: Path = DEFAULT_DIR) -> dict[str, Any] | None:
    """`node`'s filled node parameters from `herder_ndparams` (None: not there). A node is
    matched by its full name or, when unique, its first label."""
    lines = read_lines(NDPARAMS, directory)
    if not lines:
        return None
    rows: dict[str, dict[str, Any]] = {}
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("name"), str) \
                and isinstance(row.get("ndparams"), dict):
            rows[row["name"]] = row["ndparams"]
    if node in rows:
        return rows[node]
    short = [values for name, values in rows.items() if name.split(".")[0] == node]
    return short[0] if len(short) == 1 else None
