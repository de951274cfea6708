"""A node's side of a live migration, in Ganeti's RPC order (backend.py: instance_migratable,
migration_info, accept_instance, migrate_instance, instance_get_migration_status,
finalize_migration_dst/src), carried out by libvirt's own peer-to-peer migration
(`herder.noded.kvm.migration`): the source's libvirtd connects to the target's over TLS with
this node's certificate (`qemu+tls://<target node>/system?pkipath=<libvirt PKI>`), the guest's
memory travels inside that connection, the target resumes the guest.

Each outgoing migration has two connections of its own: one for libvirt's migrate call (it
blocks for the whole migration), one for the job-status queries and the abort, every wait
bounded (`kvm.migration.LiveMigration`); `status` answers from the job statistics. The
target's side needs no incoming QEMU started by herder (libvirt starts it), only its checks
(`accept_instance` in noded).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

import libvirt

from herder.core import libvirt_host, libvirtd_conf
from herder.core.errors import HerderError
from herder.core.rpcdefs import migration_calls
from herder.noded.kvm import migration

log = logging.getLogger("herder.noded")
ABORT_WAIT = 30.0  # after the abort, how long libvirt's migrate call may take to return


class Migrations:
    """The outgoing migrations of this node, by instance name."""

    def __init__(self, uri: str, pki: libvirtd_conf.LibvirtPki, *,
                 hypervisor_version: Callable[[], int] | None = None) -> None:
        """`hypervisor_version`: libvirt's hypervisor version as the node keeps it (None: each
        migration asks libvirt; see `Hypervisor.hypervisor_version`)."""
        self.uri = uri
        self.pki = pki
        self.hypervisor_version = hypervisor_version
        self._lock = threading.Lock()
        self._running: dict[str, tuple[libvirt.virConnect, migration.LiveMigration]] = {}

    def target_uri(self, target_node: str) -> str:
        return libvirtd_conf.tls_uri(target_node, pki=self.pki)

    def _open(self) -> libvirt.virConnect:
        # with keepalive: a libvirtd that stops answering is noticed within about 5 x 3 s
        return libvirt_host.open_connection(self.uri, keepalive=True)

    def start(self, name: str, target_node: str, settings: migration.MigrationSettings) -> None:
        with self._lock:
            if name in self._running and self._running[name][1].status().status == \
                    migration.STATUS_ACTIVE:
                raise HerderError(f"a migration of {name} is already running")
            self._drop(name)
            began = time.monotonic()
            # one connection for libvirt's migrate call (it blocks for the whole migration),
            # one for the job-status queries and the abort
            conn = self._open()
            try:
                monitor = self._open()
            except HerderError:
                _close(conn)
                raise
            # persist on the target, undefine here: the definition moves with the guest
            # the statistics of the completed migration: the target's finalize_migration_dst
            # reads them there, so the end is told without a connection to it first
            outgoing = migration.LiveMigration(conn, name, self.target_uri(target_node),
                                               settings, persist=True, monitor=monitor,
                                               target_stats=False,
                                               hypervisor_version=self.hypervisor_version)
            opened = time.monotonic()
            try:
                outgoing.start()
            except migration.MigrationError:
                _close(conn)
                _close(monitor)
                raise
            self._running[name] = (conn, outgoing)
            log.info("migrating %s to %s (%s, %s MiB/s, downtime %d ms; connections %.0f ms, "
                     "checks %.0f ms, downtime limit %.0f ms)", name, target_node,
                     "live" if outgoing.settings.live else "paused",
                     settings.bandwidth_mib_s or "unlimited", settings.downtime_ms,
                     (opened - began) * 1000, outgoing.timings.get("checks", 0) * 1000,
                     outgoing.timings.get("downtime", 0) * 1000)
            if outgoing.note:
                log.warning("migration of %s: %s", name, outgoing.note)

    def status(self, name: str, wait: float = 0.0) -> migration_calls.MigrationStatus:
        """Ganeti's MigrationStatus (status, transferred_ram, total_ram) and, once completed,
        libvirt's statistics of the migration (`stats`: total_ms, downtime_ms, ...); `wait`:
        first up to that many seconds for the migration to end."""
        with self._lock:
            entry = self._running.get(name)
        if entry is None:
            return migration_calls.MigrationStatus(
                status=migration.STATUS_FAILED,
                error=f"no migration of {name} is known on this node")
        outgoing = entry[1]
        if wait > 0:
            outgoing.settle(wait)
        current = outgoing.status()
        stats = None
        if current.status == migration.STATUS_COMPLETED:
            with contextlib.suppress(migration.MigrationError):
                done = outgoing.wait(0)
                stats = migration_calls.MigrationStats(
                    total_ms=done.total_ms, downtime_ms=done.downtime_ms,
                    setup_ms=done.setup_ms, data_total=done.data_total,
                    data_processed=done.data_processed,
                    memory_iterations=done.memory_iterations, live=done.live)
        return migration_calls.MigrationStatus(
            status=current.status, transferred_ram=current.transferred_ram,
            total_ram=current.total_ram, error=current.error, note=outgoing.note or None,
            stats=stats)

    def abort(self, name: str) -> None:
        """Cancel the migration and wait a bounded time for libvirt's call to end."""
        with self._lock:
            entry = self._running.get(name)
        if entry is not None:
            if not entry[1].abort():
                log.warning("libvirt did not take the abort of %s's migration within %gs",
                            name, migration.ABORT_CALL_TIMEOUT)
            with contextlib.suppress(migration.MigrationError):
                entry[1].wait(ABORT_WAIT)

    def finish(self, name: str) -> None:
        with self._lock:
            self._drop(name)

    def _drop(self, name: str) -> None:
        entry = self._running.pop(name, None)
        if entry is not None:
            _close(entry[0])
            _close(entry[1].monitor)


def _close(conn: libvirt.virConnect) -> None:
    """Close in the background: closing a connection whose call still hangs must not hang."""
    def close() -> None:
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()

    threading.Thread(target=close, name="libvirt-close", daemon=True).start()
