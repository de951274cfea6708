"""Builds of herder installed side by side on a host, and the switch from one to another (Ganeti's
`/usr/lib/ganeti/<version>` with the `/etc/ganeti/lib` symlink; docs/install.md "Upgrading"):

    <prefix>/versions/<version>/     one virtualenv per build (`bin/herder`, its own packages)
    <prefix>/current -> versions/<version>
    <prefix>/bin -> current/bin      what the units and node.toml run (`/opt/herder/bin/herder`)

The prefix is the directory whose `versions/` holds the running interpreter's virtualenv
(`/opt/herder` on a host installed by the guide), so noded and the CLI find the layout they
were started from and nothing names it twice. `switch_version` is what `herder daemon-util
switch-version` does on one node: point `current` at the other build, then stop and start
again herder's daemons that run here (never libvirtd, so the guests' QEMU processes go on:
noded finds its domains again when it starts), which then run the other build.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from herder.core import supervise_control
from herder.core.errors import HerderError
from herder.supervise.daemon_util import Backend
from herder.supervise.settings import HERDER_DAEMONS, KNOWN_DAEMONS

VERSIONS = "versions"
CURRENT = "current"
# A version as setuptools-scm makes it (PEP 440, local part included): one path component.
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,99}")


def check_version(version: str) -> str:
    """A build's version as given (`1.2.0`, `0.3.dev4+g5de7b10`), checked: it names a
    directory under `versions/`."""
    if not _VERSION.fullmatch(version) or ".." in version:
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


def switch_version(version: str, layout: Layout, backend: Backend,
                   say: Callable[[str], None] = lambda line: None) -> list[str]:
    """Point `current` at `version`, then stop and start again, one after the other in start
    order, herder's daemons that run here (Ganeti's `daemon-util stop-all`, symlink,
    `start-all` on one node); the daemons restarted.

    One at a time rather than all stopped at once: a node's liveness lease is renewed by its
    noded through the master's masterd, else through the master candidates' nodeds, and runs
    out 6 s after the last renewal (docs/ha.md "Node failure"): with every daemon of the
    master down at once, the other nodes would lose their lease and stop their guests. A
    running daemon keeps the build it was started from (its interpreter's own venv), so the
    link can move first."""
    if not layout.installed(version):
        raise HerderError(f"herder {version} is not installed here: no "
                          f"{layout.version_dir(version)}/bin/herder")
    running = [d for d in KNOWN_DAEMONS if d in HERDER_DAEMONS
               and backend.state(d) == supervise_control.RUNNING]
    before = layout.current_version()
    try:
        layout.switch(version)
    except OSError as err:
        raise HerderError(f"cannot switch {layout.current} to {version}: {err}") from None
    say(f"{layout.current} -> {VERSIONS}/{version} (was {before})")
    for daemon in running:
        say(f"restarting {daemon}")
        backend.stop([daemon])
        backend.start([daemon])
    return running
