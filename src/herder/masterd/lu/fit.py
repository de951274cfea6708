"""Does an instance fit where it goes: its group's instance policy, and the memory and disk
space it needs on its nodes, asked of the nodes now (their `node_info`). As Ganeti's
ComputeIPolicySpecViolation (cmdlib/common.py; the pure check is `core.verify`'s),
CheckNodeFreeMemory (instance_utils) and CheckNodesFreeDiskPerVG (instance_storage): an
explicit primary gets the same checks as an allocator's choice, and a start is refused where
the guest cannot fit.

Policy: a violation is refused with Ganeti's message ("Instance allocation to group G (NAME)
violates policy: ...") unless the opcode says `ignore_ipolicy` (instance create, modify,
move). Memory: the node's free memory (Ganeti's `memory_free`) against what the instance
needs (`maxmem` to create it started or to move it, `minmem` to start it, as Ganeti). Disk:
the space the new disks take on each node (a DRBD disk 128 MiB of metadata more) against the
free space of their storage unit: the volume group for plain and drbd, the file-storage
directory for file, and (herder's, compat row B46) the shared file-storage directory for
sharedfile, whose filesystem every node sees alike. Other templates report no space (rbd,
ext, blockdev, diskless) and are not checked, as in Ganeti.
"""

from __future__ import annotations

from collections.abc import Sequence

from herder.core import livefigures, model, verify
from herder.core.errors import HerderError, OpPrereqError
from herder.core.rpcdefs import node_calls
from herder.masterd.iallocator import disk_space_total
from herder.masterd.lu.base import MasterEnv

NODE_INFO_TIMEOUT = 60.0  # seconds: as the other checks that ask a node


def refuse_violations(config: model.ConfigData, node: model.Node, spec: verify.InstanceSpec,
                      *, ignore: bool) -> list[str]:
    """OpPrereqError when `spec` breaks the policy of `node`'s group (Ganeti's message),
    unless `ignore`; the violations (the caller may say them when ignored)."""
    group = config.nodegroups.get(node.group)
    found = verify.policy_violations(config.filled_ipolicy(group), spec)
    if found and not ignore:
        name = group.name if group is not None else "?"
        raise OpPrereqError(f"Instance allocation to group {node.group} ({name}) violates "
                            f"policy: {', '.join(found)}", "wrong_input")
    return found


def node_info(env: MasterEnv, node: model.Node, *,
              storage_units: Sequence[tuple[str, str]] = (),
              instances: bool = False) -> livefigures.NodeInfo:
    """The node's answer; OpPrereqError when it cannot be had (Ganeti's "Can't get data
    from node")."""
    try:
        return env.rpc.call(node, node_calls.NodeInfo(
            instances=instances, storage_units=list(storage_units)), timeout=NODE_INFO_TIMEOUT)
    except (HerderError, ValueError) as err:
        raise OpPrereqError(f"Can't get data from node {node.name}: {err}",
                            "environment_error") from None


def check_free_memory(env: MasterEnv, node: model.Node, requested: int, reason: str,
                      info: livefigures.NodeInfo | None = None) -> int:
    """Ganeti's CheckNodeFreeMemory: the node's free memory, when at least `requested` MiB."""
    free = (info or node_info(env, node)).memory_free
    if requested > free:
        raise OpPrereqError(f"Not enough memory on node {node.name} for {reason}: needed "
                            f"{requested} MiB, available {free} MiB", "insufficient_resources")
    return free


def storage_unit(cluster: model.Cluster, template: str) -> tuple[str, str] | None:
    """The (type, name) unit holding `template`'s disks whose free space can be asked."""
    if template in ("plain", "drbd") and cluster.volume_group_name:
        return (livefigures.STORAGE_LVM_VG, cluster.volume_group_name)
    if template == "file":
        return (livefigures.STORAGE_FILE, cluster.file_storage_dir)
    if template == "sharedfile":
        return (livefigures.STORAGE_FILE, cluster.shared_file_storage_dir)
    return None


def needed_space(template: str, sizes: Sequence[int]) -> int:
    """MiB the disks take on each of their nodes."""
    if template == "sharedfile":
        return sum(sizes)
    return disk_space_total(template, sizes)


def check_free_disk(env: MasterEnv, config: model.ConfigData, nodes: Sequence[model.Node],
                    template: str, sizes: Sequence[int]) -> None:
    """Ganeti's CheckNodesFreeDiskPerVG: every node has the space the new disks take in their
    storage unit."""
    unit = storage_unit(config.cluster, template)
    requested = needed_space(template, sizes)
    if unit is None or requested <= 0:
        return
    kind, name = unit
    for node in nodes:
        info = node_info(env, node, storage_units=[unit])
        found = next((u for u in info.storage if u.type == kind and u.name == name), None)
        if found is None and kind == livefigures.STORAGE_FILE:
            continue  # no such directory there (yet): not judged (Ganeti checks none)
        if found is None:
            raise OpPrereqError(f"Can't compute free disk space on node {node.name} for "
                                f"{kind} {name}: the node does not report it",
                                "environment_error")
        if requested > found.storage_free:
            raise OpPrereqError(f"Not enough disk space on target node {node.name} {kind} "
                                f"{name}: required {requested} MiB, available "
                                f"{found.storage_free} MiB", "insufficient_resources")
