"""File-valued hypervisor parameters herder itself reads and distributes (issue 18).

`vnc_password_file` and `spice_password_file` name a file the master copies to every node that
can run the instance (`masterd.redist`), for the hypervisor there to read. A parameter must
never make herder read or write any other file, so such a file lies in the cluster's
hypervisor file directory, `<config directory>/hypervisor/` (`/var/lib/herder/hypervisor/` with
the default paths; docs/compat.md): masterd's RAPI refuses any other value (400), and
redistribution sends nothing else (a value set otherwise, e.g. imported from Ganeti, is left
to the operator). The other path-valued parameters (`kernel_path`, `cdrom_image_path`, ...) are
node-local paths the hypervisor opens on the node, as in Ganeti; herder neither reads nor
copies them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

FILE_PARAMS = ("vnc_password_file", "spice_password_file")
DIRECTORY = "hypervisor"


def directory(config_dir: Path) -> Path:
    """The hypervisor file directory of the cluster whose secrets are in `config_dir`."""
    return Path(config_dir) / DIRECTORY


def path_problem(value: str, where: Path) -> str | None:
    """Why `value` may not name a distributed file (None: it may)."""
    if not value:
        return None  # unset
    base = os.path.normpath(str(where))
    if "\0" in value or not value.startswith("/") or os.path.normpath(value) != value:
        return f"{value!r} is not a normalized absolute path"
    if not value.startswith(base.rstrip("/") + "/"):
        return f"{value} is not in the cluster's hypervisor file directory {base}/"
    return None


def _assignments(data: object) -> Iterator[tuple[str, object]]:
    """Every (key, value) of the file parameters anywhere in a nested opcode or parameter set."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key in FILE_PARAMS:
                    yield key, value
                elif isinstance(value, dict | list):
                    pending.append(value)
        elif isinstance(item, list):
            pending.extend(v for v in item if isinstance(v, dict | list))


def problems(data: object, where: Path | None) -> list[str]:
    """One line per file parameter of `data` (an opcode's dict, hvparams, ...) that names a
    file outside `where` (None: no directory is known, every such file is refused)."""
    found = []
    for key, value in _assignments(data):
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            found.append(f"hypervisor parameter {key}: must be a path")
        elif where is None:
            found.append(f"hypervisor parameter {key}: this server cannot check {value} "
                         "(no config directory)")
        else:
            problem = path_problem(value, where)
            if problem:
                found.append(f"hypervisor parameter {key}: {problem}")
    return found


def readable(value: str, where: Path) -> Path | None:
    """The file a parameter names, when it may be read: inside `where` also once symbolic
    links are resolved, and a regular file. None otherwise."""
    if path_problem(value, where) is not None:
        return None
    path = Path(value)
    try:
        real = path.resolve(strict=True)
        base = Path(where).resolve()
    except OSError:
        return None
    if base not in real.parents or not real.is_file():
        return None
    return path
