"""The `drbdsetup`/`drbdmeta` command lines of DRBD 8.3 and 8.4, as Ganeti 3.0.2 writes them.

DRBD 8.4 names one resource per minor (`resource<minor>`), attaches with `flexible` external
metadata and configures the network with `connect`; DRBD 8.3 addresses `/dev/drbd<minor>` and
uses `disk`/`net`/`syncer`. Resync parameters come from the disk parameters (`resync-rate`, or
the dynamic controller's `c-*` values with `dynamic-resync`); barriers from `disabled-barriers`
and `disable-meta-flush`; `disk-custom`/`net-custom` are appended split as a shell would.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from herder.core.drbd_status import KernelVersion
from herder.noded.bdev.base import BlockDevError

# Ganeti's DRBD_VALID_BARRIER_OPT: the accepted sets of disabled barriers.
VALID_BARRIER_SETS = frozenset(frozenset(s) for s in ("b", "bd", "bdf", "bf", "d", "df", "f", "n"))
PLAN_AHEAD_ZERO = ("A value of 0 for c-plan-ahead disables the dynamic sync speed controller at"
                   " DRBD level. If you want to disable it, please set the dynamic-resync disk"
                   " parameter to False.")
Argv = list[str]


def dev_path(minor: int) -> str:
    return f"/dev/drbd{minor}"


def _barrier_set(params: Mapping[str, Any]) -> frozenset[str]:
    disabled = frozenset(str(params["disabled-barriers"]))
    if disabled not in VALID_BARRIER_SETS:
        raise BlockDevError(f"{params['disabled-barriers']} is not a valid option set for"
                            " DRBD barriers")
    return disabled


def _dynamic_resync_args(params: Mapping[str, Any]) -> Argv:
    if params["c-plan-ahead"] == 0:
        raise BlockDevError(PLAN_AHEAD_ZERO)
    return ["--c-plan-ahead", str(params["c-plan-ahead"]),
            "--c-fill-target", str(params["c-fill-target"]),
            "--c-delay-target", str(params["c-delay-target"]),
            "--c-max-rate", str(params["c-max-rate"]),
            "--c-min-rate", str(params["c-min-rate"])]


class Drbd84Commands:
    """DRBD 8.4's syntax."""

    def __init__(self, version: KernelVersion) -> None:
        self.version = version

    @staticmethod
    def resource(minor: int) -> str:
        return f"resource{minor}"

    def show(self, minor: int) -> Argv:
        return ["drbdsetup", "show", str(minor)]

    def init_meta(self, minor: int, meta_dev: str) -> Argv:
        return ["drbdmeta", "--force", dev_path(minor), "v08", meta_dev, "flex-external",
                "create-md"]

    def local_init(self, minor: int, data_dev: str, meta_dev: str, size_mb: int,
                   params: Mapping[str, Any]) -> list[Argv]:
        attach = ["drbdsetup", "attach", str(minor), data_dev, meta_dev, "flexible",
                  "--on-io-error=detach"]
        if size_mb:
            attach += ["--size", f"{size_mb}m"]
        attach += self.barrier_args(params)
        if params["disk-custom"]:
            attach += shlex.split(params["disk-custom"])
        return [["drbdsetup", "new-resource", self.resource(minor)],
                ["drbdsetup", "new-minor", self.resource(minor), str(minor), "0"],
                ["drbdmeta", dev_path(minor), "v08", meta_dev, "flex-external", "apply-al"],
                attach]

    def net_init(self, minor: int, family: str, lhost: str, lport: int, rhost: str,
                 rport: int, protocol: str, dual_primary: bool, hmac: str | None,
                 secret: str | None, params: Mapping[str, Any]) -> list[Argv]:
        connect = ["drbdsetup", "connect", self.resource(minor), f"{family}:{lhost}:{lport}",
                   f"{family}:{rhost}:{rport}", "--protocol", protocol,
                   "--after-sb-0pri", "discard-zero-changes", "--after-sb-1pri", "consensus"]
        if dual_primary:
            connect.append("--allow-two-primaries")
        if hmac and secret:
            connect += ["--cram-hmac-alg", hmac, "--shared-secret", secret]
        if params["net-custom"]:
            connect += shlex.split(params["net-custom"])
        return [["drbdsetup", "new-resource", self.resource(minor)],
                ["drbdsetup", "new-minor", self.resource(minor), str(minor), "0"],
                connect]

    def sync_params(self, minor: int, params: Mapping[str, Any]) -> Argv:
        args = ["drbdsetup", "disk-options", str(minor)]
        if params["dynamic-resync"]:
            return args + _dynamic_resync_args(params)
        return [*args, "--resync-rate", str(int(params["resync-rate"]))]

    def pause_sync(self, minor: int) -> Argv:
        return ["drbdsetup", "pause-sync", str(minor)]

    def resume_sync(self, minor: int) -> Argv:
        return ["drbdsetup", "resume-sync", str(minor)]

    def primary(self, minor: int, force: bool) -> Argv:
        return ["drbdsetup", "primary", str(minor)] + (["--force"] if force else [])

    def secondary(self, minor: int) -> Argv:
        return ["drbdsetup", "secondary", str(minor)]

    def detach(self, minor: int) -> Argv:
        return ["drbdsetup", "detach", str(minor)]

    def disconnect(self, minor: int, family: str, lhost: str, lport: int, rhost: str,
                   rport: int) -> Argv:
        return ["drbdsetup", "disconnect", f"{family}:{lhost}:{lport}",
                f"{family}:{rhost}:{rport}"]

    def down(self, minor: int) -> Argv:
        return ["drbdsetup", "down", self.resource(minor)]

    def resize(self, minor: int, size_mb: int) -> Argv:
        return ["drbdsetup", "resize", str(minor), "--size", f"{size_mb}m"]

    def barrier_args(self, params: Mapping[str, Any]) -> Argv:
        disabled = _barrier_set(params)
        args = []
        if params["disable-meta-flush"]:
            args.append("--md-flushes=no")
        if "f" in disabled:
            args.append("--disk-flushes=no")
        if "d" in disabled:
            args.append("--disk-drain=no")
        if "b" in disabled:
            args.append("--disk-barrier=no")
        return args


