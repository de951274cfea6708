"""OS definitions: the OS interface (Ganeti's OS API 10, 15 and 20) with variants.

An OS is a directory named after it in one of the search path's directories, holding:

* `ganeti_api_version`: one integer per line; the OS is usable when one of them is supported;
* executable `create`, `export`, `import`, `rename` scripts, and `verify` for API 20;
* optional `variants.list`: one variant per line (blank lines and `#` comments ignored). When
  present it must name at least one variant; the instance's OS is then `name+variant`;
* optional `parameters.list` (API 20): one `name description...` per line.

The scripts get everything through their environment (`os_environment`). The variables an API
version did not define are not passed to OSes declaring only that version: OS_VARIANT and
OS_NAME need API 15, OSP_* need API 20. HYPERVISOR is passed to every version; there is no
INSTANCE_HYPERVISOR (neither Ganeti 2.1 nor later ones set it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from herder.core import paths
from herder.core.errors import HerderError

if TYPE_CHECKING:
    from herder.core import model
    from herder.core.rpcdefs.payload import InstancePayload

DEFAULT_SEARCH_PATH: tuple[Path, ...] = (Path("/srv/herder/os"),)

API_V10, API_V15, API_V20 = 10, 15, 20
SUPPORTED_API_VERSIONS = frozenset({API_V10, API_V15, API_V20})

API_FILE = "ganeti_api_version"
VARIANTS_FILE = "variants.list"
PARAMETERS_FILE = "parameters.list"

OsScript = Literal["create", "export", "import", "rename", "verify"]
BASE_SCRIPTS: tuple[OsScript, ...] = ("create", "export", "import", "rename")
VERIFY_SCRIPT: OsScript = "verify"

DEFAULT_PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class OsError(HerderError):
    """Base of the OS-definition errors."""


class OsNotFoundError(OsError):
    """No directory of that name in the OS search path."""


class InvalidOsError(OsError):
    """The OS directory exists but is not a valid OS definition."""


class OsVariantError(OsError):
    """The instance's `name+variant` does not fit the OS's declared variants."""


class OsParameterError(OsError):
    """An OS parameter is not declared in the OS's parameters.list."""


class OsScriptError(OsError):
    """An OS script failed (non-zero exit) or could not be started."""

    def __init__(self, message: str, *, returncode: int | None = None,
                 log_file: Path | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.log_file = log_file


class OsScriptTimeoutError(OsScriptError):
    """An OS script ran longer than its timeout and was killed."""


# --- definitions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class OsDefinition:
    name: str
    path: Path
    api_versions: tuple[int, ...]  # as declared, sorted, may include unsupported ones
    variants: tuple[str, ...] = ()
    parameters: tuple[tuple[str, str], ...] = ()  # (name, description)

    @property
    def api_version(self) -> int:
        """The highest API version both herder and the OS support."""
        return max(SUPPORTED_API_VERSIONS.intersection(self.api_versions))

    @property
    def parameter_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.parameters)

    def script_path(self, script: OsScript) -> Path:
        if script not in (*BASE_SCRIPTS, VERIFY_SCRIPT):
            raise OsError(f"unknown OS script {script!r}")
        return self.path / script


@dataclass(frozen=True)
class OsDiagnosis:
    """One entry of an OS listing: a valid definition, or why the directory is not one."""

    name: str
    path: Path
    os: OsDefinition | None
    error: str | None


def split_os_name(full_name: str) -> tuple[str, str | None]:
    """`debian+squeeze` -> ("debian", "squeeze"); `debian` -> ("debian", None)."""
    name, sep, variant = full_name.partition("+")
    return name, (variant if sep else None)


def _read_lines(path: Path) -> list[str]:
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def _regular_file(path: Path, what: str) -> None:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InvalidOsError(f"{what} {path} is missing") from None
    except OSError as err:
        raise InvalidOsError(f"cannot stat {what} {path}: {err}") from err
    if not stat.S_ISREG(st.st_mode):
        raise InvalidOsError(f"{what} {path} is not a regular file")


