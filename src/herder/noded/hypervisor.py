"""The node's hypervisor, through libvirt: define, start, shut down, reboot, destroy, migrate,
list and query domains.

noded holds one connection for its whole life (libvirt's test driver keeps domains only while a
client is connected) and re-opens it when libvirtd restarts. Every domain it defines is also
recorded in its state directory, so after a libvirtd restart (which resets the test driver) the
node's domains are defined again.

Every definition is the instance's domain from its config (`herder.noded.kvm.domain`), made
anew at each start; on libvirt's test driver the same XML is defined with `type='test'`, which
runs nothing. A domain with the instance's UUID under another name (the instance was renamed) is
replaced. Whether hardware KVM works is probed once (`herder.noded.kvm.kvmprobe`).

Live migration is libvirt's own (`herder.noded.kvm.migration`); the test driver cannot migrate,
so for it the master's stand-in hand-over (define and start on the target, then undefine here)
remains, which only the test driver's nodes accept.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import libvirt

from herder.core import libvirt_host, paths
from herder.core.errors import HerderError
from herder.core.store import atomic_write
from herder.noded.kvm import kvmprobe
from herder.noded.kvm.domain import InstanceSpec, domain_xml

log = logging.getLogger("herder.noded")
T = TypeVar("T")

STATES = libvirt_host.DOMAIN_STATES
RUNNING = {1, 2, 3}
DETACH_TIMEOUT = 30.0  # seconds a guest has to release an unplugged device
VERSION_KEEP = 600.0  # s a hypervisor version answered by libvirt is used before asking again


class HypervisorError(HerderError):
    """A hypervisor operation failed (the message says which and why)."""


@dataclass(frozen=True)
class HostInfo:
    memory_total: int  # MiB
    cpu_total: int
    cpu_nodes: int  # NUMA domains
    cpu_sockets: int
    domains_memory: int  # MiB that running domains have


@dataclass(frozen=True)
class DomainInfo:
    state: str  # libvirt's word (STATES)
    memory: int  # MiB the domain has now
    vcpus: int


def domain_type_for(uri: str) -> str:
    scheme = uri.split(":", 1)[0].split("+", 1)[0]
    return {"test": "test", "qemu": "kvm", "xen": "xen", "lxc": "lxc"}.get(scheme, "kvm")


class Hypervisor:
    def __init__(self, uri: str, state_dir: Path) -> None:
        self.uri = uri
        self.domain_type = domain_type_for(uri)
        self.defs_dir = state_dir / "domains"
        self.defs_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        # one connection for noded's life: the test driver keeps domains only while a client
        # is connected; a fresh one (libvirtd restarted) gets the recorded domains again
        self._connection = libvirt_host.Connection(uri, on_open=self._restore_definitions)
        self._probe: kvmprobe.KvmProbe | None = None
        self._probed_at = 0.0  # time.monotonic() of the last probe
        # one probe at a time: the node's figures, a start and cluster verify may ask at once
        self._probe_lock = threading.Lock()
        self.probe_cache = kvmprobe.CACHE_FILE
        self._version: tuple[str, int, float] | None = None  # (uri, version, monotonic time)
        self._version_lock = threading.Lock()
        # Why a recorded domain must not be defined again after a libvirtd restart (None: it
        # may); noded's guard says so for the domains this node is not the primary of.
        self.may_restore: Callable[[str], str | None] = lambda name: None

    # --- the connection -------------------------------------------------------------------------

    def call(self, fn: Callable[[libvirt.virConnect], T]) -> T:
        """Run `fn` on a live connection; retried once on a fresh one if libvirtd restarted."""
        with self._lock:
            try:
                return self._connection.call(fn)
            except libvirt.libvirtError as err:
                raise HypervisorError(libvirt_host.message(err)) from None
            except (libvirt_host.Unreachable, libvirt_host.ConnectionLost) as err:
                raise HypervisorError(str(err)) from None

    def set_uri(self, uri: str) -> None:
        """Talk to another hypervisor from now on (the node's parameters changed); the next
        call connects there and defines the recorded domains it does not know."""
        with self._lock:
            self._connection.set_uri(uri)
            self.uri = uri
            self.domain_type = domain_type_for(uri)

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def check(self) -> bool:
        """Keep the connection alive; re-define domains after a libvirtd restart."""
        try:
            self.call(lambda conn: conn.getLibVersion())
            return True
        except HypervisorError:
            return False

    # --- the record of defined domains ---------------------------------------------------------

    def _definition(self, name: str) -> Path:
        return paths.child(self.defs_dir, name, suffix=".xml", what="domain name")

    def _record(self, name: str, xml: str) -> None:
        atomic_write(self._definition(name), xml.encode(), 0o600)

    def _forget(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._definition(name).unlink()

    def recorded(self) -> list[str]:
        return sorted(p.stem for p in self.defs_dir.glob("*.xml"))

    def _restore_definitions(self, conn: libvirt.virConnect) -> None:
        """Define every recorded domain libvirt does not know (e.g. after a libvirtd restart)."""
        known = {d.name() for d in conn.listAllDomains()}
        for path in sorted(self.defs_dir.glob("*.xml")):
            if path.stem in known:
                continue
            why = self.may_restore(path.stem)
            if why is not None:
                log.warning("not re-defining domain %s after a libvirt restart: %s", path.stem,
                            why)
                continue
            try:
                conn.defineXML(path.read_text())
                log.info("re-defined domain %s after a libvirt restart", path.stem)
            except (libvirt.libvirtError, OSError) as err:
                log.error("cannot re-define domain %s: %s", path.stem, err)

    # --- operations -----------------------------------------------------------------------------

    def _lookup(self, conn: libvirt.virConnect, name: str) -> libvirt.virDomain | None:
        try:
            return conn.lookupByName(name)
        except libvirt.libvirtError as err:
            if libvirt_host.is_no_domain(err):
                return None
            raise

    @property
    def runs_guests(self) -> bool:
        """False on libvirt's test driver, which runs no processes (no bridges, kernels or
        ports to check, no KVM to probe, nothing to migrate)."""
        return self.domain_type != "test"

    def kvm_probe(self) -> kvmprobe.KvmProbe:
        """Whether hardware KVM works here: a positive answer is kept (on disk, by its inputs),
        a negative one for `kvmprobe.REPROBE_AFTER` seconds, then the node probes again."""
        if not self.runs_guests:
            return kvmprobe.KvmProbe(True, "libvirt's test driver runs no guests", 0.0)
        with self._probe_lock:
            probe = self._probe
            if probe is None or self._needs_probe():
                probe = self._probe = kvmprobe.kvm_probe(self.probe_cache)
                self._probed_at = time.monotonic()
                log.info("KVM probe: %s", probe.reason)
            return probe

    def _needs_probe(self) -> bool:
        """No verdict yet, or a negative one older than `kvmprobe.REPROBE_AFTER`."""
        return self._probe is None or (not self._probe.usable and time.monotonic()
                                       - self._probed_at > kvmprobe.REPROBE_AFTER)

    def kvm_verdict_nowait(self) -> kvmprobe.KvmProbe | None:
        """The verdict at hand without waiting for a probe (the node's live figures must
        answer within masterd's 3 s): when there is none, or a negative one is due again, a
        probe starts in the background and the last verdict (None: none yet) is answered."""
        if not self.runs_guests:
            return self.kvm_probe()
        if self._needs_probe() and not self._probe_lock.locked():
            threading.Thread(target=self.kvm_probe, name="kvm-probe", daemon=True).start()
        return self._probe

    def hypervisor_version(self, max_age: float = VERSION_KEEP) -> int:
        """libvirt's hypervisor version (QEMU's: major * 1,000,000 + minor * 1,000 + micro; 0
        when libvirt does not say), kept `max_age` seconds. libvirt answers it from the
        capabilities of its default emulator, and the first time it is asked in its life it
        probes that binary (runs it: 1.3-2.4 s measured on a loaded machine; a binary other than
        the guests', qemu-system-i386 here, so their start did not probe it). A migration's
        start needs it (the TCG hazard check), so the node asks in the background with its
        first figures (`hypervisor_version_nowait`) and the migration finds it at hand. Asked
        on a connection of its own: the node's shared one (and its lock) stays free for the
        calls of the node's figures meanwhile."""
        with self._version_lock:
            now = time.monotonic()
            kept = self._version
            if kept is not None and kept[0] == self.uri and now - kept[2] < max_age:
                return kept[1]
            uri = self.uri
            try:
                conn = libvirt_host.open_connection(uri)
                try:
                    version = int(conn.getVersion())
                finally:
                    with contextlib.suppress(libvirt.libvirtError):
                        conn.close()
            except (libvirt.libvirtError, libvirt_host.Unreachable):
                return 0  # not kept: asked again next time
            self._version = (uri, version, time.monotonic())
            return version

    def hypervisor_version_nowait(self) -> None:
        """Ask libvirt's hypervisor version in the background when none is kept or it is due
        again (see `hypervisor_version`)."""
        early = VERSION_KEEP * 0.9  # asked again before a migration would ask itself
        kept = self._version
        due = kept is None or kept[0] != self.uri or time.monotonic() - kept[2] >= early
        if due and self.runs_guests and not self._version_lock.locked():
            threading.Thread(target=self.hypervisor_version, args=(early,),
                             name="hypervisor-version", daemon=True).start()

    def probed(self) -> kvmprobe.KvmProbe | None:
        """The KVM probe's last verdict, without probing (None: not probed yet; libvirt's test
        driver has its verdict at once)."""
        return self._probe if self.runs_guests else self.kvm_probe()

    def render(self, spec: InstanceSpec) -> str:
        """The domain XML of an instance for this hypervisor."""
        xml = domain_xml(spec)
        if not self.runs_guests:
            root = ET.fromstring(xml)
            root.set("type", "test")
            xml = ET.tostring(root, encoding="unicode")
        return xml

    def define(self, spec: InstanceSpec) -> str | None:
        """Define the instance's domain from its spec (replacing any older definition, also
        one under a former name of the instance); returns that former name, if any."""
        xml = self.render(spec)

        def replace_renamed(conn: libvirt.virConnect) -> str | None:
            try:
                old = conn.lookupByUUIDString(spec.uuid)
            except libvirt.libvirtError as err:
                if libvirt_host.is_no_domain(err):
                    return None
                raise
            old_name = str(old.name())
            if old_name == spec.name:
                return None
            if old.isActive():
                raise HypervisorError(f"instance {spec.name} still runs here under its old "
                                      f"name {old_name}; shut it down first")
            old.undefine()
            return old_name

        renamed = self.call(replace_renamed)
        if renamed is not None:
            self._forget(renamed)
            log.info("domain %s is now %s (renamed)", renamed, spec.name)
        self.define_xml(spec.name, xml)
        return renamed

    def define_xml(self, name: str, xml: str) -> None:
        def run(conn: libvirt.virConnect) -> None:
            conn.defineXML(xml)

        self.call(run)
        self._record(name, xml)

    def record_current(self, name: str) -> None:
        """Record the definition libvirt holds now (a domain that arrived by migration)."""
        self._record(name, self.call(lambda conn: conn.lookupByName(name).XMLDesc(
            libvirt.VIR_DOMAIN_XML_INACTIVE)))

    def completed_job_stats(self, name: str) -> dict[str, int]:
        """libvirt's statistics of the domain's last completed job (an incoming migration:
        its time and downtime), read once (libvirt clears them); {} when there are none."""
        def read(conn: libvirt.virConnect) -> dict[str, int]:
            stats = conn.lookupByName(name).jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
            return dict(stats or {})

        try:
            return self.call(read)
        except (libvirt.libvirtError, HerderError):
            return {}

    def forget_definition(self, name: str) -> None:
        """Drop the record of a domain that left this node (migrated away)."""
        self._forget(name)

    def start(self, name: str) -> None:
        def run(conn: libvirt.virConnect) -> None:
            dom = self._lookup(conn, name)
            if dom is None:
                raise HypervisorError(f"no domain {name} is defined on this node")
            if dom.state()[0] not in RUNNING:
                dom.create()

        self.call(run)

    def shutdown(self, name: str, timeout: float) -> None:
        """Ask the guest to shut down; destroy it when it has not stopped after `timeout`."""
        def ask(conn: libvirt.virConnect) -> bool:
            dom = self._lookup(conn, name)
            if dom is None or dom.state()[0] not in RUNNING:
                return False
            try:
                dom.shutdown()
            except libvirt.libvirtError:
                dom.destroy()
            return True

        if not self.call(ask):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.state(name) not in ("running", "blocked", "paused"):
                return
            time.sleep(0.1)
        self.destroy(name)

    def destroy(self, name: str) -> None:
        def run(conn: libvirt.virConnect) -> None:
            dom = self._lookup(conn, name)
            if dom is not None and dom.state()[0] in RUNNING:
                dom.destroy()

        self.call(run)

    def reboot(self, name: str, hard: bool) -> None:
        def run(conn: libvirt.virConnect) -> None:
            dom = self._lookup(conn, name)
            if dom is None:
                raise HypervisorError(f"no domain {name} on this node")
            if hard or dom.state()[0] not in RUNNING:
                if dom.state()[0] in RUNNING:
                    dom.destroy()
                dom.create()
            else:
                dom.reboot()

        self.call(run)

    def balloon(self, name: str, memory_mib: int) -> None:
        """The running guest's memory (its balloon) to `memory_mib`, not its maximum."""
        def run(conn: libvirt.virConnect) -> None:
            dom = self._lookup(conn, name)
            if dom is None or dom.state()[0] not in RUNNING:
                raise HypervisorError(f"instance {name} is not running on this node")
            dom.setMemoryFlags(memory_mib * 1024, libvirt.VIR_DOMAIN_AFFECT_LIVE)

        self.call(run)

    def _running(self, conn: libvirt.virConnect, name: str) -> libvirt.virDomain:
        dom = self._lookup(conn, name)
        if dom is None or dom.state()[0] not in RUNNING:
            raise HypervisorError(f"instance {name} is not running on this node")
        return dom

    def attach_device(self, name: str, xml: str) -> None:
        """Hotplug a device into the running domain (its definition is made anew from the
        config at the next start)."""
        self.call(lambda conn: self._running(conn, name).attachDeviceFlags(
            xml, libvirt.VIR_DOMAIN_AFFECT_LIVE))

    def has_device(self, name: str, alias: str) -> bool:
        """Whether the running domain has a device with this alias."""
        root = ET.fromstring(self.xml_of(name))
        return any(el.get("name") == alias for el in root.iter("alias"))

    def detach_device(self, name: str, alias: str, timeout: float = DETACH_TIMEOUT) -> None:
        """Unplug the device with this alias from the running domain and wait until the guest
        let it go (PCI unplug needs the guest's consent)."""
        if not self.has_device(name, alias):
            raise HypervisorError(f"instance {name} has no device {alias}")
        self.call(lambda conn: self._running(conn, name).detachDeviceAlias(
            alias, libvirt.VIR_DOMAIN_AFFECT_LIVE))
        deadline = time.monotonic() + timeout
        while self.has_device(name, alias):
            if time.monotonic() > deadline:
                raise HypervisorError(f"instance {name} did not release device {alias} within "
                                      f"{timeout:g}s")
            time.sleep(0.2)

    def block_resize(self, name: str, alias: str, size_bytes: int) -> None:
        """Tell the running domain's QEMU that the disk with this alias has `size_bytes` now
        (QMP block_resize through libvirt), so the guest sees the new size."""
        def run(conn: libvirt.virConnect) -> None:
            dom = self._running(conn, name)
            root = ET.fromstring(dom.XMLDesc())
            for disk in root.iter("disk"):
                found = disk.find("alias")
                target = disk.find("target")
                if found is not None and found.get("name") == alias and target is not None:
                    dom.blockResize(str(target.get("dev")), size_bytes,
                                    libvirt.VIR_DOMAIN_BLOCK_RESIZE_BYTES)
                    return
            raise HypervisorError(f"instance {name} has no disk {alias}")

        self.call(run)

    def undefine(self, name: str) -> None:
        def run(conn: libvirt.virConnect) -> None:
            dom = self._lookup(conn, name)
            if dom is None:
                return
            if dom.state()[0] in RUNNING:
                dom.destroy()
            dom.undefine()

        self.call(run)
        self._forget(name)

    def state(self, name: str) -> str | None:
        def run(conn: libvirt.virConnect) -> str | None:
            dom = self._lookup(conn, name)
            return None if dom is None else STATES.get(dom.state()[0], "nostate")

        return self.call(run)

    def xml_of(self, name: str) -> str:
        def run(conn: libvirt.virConnect) -> str:
            dom = self._lookup(conn, name)
            if dom is None:
                raise HypervisorError(f"no domain {name} on this node")
            return dom.XMLDesc()

        return self.call(run)

    def list_domains(self) -> dict[str, str]:
        """name -> state of every domain libvirt knows on this node."""
        return self.call(lambda conn: {d.name(): STATES.get(d.state()[0], "nostate")
                                       for d in conn.listAllDomains()})

    def host_info(self) -> HostInfo:
        """The host as the hypervisor sees it: memory, CPUs, NUMA domains, sockets, and the
        memory its running domains have now."""
        def run(conn: libvirt.virConnect) -> HostInfo:
            _model, memory_mib, cpus, _mhz, numa, sockets, _cores, _threads = conn.getInfo()
            running = sum(d.info()[2] // 1024 for d in conn.listAllDomains()
                          if d.state()[0] in RUNNING)
            return HostInfo(memory_total=int(memory_mib), cpu_total=int(cpus),
                            cpu_nodes=max(1, int(numa)),
                            cpu_sockets=max(1, int(numa)) * max(1, int(sockets)),
                            domains_memory=running)

        return self.call(run)

    def domains_info(self) -> dict[str, DomainInfo]:
        """name -> state (libvirt's word), memory (MiB) and vCPUs of every domain."""
        def run(conn: libvirt.virConnect) -> dict[str, DomainInfo]:
            found = {}
            for dom in conn.listAllDomains():
                state, _max_kib, memory_kib, vcpus, _cpu_time = dom.info()
                found[dom.name()] = DomainInfo(STATES.get(state, "nostate"),
                                               int(memory_kib) // 1024, int(vcpus))
            return found

        return self.call(run)
