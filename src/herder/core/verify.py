"""Consistency checks over a whole config (pure logic; `herder cluster verify` prints them).

Loading already refuses what is malformed in one object (types, parameters, a routed NIC without
an IP). What is checked here spans objects: dangling references, duplicates that must be unique
cluster-wide, and instances that break their group's instance policy.

`running` checks what the node daemons report against the config (masterd's
OP_CLUSTER_VERIFY_GROUP asks them; the checks stay pure): a domain running on a node that is not
its instance's primary (Ganeti's "instance should not run on node"), an admin-up instance not
running on its primary, a domain no instance owns, a node that could not be asked.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from herder.core import model
from herder.core.diskobjects import BlockDevStatus, LocalDiskStatus

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    code: str  # stable machine-readable kind, e.g. "dangling-node"
    object: str  # "instance inst1.example.com", "cluster", ...
    message: str

    def __str__(self) -> str:
        return f"{self.severity.upper()}: {self.object}: {self.message}"

    def with_code(self) -> str:
        """Ganeti's --error-codes line: SEVERITY:CODE:TYPE:OBJECT:MESSAGE."""
        kind, _, name = self.object.partition(" ")
        return f"{self.severity.upper()}:{self.code}:{kind}:{name}:{self.message}"


def verify(config: model.ConfigData) -> list[Finding]:
    findings: list[Finding] = []
    findings += _references(config)
    findings += _duplicates(config)
    findings += _drbd(config)
    findings += _policy(config)
    return findings


def _references(config: model.ConfigData) -> Iterable[Finding]:
    c = config.cluster
    if c.master_node not in config.nodes:
        yield Finding("error", "dangling-master", "cluster", f"master node {c.master_node} unknown")
    else:
        master = config.nodes[c.master_node]
        if master.offline:
            yield Finding("error", "master-offline", "cluster", "the master node is offline")
        if not master.master_candidate:
            yield Finding(
                "warning", "master-not-candidate", "cluster", "the master is not a master candidate"
            )
    for node in config.nodes.values():
        if node.group not in config.nodegroups:
            yield Finding(
                "error", "dangling-group", f"node {node.name}", f"unknown group {node.group}"
            )
    for inst in config.instances.values():
        what = f"instance {inst.name}"
        for node_uuid in inst.all_nodes:
            if node_uuid not in config.nodes:
                role = "primary" if node_uuid == inst.primary_node else "secondary"
                yield Finding("error", "dangling-node", what, f"{role} node {node_uuid} unknown")
        if inst.hypervisor not in c.enabled_hypervisors:
            yield Finding(
                "error", "hypervisor-disabled", what,
                f"hypervisor {inst.hypervisor} is not enabled on the cluster",
            )
        if inst.disks and inst.disk_template not in c.enabled_disk_templates:
            yield Finding(
                "error", "template-disabled", what,
                f"disk template {inst.disk_template} is not enabled on the cluster",
            )
        for index, nic in enumerate(inst.nics):
            if nic.network and nic.network not in config.networks:
                yield Finding(
                    "error", "dangling-network", what, f"NIC {index}: unknown network {nic.network}"
                )
    for group in config.nodegroups.values():
        for net in group.networks:
            if net not in config.networks:
                yield Finding(
                    "error", "dangling-network", f"group {group.name}", f"unknown network {net}"
                )


def _dupes(kind: str, code: str, items: Iterable[tuple[str, str]]) -> Iterable[Finding]:
    """items: (value, owner) pairs; report every value owned more than once."""
    owners: dict[str, list[str]] = defaultdict(list)
    for value, owner in items:
        owners[value].append(owner)
    for value, names in sorted(owners.items()):
        if len(names) > 1:
            yield Finding(
                "error", code, kind, f"{value!r} is used by {len(names)}: {', '.join(names)}"
            )


def _duplicates(config: model.ConfigData) -> Iterable[Finding]:
    yield from _dupes("nodes", "duplicate-name", ((n.name, n.uuid) for n in config.nodes.values()))
    yield from _dupes(
        "instances", "duplicate-name", ((i.name, i.uuid) for i in config.instances.values())
    )
    yield from _dupes(
        "node groups", "duplicate-name", ((g.name, g.uuid) for g in config.nodegroups.values())
    )
    yield from _dupes(
        "nodes", "duplicate-ip", ((n.primary_ip, n.name) for n in config.nodes.values())
    )
    yield from _dupes(
        "NICs",
        "duplicate-mac",
        ((nic.mac, i.name) for i in config.instances.values() for nic in i.nics),
    )
    # An IP may repeat across separate networks/links, not within one.
    ips: list[tuple[str, str]] = []
    for inst in config.instances.values():
        group = config.instance_group(inst)
        for nic in inst.nics:
            if nic.ip:
                scope = nic.network or config.filled_nicparams(nic, group)["link"]
                ips.append((f"{nic.ip} on {scope}", inst.name))
    yield from _dupes("NICs", "duplicate-ip", ips)


