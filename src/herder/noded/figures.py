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

Storage: the units the master asks for (Ganeti's node_info `storage_units`: the cluster's
volume group for plain/drbd, its file-storage directory for file), each with its real figures:
a volume group's size and free space from `vgs` (`bdev.plain.vg_info`), a directory's from its
filesystem (`bdev.file.space_info`). A unit this node does not have is left out (the allocator
then offers nothing of it here).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from herder import __version__
from herder.core import livefigures
from herder.noded.bdev import file as file_storage
from herder.noded.bdev import plain
from herder.noded.bdev.base import BlockDevError, Host
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


def storage_units(host: Host, wanted: Sequence[tuple[str, str]]) -> tuple[
        livefigures.StorageUnit, ...]:
    """The real figures of the units `wanted` ((type, name): lvm-vg and its VG, file and its
    directory); units this node lacks are left out."""
    units = []
    for kind, name in wanted:
        if kind == livefigures.STORAGE_LVM_VG:
            for free, size, vg_name in plain.vg_info(host, [name]) or []:
                units.append(livefigures.StorageUnit(type=kind, name=vg_name,
                                                     storage_size=int(size),
                                                     storage_free=int(free)))
        elif kind == livefigures.STORAGE_FILE:
            try:
                space = file_storage.space_info(name)
            except BlockDevError:
                continue
            total, available = space["storage_size"], space["storage_free"]
            assert isinstance(total, int) and isinstance(available, int)
            units.append(livefigures.StorageUnit(type=kind, name=name, storage_size=total,
                                                 storage_free=available))
    return tuple(units)


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


def node_info(hv: Hypervisor, instances_dir: Path, *,
              storage: tuple[livefigures.StorageUnit, ...] = (),
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
        cpu_sockets=host.cpu_sockets, storage=storage,
        instances=instance_runs(hv, instances_dir) if with_instances else None,
        kvm=_kvm_verdict(hv), herder_version=__version__)


def _kvm_verdict(hv: Hypervisor) -> livefigures.KvmVerdict | None:
    """The KVM probe's verdict at hand (none on libvirt's test driver, which runs no guests;
    none until the node's first probe ended)."""
    if not hv.runs_guests:
        return None
    hv.hypervisor_version_nowait()  # at hand before the first migration (see there)
    probe = hv.kvm_verdict_nowait()
    return None if probe is None else probe.verdict()
