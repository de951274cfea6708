"""drbd: the status of this node's DRBD devices (design-monitoring-agent "DRBD status").

Category storage, kind 1 (status). Active only where DRBD is present (`/proc/drbd` exists, or an
input is overridden). Inputs:

- `proc_drbd` (default `/proc/drbd`): DRBD 8.0-8.4 print the version and one block per minor;
  DRBD 9 prints only the version there.
- `drbd_status_json` (default: the output of `drbdsetup status --json`, run only when
  `/proc/drbd` lists no minor, says DRBD 9 or later (or no version) and `drbdsetup` exists):
  DRBD 9's per-resource status, mapped to the same per-minor structure as far as it goes.
- `pairing` (default: none, the cluster config decides): Ganeti's minor/instance pairing file,
  a JSON list of `[node, minor, instance, disk, role, peer]` (what Ganeti's confd answers for
  this node; every entry is used, as `mon-collector drbd --drbd-pairing` does). Objects with
  `minor` and `instance` keys are accepted too.

Without a pairing input the minors are mapped to instances from the cluster config, or, on a
node without it, from confd's answer for this node (type 7, the same rows; herder's or Ganeti's
confd). When confd fails or does not know this node, `instance` stays null and the status
message says why (the code is not raised: the devices' health is known).

`data` uses Ganeti's JSON field names (`mon-collector drbd`): `status`, `versionInfo`
(`version`, `api`, `proto`, `srcversion`, `gitHash`, `buildBy`, only those present) and
`deviceInfos`, one object per minor (`minor`, `connectionState`, `localRole`, `remoteRole`,
`localState`, `remoteState`, `replicationProtocol`, `ioFlags`, `perfIndicators`, optional
`syncStatus`, `instance`); an Unconfigured minor has only `minor` and `connectionState`.
Lines herder cannot read are listed in `unparsedLines` (present only when there are some) and
make the status at least 2 (unknown).

The status code of each minor comes from the state-to-code table in docs/drbd-status.md:
Ganeti's connection-state table, extended with the local and remote disk states. The
collector's status is the worst over all minors; the message has one line per minor that is
not OK, in minor order, naming the minor (and its instance).

Parsing is pure: `parse_proc_drbd`, `parse_drbd9_status`, `parse_pairing`, `instance_minors`
and `device_status` work on text and plain data.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from herder.core import model as M
from herder.mond import report
from herder.mond.collector import Collector, CollectorError
from herder.mond.report import Kind, Status

PROC_DRBD = "/proc/drbd"
DRBDSETUP_STATUS = ("drbdsetup", "status", "--json")

# --- the state-to-code table (docs/drbd-status.md) -------------------------------------------

_NO_NETWORK = "no network configuration available"
_CONNECTING = "trying to establish a network connection"
_COMMUNICATION = "communication problems between the peers"

# Connection states: Ganeti's table (Drbd.hs computeDevStatus), plus the states DRBD 8.3.10+
# and DRBD 9 added (Ahead, Behind, Connecting). Anything else is Unknown (2).
CONNECTION_STATES: dict[str, tuple[Status, str]] = {
    "StandAlone": (Status.BAD, _NO_NETWORK),
    "Disconnecting": (Status.BAD, "the peer is being disconnected"),
    "TearDown": (Status.BAD, "the peer is closing the connection"),
    "Unconnected": (Status.TEMP_BAD, _CONNECTING),
    "WFConnection": (Status.TEMP_BAD, _CONNECTING),
    "WFReportParams": (Status.TEMP_BAD, _CONNECTING),
    "Connecting": (Status.TEMP_BAD, _CONNECTING),  # DRBD 9
    "Timeout": (Status.TEMP_BAD, _COMMUNICATION),
    "BrokenPipe": (Status.TEMP_BAD, _COMMUNICATION),
    "NetworkFailure": (Status.TEMP_BAD, _COMMUNICATION),
    "ProtocolError": (Status.TEMP_BAD, _COMMUNICATION),
    "Ahead": (Status.TEMP_BAD, "replication paused by congestion, a resync will follow"),
    "Behind": (Status.TEMP_BAD, "replication paused by congestion, a resync will follow"),
    **{
        state: (Status.OK, "")
        for state in (
            "Connected", "StartingSyncS", "StartingSyncT", "WFBitMapS", "WFBitMapT",
            "WFSyncUUID", "SyncSource", "SyncTarget", "PausedSyncS", "PausedSyncT",
            "VerifyS", "VerifyT", "Unconfigured",
        )
    },
}

# Connection states in which DRBD is (about to be) copying data to this node / to the peer.
RESYNC_TO_LOCAL = frozenset(
    {"SyncTarget", "PausedSyncT", "StartingSyncT", "WFBitMapT", "WFSyncUUID", "Behind"}
)
RESYNC_TO_PEER = frozenset(
    {"SyncSource", "PausedSyncS", "StartingSyncS", "WFBitMapS", "WFSyncUUID", "Ahead"}
)
SYNC_STATES = frozenset({"SyncSource", "SyncTarget", "PausedSyncS", "PausedSyncT",
                         "VerifyS", "VerifyT"})


def connection_code(state: str) -> tuple[Status, str]:
    return CONNECTION_STATES.get(state, (Status.UNKNOWN, "unknown connection state"))


def disk_code(state: str, connection: str, *, local: bool) -> tuple[Status, str]:
    """The code of a local or remote disk state, given the minor's connection state."""
    resyncing = connection in (RESYNC_TO_LOCAL if local else RESYNC_TO_PEER)
    if state == "UpToDate":
        return Status.OK, ""
    if state == "DUnknown":
        # The peer's disk is unknown while disconnected: the connection state says why.
        if local:
            return Status.UNKNOWN, "state unknown"
        return Status.OK, ""
    if state in ("Inconsistent", "Outdated"):
        if resyncing:
            return Status.TEMP_BAD, "being resynchronised"
        return Status.BAD, "not being resynchronised"
    if state in ("Attaching", "Negotiating", "Detaching", "Consistent"):
        return Status.TEMP_BAD, "transitional state"
    if state == "Diskless":
        return Status.BAD, "no disk attached"
    if state == "Failed":
        return Status.BAD, "I/O error"
    return Status.UNKNOWN, "unknown disk state"