def _drbd(config: model.ConfigData) -> Iterable[Finding]:
    ports: list[tuple[str, str]] = []
    minors: list[tuple[str, str]] = []
    for inst in config.instances.values():
        for index, disk in enumerate(inst.disks):
            lid = disk.logical_id
            if not isinstance(lid, model.DrbdId):
                continue
            ports.append((str(lid.port), f"{inst.name}/disk{index}"))
            for node_uuid, minor in zip(lid.nodes, lid.minors, strict=True):
                owner = f"{inst.name}/disk{index}"
                minors.append((f"{config.node_name(node_uuid)}:{minor}", owner))
            if inst.primary_node not in lid.nodes:
                yield Finding(
                    "error", "drbd-primary", f"instance {inst.name}",
                    f"disk {index}: the primary node is not one of the DRBD nodes",
                )
    yield from _dupes("DRBD", "duplicate-drbd-port", ports)
    yield from _dupes("DRBD", "duplicate-drbd-minor", minors)


@dataclass(frozen=True)
class InstanceSpec:
    """What the instance policy looks at (None: not checked, Ganeti's None/"auto")."""

    memory: int | None
    cpus: int | None
    disk_sizes: Sequence[int]
    nics: int
    spindle_use: int | None
    template: str  # the instance's disk template


def instance_spec(config: model.ConfigData, inst: model.Instance, *,
                  beparams: Mapping[str, object] | None = None,
                  memory_key: str = "maxmem") -> InstanceSpec:
    """The spec of `inst` (with the filled `beparams` it will have, when given): Ganeti's
    ComputeIPolicyInstanceViolation's figures."""
    be = beparams if beparams is not None else config.filled_beparams(inst)

    def number(key: str) -> int | None:
        value = be.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return InstanceSpec(memory=number(memory_key), cpus=number("vcpus"),
                        disk_sizes=[d.size for d in inst.disks], nics=len(inst.nics),
                        spindle_use=number("spindle_use"), template=inst.disk_template)


def _in_range(name: str, qualifier: str, minmax: model.MinMax, value: int | None) -> str | None:
    """Ganeti's _ComputeMinMaxSpec."""
    if value is None:
        return None
    low, high = minmax.min.as_dict()[name], minmax.max.as_dict()[name]
    if low <= value <= high:
        return None
    full = f"{name}/{qualifier}" if qualifier else name
    return f"{full} value {value} is not in range [{low}, {high}]"


def policy_violations(policy: model.IPolicy, spec: InstanceSpec) -> list[str]:
    """Every way `spec` breaks `policy` (empty: it fits), as Ganeti's
    cmdlib/common.py ComputeIPolicySpecViolation: the disk templates the policy allows, then
    each figure against the min/max pair it fits best (the one with the fewest violations)."""
    figures: list[tuple[str, str, int | None]] = [
        ("memory-size", "", spec.memory), ("cpu-count", "", spec.cpus),
        ("nic-count", "", spec.nics), ("spindle-use", "", spec.spindle_use),
        *(("disk-size", str(index), size) for index, size in enumerate(spec.disk_sizes))]
    allowed = set(policy.disk_templates)
    found: list[str] = []
    if spec.template != "diskless":
        # herder counts the disks of an instance of any other template, none included: its
        # last disk cannot go where the policy asks for at least one (Ganeti skips the count
        # when it is 0; compat row B47)
        figures.append(("disk-count", "", len(spec.disk_sizes)))
    elif "diskless" not in allowed:
        found.append(f"Disk template diskless is not allowed (allowed templates "
                     f"{', '.join(sorted(allowed))})")
    if spec.disk_sizes and spec.template not in allowed:
        found.append(f"Disk template {spec.template} is not allowed (allowed templates: "
                     f"{', '.join(sorted(allowed))})")
    fewest: list[str] | None = None
    for minmax in policy.minmax:
        errors = [err for name, qualifier, value in figures
                  if (err := _in_range(name, qualifier, minmax, value)) is not None]
        if fewest is None or len(errors) < len(fewest):
            fewest = errors
    return found + (fewest or [])


