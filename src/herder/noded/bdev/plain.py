"""`plain`: an LVM logical volume `(vg, lv)` (the master names it), with Ganeti 3.0.2's commands.

create: `pvs` for the VG's allocatable PVs (free space, stripes, exclusive storage's empty PVs),
then `lvcreate -Wn -L<size>m -n<lv> -i<stripes> <vg> <pvs...>` with fewer stripes until one
works; attach: `lvs` (kernel major/minor, extent size, stripes, PVs); assemble: `lvchange -ay`;
remove: `lvremove -f vg/lv`; rename: `lvrename vg old new`; grow: `lvextend -L +<k>k` rounded
to a full stripe, trying the allocation policies contiguous, cling, normal; set_info: LVM tags;
snapshot: `lvcreate -s`. VG figures come from `vgs`.

One addition to Ganeti: after `lvcreate`, the LV must have its device node. Without
device-mapper (LV activation impossible) it has none, so the LV is removed again and create
fails with NO_DEVICE_MAPPER: such a node honestly cannot hold `plain` (or `drbd`) data.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from herder.core.diskobjects import BlockDevStatus, Disk, LocalDiskStatus
from herder.noded.bdev.base import (
    NO_DEVICE_MAPPER,
    BlockDev,
    BlockDevError,
    Host,
    check,
)

log = logging.getLogger(__name__)

LVM_SEPARATOR = "|"
_VALID_NAME_RE = re.compile(r"^[a-zA-Z0-9+_.-]*$")
_INVALID_NAMES = frozenset({".", "..", "snapshot", "pvmove"})
_INVALID_SUBSTRINGS = ("_mlog", "_mimage")
_PV_DEVICE_RE = re.compile(r"^([^ ()]+)\([0-9]+\)$")
# Exclusive storage keeps this share of each PV free (Ganeti's PART_MARGIN + PART_RESERVED).
PART_MARGIN = 0.01
PART_RESERVED = 0.02


@dataclass
class PvInfo:
    name: str
    vg_name: str
    size: float  # MiB
    free: float  # MiB
    attributes: str
    lv_list: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        return self.size <= self.free + 1


@dataclass(frozen=True)
class LvInfo:
    """One LV as `lvs` describes it."""

    attributes: str
    major: int
    minor: int
    extent_size: int  # KiB
    stripes: int
    pv_names: tuple[str, ...]


def validate_name(name: str) -> None:
    """LVM's rules for VG and LV names (lvm(8)), both applied to both."""
    if (not _VALID_NAME_RE.match(name) or name in _INVALID_NAMES
            or any(sub in name for sub in _INVALID_SUBSTRINGS)):
        raise BlockDevError(f"Invalid LVM name '{name}'")


def _volume_info(host: Host, command: str, fields: Sequence[str]) -> list[list[str]] | None:
    """`pvs`/`vgs` rows in MiB, or None when the command fails."""
    result = host.run([command, "--noheadings", "--nosuffix", "--units=m", "--unbuffered",
                       f"--separator={LVM_SEPARATOR}", "-o" + ",".join(fields)])
    if result.failed:
        log.error("Can't get the volume information: %s - %s", result.fail_reason,
                  result.output)
        return None
    rows = []
    for line in result.stdout.splitlines():
        cells = line.strip().split(LVM_SEPARATOR)
        if len(cells) != len(fields):
            raise BlockDevError(f"Can't parse {command} output: line '{line}'")
        rows.append(cells)
    return rows


def pv_info(host: Host, vg_names: Sequence[str], *, filter_allocatable: bool = True,
            include_lvs: bool = False) -> list[PvInfo] | None:
    """The PVs of `vg_names` (all when empty); None when `pvs` fails."""
    last_field = "lv_name" if include_lvs else "pv_name"
    rows = _volume_info(host, "pvs", ["pv_name", "vg_name", "pv_free", "pv_attr", "pv_size",
                                      last_field])
    if rows is None:
        return None
    if include_lvs:
        rows.sort(key=lambda row: (row[0], row[5]))
    pvs: list[PvInfo] = []
    for pv_name, vg_name, pv_free, pv_attr, pv_size, lv_name in rows:
        if filter_allocatable and not pv_attr.startswith("a"):
            continue
        if vg_names and vg_name not in vg_names:
            continue
        if pvs and pvs[-1].name == pv_name:
            if include_lvs and lv_name and (not pvs[-1].lv_list or pvs[-1].lv_list[-1] != lv_name):
                pvs[-1].lv_list.append(lv_name)
            continue
        pvs.append(PvInfo(pv_name, vg_name, float(pv_size), float(pv_free), pv_attr,
                          [lv_name] if include_lvs and lv_name else []))
    return pvs


