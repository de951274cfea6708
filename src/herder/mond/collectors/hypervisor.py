"""hypervisor: what libvirt reports about this node and its domains (category hypervisor, kind 0).

`data`:

- `uri`, `hypervisor` {type, version}, `libvirt_version` (of the daemon) and
  `libvirt_client_version` (the library mond links);
- `node`: `getInfo()` — model, memory_kib, cpus, mhz, numa_nodes, sockets (per NUMA node),
  cores (per socket), threads (per core) — plus memory_free_kib (`getFreeMemory()`), hostname and
  cpu_stats (ns counters: kernel, user, idle, iowait) where the driver offers them;
- `domains`: per domain, sorted by name — name, uuid, id (-1 when not active), state and
  state_reason (libvirt's words), active, memory_kib, max_memory_kib, vcpus, cpu_time_ns;
  memory_stats (libvirt's balloon counters, sizes in KiB; {} without a balloon) where
  supported; `disks` (target, device, source, and
  `stats` {rd_req, rd_bytes, wr_req, wr_bytes, errs}) and `nics` (target, mac, type, source,
  and `stats` {rx_bytes, rx_packets, rx_errs, rx_drop, tx_bytes, tx_packets, tx_errs,
  tx_drop}) for active domains. Where the driver cannot give a counter the entry has
  `stats: null` and `error` naming why; a domain libvirt fails on gets `error` instead of its
  numbers — one domain never breaks the report.

Counters are libvirt's raw cumulative values; rates are the consumer's business.
"""

from __future__ import annotations

from typing import Any, ClassVar

from herder.core import libvirt_host
from herder.core.libvirt_host import alive as conn_alive
from herder.core.libvirt_host import is_no_domain
from herder.core.libvirt_host import message as error_text
from herder.mond.collector import CollectContext, Collector
from herder.mond.libvirt_conn import (
    LibvirtConnection,
    parse_domain_devices,
    reason_name,
    state_name,
    version_string,
)
from herder.mond.report import Kind

BLOCK_FIELDS = ("rd_req", "rd_bytes", "wr_req", "wr_bytes", "errs")
NIC_FIELDS = ("rx_bytes", "rx_packets", "rx_errs", "rx_drop",
              "tx_bytes", "tx_packets", "tx_errs", "tx_drop")
_INACTIVE = frozenset({0, 5})  # nostate, shutoff


def node_info(info: list[Any], free_bytes: int | None) -> dict[str, Any]:
    """virNodeGetInfo's list (model, memory MiB, cpus, MHz, nodes, sockets, cores, threads)."""
    model, memory_mib, cpus, mhz, nodes, sockets, cores, threads = (list(info) + [None] * 8)[:8]
    return {
        "model": model,
        "memory_kib": int(memory_mib) * 1024 if memory_mib is not None else None,
        "memory_free_kib": int(free_bytes) // 1024 if free_bytes is not None else None,
        "cpus": cpus,
        "mhz": mhz,
        "numa_nodes": nodes,
        "sockets": sockets,
        "cores": cores,
        "threads": threads,
    }


def _stats(fields: tuple[str, ...], values: Any) -> dict[str, int]:
    return {k: int(v) for k, v in zip(fields, values, strict=False)}


def read_domain(dom: Any) -> dict[str, Any]:
    """Everything libvirt says about one domain; device-level failures stay on the device."""
    state, reason = dom.state()
    info = dom.info()  # [state, maxMem KiB, memory KiB, nrVirtCpu, cpuTime ns]
    ident = int(dom.ID())
    active = state not in _INACTIVE and ident >= 0
    result: dict[str, Any] = {
        "name": dom.name(),
        "uuid": dom.UUIDString(),
        "id": ident,
        "state": state_name(state),
        "state_reason": reason_name(state, reason),
        "active": active,
        "memory_kib": int(info[2]),
        "max_memory_kib": int(info[1]),
        "vcpus": int(info[3]),
        "cpu_time_ns": int(info[4]) if active else 0,
        "memory_stats": None,
        "disks": [],
        "nics": [],
    }
    devices = parse_domain_devices(dom.XMLDesc(0))
    for disk in devices["disks"]:
        entry: dict[str, Any] = dict(disk)
        entry["stats"] = None
        if active and disk["target"]:
            try:
                entry["stats"] = _stats(BLOCK_FIELDS, dom.blockStats(disk["target"]))
            except Exception as err:
                if is_no_domain(err):
                    raise
                entry["error"] = error_text(err)
        result["disks"].append(entry)
    for nic in devices["nics"]:
        entry = dict(nic)
        entry["stats"] = None
        if active and nic["target"]:
            try:
                entry["stats"] = _stats(NIC_FIELDS, dom.interfaceStats(nic["target"]))
            except Exception as err:
                if is_no_domain(err):
                    raise
                entry["error"] = error_text(err)
        result["nics"].append(entry)
    if active:
        try:
            result["memory_stats"] = {str(k): int(v) for k, v in dom.memoryStats().items()}
        except Exception as err:
            if is_no_domain(err):
                raise
            result["memory_stats_error"] = error_text(err)
    return result


def read_report(conn: Any) -> dict[str, Any]:
    """The whole report from one connection (I/O; the pieces above are pure or per domain)."""
    hv_type = conn.getType()
    try:
        free: int | None = int(conn.getFreeMemory())
    except Exception:
        free = None
    node = node_info(conn.getInfo(), free)
    try:
        node["cpu_stats"] = {str(k): int(v) for k, v in conn.getCPUStats(-1).items()}
    except Exception:
        node["cpu_stats"] = None
    try:
        node["hostname"] = conn.getHostname()
    except Exception:
        node["hostname"] = None
    domains: list[dict[str, Any]] = []
    for dom in conn.listAllDomains(0):
        try:
            domains.append(read_domain(dom))
        except Exception as err:
            if is_no_domain(err):
                continue  # gone since the listing
            if not conn_alive(conn):
                raise  # the connection died: let the caller reconnect
            try:
                name, uuid = dom.name(), dom.UUIDString()
            except Exception:
                name, uuid = None, None
            domains.append({"name": name, "uuid": uuid, "error": error_text(err)})
    domains.sort(key=lambda d: (d.get("name") or "", d.get("uuid") or ""))
    return {
        "uri": conn.getURI(),
        "hypervisor": {"type": hv_type, "version": version_string(int(conn.getVersion()))},
        "libvirt_version": version_string(int(conn.getLibVersion())),
        "libvirt_client_version": (version_string(version)
                                   if (version := libvirt_host.client_version()) is not None
                                   else None),
        "node": node,
        "domains": domains,
    }


class HypervisorCollector(Collector):
    name: ClassVar[str] = "hypervisor"
    category: ClassVar[str | None] = "hypervisor"
    kind: ClassVar[Kind] = Kind.PERFORMANCE

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx)
        self.libvirt = LibvirtConnection()

    def available(self) -> bool:
        return bool(self.libvirt.available(self.ctx.libvirt_uri()))

    def collect(self) -> dict[str, Any]:
        result: dict[str, Any] = self.libvirt.call(self.ctx.libvirt_uri(), read_report)
        return result


COLLECTORS: list[type[Collector]] = [HypervisorCollector]
