"""An instance's disks on its nodes, at the points Ganeti's cmdlib handles them
(cmdlib/instance_storage.py: AssembleInstanceDisks, ShutdownInstanceDisks;
cmdlib/instance_migration.py: the DRBD steps around a live migration and a failover).

This module is the seam between the VM operations (start, failover, migration, in
`lu/instance.py`) and the block-device layer on the nodes (`noded/bdev`, reached through the
`blockdev_*` and `drbd_*` node RPCs): the VM side calls these functions where Ganeti's cmdlib
does; which node RPCs they make, and in which order, is this module's business.

First version: the node daemon still makes a disk on the fly when a domain needs it, so
`assemble_disks` asks each node for the disks (`blockdev_create`, today's behaviour) and the
migration steps have nothing to do yet; the block-device work (issue "Real disks") fills them in.
"""

from __future__ import annotations

from typing import Any

from herder.core import model
from herder.core.noderpc import instance_payload


def assemble_disks(env: Any, config: model.ConfigData, inst: model.Instance, *,
                   primary: model.Node | None = None,
                   ignore_secondaries: bool = False) -> list[tuple[str, str, str]]:
    """Make the instance's disks available: on its secondaries as secondaries, then on
    `primary` (default: its primary node) as the primary (Ganeti's AssembleInstanceDisks).
    Returns (node name, iv_name, device path) per disk of the primary, as
    `gnt-instance activate-disks` prints them."""
    payload = instance_payload(config, inst)
    primary = primary or config.nodes[inst.primary_node]
    paths: list[str] = env.rpc.call(primary, "blockdev_create",
                                    {"disks": payload["disks"], "instance": inst.name})
    return [(primary.name, disk.iv_name, path) for disk, path in zip(inst.disks, paths,
                                                                      strict=False)]


def shutdown_disks(env: Any, config: model.ConfigData, inst: model.Instance, *,
                   nodes: list[model.Node] | None = None, ignore_primary: bool = False) -> None:
    """Release the instance's disks on `nodes` (default: all its nodes), e.g. the old
    primary after a failover (Ganeti's ShutdownInstanceDisks). `ignore_primary`: errors of
    the primary (a dead node in a failover) are not fatal."""


def prepare_live_migration(env: Any, config: model.ConfigData, inst: model.Instance,
                           source: model.Node, target: model.Node) -> None:
    """Before libvirt migrates the domain: the disks usable on both nodes at once (DRBD:
    the target made secondary, both disconnected, reconnected dual-primary, in sync; shared
    storage: attached on the target)."""


def finish_live_migration(env: Any, config: model.ConfigData, inst: model.Instance,
                          source: model.Node, target: model.Node, *, migrated: bool) -> None:
    """After the migration (`migrated`) or its failure/cleanup: back to single primary on the
    node that runs the domain (target when migrated, else source); the other node's disks
    released (shared storage) or made secondary (DRBD)."""


def check_failover_target(config: model.ConfigData, inst: model.Instance,
                          target: model.Node) -> None:
    """OpPrereqError when the instance's disks cannot be used on `target` (not its DRBD
    secondary; a local template that only a copying move can take there)."""