def load_os(name: str, path: Path) -> OsDefinition:
    """Read and validate the OS definition in directory `path`."""
    if "+" in name or "/" in name or not name:
        raise InvalidOsError(f"invalid OS name {name!r}")
    if not path.is_dir():
        raise InvalidOsError(f"OS {name}: {path} is not a directory")
    api_file = path / API_FILE
    _regular_file(api_file, f"OS {name}: API version file")
    try:
        versions = tuple(sorted({int(v) for v in _read_lines(api_file)}))
    except ValueError as err:
        raise InvalidOsError(f"OS {name}: {api_file} must hold integers, one per line") from err
    except OSError as err:
        raise InvalidOsError(f"OS {name}: cannot read {api_file}: {err}") from err
    if not versions:
        raise InvalidOsError(f"OS {name}: {api_file} declares no API version")
    supported = SUPPORTED_API_VERSIONS.intersection(versions)
    if not supported:
        raise InvalidOsError(
            f"OS {name}: API version(s) {', '.join(map(str, versions))} not supported"
            f" (herder supports {', '.join(map(str, sorted(SUPPORTED_API_VERSIONS)))})"
        )
    scripts = [*BASE_SCRIPTS, *([VERIFY_SCRIPT] if max(supported) >= API_V20 else [])]
    for script in scripts:
        script_path = path / script
        _regular_file(script_path, f"OS {name}: script")
        if not script_path.stat().st_mode & stat.S_IXUSR:
            raise InvalidOsError(f"OS {name}: script {script_path} is not executable")
    variants: tuple[str, ...] = ()
    variants_file = path / VARIANTS_FILE
    if variants_file.exists():
        _regular_file(variants_file, f"OS {name}: variants file")
        found = _read_lines(variants_file)
        if not found:
            raise InvalidOsError(f"OS {name}: no supported OS variant found in {variants_file}")
        variants = tuple(dict.fromkeys(found))
    parameters: tuple[tuple[str, str], ...] = ()
    params_file = path / PARAMETERS_FILE
    if params_file.exists():
        _regular_file(params_file, f"OS {name}: parameters file")
        parsed = []
        for line in _read_lines(params_file):
            pname, _, doc = line.partition(" ")
            parsed.append((pname, doc.strip()))
        parameters = tuple(parsed)
    return OsDefinition(name=name, path=path, api_versions=versions, variants=variants,
                        parameters=parameters)


def _as_paths(search_path: Sequence[Path | str] | Path | str | None) -> list[Path]:
    if search_path is None:
        return list(DEFAULT_SEARCH_PATH)
    if isinstance(search_path, str | Path):
        return [Path(search_path)]
    return [Path(p) for p in search_path]


def find_os(name: str, search_path: Sequence[Path | str] | Path | str | None = None
            ) -> OsDefinition:
    """The OS `name` (a `+variant` suffix is ignored): the first directory of that name wins."""
    base, _ = split_os_name(name)
    dirs = _as_paths(search_path)
    for directory in dirs:
        try:
            candidate = paths.child(directory, base, what="OS name")
        except paths.UnsafeName as err:
            raise OsNotFoundError(str(err)) from None
        if candidate.is_dir():
            return load_os(base, candidate)
    raise OsNotFoundError(
        f"OS {base!r} not found in the search path ({', '.join(map(str, dirs))})"
    )


def diagnose_oses(search_path: Sequence[Path | str] | Path | str | None = None
                  ) -> list[OsDiagnosis]:
    """Every OS directory in the search path, valid or not (shadowed duplicates skipped)."""
    seen: dict[str, OsDiagnosis] = {}
    for directory in _as_paths(search_path):
        try:
            entries = sorted(directory.iterdir())
        except OSError:
            continue  # a missing search directory is not an error
        for entry in entries:
            if entry.name in seen or not entry.is_dir():
                continue
            try:
                seen[entry.name] = OsDiagnosis(entry.name, entry, load_os(entry.name, entry), None)
            except OsError as err:
                seen[entry.name] = OsDiagnosis(entry.name, entry, None, str(err))
    return sorted(seen.values(), key=lambda d: d.name)


