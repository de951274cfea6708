"""What several families of LUs share (Ganeti's cmdlib/common.py): parameter resets, ipolicy
changes, the checked name of a new instance, the instance's locks, redistribution to the
nodes, and an instance's removal (its domain and disks, then its config entry). Helper modules
of `masterd.lu` (this one, `placement`, `moves`, `disks`, `replace`, `migration`, `diskgen`,
`handover`, `exports`, `snapshot_volumes`) are imported by the LU modules and never import one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import msgspec

from herder.core import model, names, params, ports
from herder.core.errors import ConfigError, HerderError, OpExecError, OpPrereqError
from herder.core.locations import is_etcd_location
from herder.core.rpcdefs import instance_calls, node_calls
from herder.masterd import locking, portpool, redist
from herder.masterd.lu import disks, nics, snapshot_volumes
from herder.masterd.lu.base import LockRequest, MasterEnv, lookup

ValueT = TypeVar("ValueT")


def resets(changes: Mapping[str, ValueT]) -> dict[str, ValueT | None]:
    """Ganeti's `"default"` value (and null) reset a parameter to the inherited value."""
    return {k: (None if v == params.VALUE_DEFAULT else v) for k, v in changes.items()}


def apply_ipolicy(policy: model.IPolicy | model.IPolicyOverride,
                  changes: Mapping[str, object]) -> None:
    for key, value in changes.items():
        attr = model.ipolicy_field(key, group=isinstance(policy, model.IPolicyOverride))
        if attr in ("minmax", "std") and value is not None:
            target = list[model.MinMax] if attr == "minmax" else model.ISpec
            try:
                value = msgspec.convert(value, target)
            except msgspec.ValidationError as err:
                raise ConfigError(f"ipolicy {key}: {err}") from None
        setattr(policy, attr, value)


def instance_locks(config: model.ConfigData, name: str, *, nodes: bool = False,
                   shared_nodes: bool = True) -> list[LockRequest]:
    """The instance's lock, with `nodes` its nodes' (shared unless `shared_nodes` is false)."""
    inst = lookup(config.find_instance, name)
    requests = [LockRequest(locking.LEVEL_INSTANCE, [inst.uuid])]
    if nodes:
        requests.append(LockRequest(locking.LEVEL_NODE, sorted(inst.all_nodes),
                                    shared=shared_nodes))
    return requests


def checked_new_name(name: str, *, name_check: bool, ip_check: bool,
                     feedback: Callable[[str], None]) -> str:
    """A new instance name after Ganeti's name and IP checks: resolved (the resolved fully
    qualified name is the one kept) and its address not in use; OpPrereqError otherwise."""
    if not name_check:
        return name
    try:
        resolved = names.resolve(name)
    except names.BadName as err:
        raise OpPrereqError(str(err), "resolver_error") from None
    if resolved.name != name:
        feedback(f"Resolved given name '{name}' to '{resolved.name}'")
    if ip_check and names.address_answers(resolved.ip, ports.NODED):
        raise OpPrereqError(f"IP {resolved.ip} of instance {resolved.name} already in use",
                            "already_exists")
    return resolved.name


def config_path_of(env: MasterEnv) -> Path:
    """Where the config file is (the cluster secrets beside it)."""
    location = str(getattr(env.store, "path", "") or "")
    # a store that is no file (etcd): the secrets live in the default directory
    return Path(location if location.endswith(".json") and "://" not in location
                else "/var/lib/herder/config.json")


def redistribute(env: MasterEnv, config: model.ConfigData, *, full: bool,
                 only: list[str] | None = None) -> dict[str, dict[str, list[str]]]:
    """Push to the nodes (docs/ha.md "Redistribution"); per node name what was sent and the
    errors. Never raises for a node's failure."""
    pusher = redist.Redistributor(env.rpc, config_path_of(env), env.queue_dir,
                                  reachability=env.reachability,
                                  # etcd replicates the config and the queue itself
                                  config_copies=not is_etcd_location(
                                      getattr(env.store, "location", None)))
    return redist.report(pusher.push(config, full=full, only=only))


def remove_domain_and_disks(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                            ignore_failures: bool, feedback: Callable[[str], None]) -> None:
    """Ganeti's LUInstanceRemove: the domain gone, then the disks from every node they live on
    (RemoveDisks), their snapshots first; the config entry stays (`forget_instance`)."""
    for node_uuid in inst.all_nodes:
        node = config.nodes.get(node_uuid)
        if node is None:
            continue
        try:
            env.rpc.call(node, instance_calls.InstanceRemove(name=inst.name))
        except HerderError:
            if not ignore_failures:
                raise
            feedback(f"could not clean up on {node.name}; ignored")
    snapshots = [volume for snap in inst.snapshots for volume in snap.volumes]
    left = snapshot_volumes.remove_volumes(env, config, inst, snapshots, feedback)
    if left and not ignore_failures:
        raise OpExecError(f"could not remove the snapshot volumes {', '.join(left)} of "
                          f"{inst.name}")
    if not disks.remove_disks(env, config, inst, feedback=feedback) and not ignore_failures:
        raise OpExecError(f"could not remove the block devices of {inst.name}")


def forget_instance(env: MasterEnv, inst: model.Instance, feedback: Callable[[str], None]) -> None:
    """The removed instance's config entry, port, addresses and lock gone."""
    with env.store.update() as config:
        removed = config.instances.pop(inst.uuid)
        portpool.release(config, removed.network_port)
        pools = nics.Pools(config)  # its addresses go back to their networks' pools
        for nic in removed.nics:
            pools.release(nic, feedback)
        pools.keep()
    env.locks.remove(locking.LEVEL_INSTANCE, [inst.uuid])


def kvm_verdict_feedback(env: MasterEnv, node: model.Node, inst: model.Instance,
                         feedback: Callable[[str], None]) -> None:
    """The job log of a KVM instance's start says how it runs on `node`: with hardware KVM or
    emulated, and why (the node's KVM probe); a node that cannot say does not stop the start."""
    if inst.hypervisor != "kvm":
        return
    try:
        verdict = env.rpc.call(node, node_calls.KvmProbe())
    except HerderError as err:
        feedback(f"{node.name}: the KVM probe's verdict is unknown ({err})")
        return
    how = "hardware KVM" if verdict.usable else "no hardware KVM, emulated (TCG)"
    feedback(f"{node.name}: {how}: {verdict.reason}")