def device_status(device: Mapping[str, Any], problems: Iterable[str] = ()) -> dict[str, Any]:
    """`{code, message}` of one minor: the worst of its connection, local and remote disk states
    (and Unknown for each problem met while parsing it). The message names the minor."""
    code = Status.OK
    reasons: list[str] = []

    def add(result: tuple[Status, str], what: str) -> None:
        nonlocal code
        st, why = result
        if st != Status.OK:
            code = max(code, st)
            reasons.append(f"{what}: {why}" if why else what)

    cs = str(device.get("connectionState", ""))
    add(connection_code(cs), f"connection {cs}")
    if "localState" in device:
        add(disk_code(str(device["localState"]), cs, local=True),
            f"local disk {device['localState']}")
    if "remoteState" in device:
        add(disk_code(str(device["remoteState"]), cs, local=False),
            f"peer disk {device['remoteState']}")
    for peer in device.get("peers", ())[1:]:  # DRBD 9: every peer beyond the first
        pcs = str(peer.get("connectionState", ""))
        name = peer.get("name") or peer.get("nodeId")
        add(connection_code(pcs), f"peer {name} connection {pcs}")
        if "diskState" in peer:
            add(disk_code(str(peer["diskState"]), pcs, local=False),
                f"peer {name} disk {peer['diskState']}")
    for problem in problems:
        code = max(code, Status.UNKNOWN)
        reasons.append(problem)
    if code == Status.OK:
        return report.status(code, "")
    who = f"minor {device.get('minor')}"
    if device.get("instance"):
        who += f" ({device['instance']})"
    return report.status(code, f"{who}: " + "; ".join(reasons))


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

    Raises CollectorError when the text has neither version information nor any minor;
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
            raise CollectorError("/proc/drbd is empty")
        first = next(line for line in lines if line.strip()).strip()[:80]
        raise CollectorError(
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
        raise CollectorError(f"drbdsetup status --json: not JSON: {err.msg}") from None
    if not isinstance(resources, list):
        raise CollectorError("drbdsetup status --json: expected a list of resources")
    devices: list[dict[str, Any]] = []
    for res in resources:
        if not isinstance(res, dict):
            raise CollectorError("drbdsetup status --json: a resource is not an object")
        connections = [c for c in res.get("connections") or [] if isinstance(c, dict)]
        for dev in res.get("devices") or []:
            if not isinstance(dev, dict) or not isinstance(dev.get("minor"), int):
                raise CollectorError(
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


# --- minor -> instance -----------------------------------------------------------------------


def parse_pairing(text: str) -> dict[int, str]:
    """Ganeti's pairing file: `[[node, minor, instance, disk, role, peer], ...]` (or objects
    with `minor` and `instance`) -> minor -> instance name. Every entry is used."""
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as err:
        raise CollectorError(f"pairing file is not JSON: {err.msg}") from None
    return pairing_from_entries(entries)


def pairing_from_entries(entries: Any) -> dict[int, str]:
    """`parse_pairing` on decoded data (e.g. confd's type 7 answer)."""
    if not isinstance(entries, list):
        raise CollectorError("pairing file must hold a JSON list")
    result: dict[int, str] = {}
    for entry in entries:
        if isinstance(entry, list) and len(entry) >= 3:
            minor, instance = entry[1], entry[2]
        elif isinstance(entry, dict):
            minor, instance = entry.get("minor"), entry.get("instance")
        else:
            raise CollectorError(f"pairing entry {entry!r} is neither a list nor an object")
        if not isinstance(minor, int) or isinstance(minor, bool) or not isinstance(instance, str):
            raise CollectorError(f"pairing entry {entry!r} needs an integer minor and a name")
        result[minor] = instance
    return result


def instance_minors(config: M.ConfigData, node_uuid: str) -> dict[int, str]:
    """minor -> instance name for the DRBD disks of `node_uuid`, from the cluster config: the
    minor at that node's index in each DRBD disk's logical id (children included)."""
    result: dict[int, str] = {}

    def walk(disk: M.Disk, instance: str) -> None:
        lid = disk.logical_id
        if isinstance(lid, M.DrbdId) and node_uuid in lid.nodes:
            result[lid.minors[lid.nodes.index(node_uuid)]] = instance
        for child in disk.children:
            walk(child, instance)

    for inst in config.instances.values():
        for disk in inst.disks:
            walk(disk, inst.name)
    return result


# --- the collector ---------------------------------------------------------------------------


def _drbd9_or_later(version_info: Mapping[str, str]) -> bool:
    version = version_info.get("version")
    if version is None:
        return True
    major = version.split(".", 1)[0]
    return not major.isdigit() or int(major) >= 9


def build_data(version_info: Mapping[str, str], devices: list[dict[str, Any]],
               problems: Mapping[int, list[str]] | None = None,
               unparsed: Iterable[str] = (), pairing: Mapping[int, str] | None = None,
               pairing_error: str | None = None) -> dict[str, Any]:
    """The verbose `data`: instances filled in, the status computed, Ganeti's key order.
    `pairing_error` (why the minors could not be mapped) is added to the status message."""
    problems = problems or {}
    pairing = pairing or {}
    statuses: list[dict[str, Any]] = []
    for device in devices:
        if "instance" in device:
            device["instance"] = pairing.get(device["minor"])
        statuses.append(device_status(device, problems.get(device["minor"], ())))
    unparsed = list(unparsed)
    if unparsed:
        statuses.append(report.status(
            Status.UNKNOWN, f"{len(unparsed)} unrecognised line(s) in the DRBD status"
        ))
    if pairing_error:
        statuses.append(report.status(Status.OK, f"instances unknown: {pairing_error}"))
    data: dict[str, Any] = {"versionInfo": dict(version_info), "deviceInfos": devices}
    if unparsed or problems:
        data["unparsedLines"] = unparsed + [
            f"minor {minor}: {p}" for minor, ps in problems.items() for p in ps
        ]
    return report.with_status(report.merge_statuses(statuses), data)


class DrbdCollector(Collector):
    """The DRBD status collector (Ganeti's `drbd`)."""

    name = "drbd"
    category = "storage"
    kind = Kind.STATUS
    inputs = {
        "proc_drbd": PROC_DRBD,
        "drbd_status_json": " ".join(DRBDSETUP_STATUS),
        "pairing": "",  # none: from the cluster config
    }

    def available(self) -> bool:
        if any(name in self.ctx.inputs for name in ("proc_drbd", "drbd_status_json")):
            return True
        return self.ctx.input_path("proc_drbd", PROC_DRBD).exists()

    def pairing(self) -> dict[int, str]:
        return self.pairing_and_error()[0]

    def pairing_and_error(self) -> tuple[dict[int, str], str | None]:
        """minor -> instance: from the pairing input, the config, or confd (no config); and
        why it is empty when confd could not say."""
        if "pairing" in self.ctx.inputs:
            return parse_pairing(self.ctx.read_input("pairing", "")), None
        config = self.ctx.config()
        if config is None:
            if self.ctx.cluster_source() != "confd":
                return {}, None
            try:
                return pairing_from_entries(self.ctx.drbd_pairing()), None
            except CollectorError as err:
                return {}, str(err)
        node = self.ctx.this_node()
        if node is None:
            return {}, None
        return instance_minors(config, node.uuid), None

    def collect(self) -> dict[str, Any]:
        have_json = "drbd_status_json" in self.ctx.inputs
        if have_json and not self.ctx.input_path("proc_drbd", PROC_DRBD).exists():
            proc = ProcDrbd()  # a captured DRBD 9 status alone
        else:
            proc = parse_proc_drbd(self.ctx.read_input("proc_drbd", PROC_DRBD))
        devices, problems = proc.devices, proc.problems
        if have_json or (not devices and _drbd9_or_later(proc.version_info)
                         and shutil.which(DRBDSETUP_STATUS[0])):
            devices = parse_drbd9_status(
                self.ctx.run(DRBDSETUP_STATUS, input_name="drbd_status_json")
            )
            problems = {}
        pairing, pairing_error = self.pairing_and_error()
        return build_data(proc.version_info, devices, problems, proc.unparsed, pairing,
                          pairing_error)


COLLECTORS = [DrbdCollector]
