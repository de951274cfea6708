"""Storage units (design-2.1 "Storage units modelling", "Automated disk repairs infrastructure").

A small generic interface over the node's storage pools: LVM physical volumes (`lvm-pv`), LVM
volume groups (`lvm-vg`) and file storage directories (`file`). Every type lists its units
with Ganeti's storage fields (name, size, used, free, allocatable; sizes in MiB) and reports a
unit's status; the type-specific operations are `set_pv_allocatable` (Ganeti's modify of the
`allocatable` field), `repair_vg` (the `fix-consistency` operation) and the file storage
directory creation/removal.

LVM commands run through one runner (`run_command`): LC_ALL=C, a timeout, no inherited file
descriptors, and errors carrying the command and its output. Listing uses
`--noheadings --units=m --nosuffix --separator |` as Ganeti does (lower-case `m` is MiB).

`repair_vg` may destroy logical volumes that lived on the missing PVs; the master first checks
`herder.masterd.vg_repair.vg_repair_allowed` against the cluster model and the other nodes'
health.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from herder.core import sizes
from herder.core.errors import HerderError
from herder.core.rpcdefs.storage_calls import StorageRow

if TYPE_CHECKING:
    from herder.core import model

# a unit's field value: a name, a size in MiB, a flag (the node RPC's answer row)
UnitValue = str | int | float | bool | None

ST_LVM_PV = "lvm-pv"
ST_LVM_VG = "lvm-vg"
ST_FILE = "file"

SF_NAME, SF_SIZE, SF_USED, SF_FREE, SF_ALLOCATABLE = "name", "size", "used", "free", "allocatable"
STORAGE_FIELDS: tuple[str, ...] = (SF_NAME, SF_SIZE, SF_USED, SF_FREE, SF_ALLOCATABLE)

SO_FIX_CONSISTENCY = "fix-consistency"

DEFAULT_TIMEOUT = 60.0
LVM_SEPARATOR = "|"


class StorageError(HerderError):
    """A storage unit cannot be listed, changed or repaired."""


class StorageCommandError(StorageError):
    """A storage command failed or timed out; carries the command and its output."""

    def __init__(self, message: str, argv: Sequence[str], returncode: int | None,
                 output: str) -> None:
        super().__init__(message)
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output


class VgRepairError(StorageError):
    """The volume group is still inconsistent after `vgreduce --removemissing`."""


class FileStorageError(StorageError):
    """A file storage directory operation was refused or failed."""


# --- the command runner ------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """stdout and stderr together (LVM writes its warnings to stderr)."""
        return "\n".join(part for part in (self.stdout, self.stderr) if part)

    @property
    def failed(self) -> bool:
        return self.returncode != 0


Runner = Callable[[Sequence[str], float], CommandResult]


def _command_env() -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    env["LVM_SUPPRESS_FD_WARNINGS"] = "1"
    return env


def run_command(argv: Sequence[str], timeout: float = DEFAULT_TIMEOUT) -> CommandResult:
    """Run a command (LC_ALL=C, no stdin, closed fds) and capture its output.

    Raises StorageCommandError when it cannot start or times out; a non-zero exit is returned
    (callers decide, see `check`).
    """
    args = tuple(argv)
    try:
        proc = subprocess.run(
            args, capture_output=True, text=True, timeout=timeout, env=_command_env(),
            stdin=subprocess.DEVNULL, close_fds=True, check=False,
        )
    except subprocess.TimeoutExpired as err:
        out = err.stdout
        text = out.decode(errors="replace") if isinstance(out, bytes) else (out or "")
        raise StorageCommandError(
            f"{' '.join(args)} timed out after {timeout:g}s", args, None, text
        ) from None
    except OSError as err:
        raise StorageCommandError(f"cannot run {' '.join(args)}: {err}", args, None, "") from err
    return CommandResult(args, proc.returncode, proc.stdout, proc.stderr)


def check(result: CommandResult, what: str) -> CommandResult:
    """Raise StorageCommandError (with the output) when `result` failed."""
    if result.failed:
        raise StorageCommandError(
            f"{what}: {' '.join(result.argv)} failed (exit code {result.returncode}):"
            f" {result.output.strip()}", result.argv, result.returncode, result.output,
        )
    return result


# --- parsing -----------------------------------------------------------------------------------


def parse_size(value: str) -> int:
    """An LVM size printed with `--units m --nosuffix` ("60.00") as whole MiB, rounded."""
    try:
        return round(sizes.parse_size(value, "m", si_upper=True))
    except ValueError as err:
        raise StorageError(f"cannot parse LVM size {value!r}") from err


def parse_rows(output: str, field_count: int, separator: str = LVM_SEPARATOR
               ) -> list[list[str]]:
    """Split `--noheadings --separator` output into rows; lines of the wrong width are skipped
    (LVM mixes warnings into its output on some versions)."""
    rows = []
    for line in output.splitlines():
        line = line.strip()
        if not line:
            continue
        values = line.split(separator)
        if len(values) == field_count:
            rows.append(values)
    return rows


_MISSING_DEVICE = re.compile(r"Couldn't find device with uuid '?([\w-]+)'?")
_PARTIAL_LV = re.compile(r"Partial LV (\S+) needs to be repaired")


@dataclass(frozen=True)
class VgReduceOutcome:
    consistent: bool  # "Wrote out consistent volume group" and no --force suggestion
    needs_force: bool  # partial LVs remain; only `--force` (which removes them) would help
    missing_pvs: tuple[str, ...]
    partial_lvs: tuple[str, ...]


def parse_vgreduce(output: str) -> VgReduceOutcome:
    """Interpret `vgreduce --removemissing` output (old and new LVM versions)."""
    missing = tuple(dict.fromkeys(_MISSING_DEVICE.findall(output)))
    partial = tuple(dict.fromkeys(_PARTIAL_LV.findall(output)))
    needs_force = "--removemissing --force" in output or bool(partial)
    wrote = "Wrote out consistent volume group" in output
    return VgReduceOutcome(consistent=wrote and not needs_force, needs_force=needs_force,
                           missing_pvs=missing, partial_lvs=partial)


def vg_inconsistency(vg: str, result: CommandResult, attr: str | None = None) -> str | None:
    """Why `vgs` output shows the VG as inconsistent, or None when it looks fine.

    Fails on a non-zero exit, on missing-device warnings (LVM >= 2.02.66 exits 0 with them),
    on "not found", and on the partial flag (attr[3] == "p") when the attributes are known.
    """
    text = result.output
    if result.failed:
        return f"vgs failed (exit code {result.returncode}): {text.strip()}"
    if f"Volume group {vg} not found" in text or f'Volume group "{vg}" not found' in text:
        return f"volume group {vg} not found"
    missing = _MISSING_DEVICE.findall(text)
    if missing:
        return f"volume group {vg} still misses PV(s) {', '.join(dict.fromkeys(missing))}"
    if attr is not None and len(attr) > 3 and attr[3] == "p":
        return f"volume group {vg} is partial (attributes {attr})"
    return None


# --- storage types -----------------------------------------------------------------------------


class StorageType(ABC):
    """One kind of storage unit. `list_units` returns dicts keyed by the requested fields."""

    name: ClassVar[str]
    modifiable: ClassVar[frozenset[str]] = frozenset()
    operations: ClassVar[frozenset[str]] = frozenset()

    @abstractmethod
    def list_units(self, name: str | None = None, fields: Sequence[str] | None = None
                   ) -> list[StorageRow]:
        """All units (or just `name`) with `fields` (default: all of STORAGE_FIELDS)."""

    @abstractmethod
    def unit_status(self, name: str) -> StorageRow:
        """One unit's fields plus type-specific health, with `ok` summarising it."""

    def modify(self, name: str, changes: Mapping[str, UnitValue]) -> None:
        unknown = set(changes) - self.modifiable
        if unknown:
            raise StorageError(
                f"{self.name} storage: field(s) {', '.join(sorted(unknown))} cannot be modified"
            )

    def execute(self, name: str, operation: str, **options: object) -> VgRepairResult:
        raise StorageError(f"{self.name} storage has no operation {operation!r}")

    @staticmethod
    def _fields(fields: Sequence[str] | None) -> list[str]:
        wanted = list(fields) if fields else list(STORAGE_FIELDS)
        unknown = [f for f in wanted if f not in STORAGE_FIELDS]
        if unknown:
            raise StorageError(f"unknown storage field(s): {', '.join(unknown)}")
        return wanted


