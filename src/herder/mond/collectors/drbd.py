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

Parsing is pure: the DRBD texts in `herder.core.drbd_status` (shared with noded);
`parse_pairing`, `instance_minors` and `device_status` work on text and plain data.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from typing import Any

from herder.core import drbd_status, model
from herder.core.drbd_status import PROC_DRBD, ProcDrbd
from herder.mond import report
from herder.mond.collector import Collector, CollectorError
from herder.mond.report import Kind, Status

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


# --- parsing: herder.core.drbd_status, with mond's error type ---------------------------------


def parse_proc_drbd(text: str) -> ProcDrbd:
    """`drbd_status.parse_proc_drbd`, failing with CollectorError."""
    try:
        return drbd_status.parse_proc_drbd(text)
    except drbd_status.DrbdStatusError as err:
        raise CollectorError(str(err)) from None


def parse_drbd9_status(text: str) -> list[dict[str, Any]]:
    """`drbd_status.parse_drbd9_status`, failing with CollectorError."""
    try:
        return drbd_status.parse_drbd9_status(text)
    except drbd_status.DrbdStatusError as err:
        raise CollectorError(str(err)) from None


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


def instance_minors(config: model.ConfigData, node_uuid: str) -> dict[int, str]:
    """minor -> instance name for the DRBD disks of `node_uuid`, from the cluster config: the
    minor at that node's index in each DRBD disk's logical id (children included)."""
    result: dict[int, str] = {}

    def walk(disk: model.Disk, instance: str) -> None:
        lid = disk.logical_id
        if isinstance(lid, model.DrbdId) and node_uuid in lid.nodes:
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
