"""LVM storage: the `plain` status collector and Ganeti's `lv` performance collector.

Both read one `lvs` listing (Ganeti's field list, one line per LV segment); `plain` also reads
`vgs`. Sizes in `plain` are KiB (the design's storage fields: free/used/total); `lv` keeps
Ganeti's bytes and field names so existing consumers parse it.

- `plain` (category storage, kind 1): per volume group name, uuid, attributes, total/free/used
  KiB and PV health; the logical volumes with their size and the instance they belong to; the
  summed free/used/total at top level; LVM's warnings (`messages`). A VG with missing physical
  volumes is status 4 with the message "backend pv unavailable: ...". When the cluster config
  enables an LVM template (plain, drbd), only the cluster's volume group
  (`cluster.volume_group_name`) is reported and its absence is an error; otherwise every VG.
- `lv` (category storage, kind 0): the LV segments in the layout of Ganeti's `mon-collector lv`
  (uuid, name, attr, major, minor, kernel_major, kernel_minor, size, seg_count, tags, modules,
  vg_uuid, vg_name, segtype, seg_start, seg_start_pe, seg_size, seg_tags, seg_pe_ranges, devices,
  instance), every VG.

The LV -> instance mapping comes from the cluster config, or, on a node without it, from confd
(the node's instances, type 8, and their disks, type 9), as Ganeti's `lv` collector does.

Parsers are pure and accept captured outputs, including LVM's warnings mixed in (`2>&1`), the
`|` or `;` separators, sizes with or without a unit suffix, and `vgs`' default column layout
(`VG #PV #LV #SN Attr VSize VFree`, as in Ganeti's `vgs-missing-pvs-*.txt` samples).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from herder.core import model, sizes
from herder.mond.collector import CollectContext, Collector, CollectorError
from herder.mond.report import Kind, Status, merge_statuses, status

KIB = 1024

# Ganeti's `lvs` field list (Storage/Lvm/LVParser.hs), and the JSON keys `mon-collector lv` uses.
LVS_FIELDS = (
    "lv_uuid", "lv_name", "lv_attr", "lv_major", "lv_minor", "lv_kernel_major",
    "lv_kernel_minor", "lv_size", "seg_count", "lv_tags", "modules", "vg_uuid", "vg_name",
    "segtype", "seg_start", "seg_start_pe", "seg_size", "seg_tags", "seg_pe_ranges", "devices",
)
LV_KEYS = (
    "uuid", "name", "attr", "major", "minor", "kernel_major", "kernel_minor", "size",
    "seg_count", "tags", "modules", "vg_uuid", "vg_name", "segtype", "seg_start", "seg_start_pe",
    "seg_size", "seg_tags", "seg_pe_ranges", "devices",
)
_LV_INT_KEYS = frozenset({"major", "minor", "kernel_major", "kernel_minor", "seg_count",
                          "seg_start_pe"})
_LV_BYTE_KEYS = frozenset({"size", "seg_start", "seg_size"})
LVS_ARGV = ("lvs", "--noheadings", "--units", "B", "--separator", ";",
            "-o", ",".join(LVS_FIELDS))

VGS_FIELDS = ("vg_name", "vg_uuid", "vg_attr", "vg_size", "vg_free", "pv_count",
              "vg_missing_pv_count", "lv_count")
VGS_ARGV = ("vgs", "--noheadings", "--units", "b", "--nosuffix", "--separator", "|",
            "-o", ",".join(VGS_FIELDS))

SEPARATORS = (";", "|")
# Messages LVM prints (on stderr; mixed in when a capture used 2>&1).
_DIAGNOSTIC = re.compile(
    r"^\s*(WARNING|Couldn't|Could not|Cannot|Failed|Volume group|No volume groups|"
    r"File descriptor \d+|Wrote out|Found duplicate|Skipping|Reading|Internal error|"
    r"/dev/\S+: |Incompatible|Check that|striped:|To remove|Proceeding|Logical volume)"
)
# `vgs` default columns: VG #PV #LV #SN Attr VSize VFree (sizes with unit suffixes).
_VGS_DEFAULT = re.compile(
    r"^\s*(?P<name>\S+)\s+(?P<pvs>\d+)\s+(?P<lvs>\d+)\s+\d+\s+(?P<attr>[-a-z]{6,})\s+"
    r"(?P<size>\S+)\s+(?P<free>\S+)\s*$"
)
_MISSING_UUID = re.compile(r"Couldn't find device with uuid '?([A-Za-z0-9-]+?)'?\.?\s*$")
_VG_MISSING_PV = re.compile(r"VG (\S+) is missing PV ([A-Za-z0-9-]+)")
_VG_INCOMPLETE = re.compile(r"Couldn't find all physical volumes for volume group (\S+?)\.?\s*$")
_VG_NOT_FOUND = re.compile(r"Volume group \"?(\S+?)\"? not found")


def parse_size(text: str, default_unit: str = "b") -> int:
    """An LVM size in bytes: `123`, `123B`, `65536.00k`, `<1.31t` (lower case: powers of
    1024; upper case K..E: powers of 1000; b/B bytes; s/S 512-byte sectors; a bare number is
    in `default_unit`). LVM marks a rounded size with a leading `<`."""
    return round(sizes.parse_size(text.strip().removeprefix("<"), "b",
                                  default_unit=default_unit, si_upper=True))


def _int(text: str) -> int:
    return int(text.strip())


def is_diagnostic(line: str) -> bool:
    """A message of LVM's rather than a row of the report."""
    return bool(_DIAGNOSTIC.match(line))


