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
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import libvirt

from herder.core.errors import HerderError

# Ganeti's HV_MIGRATION_* statuses (constants.HV_MIGRATION_VALID_STATUSES)
STATUS_ACTIVE = "active"
STATUS_COMPLETED = "completed"
STATUS_FAILED = "failed"
STATUS_CANCELLED = "cancelled"


class MigrationError(HerderError):
    """A migration failed or cannot start; the message says why, in one line."""


@dataclass(frozen=True)
class MigrationSettings:
    """What a migration honours, from the instance's hvparams (Ganeti's names)."""

    live: bool = True
    bandwidth_mib_s: int = 32  # migration_bandwidth, MiB/s; 0 = libvirt's unlimited
    downtime_ms: int = 30  # migration_downtime, ms

    @classmethod
    def from_hvparams(cls, hvparams: Mapping[str, Any], live: bool | None = None
                      ) -> MigrationSettings:
        """`live` None: the hvparam `migration_mode` decides (Ganeti's default)."""
        if live is None:
            live = hvparams.get("migration_mode", "live") == "live"
        return cls(live=live, bandwidth_mib_s=int(hvparams.get("migration_bandwidth", 32)),
                   downtime_ms=int(hvparams.get("migration_downtime", 30)))


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
    def from_stats(cls, stats: Mapping[str, Any], live: bool) -> MigrationResult:
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


def migration_flags(settings: MigrationSettings, persist: bool) -> int:
    flags = (libvirt.VIR_MIGRATE_PEER2PEER | libvirt.VIR_MIGRATE_TUNNELLED
             | libvirt.VIR_MIGRATE_UNSAFE | libvirt.VIR_MIGRATE_ABORT_ON_ERROR)
    if settings.live:
        flags |= libvirt.VIR_MIGRATE_LIVE
    if persist:
        flags |= libvirt.VIR_MIGRATE_PERSIST_DEST | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
    return flags


def check_migratable(domain: libvirt.virDomain) -> None:
    """Ganeti's instance_migratable: the domain must be running here."""
    try:
        active = domain.isActive()
    except libvirt.libvirtError as err:
        raise MigrationError(f"cannot check {domain.name()}: {_message(err)}") from None
    if not active:
        raise MigrationError(f"instance {domain.name()} is not running, cannot migrate")


class LiveMigration:
    """One outgoing migration, run by libvirt in a thread of this process.

    `start()` returns at once; `status()` answers Ganeti's instance_get_migration_status;
    `wait()` returns libvirt's statistics or raises MigrationError; `abort()` cancels it.
    """

    def __init__(self, source: libvirt.virConnect, name: str, target_uri: str,
                 settings: MigrationSettings, *, dest_xml: str | None = None,
                 persist: bool = False) -> None:
        self.source = source
        self.name = name
        self.target_uri = target_uri
        self.settings = settings
        self.dest_xml = dest_xml
        self.persist = persist
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self._result: MigrationResult | None = None
        self._done = threading.Event()
        self._domain: libvirt.virDomain | None = None

    def _lookup(self) -> libvirt.virDomain:
        try:
            return self.source.lookupByName(self.name)
        except libvirt.libvirtError as err:
            raise MigrationError(f"instance {self.name}: {_message(err)}") from None

    def start(self) -> None:
        domain = self._lookup()
        check_migratable(domain)
        self._domain = domain
        try:
            # Before the job starts: QEMU's downtime limit ("downtime-limit") for this domain.
            domain.migrateSetMaxDowntime(self.settings.downtime_ms, 0)
        except libvirt.libvirtError as err:
            raise MigrationError(f"cannot set the migration downtime of {self.name}: "
                                 f"{_message(err)}") from None
        params: dict[str, Any] = {}
        if self.settings.bandwidth_mib_s > 0:
            params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] = self.settings.bandwidth_mib_s
        if self.dest_xml is not None:
            params[libvirt.VIR_MIGRATE_PARAM_DEST_XML] = self.dest_xml
        flags = migration_flags(self.settings, self.persist)
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, args=(domain, params, flags),
                                        name=f"migrate-{self.name}", daemon=True)
        self._thread.start()

    def _run(self, domain: libvirt.virDomain, params: dict[str, Any], flags: int) -> None:
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
        if not stats.get("time_elapsed"):
            with contextlib.suppress(libvirt.libvirtError):
                target = libvirt.open(self.target_uri)
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
                return MigrationStatus(STATUS_FAILED, error=self._error)
            return MigrationStatus(STATUS_COMPLETED)
        if self._domain is None:
            return MigrationStatus(STATUS_FAILED, error="not started")
        try:
            stats = self._domain.jobStats(0)
        except libvirt.libvirtError:
            return MigrationStatus(STATUS_ACTIVE)
        return MigrationStatus(STATUS_ACTIVE, int(stats.get("memory_processed", 0)),
                               int(stats.get("memory_total", 0)))

    def wait(self, timeout: float | None = None) -> MigrationResult:
        if self._thread is None:
            raise MigrationError("migration not started")
        if not self._done.wait(timeout):
            raise MigrationError(f"migration of {self.name} still running after {timeout:g}s")
        if self._error is not None:
            raise MigrationError(f"migration of {self.name} to {self.target_uri.split('?')[0]} "
                                 f"failed: {self._error}")
        assert self._result is not None
        return self._result

    def abort(self) -> None:
        """Cancel a running migration (the source keeps running the guest)."""
        if self._domain is None or self._done.is_set():
            return
        with contextlib.suppress(libvirt.libvirtError):
            self._domain.abortJob()


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
    except libvirt.libvirtError as err:
        if err.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return DomainPlace(exists=False)
        raise MigrationError(f"cannot look up {name}: {_message(err)}") from None
    state, reason = domain.state()
    active = bool(domain.isActive())
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
