"""Storage and repair LUs (design-2.1 "Automated disk repairs infrastructure"): list storage
units (PVs, VGs, file dirs), stop allocation on a PV, fix a node's volume group (only when it is
safe), and run a white-listed repair command on a node (maintd's live-repair); the nodes' OS
definitions (OP_OS_DIAGNOSE) and logical volumes (OP_NODE_QUERYVOLS)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from herder.core import diskobjects, model, storage_units, verify
from herder.core.diskobjects import BlockDevStatus
from herder.core.errors import HerderError, OpPrereqError
from herder.core.rpcdefs import disk_calls, node_calls, storage_calls
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup
from herder.masterd.vg_repair import CopyReport, CopyReports, vg_repair_allowed

FIELDS = ("name", "size", "used", "free", "allocatable")


class NodeQueryStorage(LogicalUnit[opcodes.OpNodeQueryStorage]):
    def check(self, config: model.ConfigData) -> None:
        op = self.op
        self.config = config
        nodes = [lookup(config.find_node, n) for n in op.nodes] if op.nodes else \
            sorted((n for n in config.nodes.values() if n.vm_capable and not n.offline),
                   key=lambda n: n.name)
        self.nodes = nodes
        self.fields = list(op.output_fields or ("node", *FIELDS))
        if op.name is not None:
            problem = storage_units.query_problem(config, op.storage_type, op.name)
            if problem:
                raise OpPrereqError(f"cannot query storage unit: {problem}")

    def execute(self) -> JobResult:
        op = self.op
        c = self.config.cluster
        request = storage_calls.StorageList(
            type=op.storage_type, name=op.name,
            dirs=[c.file_storage_dir, c.shared_file_storage_dir]
            if op.storage_type == "file" else [])
        rows: list[list[JobResult]] = []
        for node in self.nodes:
            try:
                units = self.env.rpc.call(node, request)
            except HerderError as err:
                self.feedback(f"node {node.name}: {err}")
                continue
            for unit in units:
                row: dict[str, JobResult] = {**unit, "node": node.name}
                rows.append([row.get(f) for f in self.fields])
        return rows


class NodeModifyStorage(LogicalUnit[opcodes.OpNodeModifyStorage]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        node = lookup(config.find_node, self.op.node_name)
        return [LockRequest(locking.LEVEL_NODE, [node.uuid])]

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        self.node = lookup(config.find_node, op.node_name)
        unknown = set(op.changes) - {"allocatable"}
        if unknown:
            raise OpPrereqError(f"storage units of type {op.storage_type} can only change "
                                f"'allocatable' (not {', '.join(map(repr, sorted(unknown)))})")

    def execute(self) -> JobResult:
        op = self.op
        if not op.changes:  # Ganeti's ModifyNodeStorageUnits without allocatable
            self.feedback(f"{op.name} on {self.node.name}: nothing to change")
            return None
        self.env.rpc.call(self.node, storage_calls.StorageModify(
            type=op.storage_type, name=op.name, allocatable=bool(op.changes["allocatable"])))
        return None


class RepairNodeStorage(LogicalUnit[opcodes.OpRepairNodeStorage]):
    """Fix a node's VG (remove missing PVs) — only when every node sharing instances with it is
    healthy and every instance on it has a good copy elsewhere ("Fix node volume group")."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return [LockRequest(locking.LEVEL_INSTANCE, None, shared=True),
                LockRequest(locking.LEVEL_NODE, None, shared=True)]

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        self.node = lookup(config.find_node, op.node_name)
        health: dict[str, bool] = {}
        for node in config.nodes.values():
            if node.offline:
                health[node.uuid] = False
                continue
            try:
                self.env.rpc.call(node, node_calls.Ping(), timeout=10)
                health[node.uuid] = True
            except HerderError:
                health[node.uuid] = False
        copies = self._copies(config, health)
        allowed, reason = vg_repair_allowed(config, self.node.uuid, health, op.name, copies)
        if not allowed and not op.ignore_consistency:
            raise OpPrereqError(f"repairing {op.name} on {self.node.name} is not safe: {reason}",
                                "wrong_state")

    def _copies(self, config: model.ConfigData, health: dict[str, bool]) -> CopyReports:
        """Each mirror node's report of its copy of the disks of the instances on this node
        (blockdev_getmirrorstatus_multi): "every other copy is good" means in sync."""
        wanted: dict[str, list[model.Instance]] = {}
        for inst in config.instances_on(self.node.uuid):
            for peer in inst.all_nodes:
                if peer != self.node.uuid and health.get(peer):
                    wanted.setdefault(peer, []).append(inst)
        copies: dict[tuple[str, str], CopyReport] = {}
        reports: dict[tuple[str, str], list[tuple[bool, BlockDevStatus | str]]] = {}
        for peer, instances in wanted.items():
            node = config.nodes[peer]
            objects = [(inst.uuid, diskobjects.disk_object(config, inst, disk, peer))
                       for inst in instances for disk in inst.disks]
            try:
                found = self.env.rpc.call(node, disk_calls.BlockdevGetmirrorstatusMulti(
                    disks=[obj for _, obj in objects]))
            except HerderError as err:
                for inst in instances:
                    copies[(inst.uuid, peer)] = str(err)
                continue
            for (owner, _), entry in zip(objects, found, strict=False):
                reports.setdefault((owner, peer), []).append(entry)
        return {**copies, **reports}

    def execute(self) -> JobResult:
        op = self.op
        repaired = self.env.rpc.call(self.node, storage_calls.StorageRepair(
            type=op.storage_type, name=op.name))
        return msgspec.to_builtins(repaired)