def _policy(config: model.ConfigData) -> Iterable[Finding]:
    for inst in config.instances.values():
        group = config.instance_group(inst)
        if group is None:
            continue
        for problem in policy_violations(config.filled_ipolicy(group),
                                         instance_spec(config, inst)):
            yield Finding("warning", "policy-violation", f"instance {inst.name}", problem)


RUNNING_STATES = frozenset({"running", "blocked", "paused"})  # noded's instance_list words


def running(config: model.ConfigData, answers: Mapping[str, Mapping[str, str] | str],
            instances: Iterable[model.Instance] | None = None) -> list[Finding]:
    """Findings from the node daemons' domain lists: `answers` maps a node UUID to its
    `instance_list` answer (domain name -> state) or to why it could not be asked. Only the
    nodes in `answers` are judged; `instances` (default: all) are those whose primary's answer
    is checked for "not running"."""
    findings: list[Finding] = []
    by_name = {i.name: i for i in config.instances.values()}
    for node_uuid, answer in sorted(answers.items(), key=lambda kv: config.node_name(kv[0])):
        node = config.node_name(node_uuid)
        if isinstance(answer, str):
            findings.append(Finding("error", "node-rpc", f"node {node}",
                                    f"while contacting the node daemon: {answer}"))
            continue
        for name, state in sorted(answer.items()):
            if state not in RUNNING_STATES:
                continue
            inst = by_name.get(name)
            if inst is None:
                findings.append(Finding("warning", "node-unknown-domain", f"node {node}",
                                        f"node is running unknown domain {name}"))
            elif inst.primary_node != node_uuid:
                findings.append(Finding(
                    "error", "instance-wrong-node", f"instance {name}",
                    f"instance should not run on node {node} (its primary node is "
                    f"{config.node_name(inst.primary_node)})"))
    for inst in sorted(config.instances.values() if instances is None else instances,
                       key=lambda i: i.name):
        listed = answers.get(inst.primary_node)
        if inst.admin_state != "up" or not isinstance(listed, Mapping):
            continue
        if listed.get(inst.name) not in RUNNING_STATES:
            findings.append(Finding(
                "error", "instance-down", f"instance {inst.name}",
                f"instance not running on its primary node {config.node_name(inst.primary_node)}"))
    return findings


# --- disks (Ganeti's LUClusterVerifyGroup._VerifyInstance, _CollectDiskInfo) ------------------

# Ganeti's LDS_* local-disk states' names
LDS_NAMES = {LocalDiskStatus.OKAY: "ok", LocalDiskStatus.SYNC: "syncing",
             LocalDiskStatus.UNKNOWN: "unknown", LocalDiskStatus.FAULTY: "faulty"}


def instance_lvs(disk: model.Disk) -> list[str]:
    """The `vg/lv` names a disk's tree holds (Ganeti's Disk.ComputeNodeTree volumes)."""
    lid = disk.logical_id
    found = [f"{lid.vg}/{lid.lv}"] if isinstance(lid, model.PlainId) else []
    for child in disk.children:
        found += instance_lvs(child)
    return found


def expected_volumes(config: model.ConfigData) -> set[tuple[str, str]]:
    """(node UUID, `vg/lv`) of every LV some instance's disks have on some node (Ganeti's
    MapLVsByNode over all instances: a DRBD disk's children on both its nodes, a plain disk
    on its primary)."""
    expected: set[tuple[str, str]] = set()
    for inst in config.instances.values():
        for disk in inst.disks:
            lid = disk.logical_id
            nodes = list(lid.nodes) if isinstance(lid, model.DrbdId) else [inst.primary_node]
            expected.update((node, volume) for node in nodes for volume in instance_lvs(disk))
    return expected


def orphan_volumes(config: model.ConfigData,
                   volumes: Mapping[str, Mapping[str, object] | str]) -> dict[str, list[str]]:
    """Node UUID -> the LVs of the cluster's volume group it listed that no instance has
    there (Ganeti's _VerifyOrphanVolumes), but those the cluster's `reserved_lvs` patterns
    match (whole `vg/lv` names, Python regular expressions as Ganeti's)."""
    expected = expected_volumes(config)
    reserved = [re.compile(pattern) for pattern in config.cluster.reserved_lvs]
    prefix = f"{config.cluster.volume_group_name}/"
    found: dict[str, list[str]] = {}
    for node_uuid, listed in volumes.items():
        if isinstance(listed, str) or not config.cluster.volume_group_name:
            continue
        unknown = sorted(volume for volume in listed if volume.startswith(prefix)
                         and (node_uuid, volume) not in expected
                         and not any(p.fullmatch(volume) for p in reserved))
        if unknown:
            found[node_uuid] = unknown
    return found


