"""noded's `node_info` answer (`herder.core.livefigures.NodeInfo`): the node's memory, CPUs,
boot id and storage units, and with `instances` the run state of every instance whose
hypervisor process exists here (Ganeti's node_info and all_instances_info RPCs in one call, so
the master pays one round trip, and one timeout for a dead node).

Memory follows Ganeti's Linux rule (hypervisor/hv_base `GetLinuxNodeInfo`): total = MemTotal,
free = MemFree + Buffers + Cached, node = Active, from /proc/meminfo; on libvirt's test driver,
whose "host" is made up, the driver's memory less what its running domains have (Ganeti's fake
hypervisor subtracts its instances the same way) and no node memory. CPUs, NUMA domains and
sockets come from libvirt; the node OS counts as using every CPU (Ganeti's KVM rule for
`cpu_dom0`).

Storage: the pool noded keeps instance disks in (image files in its state directory) is one
`file` unit named after that directory; its size is the filesystem's free space plus what the
disks already take (the node's real disk, no configured figure), and free = size − the disks
(so size − free is what herder's disks use, as hail checks). Volume groups become `lvm-vg`
units once noded's block devices are wired (noded.bdev's `plain.vg_info`).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from herder.core import livefigures
from herder.noded.hypervisor import Hypervisor

MEMINFO = Path("/proc/meminfo")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def parse_meminfo(text: str) -> tuple[int, int, int]:
    """(total, free, node) in MiB from /proc/meminfo, by Ganeti's rule (each term rounded
    down to MiB before adding, as Ganeti does)."""
    total = free = node = 0
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep or not value.split():
            continue
        mib = int(value.split()[0]) // 1024
        key = key.strip()
        if key == "MemTotal":
            total = mib
        elif key in ("MemFree", "Buffers", "Cached"):
            free += mib
        elif key == "Active":
            node = mib
    return total, free, node


def boot_id(path: Path = BOOT_ID) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def disk_pool(disks_dir: Path) -> livefigures.StorageUnit:
    """The `file` unit of noded's instance-disk pool (see the module doc)."""
    usage = shutil.disk_usage(disks_dir)
    used = sum(p.stat().st_size for p in disks_dir.glob("*.img")) // 2**20
    fs_free = usage.free // 2**20
    size = fs_free + used
    return livefigures.StorageUnit(type=livefigures.STORAGE_FILE, name=str(disks_dir),
                                   storage_size=size,
                                   storage_free=max(0, min(size - used, fs_free)))


def instance_runs(hv: Hypervisor, instances_dir: Path,
                  now: float | None = None) -> dict[str, livefigures.InstanceRun]:
    """The live domains (a hypervisor process exists): state, memory, vCPUs and the time since
    noded last started the instance here (its record in `instances_dir`, written at every start
    or incoming migration; None without one)."""
    now = time.time() if now is None else now
    runs = {}
    for name, dom in hv.domains_info().items():
        if dom.state not in livefigures.LIVE_STATES:
            continue
        runs[name] = livefigures.InstanceRun(state=dom.state, memory=dom.memory,
                                             vcpus=dom.vcpus,
                                             uptime=_uptime(instances_dir / f"{name}.json", now))
    return runs


def _uptime(record: Path, now: float) -> float | None:
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("expected_state") != "up":
        return None
    changed = data.get("changed")
    return max(0.0, now - changed) if isinstance(changed, int | float) else None


def node_info(hv: Hypervisor, disks_dir: Path, instances_dir: Path, *,
              with_instances: bool = False, meminfo: Path = MEMINFO) -> livefigures.NodeInfo:
    host = hv.host_info()
    if hv.domain_type == "test":
        total, node = host.memory_total, 0
        free = max(0, total - host.domains_memory)
    else:
        total, free, node = parse_meminfo(meminfo.read_text())
    return livefigures.NodeInfo(
        bootid=boot_id(), memory_total=total, memory_free=free, memory_dom0=node,
        cpu_total=host.cpu_total, cpu_dom0=host.cpu_total, cpu_nodes=host.cpu_nodes,
        cpu_sockets=host.cpu_sockets, storage=(disk_pool(disks_dir),),
        instances=instance_runs(hv, instances_dir) if with_instances else None)