class _LvmStorage(StorageType):
    list_command: ClassVar[str]
    # storage field -> the LVM fields it needs
    field_map: ClassVar[dict[str, tuple[str, ...]]]

    def __init__(self, runner: Runner = run_command, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.runner = runner
        self.timeout = timeout

    def _convert(self, field: str, values: Mapping[str, str]) -> UnitValue:
        raise NotImplementedError

    def _query(self, name: str | None, lvm_fields: Sequence[str]) -> list[dict[str, str]]:
        argv = [self.list_command, "--noheadings", "--units=m", "--nosuffix",
                f"--separator={LVM_SEPARATOR}", f"--options={','.join(lvm_fields)}"]
        if name is not None:
            argv.append(name)
        result = check(self.runner(argv, self.timeout), f"listing {self.name} storage")
        return [dict(zip(lvm_fields, (v.strip() for v in row), strict=True))
                for row in parse_rows(result.stdout, len(lvm_fields))]

    def list_units(self, name: str | None = None, fields: Sequence[str] | None = None
                   ) -> list[StorageRow]:
        wanted = self._fields(fields)
        lvm_fields = list(dict.fromkeys(f for sf in wanted for f in self.field_map[sf]))
        if not lvm_fields:
            lvm_fields = [self.field_map[SF_NAME][0]]
        return [{sf: self._convert(sf, row) for sf in wanted}
                for row in self._query(name, lvm_fields)]


class LvmPvStorage(_LvmStorage):
    name = ST_LVM_PV
    list_command = "pvs"
    modifiable = frozenset({SF_ALLOCATABLE})
    field_map: ClassVar[dict[str, tuple[str, ...]]] = {
        SF_NAME: ("pv_name",), SF_SIZE: ("pv_size",), SF_USED: ("pv_used",),
        SF_FREE: ("pv_free",), SF_ALLOCATABLE: ("pv_attr",),
    }

    def _convert(self, field: str, values: Mapping[str, str]) -> UnitValue:
        if field == SF_NAME:
            return values["pv_name"]
        if field == SF_ALLOCATABLE:
            return values["pv_attr"][:1] == "a"
        return parse_size(values[self.field_map[field][0]])

    def unit_status(self, name: str) -> StorageRow:
        fields = ["pv_name", "vg_name", "pv_attr", "pv_size", "pv_free", "pv_used"]
        rows = self._query(name, fields)
        if not rows:
            raise StorageError(f"physical volume {name} not found")
        row = rows[0]
        attr = row["pv_attr"]
        missing = len(attr) > 2 and attr[2] == "m"
        return {
            SF_NAME: row["pv_name"], "vg": row["vg_name"], "attr": attr,
            SF_SIZE: parse_size(row["pv_size"]), SF_USED: parse_size(row["pv_used"]),
            SF_FREE: parse_size(row["pv_free"]), SF_ALLOCATABLE: attr[:1] == "a",
            "exported": len(attr) > 1 and attr[1] == "x", "missing": missing, "ok": not missing,
        }

    def modify(self, name: str, changes: Mapping[str, UnitValue]) -> None:
        super().modify(name, changes)
        if SF_ALLOCATABLE in changes:
            set_pv_allocatable(name, bool(changes[SF_ALLOCATABLE]), self.runner, self.timeout)


class LvmVgStorage(_LvmStorage):
    name = ST_LVM_VG
    list_command = "vgs"
    operations = frozenset({SO_FIX_CONSISTENCY})
    field_map: ClassVar[dict[str, tuple[str, ...]]] = {
        SF_NAME: ("vg_name",), SF_SIZE: ("vg_size",), SF_FREE: ("vg_free",),
        SF_USED: ("vg_size", "vg_free"), SF_ALLOCATABLE: (),
    }

    def _convert(self, field: str, values: Mapping[str, str]) -> UnitValue:
        if field == SF_NAME:
            return values["vg_name"]
        if field == SF_ALLOCATABLE:
            return True
        if field == SF_USED:
            return parse_size(values["vg_size"]) - parse_size(values["vg_free"])
        return parse_size(values[self.field_map[field][0]])

    def unit_status(self, name: str) -> StorageRow:
        fields = ["vg_name", "vg_attr", "vg_size", "vg_free", "pv_count", "lv_count"]
        argv = ["vgs", "--noheadings", "--units=m", "--nosuffix", f"--separator={LVM_SEPARATOR}",
                f"--options={','.join(fields)}", name]
        result = self.runner(argv, self.timeout)
        rows = parse_rows(result.stdout, len(fields))
        if result.failed or not rows:
            raise StorageCommandError(
                f"volume group {name} not found or unreadable: {result.output.strip()}",
                result.argv, result.returncode, result.output,
            )
        row = dict(zip(fields, (v.strip() for v in rows[0]), strict=True))
        problem = vg_inconsistency(name, result, row["vg_attr"])
        size, free = parse_size(row["vg_size"]), parse_size(row["vg_free"])
        return {
            SF_NAME: row["vg_name"], "attr": row["vg_attr"], SF_SIZE: size, SF_FREE: free,
            SF_USED: size - free, SF_ALLOCATABLE: True, "pv_count": int(row["pv_count"]),
            "lv_count": int(row["lv_count"]), "partial": row["vg_attr"][3:4] == "p",
            "problem": problem, "ok": problem is None,
        }

    def execute(self, name: str, operation: str, **options: object) -> VgRepairResult:
        """`fix-consistency` is `repair_vg` (option: remove_partial_lvs)."""
        if operation != SO_FIX_CONSISTENCY:
            return super().execute(name, operation, **options)
        unknown = set(options) - {"remove_partial_lvs"}
        if unknown:
            raise StorageError(f"unknown option(s) for {operation}: {', '.join(sorted(unknown))}")
        return repair_vg(name, remove_partial_lvs=bool(options.get("remove_partial_lvs")),
                         runner=self.runner, timeout=self.timeout)


class FileStorage(StorageType):
    """The cluster's file storage directories (`paths`), as Ganeti's FileStorage."""

    name = ST_FILE

    def __init__(self, paths: Iterable[str | Path]) -> None:
        self.paths = [Path(p) for p in paths]

    def _row(self, path: Path, wanted: Sequence[str]) -> StorageRow:
        row: StorageRow = {}
        stats: os.statvfs_result | None = None
        for field in wanted:
            if field == SF_NAME:
                row[field] = str(path)
            elif field == SF_ALLOCATABLE:
                row[field] = True
            elif field == SF_USED:
                row[field] = bytes_to_mib(directory_size(path))
            else:
                if stats is None:
                    try:
                        stats = os.statvfs(path)
                    except OSError as err:
                        raise FileStorageError(f"cannot stat file storage {path}: {err}") from err
                blocks = stats.f_blocks if field == SF_SIZE else stats.f_bavail
                row[field] = bytes_to_mib(blocks * stats.f_frsize)
        return row

    def list_units(self, name: str | None = None, fields: Sequence[str] | None = None
                   ) -> list[StorageRow]:
        wanted = self._fields(fields)
        paths = [Path(name)] if name is not None else self.paths
        return [self._row(p, wanted) for p in paths]

    def unit_status(self, name: str) -> StorageRow:
        path = Path(name)
        status: StorageRow = {SF_NAME: str(path), "exists": path.exists(),
                                  "is_dir": path.is_dir()}
        status["writable"] = status["is_dir"] and os.access(path, os.W_OK | os.X_OK)
        if status["is_dir"]:
            status.update(self._row(path, [SF_SIZE, SF_USED, SF_FREE]))
        status[SF_ALLOCATABLE] = True
        status["ok"] = bool(status["writable"])
        return status


STORAGE_TYPES: dict[str, type[StorageType]] = {
    ST_LVM_PV: LvmPvStorage, ST_LVM_VG: LvmVgStorage, ST_FILE: FileStorage,
}


def get_storage(type_name: str, paths: Iterable[str | Path] = (), *,
                runner: Runner = run_command) -> StorageType:
    """An instance of the storage type `type_name` (`file` takes the directory list `paths`,
    the LVM types the command runner)."""
    if type_name not in STORAGE_TYPES:
        raise StorageError(
            f"unknown storage type {type_name!r} (known: {', '.join(sorted(STORAGE_TYPES))})")
    if type_name == ST_FILE:
        return FileStorage(paths)
    return LvmPvStorage(runner) if type_name == ST_LVM_PV else LvmVgStorage(runner)


# --- helpers for file storage sizes ------------------------------------------------------------


def bytes_to_mib(value: int) -> int:
    return math.floor(value / 1048576.0 + 0.5)


def directory_size(path: Path) -> int:
    """Sum of the sizes of the files under `path` (lstat, symlinks not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue  # removed meanwhile
    return total


# --- specific operations -----------------------------------------------------------------------


def set_pv_allocatable(pv: str, allocatable: bool, runner: Runner = run_command,
                       timeout: float = DEFAULT_TIMEOUT) -> None:
    """Allow or stop allocations on a PV (`pvchange --allocatable y|n PV`)."""
    flag = "y" if allocatable else "n"
    check(runner(["pvchange", f"--allocatable={flag}", pv], timeout),
          f"cannot modify physical volume {pv}")


@dataclass(frozen=True)
class VgRepairResult:
    vg: str
    forced: bool  # `--force` was used: the partial LVs listed were removed
    removed_lvs: tuple[str, ...]
    missing_pvs: tuple[str, ...]
    output: str


def repair_vg(vg: str, *, remove_partial_lvs: bool = False, runner: Runner = run_command,
              timeout: float = DEFAULT_TIMEOUT) -> VgRepairResult:
    """Drop missing PVs from `vg` (`vgreduce --removemissing`) and check it is consistent.

    When LVs lived (partly) on the missing PVs, LVM refuses without `--force`, which removes
    those LVs. That happens only with `remove_partial_lvs=True`, to be passed only after
    `vg_repair_allowed` agreed; otherwise VgRepairError names the LVs that would go.
    The check afterwards runs `vgs` on the VG: it must succeed, report no missing devices and
    not be partial.
    """
    first = runner(["vgreduce", "--removemissing", vg], timeout)  # exit code judged below
    outcome = parse_vgreduce(first.output)
    outputs = [first.output]
    forced = False
    if outcome.needs_force:
        if not remove_partial_lvs:
            raise VgRepairError(
                f"volume group {vg} still has partial LVs"
                f" ({', '.join(outcome.partial_lvs) or 'unknown'}); only removing them"
                " (vgreduce --removemissing --force) can make it consistent, which needs"
                " remove_partial_lvs"
            )
        second = runner(["vgreduce", "--removemissing", "--force", vg], timeout)
        outputs.append(second.output)
        forced = True
    vgs = runner(["vgs", "--noheadings", "--units=m", "--nosuffix",
                  f"--separator={LVM_SEPARATOR}", "--options=vg_name,vg_attr", vg], timeout)
    rows = parse_rows(vgs.stdout, 2)
    attr = rows[0][1].strip() if rows else None
    problem = vg_inconsistency(vg, vgs, attr)
    if problem is None and not rows:
        problem = f"vgs printed nothing for volume group {vg}"
    if problem is not None:
        raise VgRepairError(
            f"volume group {vg} still not consistent: {problem}; vgreduce output:"
            f" {' / '.join(o.strip() for o in outputs)}"
        )
    return VgRepairResult(vg=vg, forced=forced,
                          removed_lvs=outcome.partial_lvs if forced else (),
                          missing_pvs=outcome.missing_pvs, output="\n".join(outputs))


# --- file storage directories ------------------------------------------------------------------


def allowed_file_storage_dirs(cluster: model.Cluster) -> list[Path]:
    """The base directories file storage directories may be created under."""
    bases = [cluster.file_storage_dir, cluster.shared_file_storage_dir]
    return [Path(b) for b in dict.fromkeys(bases) if b]


def _check_under_bases(path: Path, allowed_bases: Iterable[str | Path]) -> Path:
    if not path.is_absolute():
        raise FileStorageError(f"file storage directory {path} must be an absolute path")
    resolved = Path(os.path.realpath(path))
    bases = [Path(os.path.realpath(b)) for b in allowed_bases]
    for base in bases:
        if resolved != base and resolved.is_relative_to(base):
            return resolved
    raise FileStorageError(
        f"file storage directory {path} is not below an allowed file storage directory"
        f" ({', '.join(map(str, bases)) or 'none configured'})"
    )


def create_dir(path: str | Path, allowed_bases: Iterable[str | Path]) -> Path:
    """Create a file storage directory (and parents) below one of the allowed base dirs.

    Idempotent for an existing directory; refuses a path outside the bases (symlinks are
    resolved first) or one that exists as something else.
    """
    resolved = _check_under_bases(Path(path), allowed_bases)
    if resolved.exists() and not resolved.is_dir():
        raise FileStorageError(f"{path} exists and is not a directory")
    try:
        # 0711: QEMU as libvirt-qemu (Debian's libvirt) traverses it to its disks (bdev.file)
        resolved.mkdir(mode=0o711, parents=True, exist_ok=True)
    except OSError as err:
        raise FileStorageError(f"cannot create file storage directory {path}: {err}") from err
    return resolved


def remove_dir(path: str | Path, allowed_bases: Iterable[str | Path]) -> None:
    """Remove an empty file storage directory below an allowed base; a missing one is fine."""
    resolved = _check_under_bases(Path(path), allowed_bases)
    if not resolved.exists():
        return
    if not resolved.is_dir():
        raise FileStorageError(f"{path} is not a directory")
    try:
        resolved.rmdir()
    except OSError as err:
        raise FileStorageError(
            f"cannot remove file storage directory {path} (it must be empty): {err}"
        ) from err


def lvm_available() -> bool:
    """True when the LVM tools are installed (the daemon may report no LVM storage otherwise)."""
    return all(shutil.which(tool) for tool in ("pvs", "vgs", "pvchange", "vgreduce"))
