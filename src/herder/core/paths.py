"""Paths built from names: proven to stay inside their directory.

An instance, OS or provider name reaches a node's file system in many places (state records,
reason trails, operation markers, logs, domain definitions, file-disk directories). Every such
path is built here, with `child(directory, name, ...)`: each name must be one plain path
component (no separator, no NUL, not `.` or `..`, not empty), and the result is checked to lie
below the directory after normalisation. Anything else is refused with `UnsafeName`, one line
naming the name and the directory, before the file system is touched (Ganeti's
`utils.PathJoin` has the same purpose).
"""

from __future__ import annotations

import os
from pathlib import Path

from herder.core.errors import HerderError


class UnsafeName(HerderError, ValueError):
    """A name that would not be a plain file name inside its directory."""


def check_component(name: str, what: str = "name") -> str:
    """`name` if it is one plain path component; UnsafeName otherwise."""
    if not isinstance(name, str) or not name:
        raise UnsafeName(f"{what} {name!r}: a file name must be a non-empty string")
    if name in (".", "..") or "/" in name or "\0" in name or os.sep in name:
        raise UnsafeName(f"{what} {name!r} is not a plain file name")
    return name


def child(directory: str | os.PathLike[str], *names: str, suffix: str = "",
          prefix: str = "", what: str = "name") -> Path:
    """`directory/names[0]/.../prefix + names[-1] + suffix`, each name a plain component and the
    result inside `directory` (UnsafeName otherwise)."""
    if not names:
        raise UnsafeName(f"no {what} given for a path in {directory}")
    parts = [check_component(name, what) for name in names]
    parts[-1] = check_component(f"{prefix}{parts[-1]}{suffix}", what)
    base = Path(directory)
    result = base.joinpath(*parts)
    # the components are plain, so this holds; kept as the proof the module promises
    normal_base = os.path.normpath(os.path.abspath(base))
    normal = os.path.normpath(os.path.abspath(result))
    if os.path.commonpath([normal_base, normal]) != normal_base or normal == normal_base:
        raise UnsafeName(f"{what} {'/'.join(names)!r} leaves the directory {directory}")
    return result