def list_oses(search_path: Sequence[Path | str] | Path | str | None = None
              ) -> list[OsDefinition]:
    """The valid OS definitions in the search path, by name."""
    return [d.os for d in diagnose_oses(search_path) if d.os is not None]


def os_names_with_variants(oses: Sequence[OsDefinition]) -> list[str]:
    """The OS list as shown to users: `name+variant` per variant, or `name` without variants."""
    names: list[str] = []
    for osdef in sorted(oses, key=lambda o: o.name):
        if osdef.variants:
            names.extend(f"{osdef.name}+{v}" for v in osdef.variants)
        else:
            names.append(osdef.name)
    return names


def check_variant(osdef: OsDefinition, full_name: str, force: bool = False) -> str | None:
    """Check `name+variant` against the OS; returns the variant (None when there is none).

    A declared-variants OS needs a variant, and it must be one of variants.list; an OS without
    variants takes none. `force` (Ganeti's --force-variant) skips these checks: the scripts
    then get the variant as given (or the first declared one when none is given).
    """
    name, variant = split_os_name(full_name)
    if name != osdef.name:
        raise OsVariantError(f"OS name {full_name!r} does not refer to OS {osdef.name!r}")
    if variant == "":
        raise OsVariantError(f"OS name {full_name!r} has an empty variant")
    if force:
        return variant
    if not osdef.variants:
        if variant is not None:
            raise OsVariantError(
                f"OS {osdef.name!r} does not support variants ({variant!r} given);"
                " use --force-variant to pass it anyway"
            )
        return None
    if variant is None:
        raise OsVariantError(
            f"OS name must include a variant: {osdef.name!r} supports"
            f" {', '.join(osdef.variants)}"
        )
    if variant not in osdef.variants:
        raise OsVariantError(
            f"unsupported OS variant {variant!r} for OS {osdef.name!r} (supported:"
            f" {', '.join(osdef.variants)}); use --force-variant to override"
        )
    return variant


def check_os_params(osdef: OsDefinition, osparams: Mapping[str, object]) -> None:
    """Refuse OS parameters the OS does not declare (API 20 parameters.list)."""
    unknown = sorted(set(osparams) - osdef.parameter_names)
    if unknown:
        declared = ", ".join(sorted(osdef.parameter_names)) or "none"
        raise OsParameterError(
            f"OS {osdef.name!r} does not know the parameter(s) {', '.join(unknown)}"
            f" (declared: {declared})"
        )


# --- instance data and environment -------------------------------------------------------------


@dataclass(frozen=True)
class OsDisk:
    path: str  # the block device (or file) the script writes to
    access: Literal["rw", "ro"] = "rw"
    backend_type: str = "block"  # "block" for LV/DRBD, "file:<driver>" for file disks
    uri: str | None = None  # the userspace access URI (Ganeti's DISK_<n>_URI), e.g. rbd:P/N


@dataclass(frozen=True)
class OsNic:
    mac: str
    ip: str | None = None
    mode: str = "bridged"
    link: str = ""


