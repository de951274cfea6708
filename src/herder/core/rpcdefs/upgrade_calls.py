"""A rolling upgrade of herder (`herder cluster upgrade`, Ganeti's `gnt-cluster upgrade`): which
builds a node has installed and runs, and the switch of its daemons to another build
(`herder.core.install_layout`)."""

from __future__ import annotations

import msgspec

from herder.core.install_layout import valid_version
from herder.core.rpcdefs.base import Call


def _version(version: str) -> None:
    if not valid_version(version):  # one path component under <prefix>/versions
        raise ValueError(f"invalid herder version {version!r}")


class VersionsAnswer(msgspec.Struct, kw_only=True):
    node: str
    running: str  # the build this noded runs
    prefix: str | None  # the versioned layout noded runs from (None: not installed that way)
    current: str | None  # the build <prefix>/current points at
    installed: bool  # the build asked about is installed under <prefix>/versions


class UpgradeCheck(Call[VersionsAnswer], kw_only=True):
    METHOD = "upgrade_check"
    READ_ONLY = True
    version: str

    def __post_init__(self) -> None:
        _version(self.version)


class UpgradeSwitch(Call[str], kw_only=True):
    """Switch this node's daemons to the installed build `version`: answered at once, then
    noded (with the others) is stopped and started again from a process of its own; the
    master sees the node back when its ping names `version`."""

    METHOD = "upgrade_switch"
    version: str

    def __post_init__(self) -> None:
        _version(self.version)
