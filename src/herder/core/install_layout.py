"""Builds of herder installed side by side on a host (Ganeti's `/usr/lib/ganeti/<version>` with
the `/etc/ganeti/lib` symlink; docs/install.md "Upgrading"):

    <prefix>/versions/<version>/     one virtualenv per build (`bin/herder`, its own packages)
    <prefix>/current -> versions/<version>
    <prefix>/bin -> current/bin      what the units and node.toml run (`/opt/herder/bin/herder`)

The prefix is the directory whose `versions/` holds the running interpreter's virtualenv
(`/opt/herder` on a host installed by the guide), so noded and the CLI find the layout they
were started from and nothing names it twice. One node's switch to another build is
`herder.supervise.versions` (`herder daemon-util switch-version`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from herder.core.errors import HerderError

VERSIONS = "versions"
CURRENT = "current"
# what `herder daemon-util switch-version` started by noded writes (docs/install.md)
UPGRADE_LOG = Path("/var/log/herder/upgrade.log")
# Under <run dir> (/run/herder): `switch-version` asks the master's masterd on etcd to keep its
# master lease while it restarts (KEEP_LEASE, written before the stop); the stopped masterd
# leaves the lease's id for the next one (KEPT_LEASE), which holds that lease instead of
# campaigning, so no other candidate is elected meanwhile (herder.masterd.lease)
KEEP_LEASE = "masterd.keep-lease"
KEPT_LEASE = "masterd.kept-lease"
RUN_DIR = Path("/run/herder")
# A version as setuptools-scm makes it (PEP 440, local part included): one path component.
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,99}")


def valid_version(version: str) -> bool:
    return bool(_VERSION.fullmatch(version)) and ".." not in version


def check_version(version: str) -> str:
    """A build's version as given (`1.2.0`, `0.3.dev4+g5de7b10`), checked: it names a
    directory under `versions/`."""
    if not valid_version(version):
        raise HerderError(f"{version!r} is not a herder version (e.g. 1.2.0 or "
                          "0.3.dev4+g5de7b10)")
    return version


@dataclass(frozen=True)
class Layout:
    prefix: Path

    def version_dir(self, version: str) -> Path:
        return self.prefix / VERSIONS / check_version(version)

    @property
    def current(self) -> Path:
        return self.prefix / CURRENT

    def installed(self, version: str) -> bool:
        """Is the build `version` installed here (its venv's `bin/herder` runs)?"""
        return os.access(self.version_dir(version) / "bin" / "herder", os.X_OK)

    def current_version(self) -> str | None:
        """The build `current` points at (None: no link)."""
        try:
            target = os.readlink(self.current)
        except OSError:
            return None
        return Path(target).name

    def switch(self, version: str) -> None:
        """Point `current` at `versions/<version>` in one rename (a crash leaves the old or
        the new link, never none)."""
        if not self.installed(version):
            raise HerderError(f"herder {version} is not installed here: no "
                              f"{self.version_dir(version)}/bin/herder")
        staging = self.prefix / f".{CURRENT}.{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            staging.unlink()
        os.symlink(f"{VERSIONS}/{version}", staging)
        os.replace(staging, self.current)


def running_layout(prefix: Path | None = None) -> Layout | None:
    """The layout `prefix` names, else the one this interpreter's virtualenv belongs to (its
    `sys.prefix` is `<prefix>/versions/<version>`); None when herder runs from elsewhere
    (a checkout, a single venv)."""
    if prefix is not None:
        return Layout(prefix)
    here = Path(sys.prefix)
    if here.parent.name == VERSIONS:
        return Layout(here.parent.parent)
    return None
