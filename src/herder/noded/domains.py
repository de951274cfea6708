"""An instance's domain on this node as the instance and migration handlers share it: its spec
from the master's payload and this node's facts, its definition after the node's checks, the
uid of its processes, its routed NICs, and the primary guard's checks of the call's claim.

The primary guard (`herder.noded.guard`): calls that may start or define a domain carry the
instance's claim (primary node, config version, master epoch; `herder.core.vmclaim`), and the
node refuses to run a domain it is not the primary of, except as the target of a move the master
is running; so does the re-definition of domains after a libvirtd restart.
"""

from __future__ import annotations

import json
import logging
import pwd
import subprocess

from herder.core import ordered, paths, vmclaim
from herder.core.rpcdefs.payload import InstancePayload
from herder.core.store import atomic_write
from herder.core.uidpool import expand
from herder.noded import instance_spec, uidpool
from herder.noded.kvm import domain, ifup, preflight
from herder.noded.kvm.domain import InstanceSpec
from herder.noded.node import Node, RpcFailure

log = logging.getLogger("herder.noded")
RUNNING_STATES = ("running", "blocked", "paused")


# --- the claim (herder.noded.guard) ------------------------------------------------------------


def claim_of(claim: vmclaim.Claim | None, inst: InstancePayload | None = None) -> vmclaim.Claim:
    """The call's claim; RpcFailure when it has none or it names another instance."""
    try:
        found = vmclaim.required(claim)
    except vmclaim.ClaimError as err:
        raise RpcFailure(str(err)) from None
    if inst is not None and inst.uuid != found.uuid:
        raise RpcFailure(f"the claim names instance {found.uuid}, the call carries {inst.uuid}")
    return found


def admit_run(node: Node, claim: vmclaim.Claim | None, move: vmclaim.Move | None,
              inst: InstancePayload) -> None:
    """Refuse (guard.Refused) to start or define a domain this node is not the primary of,
    and (RpcFailure) any while it has fenced itself (noded.fence), before anything is
    created."""
    fenced = node.lease.refusal()
    if fenced is not None:
        raise RpcFailure(fenced)
    node.guard.admit_run(inst.name, claim_of(claim, inst), move)


def note_claim(node: Node, name: str, claim: vmclaim.Claim | None) -> None:
    """A call that starts nothing: remember a newer claim when it carries one."""
    if claim is not None:
        node.guard.note(name, claim)


# --- the domain -------------------------------------------------------------------------------


def spec(node: Node, inst: InstancePayload) -> InstanceSpec:
    """The instance's domain spec from the master's payload and this node's facts (its
    disks as assembled here, the KVM probe, the uid of its processes, password files,
    interface addresses)."""
    hvparams = inst.hvparams
    passwords = {}
    for kind, path in instance_spec.password_files(hvparams).items():
        try:
            lines = node.local(path).read_text().splitlines()
        except OSError as err:
            raise RpcFailure(f"cannot read {kind}_password_file {path}: "
                             f"{err.strerror or err}") from None
        passwords[kind] = lines[0] if lines else ""
    addresses = {name: address for name in instance_spec.bind_interfaces(hvparams)
                 if (address := interface_address(name)) is not None}
    serial_log = None
    if node.hv.runs_guests and hvparams.get("serial_console", True):
        serial_log = str(node.serial_log(inst.name))
    uid = pool_uid(node, inst)
    user = hvparams.get("security_domain") if hvparams.get("security_model") == "user" \
        else None
    run_as = (uid, uid) if uid is not None else user_ids(str(user)) if user else None
    try:
        return instance_spec.from_payload(
            inst, node.disks.instance_disks(inst), kvm_usable=node.hv.kvm_probe().usable,
            serial_log=serial_log, run_as=run_as, passwords=passwords,
            interface_addresses=addresses)
    except (KeyError, TypeError, ValueError) as err:
        raise RpcFailure(f"instance {inst.name}: malformed payload ({err})") from None