def _separator(line: str) -> str | None:
    for sep in SEPARATORS:
        if sep in line:
            return sep
    return None


def parse_lvs(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    """`lvs` rows (Ganeti's field list) as Ganeti's LV objects without `instance`, and LVM's
    messages. An unexpected line raises CollectorError naming it."""
    rows: list[dict[str, Any]] = []
    messages: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        sep = _separator(line)
        values = line.strip().split(sep) if sep else []
        if len(values) != len(LV_KEYS) and is_diagnostic(line):
            messages.append(line.strip())
            continue
        if sep is None:
            raise CollectorError(f"lvs output line {number} is not an LV row: {line[:80]!r}")
        if len(values) != len(LV_KEYS):
            raise CollectorError(
                f"lvs output line {number} has {len(values)} fields, expected {len(LV_KEYS)}"
            )
        row: dict[str, Any] = {}
        for key, value in zip(LV_KEYS, values, strict=True):
            try:
                if key in _LV_INT_KEYS:
                    row[key] = _int(value)
                elif key in _LV_BYTE_KEYS:
                    row[key] = parse_size(value, "b")
                else:
                    row[key] = value
            except ValueError:
                raise CollectorError(
                    f"lvs output line {number}: bad {key} value {value!r}"
                ) from None
        rows.append(row)
    return rows, messages


@dataclass
class VolumeGroup:
    name: str
    size: int  # bytes
    free: int  # bytes
    uuid: str | None = None
    attr: str = ""
    pv_count: int | None = None
    missing_pvs: int | None = None  # None: not reported (old vgs, default layout)
    lv_count: int | None = None

    @property
    def partial(self) -> bool:
        return len(self.attr) > 3 and self.attr[3] == "p"


def parse_vgs(text: str) -> tuple[list[VolumeGroup], list[str]]:
    """`vgs` rows (VGS_FIELDS separated by `|`, or vgs' default columns) and LVM's messages."""
    groups: list[VolumeGroup] = []
    messages: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.split()[:2] == ["VG", "#PV"]:  # the header of vgs' default layout
            continue
        sep = _separator(line)
        values = [v.strip() for v in line.strip().split(sep)] if sep else []
        if len(values) != len(VGS_FIELDS) and not _VGS_DEFAULT.match(line) and is_diagnostic(
                line):
            messages.append(line.strip())
            continue
        try:
            if sep is not None:
                if len(values) != len(VGS_FIELDS):
                    raise CollectorError(f"vgs output line {number} has {len(values)} fields, "
                                         f"expected {len(VGS_FIELDS)}")
                name, uuid, attr, size, free, pvs, missing, lvs = values
                groups.append(VolumeGroup(
                    name=name, uuid=uuid, attr=attr, size=parse_size(size, "b"),
                    free=parse_size(free, "b"), pv_count=_int(pvs),
                    missing_pvs=_int(missing) if missing else None, lv_count=_int(lvs),
                ))
                continue
            match = _VGS_DEFAULT.match(line)
            if match is None:
                raise CollectorError(
                    f"vgs output line {number} is not a VG row: {line[:80]!r}")
            groups.append(VolumeGroup(
                name=match["name"], attr=match["attr"], size=parse_size(match["size"], "m"),
                free=parse_size(match["free"], "m"), pv_count=int(match["pvs"]),
                lv_count=int(match["lvs"]),
            ))
        except ValueError as err:
            raise CollectorError(f"vgs output line {number}: {err}") from None
    return groups, messages


@dataclass
class PvProblems:
    """What LVM's messages say about missing physical volumes."""

    uuids_by_vg: dict[str, list[str]] = field(default_factory=dict)
    incomplete: set[str] = field(default_factory=set)  # VGs with PVs missing
    not_found: set[str] = field(default_factory=set)  # VGs LVM could not find
    unattributed: list[str] = field(default_factory=list)  # missing PV uuids, VG unknown


def pv_problems(messages: Iterable[str]) -> PvProblems:
    result = PvProblems()
    attributed: set[str] = set()
    for msg in messages:
        if m := _VG_MISSING_PV.search(msg):
            vg, uuid = m.group(1), m.group(2)
            uuids = result.uuids_by_vg.setdefault(vg, [])
            if uuid not in uuids:
                uuids.append(uuid)
            attributed.add(uuid)
        elif m := _MISSING_UUID.search(msg):
            if m.group(1) not in result.unattributed:
                result.unattributed.append(m.group(1))
        elif m := _VG_INCOMPLETE.search(msg):
            result.incomplete.add(m.group(1))
        elif m := _VG_NOT_FOUND.search(msg):
            result.not_found.add(m.group(1))
    result.unattributed = [u for u in result.unattributed if u not in attributed]
    return result


def lv_owners(config: model.ConfigData | None, node_uuid: str | None) -> dict[tuple[str, str], str]:
    """(vg, lv) -> instance name, for the instances on this node (primary or secondary; every
    instance when this node is not in the config), plain disks and DRBD children alike."""
    owners: dict[tuple[str, str], str] = {}
    if config is None:
        return owners

    def walk(disks: Sequence[model.Disk], name: str) -> None:
        for disk in disks:
            if isinstance(disk.logical_id, model.PlainId):
                owners[(disk.logical_id.vg, disk.logical_id.lv)] = name
            walk(disk.children, name)

    for inst in config.instances.values():
        if node_uuid is None or node_uuid in inst.all_nodes:
            walk(inst.disks, inst.name)
    return owners


def ganeti_lvs(rows: Iterable[dict[str, Any]],
               owners: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """`mon-collector lv`'s data: each segment row plus `instance` (name or null)."""
    return [{**row, "instance": owners.get((row["vg_name"], row["name"]))} for row in rows]


def _kib(nbytes: int) -> int:
    return nbytes // KIB


def _vg_health(vg: VolumeGroup, problems: PvProblems) -> tuple[int, dict[str, Any]]:
    """How many PVs the VG misses (from vgs' count, its partial flag or LVM's messages), and
    its status."""
    uuids = problems.uuids_by_vg.get(vg.name, [])
    missing = vg.missing_pvs or 0
    if vg.partial and not missing:
        missing = max(1, len(uuids) or len(problems.unattributed))
    if not missing and (uuids or vg.name in problems.incomplete):
        missing = max(1, len(uuids))
    if not missing:
        return 0, status(Status.OK)
    ids = uuids or problems.unattributed
    detail = f" ({', '.join(ids)})" if ids else ""
    plural = "s" if missing != 1 else ""
    return missing, status(Status.BAD, f"backend pv unavailable: volume group {vg.name}: "
                                       f"{missing} physical volume{plural} missing{detail}")


def cluster_vg(config: model.ConfigData | None) -> str | None:
    """The cluster's volume group, when the cluster uses LVM (plain or drbd enabled)."""
    if config is None or not config.cluster.volume_group_name:
        return None
    if not {"plain", "drbd"} & set(config.cluster.enabled_disk_templates):
        return None
    return config.cluster.volume_group_name


def plain_data(groups: Sequence[VolumeGroup], lv_rows: Sequence[dict[str, Any]],
               messages: Sequence[str], owners: dict[tuple[str, str], str],
               volume_group: str | None = None) -> dict[str, Any]:
    """The `plain` collector's verbose data. `volume_group`: report only that VG (the
    cluster's); it being absent is then an error."""
    problems = pv_problems(messages)
    wanted = [vg for vg in groups if volume_group is None or vg.name == volume_group]
    statuses: list[dict[str, Any]] = []
    vg_objects: list[dict[str, Any]] = []
    for vg in wanted:
        missing, st = _vg_health(vg, problems)
        statuses.append(st)
        vg_objects.append({
            "name": vg.name, "uuid": vg.uuid, "attr": vg.attr,
            "total": _kib(vg.size), "free": _kib(vg.free), "used": _kib(vg.size - vg.free),
            "pv_count": vg.pv_count, "missing_pvs": missing, "lv_count": vg.lv_count,
            "status": st,
        })
    seen = {vg.name for vg in groups}
    if volume_group is not None:
        absent = [volume_group] if volume_group not in seen else []
    else:
        named = problems.not_found | problems.incomplete | set(problems.uuids_by_vg)
        absent = sorted(named - seen)
    for name in absent:
        reasons = []
        if name in problems.incomplete or name in problems.uuids_by_vg:
            ids = problems.uuids_by_vg.get(name) or problems.unattributed
            reasons.append("physical volumes missing" + (f" ({', '.join(ids)})" if ids else ""))
        if name in problems.not_found or not reasons:
            reasons.append("not found")
        statuses.append(status(Status.BAD, f"backend pv unavailable: volume group {name}: "
                                           + ", ".join(reasons)))
    if not any(st["code"] for st in statuses) and problems.unattributed and (
            volume_group is None):
        statuses.append(status(Status.BAD, "backend pv unavailable: device with uuid "
                                           + ", ".join(problems.unattributed) + " not found"))
    lvs: dict[tuple[str, str], dict[str, Any]] = {}
    for row in lv_rows:
        key = (row["vg_name"], row["name"])
        if volume_group is not None and key[0] != volume_group:
            continue
        entry = lvs.get(key)
        if entry is None:
            entry = lvs[key] = {
                "name": row["name"], "vg": row["vg_name"], "uuid": row["uuid"],
                "attr": row["attr"], "size": _kib(row["size"]), "devices": [],
                "instance": owners.get(key),
            }
        if row["devices"] and row["devices"] not in entry["devices"]:
            entry["devices"].append(row["devices"])
    return {
        "status": merge_statuses(statuses),
        "free": sum(v["free"] for v in vg_objects),
        "used": sum(v["used"] for v in vg_objects),
        "total": sum(v["total"] for v in vg_objects),
        "vgs": vg_objects,
        "lvs": list(lvs.values()),
        "messages": list(messages),
    }


def lvm_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(LC_ALL="C", LVM_SUPPRESS_FD_WARNINGS="1")
    return env


def run_lvm(ctx: CollectContext, argv: Sequence[str],
            input_name: str) -> tuple[str, list[str], str]:
    """(stdout, stderr messages, failure) of an LVM command, or a captured input (which may
    hold LVM's messages mixed in: the parsers recognise those). `failure` is "" on success,
    else why the command failed; the caller decides whether the messages explain it (missing
    PVs) or it is an error."""
    if input_name in ctx.inputs:
        return ctx.read_input(input_name, ctx.inputs[input_name]), [], ""
    timeout = ctx.settings.command_timeout
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env=lvm_env(), check=False)
    except FileNotFoundError:
        raise CollectorError(f"command not found: {argv[0]}") from None
    except subprocess.TimeoutExpired:
        raise CollectorError(f"{argv[0]} did not finish within {timeout:g}s") from None
    except OSError as err:
        raise CollectorError(f"cannot run {argv[0]}: {err.strerror}") from None
    messages = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    failure = ""
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or [""])[-1].strip()[:200]
        failure = f"{argv[0]} failed with exit code {proc.returncode}: {detail}"
    return proc.stdout, messages, failure