def _std_pv_size(pvs: Sequence[PvInfo]) -> float:
    return min(pv.size for pv in pvs) // (1 + PART_MARGIN + PART_RESERVED)


def vg_info(host: Host, vg_names: Sequence[str], *, excl_stor: bool = False,
            filter_readonly: bool = True) -> list[tuple[float, float, str]] | None:
    """(free MiB, size MiB, name) per VG from `vgs`; None when `vgs` fails."""
    rows = _volume_info(host, "vgs", ["vg_name", "vg_free", "vg_attr", "vg_size"])
    if rows is None:
        return None
    data = []
    for vg_name, vg_free, vg_attr, vg_size in rows:
        if filter_readonly and vg_attr.startswith("r"):
            continue
        if vg_names and vg_name not in vg_names:
            continue
        free = float(vg_free)
        if excl_stor:
            pvs = pv_info(host, [vg_name]) or []
            free = _std_pv_size(pvs) * sum(pv.is_empty() for pv in pvs) if pvs else 0.0
        data.append((free, float(vg_size), vg_name))
    return data


def parse_lvs_line(line: str) -> tuple[str, LvInfo]:
    """One line of the global `lvs` query -> (/dev/vg/lv, its info)."""
    cells = line.strip().split(LVM_SEPARATOR)
    if len(cells) == 9 and cells[-1] == "":
        cells.pop()
    if len(cells) != 8:
        raise BlockDevError(f"Can't parse LVS output, len({cells}) != 8")
    vg_name, lv_name, attributes, major, minor, extent_size, stripes, devices = cells
    path = os.path.join(os.environ.get("DM_DEV_DIR", "/dev"), vg_name, lv_name)
    if len(attributes) < 6:
        raise BlockDevError(f"lvs lv_attr is not at least 6 characters ({attributes})")
    try:
        numbers = (int(major), int(minor), int(float(extent_size)), int(stripes))
    except ValueError as err:
        raise BlockDevError(f"Can't parse lvs output line {line.strip()!r}: {err}") from None
    pv_names: list[str] = []
    if devices:
        for device in devices.split(","):
            match = _PV_DEVICE_RE.match(device)
            if match is None:
                raise BlockDevError(f"Can't parse this device list: {devices}")
            pv_names.append(match.group(1))
    return path, LvInfo(attributes, *numbers, tuple(pv_names))


def lv_global_info(host: Host) -> dict[str, LvInfo]:
    """Every LV of the node by device path (empty when `lvs` fails, as Ganeti)."""
    result = host.run(["lvs", "--noheadings", f"--separator={LVM_SEPARATOR}", "--units=k",
                       "--nosuffix", "-ovg_name,lv_name,lv_attr,lv_kernel_major,"
                       "lv_kernel_minor,vg_extent_size,stripes,devices"])
    if result.failed:
        log.warning("lvs failed, no LV found: %s", result.last_lines())
        return {}
    return dict(parse_lvs_line(line) for line in result.stdout.splitlines())


_LVS_LINE = re.compile(r"^\s*([^|]+)\|([^|]+)\|([0-9.]+)\|([^|]{6,})\|?$")


def volume_list(host: Host, vg_names: Sequence[str]) -> dict[str, tuple[str, bool, bool]]:
    """Ganeti's GetVolumeList: `vg/lv` -> [size MiB as text, inactive, online] of the LVs
    in `vg_names` (all when empty), virtual ones left out. BlockDevError when `lvs` fails."""
    result = host.run(["lvs", "--noheadings", "--units=m", "--nosuffix",
                       f"--separator={LVM_SEPARATOR}", "-ovg_name,lv_name,lv_size,lv_attr",
                       *vg_names])
    if result.failed:
        raise BlockDevError(f"Failed to list logical volumes, lvs output: {result.output}")
    volumes: dict[str, tuple[str, bool, bool]] = {}
    for line in result.stdout.splitlines():
        match = _LVS_LINE.match(line.strip())
        if match is None:
            log.error("Invalid line returned from lvs output: '%s'", line)
            continue
        vg, name, size, attr = match.groups()
        if attr[0] == "v":  # virtual: holds no data
            continue
        volumes[f"{vg}/{name}"] = (size, attr[4] == "-", attr[5] == "o")
    return volumes


def volume_groups(host: Host) -> dict[str, int]:
    """Ganeti's ListVolumeGroups: VG name -> size in whole MiB; empty when `vgs` fails, as
    Ganeti's (the caller then finds its VG missing)."""
    rows = _volume_info(host, "vgs", ["vg_name", "vg_size"])
    return {name: int(float(size)) for name, size in rows or []}