@dataclass(frozen=True)
class OsInstanceData:
    """What the OS scripts see of an instance (filled parameters, assembled disk paths)."""

    name: str
    os: str  # "name" or "name+variant", as stored on the instance
    hypervisor: str
    disks: Sequence[OsDisk] = ()
    nics: Sequence[OsNic] = ()
    hvparams: Mapping[str, Any] = field(default_factory=dict)
    beparams: Mapping[str, Any] = field(default_factory=dict)
    osparams: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_payload(cls, inst: InstancePayload,
                     os_disks: Sequence[tuple[str, str | None]]) -> OsInstanceData:
        """From the instance as the master told it a node; `os_disks`: (path, userspace URI)
        of each disk on this node (`NodeDisks.os_disk_paths`)."""
        return cls(name=inst.name, os=inst.os, hypervisor=inst.hypervisor,
                   disks=[OsDisk(path=path, uri=uri) for path, uri in os_disks],
                   nics=[OsNic(mac=nic.mac, ip=nic.ip, mode=nic.mode or "bridged",
                               link=nic.link or "") for nic in inst.nics],
                   hvparams=inst.hvparams, beparams=inst.beparams, osparams=inst.osparams)

    @classmethod
    def from_model(cls, config: model.ConfigData, inst: model.Instance,
                   disk_paths: Sequence[str]) -> OsInstanceData:
        """Build from the model; `disk_paths[i]` is where disk i is assembled on this node."""
        if len(disk_paths) != len(inst.disks):
            raise OsError(
                f"instance {inst.name}: {len(disk_paths)} disk paths for {len(inst.disks)} disks"
            )
        group = config.instance_group(inst)
        disks = []
        for disk, path in zip(inst.disks, disk_paths, strict=True):
            backend = "block"
            driver = getattr(disk.logical_id, "driver", None)
            if driver is not None:
                backend = f"file:{driver}"
            disks.append(OsDisk(path=path, access=disk.mode, backend_type=backend))
        nics = []
        for nic in inst.nics:
            params = config.filled_nicparams(nic, group)
            nics.append(OsNic(mac=nic.mac, ip=nic.ip, mode=str(params.get("mode", "bridged")),
                              link=str(params.get("link") or "")))
        return cls(
            name=inst.name, os=inst.os, hypervisor=inst.hypervisor, disks=disks, nics=nics,
            hvparams=dict(config.filled_hvparams(inst)),
            beparams=dict(config.filled_beparams(inst)),
            osparams=dict(config.filled_osparams(inst)),
        )


def _env_value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list | tuple):
        return ",".join(_env_value(v) for v in value)
    return str(value)


def os_environment(osdef: OsDefinition, inst: OsInstanceData, api_version: int | None = None,
                   *, debug: int = 0) -> dict[str, str]:
    """The variables of the OS interface for `inst` (no script-specific extras).

    `api_version` defaults to the highest version both sides support; an explicit one must be
    declared by the OS and supported by herder. Variables newer than that version are left out.
    """
    declared = SUPPORTED_API_VERSIONS.intersection(osdef.api_versions)
    version = osdef.api_version if api_version is None else api_version
    if version not in declared:
        raise OsError(
            f"OS {osdef.name!r} does not support API version {version}"
            f" (it declares {', '.join(map(str, osdef.api_versions))})"
        )
    env: dict[str, str] = {
        "OS_API_VERSION": str(version),
        "INSTANCE_NAME": inst.name,
        "INSTANCE_OS": inst.os,
        "HYPERVISOR": inst.hypervisor,
        "DISK_COUNT": str(len(inst.disks)),
        "NIC_COUNT": str(len(inst.nics)),
        "DEBUG_LEVEL": str(int(debug)),
    }
    if version >= API_V15:
        name, variant = split_os_name(inst.os)
        env["OS_NAME"] = name
        if variant is None and osdef.variants:
            variant = osdef.variants[0]
        env["OS_VARIANT"] = variant or ""
    disk_type = inst.hvparams.get("disk_type")
    for idx, disk in enumerate(inst.disks):
        env[f"DISK_{idx}_PATH"] = disk.path
        if disk.uri:
            env[f"DISK_{idx}_URI"] = disk.uri
        env[f"DISK_{idx}_ACCESS"] = disk.access
        env[f"DISK_{idx}_BACKEND_TYPE"] = disk.backend_type
        if disk_type is not None:
            env[f"DISK_{idx}_FRONTEND_TYPE"] = _env_value(disk_type)
    nic_type = inst.hvparams.get("nic_type")
    for idx, nic in enumerate(inst.nics):
        env[f"NIC_{idx}_MAC"] = nic.mac
        env[f"NIC_{idx}_MODE"] = nic.mode
        if nic.ip:
            env[f"NIC_{idx}_IP"] = nic.ip
        if nic.link:
            env[f"NIC_{idx}_LINK"] = nic.link
            if nic.mode == "bridged":
                env[f"NIC_{idx}_BRIDGE"] = nic.link
        if nic_type is not None:
            env[f"NIC_{idx}_FRONTEND_TYPE"] = _env_value(nic_type)
    for key, value in inst.hvparams.items():
        env[f"INSTANCE_HV_{key}"] = _env_value(value)
    for key, value in inst.beparams.items():
        env[f"INSTANCE_BE_{key}"] = _env_value(value)
    if version >= API_V20:
        for key, value in inst.osparams.items():
            env[f"OSP_{key.upper().replace('-', '_')}"] = _env_value(value)
    return env