class RepairCommand(LogicalUnit[opcodes.OpRepairCommand]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        node = lookup(config.find_node, self.op.node_name)
        return [LockRequest(locking.LEVEL_NODE, [node.uuid], shared=True)]

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        self.node = lookup(config.find_node, op.node_name)
        if not op.command or "/" in op.command:
            raise OpPrereqError("the repair command is a file name in the node's white-list "
                                "directory, without path separators")

    def execute(self) -> JobResult:
        op = self.op
        result = self.env.rpc.call(self.node, node_calls.RepairCommand(command=op.command,
                                                                        input=op.input))
        self.feedback(f"repair command {op.command} on {self.node.name} succeeded")
        return result.stdout


OS_FIELDS = ("name", "valid", "hidden", "blacklisted", "variants", "node_status", "os_hvp",
             "osparams")


def _left_out(row: dict[str, JobResult], fields: Sequence[str]) -> bool:
    """Ganeti's LUOsDiagnose._BuildFilter (its legacy behaviour): a hidden OS is left out
    unless `hidden` is asked, a blacklisted one unless `blacklisted` is, an invalid one
    unless `valid` is."""
    return bool(("hidden" not in fields and row["hidden"])
                or ("blacklisted" not in fields and row["blacklisted"])
                or ("valid" not in fields and not row["valid"]))


class OsDiagnose(LogicalUnit[opcodes.OpOsDiagnose]):
    """Ganeti's LUOsDiagnose: one row of `output_fields` per OS the node daemons offer (`names`:
    only those; hidden, blacklisted and invalid OSes left out as `_left_out` says).
    `node_status` is herder's
    {node: offers it}; `variants` those every node offering the OS has."""

    def check(self, config: model.ConfigData) -> None:
        unknown = [f for f in self.op.output_fields if f not in OS_FIELDS]
        if unknown:
            raise OpPrereqError(f"unknown OS field(s) {', '.join(unknown)} (herder's: "
                                f"{', '.join(OS_FIELDS)})", "wrong_input")
        self.config = config
        self.nodes = sorted((n for n in config.nodes.values() if n.vm_capable and not n.offline),
                            key=lambda n: n.name)

    def execute(self) -> JobResult:
        offered: dict[str, dict[str, set[str]]] = {}  # OS -> node -> its variants there
        answered = []
        for node in self.nodes:
            try:
                names = self.env.rpc.call(node, node_calls.OsList())
            except HerderError as err:
                self.feedback(f"node {node.name}: {err}")
                continue
            answered.append(node.name)
            for full in names:
                base, _, variant = str(full).partition("+")
                offered.setdefault(base, {}).setdefault(node.name, set()).add(variant)
        wanted = self.op.names or sorted(offered)
        missing = [name for name in wanted if name.partition("+")[0] not in offered]
        if self.op.names and missing:
            raise OpPrereqError(f"OS {', '.join(missing)} is not offered by any node",
                                "unknown_entity")
        c = self.config.cluster
        rows: list[JobResult] = []
        for name in wanted:
            base = name.partition("+")[0]
            where = offered[base]
            common = set.intersection(*where.values())
            row: dict[str, JobResult] = {"name": base, "valid": sorted(where) == sorted(answered),
                   "hidden": base in c.hidden_os, "blacklisted": base in c.blacklisted_os,
                   "variants": sorted(v for v in common if v),
                   "node_status": {n: n in where for n in answered},
                   "os_hvp": c.os_hvp.get(base, {}), "osparams": c.osparams.get(base, {})}
            if _left_out(row, self.op.output_fields):
                continue
            rows.append([row[f] for f in self.op.output_fields])
        return rows


VOLUME_FIELDS = ("node", "vg", "name", "size", "instance")


class NodeQueryvols(LogicalUnit[opcodes.OpNodeQueryvols]):
    """Ganeti's LUNodeQueryvols (`gnt-node volumes`): the nodes' logical volumes (`lv_list`),
    one row of `output_fields` each, with the instance whose disk it is (`-` for none).
    Ganeti's `phys` (the PVs) is not among herder's fields: its nodes' LV list names none."""

    def check(self, config: model.ConfigData) -> None:
        unknown = [f for f in self.op.output_fields if f not in VOLUME_FIELDS]
        if unknown:
            raise OpPrereqError(f"unknown volume field(s) {', '.join(unknown)} (herder's: "
                                f"{', '.join(VOLUME_FIELDS)})", "wrong_input")
        self.config = config
        self.nodes = [lookup(config.find_node, n) for n in self.op.nodes] if self.op.nodes \
            else sorted((n for n in config.nodes.values() if n.vm_capable), key=lambda n: n.name)

    def execute(self) -> JobResult:
        owner = {(node, lv): inst.name for inst in self.config.instances.values()
                 for node in (inst.primary_node, *inst.secondary_nodes)
                 for disk in inst.disks for lv in verify.instance_lvs(disk)}
        rows: list[JobResult] = []
        for node in self.nodes:
            if node.offline:
                continue
            try:
                volumes = self.env.rpc.call(node, disk_calls.LvList(), timeout=30)
            except HerderError as err:
                self.feedback(f"node {node.name}: {err}")
                continue
            for full, (size, *_) in sorted(volumes.items()):
                vg, _, name = full.partition("/")
                row: dict[str, JobResult] = {
                    "node": node.name, "vg": vg, "name": name, "size": int(float(size)),
                    "instance": owner.get((node.uuid, full), "-")}
                rows.append([row[f] for f in self.op.output_fields])
        return rows
