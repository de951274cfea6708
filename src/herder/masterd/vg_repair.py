"""Whether a node's volume group may be repaired (design-2.1 "Fix node volume group"): the
master's safety check before OP_REPAIR_NODE_STORAGE makes the node remove missing PVs. Pure:
the config and the nodes' health in, a verdict and its reason out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from herder.core import model, verify
from herder.core.diskobjects import BlockDevStatus, LocalDiskStatus

# what a node said of each of an instance's disks there: (success, Ganeti's BlockDevStatus or
# why not) (blockdev_getmirrorstatus_multi), or why the node could not say
CopyReport = Sequence[tuple[bool, BlockDevStatus | str]] | str
CopyReports = Mapping[tuple[str, str], CopyReport]  # by (instance UUID, node UUID)


def copy_problem(report: CopyReport | None) -> str | None:
    """Why a node's copy of an instance's disks is not a good copy (None: every disk is there,
    its local data up to date and not resyncing). "Good" means in sync: a copy the node
    merely answers for may still be degraded or half synced."""
    if report is None:
        return "no report of its disks"
    if isinstance(report, str):
        return f"its disks could not be checked ({report})"
    for index, (success, status) in enumerate(report):
        if not success or not isinstance(status, BlockDevStatus):
            return f"disk/{index} could not be found ({status})"
        if status.ldisk_status != LocalDiskStatus.OKAY:
            return (f"disk/{index} is degraded (local disk state "
                    f"'{verify.LDS_NAMES[status.ldisk_status]}')")
        if status.sync_percent is not None:
            return f"disk/{index} is resyncing ({status.sync_percent}% synced)"
    return None


def _disk_vgs(disk: model.Disk) -> set[str]:
    vgs: set[str] = set()
    vg = getattr(disk.logical_id, "vg", None)
    if disk.dev_type == "plain" and vg is not None:
        vgs.add(vg)
    for child in disk.children:
        vgs |= _disk_vgs(child)
    return vgs


def vg_repair_allowed(config: model.ConfigData, node_uuid: str, node_health: Mapping[str, bool],
                      vg_name: str | None = None,
                      copies: CopyReports | None = None) -> tuple[bool, str]:
    """May the volume group(s) of `node_uuid` be repaired (design-2.1 "Fix node volume group")?

    Only when this is the only node with problems and every instance on it keeps a good copy
    elsewhere: every instance with LVM disks on this node (in `vg_name` when given) must be
    DRBD, and each of its other nodes must be healthy (`node_health[uuid]` True; a node missing
    from the mapping, or offline in the config, counts as unhealthy) and, with `copies`, hold
    a good copy: every disk found, its local data up to date, not resyncing (`copy_problem`).
    Instances whose storage is not in the node's VG (file, shared, external, diskless) are
    not affected.
    Returns (allowed, reason).
    """
    if node_uuid not in config.nodes:
        return False, f"node {node_uuid} is not in the cluster"
    this = config.node_name(node_uuid)
    problems: list[str] = []
    checked = 0
    for inst in sorted(config.instances_on(node_uuid), key=lambda i: i.name):
        lvm_disks = [d for d in inst.disks
                     if _disk_vgs(d) and (vg_name is None or vg_name in _disk_vgs(d))]
        if not lvm_disks:
            continue
        checked += 1
        if any(d.dev_type != "drbd" for d in lvm_disks):
            problems.append(f"instance {inst.name} has non-mirrored ({inst.disk_template}) disks"
                            f" on {this}")
            continue
        for peer in inst.all_nodes:
            if peer == node_uuid:
                continue
            node = config.nodes.get(peer)
            peer_name = config.node_name(peer) if node else peer
            if node is None:
                problems.append(f"instance {inst.name}: mirror node {peer} is unknown")
            elif node.offline:
                problems.append(f"instance {inst.name}: mirror node {peer_name} is offline")
            elif peer not in node_health:
                problems.append(f"instance {inst.name}: no health report for mirror node"
                                f" {peer_name}")
            elif not node_health[peer]:
                problems.append(f"instance {inst.name}: mirror node {peer_name} is unhealthy")
            elif copies is not None and \
                    (why := copy_problem(copies.get((inst.uuid, peer)))) is not None:
                problems.append(f"instance {inst.name}: the copy on {peer_name} is not good: "
                                f"{why}; repairing would lose its data")
    if problems:
        return False, "; ".join(problems)
    return True, (f"all {checked} instance(s) with disks in the volume group of {this} have a"
                  " healthy mirror on another node"
                  + (", in sync" if copies is not None else ""))