def orphan_findings(config: model.ConfigData,
                    volumes: Mapping[str, Mapping[str, object] | str]) -> list[Finding]:
    """Ganeti's "volume V is unknown", one per orphan LV (a copy a killed move left)."""
    return [Finding("error", "node-orphan-volume", f"node {config.node_name(node_uuid)}",
                    f"volume {volume} is unknown")
            for node_uuid, unknown in sorted(orphan_volumes(config, volumes).items(),
                                             key=lambda kv: config.node_name(kv[0]))
            for volume in unknown]


def disk_status_findings(config: model.ConfigData, instances: Iterable[model.Instance],
                         volumes: Mapping[str, Mapping[str, object] | str],
                         statuses: Mapping[str, Mapping[str, list[tuple[bool,
                                                                         BlockDevStatus | str]]]
                                           | str]) -> list[Finding]:
    """Ganeti's disk checks of `cluster verify`, judged on what the nodes said:
    `volumes` maps a node UUID to its LV list (`vg/lv` -> ...) or why `lvs` failed there
    (only nodes that answered at all); `statuses` maps a node UUID to, per instance UUID,
    each disk's (success, BlockDevStatus or why not) from
    `blockdev_getmirrorstatus_multi`, or why the node could not say. Messages are Ganeti's:
    "volume V missing on node N", "couldn't retrieve status for disk/I on N: ...",
    "disk/I on N is degraded; local disk state is 'S'" (a warning while the local disk is ok
    or syncing, as a mirror catching up), "LVM problem on node: ...", "while getting disk
    information: ..."."""
    findings: list[Finding] = []
    for node_uuid, answer in sorted(volumes.items(), key=lambda kv: config.node_name(kv[0])):
        if isinstance(answer, str):
            findings.append(Finding("error", "node-lvm", f"node {config.node_name(node_uuid)}",
                                    f"LVM problem on node: {answer}"))
    for node_uuid, answer in sorted(statuses.items(), key=lambda kv: config.node_name(kv[0])):
        if isinstance(answer, str):
            findings.append(Finding("error", "node-rpc", f"node {config.node_name(node_uuid)}",
                                    f"while getting disk information: {answer}"))
    for inst in sorted(instances, key=lambda i: i.name):
        what = f"instance {inst.name}"
        for node_uuid in inst.all_nodes:
            listed = volumes.get(node_uuid)
            node = config.nodes.get(node_uuid)
            if not isinstance(listed, Mapping) or node is None or node.offline:
                continue  # offline or broken nodes: missing volumes are not judged
            for disk in inst.disks:
                lid = disk.logical_id
                here = (isinstance(lid, model.DrbdId) and node_uuid in lid.nodes) or \
                    node_uuid == inst.primary_node
                for volume in instance_lvs(disk) if here else []:
                    if volume not in listed:
                        findings.append(Finding(
                            "error", "instance-missing-disk", what,
                            f"volume {volume} missing on node {node.name}"))
        if not inst.disks_active:
            continue
        for node_uuid in inst.all_nodes:
            said = statuses.get(node_uuid)
            node = config.nodes.get(node_uuid)
            if not isinstance(said, Mapping) or node is None:
                continue
            per_disk = list(said.get(inst.uuid, []))
            for index, (success, status) in enumerate(per_disk):
                if not success or not isinstance(status, BlockDevStatus):
                    if not node.offline:
                        findings.append(Finding(
                            "error", "instance-faulty-disk", what,
                            f"couldn't retrieve status for disk/{index} on {node.name}: "
                            f"{status}"))
                    continue
                if status.is_degraded:
                    ldisk = status.ldisk_status
                    ok_locally = ldisk in (LocalDiskStatus.OKAY, LocalDiskStatus.SYNC)
                    state = LDS_NAMES[ldisk]
                    findings.append(Finding(
                        "warning" if ok_locally else "error", "instance-faulty-disk", what,
                        f"disk/{index} on {node.name} is degraded; local disk state is "
                        f"'{state}'"))
    return findings
