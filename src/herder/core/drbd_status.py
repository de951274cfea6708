"""DRBD state as the kernel and `drbdsetup` print it: pure parsing, shared by mond and noded.

- `parse_proc_drbd`: `/proc/drbd` of DRBD 8.0-8.4 (and the version-only file of DRBD 9) into
  version information and one dict per minor with Ganeti's monitoring field names
  (`mon-collector drbd`). Odd lines are recorded, never fatal.
- `parse_drbd9_status`: `drbdsetup status --json` (DRBD 9) mapped to the same per-minor dicts.
- `kernel_version` and `minor_states`: what Ganeti's node code reads from `/proc/drbd`
  (`DRBD8Info`/`DRBD8Status`): the kernel's major/minor/point version from the first line, and
  per minor its connection state, roles, disk states, resync percent and estimated seconds.
- `parse_drbdsetup_show`: `drbdsetup show` of DRBD 8.0-8.4 (flat sections, or one
  `resource` with volumes) -> the local data and meta devices and the local/remote addresses,
  as Ganeti's `DRBD8[34]ShowInfo.GetDevInfo`.

The errors are `DrbdStatusError` (one line); callers translate them to their own errors.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from herder.core.errors import HerderError

PROC_DRBD = "/proc/drbd"


class DrbdStatusError(HerderError):
    """A DRBD status text cannot be read at all."""


SYNC_STATES = frozenset({"SyncSource", "SyncTarget", "PausedSyncS", "PausedSyncT",
                         "VerifyS", "VerifyT"})

# --- /proc/drbd of DRBD 8.0-8.4 --------------------------------------------------------------


@dataclass
class ProcDrbd:
    """What `/proc/drbd` says: version info, one dict per minor, and what could not be read."""

    version_info: dict[str, str] = field(default_factory=dict)
    devices: list[dict[str, Any]] = field(default_factory=list)
    # minor -> problems met while parsing that minor's block
    problems: dict[int, list[str]] = field(default_factory=dict)
    unparsed: list[str] = field(default_factory=list)  # lines outside any minor's block


_VERSION_RE = re.compile(
    r"^version:\s*(?P<version>\S+)(?:\s*\(api:(?P<api>[^/)\s]+)/proto:(?P<proto>[^)\s]+)\))?"
)
_SRCVERSION_RE = re.compile(r"^srcversion:\s*(?P<src>\S+)")
_GIT_RE = re.compile(r"^GIT-hash:\s*(?P<hash>\S+)(?:\s+build by\s+(?P<by>.*?))?\s*$")
_DEVICE_RE = re.compile(r"^\s*(?P<minor>\d+):\s*cs:(?P<cs>\S+)(?P<rest>.*)$")
_STATES_RE = re.compile(
    r"^\s+(?:ro|st):(?P<lrole>[^/\s]+)/(?P<rrole>\S+)\s+ds:(?P<lstate>[^/\s]+)/(?P<rstate>\S+)"
    r"(?: (?P<proto>.)(?P<flags>.*))?$"
)
_PERF_RE = re.compile(r"^\s*ns:\d")
_KV_RE = re.compile(r"(\w+):(\S*)")
_SYNC_RE = re.compile(
    r"(?:sync'ed|verified):\s*(?P<pct>\d+(?:\.\d+)?)%\s*\((?P<done>\d+)/(?P<total>\d+)\)"
    r"(?P<unit>[KM])"
)
_FINISH_RE = re.compile(
    r"finish:\s*(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)\s+speed:\s*(?P<speed>[\d,]+)"
    r"(?:\s*\((?P<avg>[\d,]+)\))?(?:\s+want:\s*(?P<want>[\d,]+))?\s*(?P<unit>[KM])/sec"
)
# Debug details, not reported: DRBD 8.0's resync:/act_log: cache lines (later versions print
# them, and "sector pos:" / "blocked on activity log:", with the proc_details module option).
_ADDITIONAL_RE = re.compile(
    r"^\s*(?:resync:|act_log:|blocked on activity log:|\d+% sector pos:)"
)
_TRANSPORTS_RE = re.compile(r"^Transports\b(?:\s*\([^)]*\))?\s*:?\s*(?P<list>.*)$")  # DRBD 9

# /proc/drbd's performance keys -> Ganeti's names (order as Ganeti emits them)
PERF_FIELDS = (
    ("ns", "networkSend"), ("nr", "networkReceive"), ("dw", "diskWrite"), ("dr", "diskRead"),
    ("al", "activityLog"), ("bm", "bitMap"), ("lo", "localCount"), ("pe", "pending"),
    ("ua", "unacknowledged"), ("ap", "applicationPending"),
)
OPTIONAL_PERF_FIELDS = (("ep", "epochs"), ("wo", "writeOrder"), ("oos", "outOfSync"))
SIZE_UNITS = {"K": "KiloByte", "M": "MegaByte"}


def comma_int(text: str) -> int:
    """`61,736` -> 61736."""
    return int(text.replace(",", ""))


def parse_perf(line: str) -> tuple[dict[str, Any], list[str]]:
    """The `ns: nr: ...` line: Ganeti's perfIndicators and the problems met."""
    values = dict(_KV_RE.findall(line))
    perf: dict[str, Any] = {}
    problems: list[str] = []
    for key, name in PERF_FIELDS + OPTIONAL_PERF_FIELDS:
        raw = values.get(key)
        if raw is None:
            if (key, name) in PERF_FIELDS:
                problems.append(f"performance counter {key} missing")
            continue
        if key == "wo":
            if len(raw) == 1:
                perf[name] = raw
            else:
                problems.append(f"bad write order {raw!r}")
            continue
        try:
            perf[name] = int(raw)
        except ValueError:
            problems.append(f"bad performance counter {key}:{raw}")
    return perf, problems


