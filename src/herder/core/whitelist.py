"""White-listed commands: the rule for every command herder runs as root on an operator's
behalf (mond's self-diagnose and live-repair commands, noded's repair commands): a regular file
directly in its white-list directory, owned by root, not writable by group or others, not
setuid/setgid, executable. `check_command` says in one line why a command is refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from herder.core.errors import HerderError


class NotWhitelisted(HerderError):
    """A command that may not run (the message says why)."""


def check_command(directory: Path, name: str, what: str = "command") -> Path:
    """The path of the white-listed command `name` in `directory` (`what`: how messages name
    it); NotWhitelisted says why one is refused."""
    if "\0" in name or name in (".", ".."):
        raise NotWhitelisted(f"invalid {what} name {name!r}")
    if "/" in name or os.sep in name:
        raise NotWhitelisted(f"{what} {name!r} must be a file name, not a path")
    path = directory / name
    try:
        st = path.stat()
    except FileNotFoundError:
        raise NotWhitelisted(f"{what} {path} does not exist") from None
    except OSError as err:
        raise NotWhitelisted(f"cannot inspect {what} {path}: {err.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise NotWhitelisted(f"{what} {path} is not a regular file")
    if st.st_uid != 0:
        raise NotWhitelisted(f"{what} {path} must be owned by root (uid {st.st_uid})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise NotWhitelisted(f"{what} {path} is writable by group or others")
    if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
        raise NotWhitelisted(f"{what} {path} must not be setuid or setgid")
    if not st.st_mode & stat.S_IXUSR:
        raise NotWhitelisted(f"{what} {path} is not executable")
    return path