def _lvm_available(ctx: CollectContext, names: Iterable[str]) -> bool:
    return any(n in ctx.inputs for n in names) or shutil.which("lvs") is not None


def _node_uuid(ctx: CollectContext) -> str | None:
    node = ctx.this_node()
    return node.uuid if node is not None else None


def owners_of(ctx: CollectContext) -> tuple[dict[tuple[str, str], str], str | None]:
    """(vg, lv) -> instance from the cluster config, or from confd on a node without it; and
    why the mapping is empty when confd could not say."""
    config = ctx.config()
    if config is None and ctx.cluster_source() == "confd":
        try:
            return ctx.instance_lvs(), None
        except CollectorError as err:
            return {}, str(err)
    return lv_owners(config, _node_uuid(ctx)), None


class PlainCollector(Collector):
    """LVM volume groups and logical volumes (storage type `plain`)."""

    name = "plain"
    category = "storage"
    kind = Kind.STATUS
    inputs = {"vgs": " ".join(VGS_ARGV), "lvs": " ".join(LVS_ARGV)}

    def available(self) -> bool:
        return _lvm_available(self.ctx, self.inputs)

    def collect(self) -> dict[str, Any]:
        config = self.ctx.config()
        volume_group = cluster_vg(config)
        vgs_text, vgs_errors, vgs_failure = run_lvm(self.ctx, VGS_ARGV, "vgs")
        groups, messages = parse_vgs(vgs_text)
        messages += vgs_errors
        if vgs_failure:
            if not groups and not _explains(messages):
                raise CollectorError(vgs_failure)
            messages.append(vgs_failure)
        lvs_text, lvs_errors, lvs_failure = run_lvm(self.ctx, LVS_ARGV, "lvs")
        rows, lv_messages = parse_lvs(lvs_text)
        lv_messages += lvs_errors
        if lvs_failure:
            if not rows and not _explains(lv_messages):
                raise CollectorError(lvs_failure)
            lv_messages.append(lvs_failure)
        all_messages = list(dict.fromkeys([*messages, *lv_messages]))
        owners, owners_error = owners_of(self.ctx)
        data = plain_data(groups, rows, all_messages, owners, volume_group)
        if owners_error:
            data["status"] = merge_statuses(
                [data["status"], status(Status.OK, f"instances unknown: {owners_error}")])
        return data

    def summary(self, data: Any) -> Any:
        return {key: data[key] for key in ("status", "free", "used", "total") if key in data}


def _explains(messages: Sequence[str]) -> bool:
    problems = pv_problems(messages)
    return bool(problems.incomplete or problems.not_found or problems.uuids_by_vg
                or problems.unattributed)


class LvCollector(Collector):
    """Ganeti's `lv` collector: every LV segment with the instance it belongs to."""

    name = "lv"
    category = "storage"
    kind = Kind.PERFORMANCE
    inputs = {"lvs": " ".join(LVS_ARGV)}

    def available(self) -> bool:
        return _lvm_available(self.ctx, self.inputs)

    def collect(self) -> list[dict[str, Any]]:
        text, _errors, failure = run_lvm(self.ctx, LVS_ARGV, "lvs")
        if failure:
            raise CollectorError(failure)
        rows, _messages = parse_lvs(text)
        return ganeti_lvs(rows, owners_of(self.ctx)[0])  # no room for a note in Ganeti's list


COLLECTORS = [PlainCollector, LvCollector]