def parse_sync(text: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The resync lines (`[==>..] sync'ed: ...` and `finish: ... speed: ...`), joined."""
    sync = _SYNC_RE.search(text)
    finish = _FINISH_RE.search(text)
    if sync is None or finish is None:
        missing = "progress" if sync is None else "finish/speed"
        return None, [f"cannot read the resync {missing}"]
    result: dict[str, Any] = {
        "percentage": float(sync["pct"]),
        "progress": f"{int(sync['done'])}/{int(sync['total'])}",
        "progressUnit": SIZE_UNITS[sync["unit"]],
        "timeToFinish": f"{int(finish['h']):02d}:{int(finish['m']):02d}:{int(finish['s']):02d}",
        "speed": comma_int(finish["speed"]),
    }
    if finish["want"] is not None:
        result["want"] = comma_int(finish["want"])
    result["speedUnit"] = f"{SIZE_UNITS[finish['unit']]}/Second"
    return result, []


def _parse_device(minor: int, cs: str, rest: str, block: list[str]) -> tuple[dict[str, Any],
                                                                               list[str]]:
    device: dict[str, Any] = {"minor": minor, "connectionState": cs}
    problems: list[str] = []
    if cs == "Unconfigured":
        problems.extend(f"unexpected line {line.strip()!r}" for line in block if line.strip())
        return device, problems
    states = _STATES_RE.match(rest.replace("\0", ""))
    if states is None:
        problems.append(f"cannot read roles/disk states from {rest.strip()!r}")
    else:
        device["localRole"] = states["lrole"]
        device["remoteRole"] = states["rrole"]
        device["localState"] = states["lstate"]
        device["remoteState"] = states["rstate"]
        if states["proto"] is not None:
            device["replicationProtocol"] = states["proto"]
            device["ioFlags"] = states["flags"].strip()
        else:
            problems.append("replication protocol and I/O flags missing")
    sync_text: list[str] = []
    for line in block:
        if not line.strip() or _ADDITIONAL_RE.match(line):
            continue
        if _PERF_RE.match(line):
            perf, perf_problems = parse_perf(line)
            device["perfIndicators"] = perf
            problems.extend(perf_problems)
        elif "sync'ed:" in line or "verified:" in line or "finish:" in line:
            sync_text.append(line)
        else:
            problems.append(f"unexpected line {line.strip()!r}")
    if "perfIndicators" not in device:
        problems.append("performance counters missing")
    if sync_text:
        sync, sync_problems = parse_sync(" ".join(sync_text))
        if sync is not None:
            device["syncStatus"] = sync
        problems.extend(sync_problems)
    elif cs in ("SyncSource", "SyncTarget"):
        problems.append("resync progress missing")
    device["instance"] = None
    return device, problems


def parse_proc_drbd(text: str) -> ProcDrbd:
    """Parse `/proc/drbd` of DRBD 8.0-8.4 (and the version-only file of DRBD 9).

    Raises DrbdStatusError when the text has neither version information nor any minor;
    odd lines are recorded (`unparsed`, `problems`), never fatal."""
    result = ProcDrbd()
    lines = text.replace("\r", "").split("\n")
    header: list[str] = []
    i = 0
    while i < len(lines) and not _DEVICE_RE.match(lines[i]):
        header.append(lines[i])
        i += 1
    for line in header:
        clean = line.replace("\0", "").strip()
        if not clean:
            continue
        if m := _VERSION_RE.match(clean):
            result.version_info["version"] = m["version"]
            if m["api"] is not None:
                result.version_info["api"] = m["api"]
                result.version_info["proto"] = m["proto"]
        elif m := _SRCVERSION_RE.match(clean):
            result.version_info["srcversion"] = m["src"]
        elif m := _GIT_RE.match(clean):
            result.version_info["gitHash"] = m["hash"]
            if m["by"]:
                result.version_info["buildBy"] = m["by"]
        elif m := _TRANSPORTS_RE.match(clean):
            result.version_info["transports"] = m["list"]
        else:
            result.unparsed.append(clean[:200])
    # Keep Ganeti's key order: version, api, proto, srcversion, gitHash, buildBy.
    order = ("version", "api", "proto", "srcversion", "gitHash", "buildBy", "transports")
    result.version_info = {k: result.version_info[k] for k in order if k in result.version_info}
    while i < len(lines):
        m = _DEVICE_RE.match(lines[i])
        assert m is not None
        i += 1
        block: list[str] = []
        while i < len(lines) and not _DEVICE_RE.match(lines[i]):
            block.append(lines[i])
            i += 1
        minor = int(m["minor"])
        device, problems = _parse_device(minor, m["cs"], m["rest"], block)
        result.devices.append(device)
        if problems:
            result.problems[minor] = problems
    if not result.version_info and not result.devices:
        if not text.strip():
            raise DrbdStatusError("/proc/drbd is empty")
        first = next(line for line in lines if line.strip()).strip()[:80]
        raise DrbdStatusError(
            f"not a DRBD status: no version information and no minor (first line {first!r})"
        )
    return result


# --- DRBD 9: drbdsetup status --json ---------------------------------------------------------

WRITE_ORDER = {"none": "n", "drain": "d", "flush": "f", "barrier": "b"}


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def parse_drbd9_status(text: str) -> list[dict[str, Any]]:
    """Map `drbdsetup status --json` to Ganeti's per-minor structure, as far as it goes.

    One device per (resource, volume). The first connection gives `remoteRole`, `remoteState`
    and `connectionState` (its replication state when connected and not Established, so
    resyncs read as in DRBD 8); every connection is listed in `peers`. Counters: disk and
    activity-log/bitmap counters from the device, network counters summed over the peers."""
    try:
        resources = json.loads(text)
    except json.JSONDecodeError as err:
        raise DrbdStatusError(f"drbdsetup status --json: not JSON: {err.msg}") from None
    if not isinstance(resources, list):
        raise DrbdStatusError("drbdsetup status --json: expected a list of resources")
    devices: list[dict[str, Any]] = []
    for res in resources:
        if not isinstance(res, dict):
            raise DrbdStatusError("drbdsetup status --json: a resource is not an object")
        connections = [c for c in res.get("connections") or [] if isinstance(c, dict)]
        for dev in res.get("devices") or []:
            if not isinstance(dev, dict) or not isinstance(dev.get("minor"), int):
                raise DrbdStatusError(
                    f"drbdsetup status --json: resource {res.get('name')!r} has a device "
                    "without a minor"
                )
            volume = dev.get("volume")
            peers: list[dict[str, Any]] = []
            for conn in connections:
                pdev = next(
                    (p for p in conn.get("peer_devices") or []
                     if isinstance(p, dict) and p.get("volume") == volume),
                    {},
                )
                cstate = str(conn.get("connection-state", "Unknown"))
                rstate = pdev.get("replication-state")
                state = rstate if (cstate == "Connected" and rstate
                                   and rstate not in ("Established", "Off")) else cstate
                peer: dict[str, Any] = {
                    "name": conn.get("name"),
                    "nodeId": conn.get("peer-node-id"),
                    "connectionState": state,
                    "role": conn.get("peer-role", "Unknown"),
                    "diskState": pdev.get("peer-disk-state", "DUnknown"),
                }
                if rstate is not None:
                    peer["replicationState"] = rstate
                for key, name in (("sent", "networkSend"), ("received", "networkReceive"),
                                  ("pending", "pending"), ("unacked", "unacknowledged"),
                                  ("out-of-sync", "outOfSync")):
                    peer[name] = _int(pdev.get(key))
                if "percent-in-sync" in pdev:
                    peer["percentInSync"] = pdev["percent-in-sync"]
                if "done" in pdev:
                    peer["done"] = pdev["done"]
                peers.append(peer)
            first = peers[0] if peers else None
            cs = first["connectionState"] if first else "StandAlone"
            perf: dict[str, Any] = {
                "networkSend": sum(p["networkSend"] for p in peers),
                "networkReceive": sum(p["networkReceive"] for p in peers),
                "diskWrite": _int(dev.get("written")),
                "diskRead": _int(dev.get("read")),
                "activityLog": _int(dev.get("al-writes")),
                "bitMap": _int(dev.get("bm-writes")),
                "localCount": _int(dev.get("lower-pending")),
                "pending": sum(p["pending"] for p in peers),
                "unacknowledged": sum(p["unacknowledged"] for p in peers),
                "applicationPending": _int(dev.get("upper-pending")),
            }
            wo = WRITE_ORDER.get(str(res.get("write-ordering")))
            if wo:
                perf["writeOrder"] = wo
            perf["outOfSync"] = max((p["outOfSync"] for p in peers), default=0)
            device: dict[str, Any] = {
                "minor": dev["minor"],
                "connectionState": cs,
                "localRole": res.get("role", "Unknown"),
                "remoteRole": first["role"] if first else "Unknown",
                "localState": dev.get("disk-state", "DUnknown"),
                "remoteState": first["diskState"] if first else "DUnknown",
                "perfIndicators": perf,
            }
            if first and cs in SYNC_STATES:
                pct = first.get("done", first.get("percentInSync"))
                if isinstance(pct, int | float):
                    device["syncStatus"] = {"percentage": float(pct)}
            device["instance"] = None
            device["resource"] = res.get("name")
            device["volume"] = volume
            device["peers"] = peers
            devices.append(device)
    devices.sort(key=lambda d: d["minor"])
    return devices


# --- what Ganeti's node code reads from /proc/drbd -------------------------------------------

_KERNEL_VERSION_RE = re.compile(
    r"^version: (?P<major>\d+)\.(?P<minor>\d+)\.(?P<point>\d+)(?:[.-](?P<fix>\d+))?"
    r" \(api:(?P<api>\d+)/proto:(?P<proto>\d+)(?:-(?P<proto2>\d+))?\)"
)
_MINOR_START_RE = re.compile(r"^ *(?P<minor>[0-9]+): cs:[^ ]+")
_UNCONFIGURED_RE = re.compile(r"\s*[0-9]+:\s*cs:Unconfigured$")
_MINOR_LINE_RE = re.compile(
    r"\s*[0-9]+:\s*cs:(?P<cs>\S+)\s+(?:st|ro):(?P<lrole>[^/]+)/(?P<rrole>\S+)"
    r"\s+ds:(?P<ldisk>[^/]+)/(?P<rdisk>\S+)\s+.*$"
)
_MINOR_SYNC_RE = re.compile(
    r"^.*\ssync'ed:\s*(?P<pct>[0-9.]+)%.*(?:\s|M)"
    r"finish: (?P<h>[0-9]+):(?P<m>[0-9]+):(?P<s>[0-9]+)\s.*$"
)
# Connection states in which Ganeti counts a minor as resynchronising (DRBD8Status.CSET_SYNC).
RESYNC_STATES = frozenset({
    "WFReportParams", "StartingSyncS", "StartingSyncT", "WFBitMapS", "WFBitMapT",
    "WFSyncUUID", "SyncSource", "SyncTarget", "PausedSyncS", "PausedSyncT",
})


@dataclass(frozen=True)
class KernelVersion:
    """The DRBD kernel module's version, from the first line of /proc/drbd."""

    major: int
    minor: int
    point: int
    api: int
    proto: int


@dataclass(frozen=True)
class MinorState:
    """One minor as Ganeti's node code sees it (DRBD8Status)."""

    minor: int
    connection: str
    local_role: str | None = None
    remote_role: str | None = None
    local_disk: str | None = None
    remote_disk: str | None = None
    sync_percent: float | None = None
    est_time: int | None = None  # seconds left in the resync

    @property
    def is_unconfigured(self) -> bool:
        return self.connection == "Unconfigured"

    @property
    def is_in_use(self) -> bool:
        return not self.is_unconfigured

    @property
    def is_standalone(self) -> bool:
        return self.connection == "StandAlone"

    @property
    def is_connected(self) -> bool:
        return self.connection == "Connected"

    @property
    def is_in_resync(self) -> bool:
        return self.connection in RESYNC_STATES

    @property
    def is_diskless(self) -> bool:
        return self.local_disk == "Diskless"

    @property
    def is_disk_uptodate(self) -> bool:
        return self.local_disk == "UpToDate"


def parse_minor_line(minor: int, line: str) -> MinorState:
    """One minor's lines of /proc/drbd, joined with spaces -> its state."""
    if _UNCONFIGURED_RE.match(line):
        return MinorState(minor, "Unconfigured")
    match = _MINOR_LINE_RE.match(line)
    if match is None:
        raise DrbdStatusError(f"cannot read the state of DRBD minor {minor}: {line.strip()!r}")
    sync = _MINOR_SYNC_RE.match(line)
    percent: float | None = None
    est: int | None = None
    if sync is not None:
        percent = float(sync["pct"])
        est = int(sync["h"]) * 3600 + int(sync["m"]) * 60 + int(sync["s"])
    elif match["cs"] in RESYNC_STATES:
        percent = 0.0  # resync starting: Ganeti reports 0 %
    return MinorState(minor, match["cs"], match["lrole"], match["rrole"], match["ldisk"],
                      match["rdisk"], percent, est)


@dataclass
class DrbdKernelInfo:
    """/proc/drbd as Ganeti's node code reads it: the version and one joined line per minor,
    in the file's order."""

    version: KernelVersion
    minor_lines: dict[int, str] = field(default_factory=dict)

    def has_minor(self, minor: int) -> bool:
        return minor in self.minor_lines

    def state(self, minor: int) -> MinorState:
        return parse_minor_line(minor, self.minor_lines[minor])

    def used_minors(self) -> list[int]:
        return [m for m in self.minor_lines if self.state(m).is_in_use]


def parse_kernel_info(text: str) -> DrbdKernelInfo:
    """Parse /proc/drbd of DRBD 8.x for the node code; the first line must be the version."""
    lines = text.splitlines()
    if not lines:
        raise DrbdStatusError(f"Can't read any data from {PROC_DRBD}")
    first = lines[0].strip()
    match = _KERNEL_VERSION_RE.match(first)
    if match is None:
        raise DrbdStatusError(f"Can't parse DRBD version from '{first}'")
    version = KernelVersion(int(match["major"]), int(match["minor"]), int(match["point"]),
                            int(match["api"]), int(match["proto"]))
    info = DrbdKernelInfo(version)
    current: int | None = None
    for line in lines:
        if not line:
            continue
        start = _MINOR_START_RE.match(line)
        if start is not None:
            current = int(start["minor"])
            info.minor_lines[current] = line
        elif current is not None:
            info.minor_lines[current] += " " + line.strip()
    return info


# --- drbdsetup show --------------------------------------------------------------------------

_SHOW_TOKEN_RE = re.compile(r'"[^"]*"|[{};]|[^\s{};"]+')


@dataclass(frozen=True)
class ShowInfo:
    """What `drbdsetup show` says of one minor's local and network configuration."""

    local_dev: str | None = None
    meta_dev: str | None = None
    meta_index: int | None = None
    local_addr: tuple[str, int] | None = None
    remote_addr: tuple[str, int] | None = None


@dataclass
class _Section:
    words: list[str]
    statements: list[list[str]] = field(default_factory=list)
    sections: list[_Section] = field(default_factory=list)


def _show_tree(text: str) -> _Section:
    root = _Section([])
    stack = [root]
    words: list[str] = []
    for raw_line in text.splitlines():
        for token in _SHOW_TOKEN_RE.findall(_strip_comment(raw_line)):
            if token == "{":
                section = _Section(words)
                stack[-1].sections.append(section)
                stack.append(section)
                words = []
            elif token == "}":
                if len(stack) == 1 or words:
                    raise DrbdStatusError("cannot parse drbdsetup show: unbalanced braces")
                stack.pop()
            elif token == ";":
                stack[-1].statements.append(words)
                words = []
            else:
                words.append(token[1:-1] if token.startswith('"') else token)
    if len(stack) != 1 or words:
        raise DrbdStatusError("cannot parse drbdsetup show: truncated output")
    return root


def _strip_comment(line: str) -> str:
    """Drop a `#` comment outside quotes."""
    quoted = False
    for index, char in enumerate(line):
        if char == '"':
            quoted = not quoted
        elif char == "#" and not quoted:
            return line[:index]
    return line


def _address(words: list[str]) -> tuple[str, int]:
    host, _, port = words[-1].rpartition(":")
    if not host or not port.isdigit():
        raise DrbdStatusError(f"cannot parse drbdsetup show address {' '.join(words)!r}")
    return host.strip("[]"), int(port)


def parse_drbdsetup_show(text: str) -> ShowInfo:
    """`drbdsetup show` (DRBD 8.0-8.3 flat sections, or DRBD 8.4's one resource) -> ShowInfo.
    Empty output (an unconfigured minor) gives an empty ShowInfo."""
    if not text.strip():
        return ShowInfo()
    root = _show_tree(text)
    sections = root.sections
    if len(sections) == 1 and sections[0].words[:1] == ["resource"]:
        sections = sections[0].sections
    found: dict[str, Any] = {}

    def read_disks(statements: list[list[str]]) -> None:
        for words in statements:
            if words[0] == "disk" and len(words) == 2:
                found["local_dev"] = words[1]
            elif words[0] == "meta-disk" and len(words) >= 2:
                found["meta_dev"] = words[1]
                if len(words) >= 5 and words[2] == "[" and words[3].isdigit():
                    found["meta_index"] = int(words[3])

    for section in sections:
        name = section.words[0] if section.words else ""
        if name == "_this_host":
            read_disks(section.statements)
            for words in section.statements:
                if words[0] == "address":
                    found["local_addr"] = _address(words)
            for volume in section.sections:
                if volume.words[:1] == ["volume"]:
                    read_disks(volume.statements)
        elif name == "_remote_host":
            for words in section.statements:
                if words[0] == "address":
                    found["remote_addr"] = _address(words)
    return ShowInfo(**found)
