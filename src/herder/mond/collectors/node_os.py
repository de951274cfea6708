"""node-os: the node's OS resources as Linux sees them (design "Node OS resources report").

Category null, kind 0 (performance). Memory and filesystem sizes are in KiB, like the storage
collectors; network counters are totals since boot.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from functools import cache
from typing import Any

import psutil

from herder import __version__
from herder.mond.collector import CollectContext, Collector
from herder.mond.report import Kind

KIB = 1024
_DRBD_VERSION = re.compile(r"^version:\s*(\S+)", re.M)


def drbd_version(proc_drbd_text: str) -> str | None:
    match = _DRBD_VERSION.search(proc_drbd_text)
    return match.group(1) if match else None


@cache
def qemu_version() -> str | None:
    """QEMU's version, asked once per process (the binary does not change under us)."""
    for binary in ("qemu-system-x86_64", "qemu-system-aarch64", "kvm"):
        path = shutil.which(binary)
        if path is None:
            continue
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=5, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        match = re.search(r"version\s+(\S+)", out)
        return match.group(1) if match else None
    return None


def libvirt_version() -> str | None:
    try:
        import libvirt
    except ImportError:
        return None
    number = libvirt.getVersion()
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


class NodeOsCollector(Collector):
    name = "node-os"
    category = None
    kind = Kind.PERFORMANCE
    inputs = {"proc_drbd": "/proc/drbd"}

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx)
        self._primed = False

    def _cpu_loads(self) -> list[float]:
        # psutil measures since its previous call; the first call needs a short window.
        loads = psutil.cpu_percent(interval=None if self._primed else 0.1, percpu=True)
        self._primed = True
        return [round(x / 100.0, 4) for x in loads]

    def collect(self) -> dict[str, Any]:
        mem = psutil.virtual_memory()
        swap = psutil.swap_memory()
        filesystems = []
        for part in psutil.disk_partitions(all=False):
            try:
                usage = psutil.disk_usage(part.mountpoint)
            except OSError:
                continue
            filesystems.append({
                "mountpoint": part.mountpoint, "device": part.device, "fstype": part.fstype,
                "total": usage.total // KIB, "available": usage.free // KIB,
                "used": usage.used // KIB,
            })
        counters = psutil.net_io_counters(pernic=True)
        stats = psutil.net_if_stats()
        addresses = psutil.net_if_addrs()
        interfaces = []
        for nic in sorted(counters):
            c = counters[nic]
            st = stats.get(nic)
            interfaces.append({
                "name": nic,
                "up": bool(st and st.isup),
                "speed": st.speed if st else None,
                "mtu": st.mtu if st else None,
                "addresses": [a.address for a in addresses.get(nic, ())
                              if a.family.name in ("AF_INET", "AF_INET6")],
                "bytes_sent": c.bytes_sent, "bytes_recv": c.bytes_recv,
                "packets_sent": c.packets_sent, "packets_recv": c.packets_recv,
                "errors_in": c.errin, "errors_out": c.errout,
                "drops_in": c.dropin, "drops_out": c.dropout,
            })
        drbd_path = self.ctx.input_path("proc_drbd", "/proc/drbd")
        try:
            drbd = drbd_version(drbd_path.read_text())
        except OSError:
            drbd = None
        return {
            "cpu_number": psutil.cpu_count() or os.cpu_count() or 0,
            "cpus": self._cpu_loads(),
            "load_average": list(os.getloadavg()),
            "memory": {
                "unit": "KiB",
                "total": mem.total // KIB, "available": mem.available // KIB,
                "free": mem.free // KIB, "used": mem.used // KIB,
                "cached": getattr(mem, "cached", 0) // KIB,
                "buffers": getattr(mem, "buffers", 0) // KIB,
                "swap_total": swap.total // KIB, "swap_free": swap.free // KIB,
                "swap_used": swap.used // KIB,
            },
            "filesystems": filesystems,
            "network_interfaces": interfaces,
            "versions": {
                "linux": platform.release(),
                "libvirt": libvirt_version(),
                "drbd": drbd,
                "qemu": qemu_version(),
                "herder": __version__,
                "python": platform.python_version(),
            },
        }


COLLECTORS = [NodeOsCollector]
