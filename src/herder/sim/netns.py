"""The simulated cluster's network: a bridge in a network namespace of its own, one veth pair
per host.

The simulator's namespace `hsim-<index>` holds the bridge `br0` with the address
198.18.<index>.1/24 (RFC 2544's benchmarking range: routed nowhere) and one port `v<slot>` per
host; the other end is the host's `eth0`, enslaved there to the host's own bridge `br0`, which
carries the host's address (as on KVM hosts, whose guests' NICs join that bridge). The
machine's own namespace gets nothing: no address on the subnet, no route, no forwarding, no NAT
(forwarding is switched off in the simulator's namespace too), so no packet of the cluster
leaves it. The published ports' forwarder (`herder.sim.forward`) is the only way in.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path

from herder.core.errors import HerderError
from herder.sim.hoststate import ProcessRecord, process_record

BRIDGE = "br0"
SIMULATOR_HOST = 1  # the simulator's address on its bridge: 198.18.<index>.1
PREFIX = 24


def namespace(index: int) -> str:
    return f"hsim-{index}"


def address(index: int, host: int) -> str:
    """198.18.<index>.<host>."""
    if not 1 <= index <= 254 or not 1 <= host <= 254:
        raise HerderError(f"no simulated address 198.18.{index}.{host}")
    return f"198.18.{index}.{host}"


def subnet(index: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"198.18.{index}.0/{PREFIX}")


def host_mac(index: int, slot: int) -> str:
    """The host's MAC address (its eth0 and br0), the same on every boot as a real NIC's, so
    the other hosts' ARP caches stay right across a reboot. Locally administered."""
    return f"02:68:73:{index:02x}:{slot >> 8 & 0xff:02x}:{slot & 0xff:02x}"


def _ip(args: list[str], *, stdin: str | None = None, what: str,
        prefix: tuple[str, ...] | list[str] = ()) -> None:
    done = subprocess.run([*prefix, "ip", *args], input=stdin, capture_output=True, text=True,
                          timeout=30)
    if done.returncode != 0:
        raise HerderError(f"{what}: {done.stderr.strip() or done.stdout.strip()}")


def exists(index: int) -> bool:
    return Path("/run/netns", namespace(index)).exists()


def create(index: int) -> None:
    """The simulator's namespace with its bridge and address; forwarding off."""
    name = namespace(index)
    _ip(["netns", "add", name], what=f"cannot create network namespace {name}")
    _ip(["-n", name, "-batch", "-"], what=f"cannot set up the bridge in {name}", stdin=(
        "link set lo up\n"
        f"link add {BRIDGE} type bridge\n"
        f"link set {BRIDGE} up\n"
        f"address add {address(index, SIMULATOR_HOST)}/{PREFIX} dev {BRIDGE}\n"))
    _sysctl_off(["nsenter", f"--net=/run/netns/{name}"])


def _sysctl_off(prefix: list[str]) -> None:
    """No forwarding in this namespace (a new one may inherit the machine's setting)."""
    done = subprocess.run([*prefix, "sysctl", "-q", "-w", "net.ipv4.ip_forward=0",
                           "net.ipv6.conf.all.forwarding=0"], capture_output=True, text=True,
                          timeout=30)
    if done.returncode != 0:
        raise HerderError(f"cannot switch forwarding off: {done.stderr.strip()}")


def processes(index: int) -> list[ProcessRecord]:
    """The processes inside the simulator's namespace."""
    try:
        handle = os.stat(Path("/run/netns", namespace(index)))
    except OSError:
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            inside = os.stat(entry / "ns" / "net")
            if (inside.st_dev, inside.st_ino) != (handle.st_dev, handle.st_ino):
                continue
            found.append(process_record(int(entry.name)))
        except (OSError, HerderError):
            continue
    return found


def destroy(index: int) -> None:
    """Remove the namespace (and with it the bridge and every host's veth)."""
    if exists(index):
        _ip(["netns", "delete", namespace(index)],
            what=f"cannot remove network namespace {namespace(index)}")


def plug(index: int, slot: int, pid: int, host_address: str) -> None:
    """Connect the host whose network namespace `pid` is in: a veth pair `v<slot>` (on the
    simulator's bridge) / `eth0` (in the host, on its bridge `br0` that carries
    `host_address`)."""
    name, port = namespace(index), f"v{slot}"
    # A port left by the host's previous life goes with its namespace, but not at once.
    subprocess.run(["ip", "-n", name, "link", "delete", port], capture_output=True, timeout=30)
    mac = host_mac(index, slot)
    _ip(["-n", name, "link", "add", port, "type", "veth", "peer", "name", "eth0", "address",
         mac, "netns", str(pid)], what=f"cannot create the veth pair of host slot {slot}")
    _ip(["-n", name, "link", "set", port, "master", BRIDGE, "up"],
        what=f"cannot put {port} on the simulator's bridge")
    inside = ["nsenter", f"--target={pid}", "--net"]
    _ip(["-batch", "-"], prefix=inside, what=f"cannot set up the network of host slot {slot}",
        stdin=("link set lo up\n"
               f"link add {BRIDGE} address {mac} type bridge\n"
               f"link set eth0 master {BRIDGE}\n"
               "link set eth0 up\n"
               f"link set {BRIDGE} up\n"
               f"address add {host_address}/{PREFIX} dev {BRIDGE}\n"))
    _sysctl_off(inside)