class Drbd83Commands:
    """DRBD 8.0-8.3's syntax."""

    # The first point release of 8.<minor> that knows each option.
    _META_FLUSH_SINCE = {0: 12, 2: 7, 3: 0}
    _DISK_FLUSH_SINCE = {0: 12, 2: 7, 3: 0}
    _DISK_DRAIN_SINCE = {2: 7, 3: 0}
    _DISK_BARRIER_SINCE = {3: 0}

    def __init__(self, version: KernelVersion) -> None:
        self.version = version

    def show(self, minor: int) -> Argv:
        return ["drbdsetup", dev_path(minor), "show"]

    def init_meta(self, minor: int, meta_dev: str) -> Argv:
        return ["drbdmeta", "--force", dev_path(minor), "v08", meta_dev, "0", "create-md"]

    def local_init(self, minor: int, data_dev: str, meta_dev: str, size_mb: int,
                   params: Mapping[str, Any]) -> list[Argv]:
        args = ["drbdsetup", dev_path(minor), "disk", data_dev, meta_dev, "0", "-e", "detach",
                "--create-device"]
        if size_mb:
            args += ["-d", f"{size_mb}m"]
        args += self.barrier_args(params)
        if params["disk-custom"]:
            args += shlex.split(params["disk-custom"])
        return [args]

    def net_init(self, minor: int, family: str, lhost: str, lport: int, rhost: str,
                 rport: int, protocol: str, dual_primary: bool, hmac: str | None,
                 secret: str | None, params: Mapping[str, Any]) -> list[Argv]:
        args = ["drbdsetup", dev_path(minor), "net", f"{family}:{lhost}:{lport}",
                f"{family}:{rhost}:{rport}", protocol, "-A", "discard-zero-changes",
                "-B", "consensus", "--create-device"]
        if dual_primary:
            args.append("-m")
        if hmac and secret:
            args += ["-a", hmac, "-x", secret]
        if params["net-custom"]:
            args += shlex.split(params["net-custom"])
        return [args]

    def sync_params(self, minor: int, params: Mapping[str, Any]) -> Argv:
        args = ["drbdsetup", dev_path(minor), "syncer"]
        if params["dynamic-resync"]:
            if self.version.minor != 3 or self.version.point < 9:
                raise BlockDevError(
                    f"The current DRBD version (8.{self.version.minor}.{self.version.point})"
                    " does not support the dynamic resync speed controller")
            args += _dynamic_resync_args(params)
        else:
            args += ["-r", str(int(params["resync-rate"]))]
        return [*args, "--create-device"]

    def pause_sync(self, minor: int) -> Argv:
        return ["drbdsetup", dev_path(minor), "pause-sync"]

    def resume_sync(self, minor: int) -> Argv:
        return ["drbdsetup", dev_path(minor), "resume-sync"]

    def primary(self, minor: int, force: bool) -> Argv:
        return ["drbdsetup", dev_path(minor), "primary"] + (["-o"] if force else [])

    def secondary(self, minor: int) -> Argv:
        return ["drbdsetup", dev_path(minor), "secondary"]

    def detach(self, minor: int) -> Argv:
        return ["drbdsetup", dev_path(minor), "detach"]

    def disconnect(self, minor: int, family: str, lhost: str, lport: int, rhost: str,
                   rport: int) -> Argv:
        return ["drbdsetup", dev_path(minor), "disconnect"]

    def down(self, minor: int) -> Argv:
        return ["drbdsetup", dev_path(minor), "down"]

    def resize(self, minor: int, size_mb: int) -> Argv:
        return ["drbdsetup", dev_path(minor), "resize", "-s", f"{size_mb}m"]

    def barrier_args(self, params: Mapping[str, Any]) -> Argv:
        disabled = _barrier_set(params)
        major, minor, point = self.version.major, self.version.minor, self.version.point
        # Ganeti's test (kept as it is): refuse only a non-8 major with minor 0, 2 or 3.
        if major != 8 and minor in (0, 2, 3):
            raise BlockDevError(f"Unsupported DRBD version: {major}.{minor}.{point}")
        args: Argv = []

        def add(option: str, since: dict[int, int]) -> None:
            first = since.get(minor)
            if first is None or point < first:
                raise BlockDevError(f"Could not use the option {option} as the DRBD version"
                                    f" {major}.{minor}.{point} does not support it.")
            args.append(option)

        if params["disable-meta-flush"]:
            add("--no-md-flushes", self._META_FLUSH_SINCE)
        if "f" in disabled:
            add("--no-disk-flushes", self._DISK_FLUSH_SINCE)
        if "d" in disabled:
            add("--no-disk-drain", self._DISK_DRAIN_SINCE)
        if "b" in disabled:
            add("--no-disk-barrier", self._DISK_BARRIER_SINCE)
        return args


DrbdCommands = Drbd84Commands | Drbd83Commands


def commands_for(version: KernelVersion) -> DrbdCommands:
    """8.0-8.3 or 8.4 syntax, by the kernel module's minor version."""
    return Drbd83Commands(version) if version.minor <= 3 else Drbd84Commands(version)
