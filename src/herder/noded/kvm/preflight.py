"""Checks on the node before a domain is defined or started, so that a missing bridge, a bad
kernel path or an occupied port is one clear line and nothing was created (libvirt would fail
later, half way, with QEMU's words).

`problems(spec, host)` is pure over `NodeFacts`; `NodeFacts.of_this_node()` reads the node."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from herder.core.errors import HerderError
from herder.core.qemu_procs import foreign_qemu
from herder.noded.kvm.domain import InstanceSpec, NicSpec, display_of

SYS_NET = Path("/sys/class/net")
# hvparams naming a file QEMU opens (URLs of cdroms excepted)
FILE_PARAMS = ("kernel_path", "initrd_path", "cdrom_image_path", "cdrom2_image_path",
               "floppy_image_path")


class PreflightError(HerderError):
    """The domain cannot run on this node (the message says why, in one line)."""


def bridges(sys_net: Path = SYS_NET) -> set[str]:
    """The Linux bridges of this node (interfaces with a `bridge` directory)."""
    found = set()
    with contextlib.suppress(OSError):
        for entry in sys_net.iterdir():
            if (entry / "bridge").is_dir():
                found.add(entry.name)
    return found


def ovs_bridges() -> set[str] | None:
    """The Open vSwitch bridges of this node (`ovs-vsctl list-br`); None when Open vSwitch is
    not installed or its database does not answer."""
    if shutil.which("ovs-vsctl") is None:
        return None
    try:
        done = subprocess.run(["ovs-vsctl", "--timeout=10", "list-br"], capture_output=True,
                              text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(done.stdout.split()) if done.returncode == 0 else None


def missing_links(nics: tuple[NicSpec, ...], bridges: set[str],
                  ovs: set[str] | None) -> list[str]:
    """One line per kind of absent link: Linux bridges of bridged NICs, Open vSwitch
    bridges of openvswitch NICs (Open vSwitch itself missing: said so)."""
    lines = []
    linux = sorted({nic.link for nic in nics if nic.mode == "bridged" and nic.link not in bridges})
    if linux:
        lines.append(f"bridge {', '.join(linux)} does not exist on this node")
    wanted = sorted({nic.link for nic in nics if nic.mode == "openvswitch"})
    if wanted and ovs is None:
        lines.append(f"openvswitch NICs ({', '.join(wanted)}) but Open vSwitch does not run on "
                     "this node (ovs-vsctl list-br)")
    elif wanted and ovs is not None and set(wanted) - ovs:
        lines.append(f"openvswitch bridge {', '.join(sorted(set(wanted) - ovs))} does not "
                     "exist on this node")
    return lines


def port_in_use(address: str, port: int) -> bool:
    """Whether something listens on address:port already (a bind fails with EADDRINUSE)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as err:
            return err.errno == errno.EADDRINUSE
    return False


@dataclass
class NodeFacts:
    """What the checks look at on the node."""

    bridges: set[str]
    exists: Callable[[str], bool] = os.path.exists
    executable: Callable[[str], bool] = field(default=lambda path: os.access(path, os.X_OK))
    port_in_use: Callable[[str, int], bool] = port_in_use
    ovs_bridges: set[str] | None = None  # None: no Open vSwitch here
    # instance name -> the QEMU processes running it outside libvirt (`core.qemu_procs`)
    foreign_qemu: Callable[[str], list[int]] = foreign_qemu

    @classmethod
    def of_this_node(cls, spec: InstanceSpec | None = None) -> NodeFacts:
        """The node's facts; Open vSwitch is asked only when `spec` has openvswitch NICs."""
        wants_ovs = spec is not None and any(nic.mode == "openvswitch" for nic in spec.nics)
        return cls(bridges=bridges(), ovs_bridges=ovs_bridges() if wants_ovs else None)


def problems(spec: InstanceSpec, node: NodeFacts) -> list[str]:
    """Everything that would keep the domain from starting here, one line each."""
    found: list[str] = []
    foreign = node.foreign_qemu(spec.name)
    if foreign:
        found.append(f"a QEMU that libvirt does not manage already runs {spec.name} (pid "
                     f"{', '.join(map(str, foreign))}; a guest Ganeti started?): stop it, or "
                     "leave the instance as it runs, before starting it here")
    found.extend(f"{line} (NIC link of {spec.name})"
                 for line in missing_links(spec.nics, node.bridges, node.ovs_bridges))
    hvp = spec.hvparams
    for key in FILE_PARAMS:
        value = str(hvp.get(key) or "")
        if not value or "://" in value:
            continue
        if not node.exists(value):
            found.append(f"{key} {value} does not exist on this node")
    kvm_path = str(hvp.get("kvm_path") or "")
    if kvm_path and not node.executable(kvm_path):
        found.append(f"kvm_path {kvm_path} is not an executable on this node")
    if spec.network_port is not None and display_of(spec.network_port) is not None:
        bind = str(hvp.get("vnc_bind_address") or hvp.get("spice_bind") or "")
        if bind and not bind.startswith("/"):
            address = spec.interface_addresses.get(bind, bind)
            with contextlib.suppress(OSError, ValueError):
                if node.port_in_use(address, spec.network_port):
                    found.append(f"port {spec.network_port} on {address} (the console of "
                                 f"{spec.name}) is already in use on this node")
    return found


def check(spec: InstanceSpec, node: NodeFacts) -> None:
    found = problems(spec, node)
    if found:
        raise PreflightError(f"cannot start {spec.name}: " + "; ".join(found))