def script_variables(script: OsScript, *, reinstall: bool = False, old_name: str | None = None,
                     disk_index: int | None = None, disk_path: str | None = None
                     ) -> dict[str, str]:
    """The per-script extras: INSTANCE_REINSTALL, OLD_INSTANCE_NAME, EXPORT_/IMPORT_ vars."""
    extra: dict[str, str] = {}
    if script == "create" and reinstall:
        extra["INSTANCE_REINSTALL"] = "1"
    elif script == "rename":
        if not old_name:
            raise OsError("the rename script needs the old instance name")
        extra["OLD_INSTANCE_NAME"] = old_name
    elif script in ("export", "import"):
        if disk_index is None or disk_path is None:
            raise OsError(f"the {script} script needs a disk index and path")
        prefix = script.upper()
        extra[f"{prefix}_DEVICE"] = disk_path
        extra[f"{prefix}_INDEX"] = str(disk_index)
    return extra


# --- running scripts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OsScriptResult:
    script: str
    returncode: int
    duration: float
    log_file: Path


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def run_os_script(osdef: OsDefinition, script: OsScript, env: Mapping[str, str], timeout: float,
                  log_file: Path, *, stdin: IO[bytes] | None = None,
                  stdout: IO[bytes] | None = None) -> OsScriptResult:
    """Run one OS script with exactly `env` (plus LC_ALL=C and a default PATH), in the OS dir.

    Output goes to `log_file` (appended; stdout to `stdout` instead when given, for export).
    The script runs in its own session; on timeout the whole process group is killed.
    Raises OsScriptError on a non-zero exit (with the log's last lines), OsScriptTimeoutError
    on timeout.
    """
    path = osdef.script_path(script)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise OsScriptError(f"OS {osdef.name!r} has no executable {script} script ({path})")
    full_env = {"PATH": DEFAULT_PATH_ENV, **env, "LC_ALL": "C"}
    log_file.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log_file, "ab") as log:
        log.write(f"# herder: running {path} ({script}, OS {osdef.name})\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(
                [str(path)], cwd=osdef.path, env=full_env, stdin=stdin or subprocess.DEVNULL,
                stdout=stdout or log, stderr=log, start_new_session=True, close_fds=True,
            )
        except OSError as err:
            raise OsScriptError(f"cannot start OS {osdef.name!r} {script} script: {err}",
                                log_file=log_file) from err
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise OsScriptTimeoutError(
                f"OS {osdef.name!r} {script} script timed out after {timeout:g}s and was"
                f" killed; log: {log_file}", returncode=None, log_file=log_file,
            ) from None
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    duration = time.monotonic() - started
    if returncode != 0:
        tail = _tail(log_file)
        raise OsScriptError(
            f"OS {osdef.name!r} {script} script failed (exit code {returncode}); log:"
            f" {log_file}; last lines:\n{tail}", returncode=returncode, log_file=log_file,
        )
    return OsScriptResult(script=script, returncode=returncode, duration=duration,
                          log_file=log_file)