def define(node: Node, inst: InstancePayload) -> None:
    """Define the instance's domain from its config as it is now (changed parameters
    apply, a renamed instance gets its new name), after the node's checks: a missing
    bridge, a missing kernel, an occupied console port are refused before anything is
    created."""
    wanted = spec(node, inst)
    try:
        if node.hv.runs_guests:
            preflight.check(wanted, preflight.NodeFacts.of_this_node(wanted))
        former = node.hv.define(wanted)
    except (domain.DomainError, preflight.PreflightError) as err:
        raise RpcFailure(str(err)) from None
    if former is not None:  # the instance was renamed: its old name's records go
        node.forget(former)
        node.guard.forget(former)


def check_target(node: Node, inst: InstancePayload) -> None:
    """Whether this node could run the domain (the target's checks before a migration): its
    XML can be made, its bridges and files exist."""
    wanted = spec(node, inst)
    try:
        domain.domain_xml(wanted)
        preflight.check(wanted, preflight.NodeFacts.of_this_node(wanted))
    except (domain.DomainError, preflight.PreflightError) as err:
        raise RpcFailure(str(err)) from None


def pool_uid(node: Node, inst: InstancePayload) -> int | None:
    """A uid from the cluster's uid pool for the instance's processes (design-2.1), when
    the pool is set and the hypervisor runs processes (not the test driver). The uid is
    reserved by its lock file until the instance is removed."""
    if not inst.uid_pool or not node.hv.runs_guests:
        return None
    record = paths.child(node.instances_dir, inst.name, suffix=".uid", what="instance name")
    if record.exists():
        return int(record.read_text())
    locked = uidpool.request_unused_uid(expand(inst.uid_pool),
                                        node.settings.state_dir / "uid-pool")
    atomic_write(record, str(locked.uid).encode(), 0o644)
    locked.unlock()  # the lock file stays: the uid is taken until released
    return locked.uid


# --- routed NICs (herder.noded.kvm.ifup, Ganeti's kvm-ifup) ---------------------------------


def routed_nics_up(node: Node, inst: InstancePayload, *, strict: bool = True) -> list[str]:
    """Ganeti's kvm-ifup for the instance's routed NICs once its domain runs here. A
    failure stops the domain again (strict, a start) or is a warning (the migration's
    target, as Ganeti's FinalizeMigrationDst)."""
    network = instance_spec.network_spec(inst)
    if not node.hv.runs_guests or not ifup.routed_nics(network):
        return []
    try:
        ifup.configure(network, hook=node.local(ifup.HOOK))
    except ifup.IfupError as err:
        if not strict:
            log.warning("%s", err)
            return [str(err)]
        with ordered.expect(node.settings.run_dir, network.name, "shutdown", 60):
            node.hv.destroy(network.name)
        ifup.unconfigure(network)
        raise RpcFailure(f"instance {network.name} stopped again: {err}") from None
    return []


def routed_nics_gone(node: Node, inst: InstancePayload | None) -> None:
    """After the domain's QEMU ended here: its routed taps' `ip rule`s go."""
    if inst is not None and node.hv.runs_guests:
        ifup.unconfigure(instance_spec.network_spec(inst))


# --- facts of this node -----------------------------------------------------------------------


def interface_address(name: str) -> str | None:
    """The first IPv4 (else IPv6) address of a network interface of this node."""
    done = subprocess.run(["ip", "-j", "addr", "show", "dev", name], capture_output=True,
                          text=True, timeout=10, check=False)
    if done.returncode != 0:
        return None
    try:
        infos = [a for link in json.loads(done.stdout) for a in link.get("addr_info", [])]
    except (ValueError, AttributeError, TypeError):
        return None
    for family in ("inet", "inet6"):
        for info in infos:
            if info.get("family") == family and info.get("local"):
                return str(info["local"])
    return None


def user_ids(user: str) -> tuple[int, int] | None:
    """uid and gid of a local user (security_model=user's security_domain)."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise RpcFailure(f"security_domain {user!r} is no user on this node") from None
    return entry.pw_uid, entry.pw_gid