class LogicalVolume(BlockDev):
    dev_type = "plain"

    def __init__(self, disk: Disk, children: Sequence[BlockDev | None], host: Host) -> None:
        super().__init__(disk, children, host)
        lid = disk.plain_id
        validate_name(lid.vg)
        validate_name(lid.lv)
        self.vg_name, self.lv_name = lid.vg, lid.lv
        self.dev_path = f"/dev/{self.vg_name}/{self.lv_name}"
        self.degraded = True
        self.extent_size: int | None = None
        self.stripe_count: int | None = None
        self.pv_names: tuple[str, ...] = ()
        self.attach()

    @classmethod
    def create(cls, disk: Disk, children: Sequence[BlockDev | None], host: Host, *,
               excl_stor: bool = False) -> LogicalVolume:
        lid = disk.plain_id
        validate_name(lid.vg)
        validate_name(lid.lv)
        size = disk.size
        pvs = pv_info(host, [lid.vg])
        if not pvs:
            if excl_stor:
                raise BlockDevError(f"No (empty) PVs found in volume group '{lid.vg}'")
            raise BlockDevError(f"volume group '{lid.vg}' not found on this node"
                                " (or it has no allocatable physical volume)")
        pvs.sort(key=lambda pv: pv.free, reverse=True)
        pv_list = [pv.name for pv in pvs]
        if any(":" in name for name in pv_list):
            raise BlockDevError("Some of your PVs have the invalid character ':' in their"
                                " name, this is not supported - please filter them out"
                                " in lvm.conf using either 'filter' or 'preferred_names'")
        desired_stripes = int(disk.params.get("stripes", 1))
        stripes = min(len(pv_list), desired_stripes)
        if excl_stor:
            if disk.spindles is None:
                raise BlockDevError("Unspecified number of spindles: this is required when"
                                    " exclusive storage is enabled, try running"
                                    " gnt-cluster repair-disk-sizes")
            needed = math.ceil(float(size) / float(_std_pv_size(pvs)))
            if disk.spindles < needed:
                raise BlockDevError(f"Requested number of spindles ({disk.spindles}) is not"
                                    f" enough for a disk of {size} MB (at least {needed}"
                                    " spindles needed)")
            needed = disk.spindles
            pv_list = [pv.name for pv in pvs if pv.is_empty()][:needed]
            if len(pv_list) < needed:
                raise BlockDevError(f"Not enough empty PVs (spindles) to create a disk of"
                                    f" {size} MB: {len(pv_list)} available, {needed} needed")
            stripes = len(pv_list)
        else:
            free = sum(pv.free for pv in pvs)
            if free < size:
                raise BlockDevError(f"not enough free space in volume group '{lid.vg}':"
                                    f" {size} MiB required, {free:g} MiB available")
        command = ["lvcreate", "-Wn", f"-L{size}m", f"-n{lid.lv}"]
        result = None
        for stripes_arg in range(stripes, 0, -1):
            result = host.run([*command, f"-i{stripes_arg}", lid.vg, *pv_list])
            if not result.failed:
                break
        assert result is not None
        check(result, f"LV create of {lid.vg}/{lid.lv} failed")
        device = cls(disk, children, host)
        if host.lv_device_nodes_required and not host.exists(device.dev_path or ""):
            # Created, but it can hold no data: take it back before refusing.
            removal = host.run(["lvremove", "-f", f"{lid.vg}/{lid.lv}"])
            if removal.failed:
                raise BlockDevError(f"{NO_DEVICE_MAPPER}; removing {lid.vg}/{lid.lv} failed:"
                                    f" {removal.last_lines()}")
            raise BlockDevError(NO_DEVICE_MAPPER)
        return device

    def attach(self, lv: LvInfo | None = None) -> bool:
        self.attached = False
        if lv is None:
            lv = lv_global_info(self.host).get(self.dev_path or "")
        if lv is None:
            return False
        self.major, self.minor = lv.major, lv.minor
        self.extent_size, self.stripe_count = lv.extent_size, lv.stripes
        self.degraded = lv.attributes.startswith("v")  # virtual: its PVs are gone
        self.pv_names = lv.pv_names
        self.attached = True
        return True

    def assemble(self) -> None:
        # Always activate: a VG may be inactive after boot or disk trouble.
        result = self.host.run(["lvchange", "-ay", self.dev_path or ""])
        if result.failed:
            raise BlockDevError(f"Can't activate lv {self.dev_path}: {result.last_lines()}")

    def remove(self) -> None:
        if not self.minor and not self.attach():
            return
        check(self.host.run(["lvremove", "-f", f"{self.vg_name}/{self.lv_name}"]),
              f"Can't lvremove {self.vg_name}/{self.lv_name}")

    def rename(self, new_logical_id: Sequence[object]) -> None:
        if len(new_logical_id) != 2:
            raise BlockDevError(f"Invalid new logical id {list(new_logical_id)!r}")
        new_vg, new_name = (str(part) for part in new_logical_id)
        if new_vg != self.vg_name:
            raise BlockDevError(f"Can't move a logical volume across volume groups"
                                f" (from {self.vg_name} to {new_vg})")
        validate_name(new_name)
        check(self.host.run(["lvrename", new_vg, self.lv_name, new_name]),
              f"Failed to rename the logical volume {self.vg_name}/{self.lv_name}")
        self.lv_name = new_name
        self.dev_path = f"/dev/{self.vg_name}/{self.lv_name}"

    def sync_status(self) -> BlockDevStatus:
        ldisk = LocalDiskStatus.FAULTY if self.degraded else LocalDiskStatus.OKAY
        return BlockDevStatus(self.dev_path, self.major, self.minor, None, None, self.degraded,
                          ldisk)

    def set_info(self, text: str) -> None:
        super().set_info(text)
        tags = check(self.host.run(["lvs", "-o", "tags", "--noheadings", "--nosuffix",
                                    self.dev_path or ""]), "Can't read the LV's tags")
        raw = tags.stdout.strip()
        if raw:
            for tag in raw.split(","):
                check(self.host.run(["lvchange", "--deltag", tag.strip(), self.dev_path or ""]),
                      f"Can't remove tag {tag.strip()}")
        text = re.sub(r"^[^A-Za-z0-9_+.]", "_", text)
        text = re.sub(r"[^-A-Za-z0-9_+.]", "_", text)[:128]
        check(self.host.run(["lvchange", "--addtag", text, self.dev_path or ""]),
              f"Can't tag {self.dev_path}")

    def _growth_available_excl_stor(self) -> float:
        pvs = pv_info(self.host, [self.vg_name])
        if not pvs:
            raise BlockDevError(f"Cannot get information about PVs for {self.dev_path}")
        std = _std_pv_size(pvs)
        return sum(pv.free - (pv.size - std) for pv in pvs if pv.name in self.pv_names)

    def grow(self, amount: int, *, dryrun: bool, backingstore: bool, excl_stor: bool) -> None:
        if not backingstore:
            return
        if (self.extent_size is None or self.stripe_count is None) and not self.attach():
            raise BlockDevError(f"Can't attach to LV {self.dev_path} during grow")
        assert self.extent_size is not None and self.stripe_count is not None
        full_stripe = self.extent_size * self.stripe_count
        amount_k = amount * 1024
        rest = amount_k % full_stripe if full_stripe else 0
        if rest:
            amount_k += full_stripe - rest
        command = ["lvextend", "-L", f"+{amount_k}k"]
        if dryrun:
            command.append("--test")
        pv_list: list[str] = []
        if excl_stor:
            free = self._growth_available_excl_stor()
            if amount_k > free * 1024:
                raise BlockDevError(f"Not enough free space to grow {self.dev_path}:"
                                    f" {amount_k // 1024} MiB required, {free:g} available")
            pv_list = list(self.pv_names)
        result = None
        for policy in ("contiguous", "cling", "normal"):
            result = self.host.run([*command, "--alloc", policy, self.dev_path or "", *pv_list])
            if not result.failed:
                return
        assert result is not None
        raise BlockDevError(f"Can't grow LV {self.dev_path}: {result.last_lines()}")

    def snapshot(self, snap_name: str | None, snap_size: int | None) -> list[object]:
        snap_name = snap_name or self.lv_name + ".snap"
        snap_size = snap_size or self.size
        old = LogicalVolume(self.disk.with_logical_id([self.vg_name, snap_name]), [],
                            self.host)
        try:
            old.remove()
        except BlockDevError as err:
            log.warning("ignoring: %s", err)
        vgs = vg_info(self.host, [self.vg_name])
        if not vgs:
            raise BlockDevError(f"Can't compute VG info for vg {self.vg_name}")
        free = vgs[0][0]
        if free < snap_size:
            raise BlockDevError(f"not enough free space in volume group '{self.vg_name}':"
                                f" {snap_size} MiB required, {free:g} MiB available")
        check(self.host.run(["lvcreate", f"-L{snap_size}m", "-s", f"-n{snap_name}",
                             self.dev_path or ""]), f"Can't snapshot {self.dev_path}")
        return [self.vg_name, snap_name]
