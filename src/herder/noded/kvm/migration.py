"""True live migration of a running domain between two nodes' libvirtds, with libvirt's own
migration: peer-to-peer and tunnelled over `qemu+tls://` (see `herder.core.libvirtd_conf`).

The source libvirtd connects to the target's TLS port with its node certificate, QEMU's
migration stream travels inside that connection, the guest's memory moves while it runs (or
paused, non-live), the target resumes it and the source's QEMU ends. No QEMU port is opened.

Ganeti's RPC order maps onto this as follows (noded's handlers, wired in by the lead):
`instance_migratable` -> `check_migratable`; `migration_info` -> the domain XML;
`accept_instance` -> nothing to start (libvirt starts the incoming QEMU itself), the target
only checks its bridges and disk paths; `migrate_instance` -> `LiveMigration.start`;
`instance_get_migration_status` -> `LiveMigration.status`; `finalize_migration_dst` /
`finalize_migration_src` -> `cleanup` (on failure) or nothing (on success).

Disks: herder assembles them on both nodes first (DRBD dual-primary, shared file, rbd), which
libvirt cannot see; so migrations carry VIR_MIGRATE_UNSAFE (libvirt would refuse a local
block device or a file outside a network filesystem). This is what Ganeti does with QEMU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import libvirt

from herder.core import libvirt_host
from herder.core.errors import HerderError

# Ganeti's HV_MIGRATION_* statuses (constants.HV_MIGRATION_VALID_STATUSES)
STATUS_ACTIVE = "active"
STATUS_COMPLETED = "completed"
STATUS_FAILED = "failed"
STATUS_CANCELLED = "cancelled"


# Every wait of a migration is bounded (see LiveMigration):
STATUS_CALL_TIMEOUT = 15.0  # one job-status query of libvirt
ABORT_CALL_TIMEOUT = 20.0  # libvirt's abortJob
STALL_TIMEOUT = 60.0  # no progress of the transfer for this long: the migration is aborted


class MigrationError(HerderError):
    """A migration failed or cannot start; the message says why, in one line."""


@dataclass(frozen=True)
class MigrationSettings:
    """What a migration honours, from the instance's hvparams (Ganeti's names)."""

    live: bool = True
    bandwidth_mib_s: int = 32  # migration_bandwidth, MiB/s; 0 = libvirt's unlimited
    downtime_ms: int = 30  # migration_downtime, ms
    caps: frozenset[str] = frozenset()  # migration_caps: QEMU's capability names

    @classmethod
    def from_hvparams(cls, hvparams: Mapping[str, Any], live: bool | None = None
                      ) -> MigrationSettings:
        """`live` None: the hvparam `migration_mode` decides (Ganeti's default)."""
        if live is None:
            live = hvparams.get("migration_mode", "live") == "live"
        return cls(live=live, bandwidth_mib_s=int(hvparams.get("migration_bandwidth", 32)),
                   downtime_ms=int(hvparams.get("migration_downtime", 30)),
                   caps=parse_caps(str(hvparams.get("migration_caps") or "")))


# Ganeti's migration_caps (QEMU capabilities, ':'-separated) -> libvirt's migration flags
CAPABILITY_FLAGS = {"xbzrle": "VIR_MIGRATE_COMPRESSED",
                    "auto-converge": "VIR_MIGRATE_AUTO_CONVERGE"}
POSTCOPY_CAPS = frozenset({"postcopy-ram", "x-postcopy-ram"})


def parse_caps(value: str) -> frozenset[str]:
    """migration_caps as Ganeti writes it ("xbzrle:auto-converge"); MigrationError for one
    libvirt cannot honour here (post-copy: not with a tunnelled migration)."""
    caps = frozenset(cap for cap in value.split(":") if cap)
    postcopy = caps & POSTCOPY_CAPS
    if postcopy:
        raise MigrationError(f"migration_caps {':'.join(sorted(postcopy))}: libvirt cannot "
                             "post-copy a tunnelled migration (herder's migrations travel "
                             "inside libvirtd's TLS connection)")
    unknown = caps - set(CAPABILITY_FLAGS)
    if unknown:
        raise MigrationError(f"migration_caps {':'.join(sorted(unknown))}: unknown (known: "
                             f"{', '.join(sorted(CAPABILITY_FLAGS))})")
    return caps


@dataclass(frozen=True)
class MigrationResult:
    """libvirt's statistics of a completed migration (its job stats), in ms and bytes."""

    total_ms: int  # time_elapsed
    downtime_ms: int | None  # downtime: how long the guest did not run
    setup_ms: int | None
    data_total: int | None
    data_processed: int | None
    memory_iterations: int | None
    live: bool
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_stats(cls, stats: Mapping[str, float], live: bool) -> MigrationResult:
        def number(key: str) -> int | None:
            value = stats.get(key)
            return int(value) if value is not None else None

        return cls(total_ms=int(stats.get("time_elapsed", 0)),
                   downtime_ms=number("downtime"), setup_ms=number("setup_time"),
                   data_total=number("data_total"), data_processed=number("data_processed"),
                   memory_iterations=number("memory_iteration"), live=live, raw=dict(stats))


@dataclass(frozen=True)
class MigrationStatus:
    """Ganeti's objects.MigrationStatus: status and RAM progress."""

    status: str
    transferred_ram: int = 0
    total_ram: int = 0
    error: str = ""


def _message(err: libvirt.libvirtError) -> str:
    return (err.get_error_message() or str(err)).strip().splitlines()[0]


# QEMU before 9.0 loses guest writes during a live migration under TCG: its fast path that
# syncs the dirty bitmap (cpu_physical_memory_sync_dirty_bitmap) clears the migration's dirty
# bits without resetting the TCG TLB's write entries, so a page the guest keeps writing
# through an entry made before is not marked dirty again and the target resumes with its
# stale copy (seen here on Debian 12's QEMU 7.2: the guest's kernel oopses in its per-CPU
# data within seconds). Fixed upstream by 03bfc2188f ("physmem: Fix migration dirty bitmap
# coherency with TCG memory access", QEMU 9.0). KVM tracks dirty pages itself: not affected.
TCG_LIVE_MIGRATION_FIXED = (9, 0, 0)


def tcg_live_migration_hazard(domain_type: str, qemu_version: int) -> str | None:
    """Why a live migration of this domain would lose guest writes (None: it would not).
    `domain_type` is the domain's <domain type> (qemu = TCG, kvm); `qemu_version` libvirt's
    hypervisor version (major * 1,000,000 + minor * 1,000 + micro; 0 when unknown)."""
    if domain_type != "qemu" or qemu_version <= 0:
        return None
    version = (qemu_version // 1_000_000, qemu_version // 1_000 % 1_000, qemu_version % 1_000)
    if version >= TCG_LIVE_MIGRATION_FIXED:
        return None
    shown = ".".join(str(part) for part in version)
    return (f"QEMU {shown} loses guest writes when it live-migrates a TCG (non-KVM) guest "
            "(fixed in QEMU 9.0): migrated paused instead")


def _domain_type(domain: libvirt.virDomain) -> str:
    try:
        return ET.fromstring(domain.XMLDesc(0)).get("type", "")
    except (libvirt.libvirtError, ET.ParseError):
        return ""


def migration_flags(settings: MigrationSettings, persist: bool) -> int:
    flags = (libvirt.VIR_MIGRATE_PEER2PEER | libvirt.VIR_MIGRATE_TUNNELLED
             | libvirt.VIR_MIGRATE_UNSAFE | libvirt.VIR_MIGRATE_ABORT_ON_ERROR)
    if settings.live:
        flags |= libvirt.VIR_MIGRATE_LIVE
    if persist:
        flags |= libvirt.VIR_MIGRATE_PERSIST_DEST | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
    for cap in sorted(settings.caps):
        flags |= int(getattr(libvirt, CAPABILITY_FLAGS[cap]))
    return flags


def check_migratable(domain: libvirt.virDomain) -> None:
    """Ganeti's instance_migratable: the domain must be running here."""
    try:
        active = domain.isActive()
    except libvirt.libvirtError as err:
        raise MigrationError(f"cannot check {domain.name()}: {_message(err)}") from None
    if not active:
        raise MigrationError(f"instance {domain.name()} is not running, cannot migrate")


ValueT = TypeVar("ValueT")


class BoundedCalls:
    """libvirt calls that may block for minutes (a libvirtd whose migration peer vanished keeps
    the domain's job, and a query waits for it) run in a thread of their own and are waited for
    at most a deadline. One call at a time: while an earlier one still hangs, the next is not
    even made (no pile of stuck threads); a late answer is dropped."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._hanging: threading.Thread | None = None

    def run(self, call: Callable[[], ValueT], timeout: float) -> tuple[bool, ValueT | None]:
        """(answered, value); libvirt's error is raised; (False, None) past the deadline."""
        if self._hanging is not None and self._hanging.is_alive():
            return False, None
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["value"] = call()
            except libvirt.libvirtError as err:
                outcome["error"] = err

        worker = threading.Thread(target=work, name=self.what, daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            self._hanging = worker
            return False, None
        self._hanging = None
        if "error" in outcome:
            raise outcome["error"]
        return True, outcome.get("value")


def _progress(stats: Mapping[str, float]) -> tuple[int, ...]:
    """What grows while a migration moves: memory, disks, everything."""
    return tuple(int(stats.get(key, 0) or 0) for key in
                 ("memory_processed", "disk_processed", "data_processed", "memory_iteration"))


class LiveMigration:
    """One outgoing migration, run by libvirt in a thread of this process.

    `start()` returns at once; `status()` answers Ganeti's instance_get_migration_status;
    `wait()` returns libvirt's statistics or raises MigrationError; `abort()` cancels it.

    Every wait is bounded: libvirt's migrate call runs on its own connection (it blocks for the
    whole migration); the job-status queries and `abortJob` go through `monitor` (a second
    connection), each waited for at most STATUS_CALL_TIMEOUT / ABORT_CALL_TIMEOUT. When the
    transfer makes no progress for `stall_timeout` (libvirt's statistics unchanged, or no
    answer at all: the target's libvirtd died, the network between them broke), the job is
    aborted and the status says failed with the reason, whether or not libvirt's migrate call
    has returned yet (a late success still wins: `status()` answers completed, and the
    master's hand-over logic follows the guest)."""

    def __init__(self, source: libvirt.virConnect, name: str, target_uri: str,
                 settings: MigrationSettings, *, dest_xml: str | None = None,
                 persist: bool = False, monitor: libvirt.virConnect | None = None,
                 stall_timeout: float = STALL_TIMEOUT, target_stats: bool = True,
                 hypervisor_version: Callable[[], int] | None = None) -> None:
        self.source = source
        self.monitor = monitor if monitor is not None else source
        self.name = name
        self.target_uri = target_uri
        self.settings = settings
        self.dest_xml = dest_xml
        self.persist = persist
        self.stall_timeout = stall_timeout
        # whether a completed migration's statistics missing here are read from the target
        # (a connection to its libvirtd before the end is told); noded's migrations have the
        # target read its own (finalize_migration_dst)
        self.target_stats = target_stats
        # the QEMU version for the TCG hazard check; None: libvirt's getVersion (which probes
        # its default emulator the first time: noded keeps the answer, Hypervisor)
        self.hypervisor_version = hypervisor_version
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self._given_up: str | None = None
        self._result: MigrationResult | None = None
        self._done = threading.Event()
        self._domain: libvirt.virDomain | None = None
        self._watched: libvirt.virDomain | None = None
        self._queries = BoundedCalls(f"migration-status-{name}")
        self._aborts = BoundedCalls(f"migration-abort-{name}")
        self._last_progress: tuple[int, ...] = ()
        self._progress_at = 0.0
        self._last_status = MigrationStatus(STATUS_ACTIVE)
        self.note: str | None = None  # why the migration is not what was asked (said in the job)
        self.timings: dict[str, float] = {}  # s spent in start()'s steps (noded's log)

    def _lookup(self, conn: libvirt.virConnect) -> libvirt.virDomain:
        try:
            return conn.lookupByName(self.name)
        except libvirt.libvirtError as err:
            raise MigrationError(f"instance {self.name}: {_message(err)}") from None

    def start(self) -> None:
        began = time.monotonic()
        domain = self._lookup(self.source)
        check_migratable(domain)
        self._domain = domain
        self._watched = domain if self.monitor is self.source else self._lookup(self.monitor)
        domain_type = _domain_type(domain) if self.settings.live else ""
        if domain_type == "qemu":  # only a TCG guest has the hazard: KVM's ask no version
            try:
                qemu_version = (self.hypervisor_version() if self.hypervisor_version is not None
                                else int(self.source.getVersion()))
            except libvirt.libvirtError:
                qemu_version = 0
            hazard = tcg_live_migration_hazard(domain_type, qemu_version)
            if hazard is not None:
                # the guest's memory intact over a short pause rather than a live move that
                # resumes it on stale pages
                self.settings = dataclasses.replace(self.settings, live=False)
                self.note = hazard
        checked = time.monotonic()
        try:
            # Before the job starts: QEMU's downtime limit ("downtime-limit") for this domain.
            domain.migrateSetMaxDowntime(self.settings.downtime_ms, 0)
        except libvirt.libvirtError as err:
            raise MigrationError(f"cannot set the migration downtime of {self.name}: "
                                 f"{_message(err)}") from None
        self.timings = {"checks": checked - began, "downtime": time.monotonic() - checked}
        params: dict[str, str | int] = {}
        if self.settings.bandwidth_mib_s > 0:
            params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] = self.settings.bandwidth_mib_s
        if self.dest_xml is not None:
            params[libvirt.VIR_MIGRATE_PARAM_DEST_XML] = self.dest_xml
        flags = migration_flags(self.settings, self.persist)
        self._started = self._progress_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, args=(domain, params, flags),
                                        name=f"migrate-{self.name}", daemon=True)
        self._thread.start()

    def _run(self, domain: libvirt.virDomain, params: dict[str, str | int], flags: int) -> None:
        try:
            domain.migrateToURI3(self.target_uri, params, flags)
        except libvirt.libvirtError as err:
            self._error = _message(err)
        else:
            self._result = self._completed_stats(domain)
        finally:
            self._done.set()

    def _completed_stats(self, domain: libvirt.virDomain) -> MigrationResult:
        stats: dict[str, Any] = {}
        with contextlib.suppress(libvirt.libvirtError):
            # The source keeps the completed job's statistics while its domain object lives
            # (a persistent source without UNDEFINE_SOURCE); otherwise the target has them.
            stats = domain.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
        if not stats.get("time_elapsed") and self.target_stats:
            with contextlib.suppress(libvirt.libvirtError, libvirt_host.Unreachable):
                target = libvirt_host.open_connection(self.target_uri)
                try:
                    stats = target.lookupByName(self.name).jobStats(
                        libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
                finally:
                    target.close()
        if not stats.get("time_elapsed"):
            stats = {"time_elapsed": int((time.monotonic() - self._started) * 1000)}
        return MigrationResult.from_stats(stats, self.settings.live)

    def status(self) -> MigrationStatus:
        if self._done.is_set():
            if self._error is not None:
                return MigrationStatus(STATUS_FAILED, error=self._given_up or self._error)
            return MigrationStatus(STATUS_COMPLETED)
        if self._watched is None:
            return MigrationStatus(STATUS_FAILED, error="not started")
        if self._given_up is not None:
            return MigrationStatus(STATUS_FAILED, error=self._given_up)
        watched = self._watched
        try:
            answered, stats = self._queries.run(lambda: watched.jobStats(0),
                                                STATUS_CALL_TIMEOUT)
        except libvirt.libvirtError:
            answered, stats = False, None
        now = time.monotonic()
        if answered and stats:
            progress = _progress(stats)
            if progress != self._last_progress:
                self._last_progress, self._progress_at = progress, now
            self._last_status = MigrationStatus(STATUS_ACTIVE,
                                                int(stats.get("memory_processed", 0)),
                                                int(stats.get("memory_total", 0)))
        if self._done.is_set():  # it ended while we asked
            return self.status()
        stalled = now - self._progress_at
        if stalled > self.stall_timeout:
            self._give_up(f"no progress of the migration for {stalled:.0f}s"
                          + ("" if answered else " (libvirt's job status does not answer)"))
            return self.status()
        return self._last_status

    def settle(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for libvirt's migrate call to return; whether it
        has (the status then says how it ended)."""
        return self._done.wait(timeout)

    def _give_up(self, why: str) -> None:
        """A stalled migration is aborted (libvirt's abortJob); it has failed from now on
        unless libvirt completed it meanwhile."""
        self._given_up = f"{why}; aborted"
        self.abort()

    def wait(self, timeout: float | None = None) -> MigrationResult:
        if self._thread is None:
            raise MigrationError("migration not started")
        if not self._done.wait(timeout):
            if self._given_up is not None:
                raise MigrationError(f"migration of {self.name} failed: {self._given_up}")
            raise MigrationError(f"migration of {self.name} still running after {timeout:g}s")
        if self._error is not None:
            raise MigrationError(f"migration of {self.name} to {self.target_uri.split('?')[0]} "
                                 f"failed: {self._given_up or self._error}")
        assert self._result is not None
        return self._result

    def abort(self) -> bool:
        """Cancel a running migration (the source keeps running the guest); whether libvirt
        took the abort within ABORT_CALL_TIMEOUT."""
        if self._watched is None or self._done.is_set():
            return True
        watched = self._watched
        try:
            answered, _ = self._aborts.run(watched.abortJob, ABORT_CALL_TIMEOUT)
        except libvirt.libvirtError:
            return False  # no job left to abort, or libvirt refused: the status tells
        return answered


def migrate(source: libvirt.virConnect, name: str, target_uri: str,
            settings: MigrationSettings, *, dest_xml: str | None = None,
            persist: bool = False, timeout: float | None = None) -> MigrationResult:
    """Migrate and wait; on failure the guest is still where it was (see `cleanup`)."""
    migration = LiveMigration(source, name, target_uri, settings, dest_xml=dest_xml,
                              persist=persist)
    migration.start()
    try:
        return migration.wait(timeout)
    except MigrationError:
        migration.abort()
        raise


# --- cleanup of a failed or aborted migration ---------------------------------------------------

@dataclass(frozen=True)
class DomainPlace:
    """Where a domain is on one node: absent, or active and running/paused (and why)."""

    exists: bool
    active: bool = False
    running: bool = False
    paused_by_migration: bool = False


def _place(conn: libvirt.virConnect | None, name: str) -> DomainPlace | None:
    if conn is None:
        return None
    try:
        domain = conn.lookupByName(name)
        # a libvirtd that just restarted may still drop the domain between these calls (an
        # incoming copy whose migration never finished): then it is gone, as if not found
        state, reason = domain.state()
        active = bool(domain.isActive())
    except libvirt.libvirtError as err:
        if libvirt_host.is_no_domain(err):
            return DomainPlace(exists=False)
        raise MigrationError(f"cannot look up {name}: {_message(err)}") from None
    paused = state == libvirt.VIR_DOMAIN_PAUSED
    by_migration = paused and reason in (libvirt.VIR_DOMAIN_PAUSED_MIGRATION,
                                         libvirt.VIR_DOMAIN_PAUSED_POSTCOPY_FAILED)
    return DomainPlace(True, active, active and state == libvirt.VIR_DOMAIN_RUNNING,
                       by_migration)


def cleanup(source: libvirt.virConnect, target: libvirt.virConnect | None, name: str) -> str:
    """After a failed or aborted migration, leave exactly one running domain; answer where it
    runs ("source" or "target").

    - running on the source: any copy on the target (an incoming QEMU that never got the
      guest) is destroyed;
    - paused on the source by the migration (non-live) and not running on the target: resumed;
    - gone from the source, running on the target: the migration completed, nothing to do;
    - running on both, or on neither: refused, the operator decides (Ganeti's cleanup too).
    `target` None: its libvirtd is unreachable; a libvirtd that restarts kills an unfinished
    incoming domain itself, so only the source is handled.
    """
    src = _place(source, name)
    assert src is not None
    dst = _place(target, name)
    target_running = dst is not None and dst.running
    if src.active and (src.running or src.paused_by_migration) and target_running:
        raise MigrationError(f"instance {name} runs on both nodes; not touching either")
    if src.active:
        if target is not None and dst is not None and dst.active:
            try:
                target.lookupByName(name).destroy()
            except libvirt.libvirtError as err:
                raise MigrationError(f"cannot remove the incoming copy of {name} on the "
                                     f"target: {_message(err)}") from None
        if src.paused_by_migration:
            try:
                source.lookupByName(name).resume()
            except libvirt.libvirtError as err:
                raise MigrationError(f"cannot resume {name} on the source: "
                                     f"{_message(err)}") from None
        return "source"
    if target is not None and dst is not None and dst.active:  # (dst is None without target)
        if dst.paused_by_migration:
            try:
                target.lookupByName(name).resume()
            except libvirt.libvirtError as err:
                raise MigrationError(f"cannot resume {name} on the target: "
                                     f"{_message(err)}") from None
        return "target"
    if dst is None:
        raise MigrationError(f"instance {name} is not running on the source and the target's "
                             "libvirtd is unreachable")
    raise MigrationError(f"instance {name} runs on neither node")
