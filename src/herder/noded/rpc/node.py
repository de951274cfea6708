"""The node as a whole: ping, the master epoch and the failover vote, live figures, the domains
and OS definitions it has, its repair commands, its power."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

from herder import __version__
from herder.core import livefigures, ports, whitelist
from herder.core.rpcdefs import node_calls
from herder.noded import fence, figures, libvirtcheck, nodecheck, osdef, powercycle
from herder.noded.node import Node, RpcFailure

QEMU_SYSTEM = "qemu:///system"


def ping(node: Node, call: node_calls.Ping) -> node_calls.PingAnswer:
    return node_calls.PingAnswer(node=node.name, version=__version__, time=time.time(),
                                 uptime=time.time() - node.started,
                                 hypervisor=node.hv.check(), vm_lock_kb=vm_locked_kb())


def master_epoch(node: Node, call: node_calls.MasterEpoch) -> node_calls.EpochAnswer:
    """The highest master epoch this node has accepted (a call carrying a newer one has
    already raised it)."""
    return node_calls.EpochAnswer(node=node.name, epoch=node.master_epoch)


def master_vote(node: Node, call: node_calls.MasterVote) -> node_calls.VoteAnswer:
    """Can this node reach the master's masterd? `reachable` false is a vote that the master
    is gone."""
    try:
        with socket.create_connection((call.address, call.port), timeout=call.timeout):
            reachable, detail = True, "masterd answers"
    except OSError as err:
        reachable, detail = False, err.strerror or str(err)
    return node_calls.VoteAnswer(node=node.name, master=call.master, reachable=reachable,
                                 detail=detail, epoch=node.master_epoch)


def node_reachable(node: Node, call: node_calls.NodeReachable) -> node_calls.ReachableAnswer:
    """For maintd's decision that a node failed (masterd.leases): does this node reach the
    node's noded, and how long ago did that node ask it for its lease?"""
    ok, detail = fence.reachable(call.address, ports.NODED, call.timeout)
    return node_calls.ReachableAnswer(node=node.name, reachable=ok, detail=detail,
                                      asked_age=node.witness.age(call.node))


def node_info(node: Node, call: node_calls.NodeInfo) -> livefigures.NodeInfo:
    """The node's live figures (noded/figures.py)."""
    return figures.node_info(node.hv, node.instances_dir,
                             storage=figures.storage_units(node.disks.host,
                                                           list(call.storage_units)),
                             with_instances=call.instances)


def instance_list(node: Node, call: node_calls.InstanceList) -> dict[str, str]:
    return node.hv.list_domains()


def os_list(node: Node, call: node_calls.OsList) -> list[str]:
    return osdef.os_names_with_variants(osdef.list_oses(list(node.settings.os_path)))


def kvm_probe(node: Node, call: node_calls.KvmProbe) -> node_calls.KvmVerdict:
    """The KVM probe's verdict (herder.noded.kvm.kvmprobe), for the job log of a start."""
    return node.hv.kvm_probe().verdict()


def node_verify(node: Node, call: node_calls.NodeVerify) -> node_calls.NodeVerifyAnswer:
    """Ganeti's node_verify: what `cluster verify` checks of this node (noded/nodecheck.py);
    the hypervisor's verdict from libvirt and the KVM probe."""
    hv = node.hv
    problem = None if hv.check() else f"libvirt does not answer at {hv.uri}"
    kvm = None
    if problem is None and hv.runs_guests:
        kvm = hv.kvm_probe().verdict()
    certificates = [node.trust.secrets.certificate, node.trust.node_certificate]
    libvirt = None
    if call.libvirt and hv.uri.startswith(QEMU_SYSTEM):  # herder configures only that libvirtd
        libvirt = libvirtcheck.facts(node.data_dir, call.storage_paths, local=node.local)
    return nodecheck.verify(call, host=node.disks.host, os_path=list(node.settings.os_path),
                            certificates=certificates, hypervisor_problem=problem, kvm=kvm,
                            libvirt=libvirt)


def node_powercycle(node: Node, call: node_calls.NodePowercycle) -> str:
    """Reboot at once (herder.noded.powercycle: reboot(2), refused where it would reboot
    a machine that is not this node)."""
    why_not = powercycle.refusal()
    if why_not is not None:
        raise RpcFailure(f"refusing to power-cycle: {why_not}")
    node.powercycled.append(time.time())
    with open(node.settings.state_dir / "powercycle.log", "a") as fh:
        fh.write(f"{time.time():.3f} powercycle requested\n")
    powercycle.reboot_soon()
    return "rebooting"


def repair_command(node: Node, call: node_calls.RepairCommand) -> node_calls.RepairAnswer:
    """A white-listed repair command, with the diagnose object on stdin (live-repair)."""
    try:
        path = whitelist.check_command(node.settings.repair_dir, call.command, "repair command")
    except whitelist.NotWhitelisted as err:
        raise RpcFailure(f"not white-listed: {err}") from None
    timeout = node.settings.repair_timeout
    try:
        proc = subprocess.run([str(path)], input=json.dumps(call.input), text=True,
                              capture_output=True, timeout=timeout,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"},
                              check=False)
    except subprocess.TimeoutExpired:
        raise RpcFailure(f"repair command {call.command} did not finish within "
                         f"{timeout:g}s") from None
    if proc.returncode != 0:
        raise RpcFailure(f"repair command {call.command} failed with exit code "
                         f"{proc.returncode}: {proc.stderr.strip()[-200:]}")
    return node_calls.RepairAnswer(stdout=proc.stdout, exit_code=proc.returncode)


def vm_locked_kb() -> int:
    """VmLck of this process (non-zero once mlockall worked)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0
