"""Checks on the node before a domain is defined or started, so that a missing bridge, a bad
kernel path or an occupied port is one clear line and nothing was created (libvirt would fail
later, half way, with QEMU's words).

`problems(spec, host)` is pure over `NodeFacts`; `NodeFacts.of_this_node()` reads the node."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from herder.core.errors import HerderError
from herder.noded.kvm.domain import InstanceSpec, display_of, missing_bridges

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

    @classmethod
    def of_this_node(cls, ovs_bridges: set[str] | None = None) -> NodeFacts:
        return cls(bridges=bridges() | (ovs_bridges or set()))


def problems(spec: InstanceSpec, node: NodeFacts) -> list[str]:
    """Everything that would keep the domain from starting here, one line each."""
    found = []
    absent = missing_bridges(spec.nics, node.bridges)
    if absent:
        found.append(f"bridge {', '.join(absent)} does not exist on this node (NIC link of "
                     f"{spec.name})")
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
