"""The bound on libvirt calls of a migration (`kvm.migration.BoundedCalls`): a call that hangs
is given up after its deadline and not repeated while it still hangs; errors pass through.
(The same with real libvirtds and a killed or frozen peer: test_migration_live.py.)"""

from __future__ import annotations

import threading
import time

import pytest

from herder.core import libvirtd_conf
from herder.core.rpcdefs import migration_calls
from herder.noded import migrations
from herder.noded.kvm import migration


def test_a_hanging_call_is_given_up_and_not_repeated() -> None:
    release = threading.Event()
    made: list[str] = []

    def hangs() -> str:
        made.append("hangs")
        release.wait(30)
        return "late"

    calls = migration.BoundedCalls("test")
    asked = time.monotonic()
    assert calls.run(hangs, 0.2) == (False, None)
    assert time.monotonic() - asked < 10
    # while the first still hangs, the next call is not even made
    assert calls.run(lambda: made.append("second") or "x", 5) == (False, None)
    assert made == ["hangs"]
    release.set()
    deadline = time.monotonic() + 30
    while calls.run(lambda: "fresh", 5) != (True, "fresh"):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_libvirt_errors_pass_through() -> None:
    libvirt = pytest.importorskip("libvirt")

    def fails() -> None:
        raise libvirt.libvirtError("no such domain")

    with pytest.raises(libvirt.libvirtError, match="no such domain"):
        migration.BoundedCalls("test").run(fails, 5)


@pytest.mark.parametrize(("domain_type", "version", "hazard"), [
    ("qemu", 7_002_022, True),  # Debian 12's QEMU 7.2.22, TCG: loses writes
    ("qemu", 8_002_009, True),
    ("qemu", 9_000_000, False),  # 03bfc2188f is in 9.0
    ("qemu", 10_000_002, False),
    ("kvm", 7_002_022, False),  # KVM tracks dirty pages itself
    ("qemu", 0, False),  # version unknown: nothing claimed
])
def test_tcg_live_migration_hazard_by_qemu_version(domain_type: str, version: int,
                                                     hazard: bool) -> None:
    why = migration.tcg_live_migration_hazard(domain_type, version)
    assert (why is not None) == hazard
    if why is not None:
        assert f"QEMU {version // 1_000_000}." in why and "paused" in why


class _RecordingDomain:
    """What LiveMigration.start asks of a domain; the migrate call records its flags (a QEMU
    older than 9.0 no longer runs on this machine, scripts/sysdeps.sh installs a newer one)."""

    def __init__(self, domain_type: str) -> None:
        self.domain_type = domain_type
        self.flags: list[int] = []

    def name(self) -> str:
        return "tcg.example.com"

    def isActive(self) -> bool:
        return True

    def XMLDesc(self, flags: int = 0) -> str:
        return f"<domain type='{self.domain_type}'><name>tcg.example.com</name></domain>"

    def migrateSetMaxDowntime(self, downtime: int, flags: int = 0) -> int:
        return 0

    def migrateToURI3(self, uri: str, params: dict[str, object], flags: int) -> int:
        self.flags.append(flags)
        return 0

    def jobStats(self, flags: int = 0) -> dict[str, int]:
        return {"time_elapsed": 1}


class _Connection:
    def __init__(self, domain: _RecordingDomain, version: int) -> None:
        self.domain, self.version = domain, version

    def lookupByName(self, name: str) -> _RecordingDomain:
        return self.domain

    def getVersion(self) -> int:
        return self.version


@pytest.mark.parametrize(("domain_type", "version", "live"), [
    ("qemu", 7_002_022, False), ("qemu", 10_000_002, True), ("kvm", 7_002_022, True)])
def test_a_tcg_guest_on_an_old_qemu_migrates_paused_and_says_why(
        domain_type: str, version: int, live: bool) -> None:
    import libvirt

    domain = _RecordingDomain(domain_type)
    outgoing = migration.LiveMigration(_Connection(domain, version), domain.name(),  # type: ignore[arg-type]
                                       "qemu+tls://target/system", migration.MigrationSettings())
    outgoing.start()
    result = outgoing.wait(10)
    assert bool(domain.flags[0] & libvirt.VIR_MIGRATE_LIVE) == live == result.live
    assert (outgoing.note is None) == live


def test_a_domain_dropped_between_lookup_and_state_counts_as_absent() -> None:
    """A libvirtd that just restarted drops an unfinished incoming domain on its own, maybe
    right after our lookup found it: the cleanup then sees no domain there, not an error."""
    import libvirt

    class Vanishing(_RecordingDomain):
        def state(self, flags: int = 0) -> list[int]:
            gone = libvirt.libvirtError("Domain not found")
            gone.err = (libvirt.VIR_ERR_NO_DOMAIN, 0, "Domain not found", 0, "", "", "", 0, 0)
            raise gone

    assert migration._place(_Connection(Vanishing("qemu"), 0), "tcg.example.com") == \
        migration.DomainPlace(exists=False)  # type: ignore[arg-type]


class _MigratingDomain(_RecordingDomain):
    """libvirt's migrate call returns once `moved` is set (the memory has moved)."""

    def __init__(self) -> None:
        super().__init__("kvm")
        self.moved = threading.Event()

    def migrateToURI3(self, uri: str, params: dict[str, object], flags: int) -> int:
        self.moved.wait(60)
        return 0

    def jobStats(self, flags: int = 0) -> dict[str, int]:
        return {"time_elapsed": 7, "memory_processed": 1 << 20, "memory_total": 128 << 20}


class _ClosableConnection(_Connection):
    def close(self) -> int:
        return 0


def test_a_status_call_with_wait_answers_when_the_migration_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """instance_get_migration_status's `wait`: the node answers as soon as libvirt's migrate
    call returned (the master learns the end at once), or after `wait` with the progress."""
    domain = _MigratingDomain()
    monkeypatch.setattr(migrations.Migrations, "_open",
                        lambda self: _ClosableConnection(domain, 10_000_002))
    outgoing = migrations.Migrations("qemu:///system", libvirtd_conf.LibvirtPki())
    outgoing.start("tcg.example.com", "node2.example.com", migration.MigrationSettings())
    try:
        going = outgoing.status("tcg.example.com", wait=0.05)
        assert (going.status, going.transferred_ram) == (migration.STATUS_ACTIVE, 1 << 20)
        threading.Timer(0.2, domain.moved.set).start()
        done = outgoing.status("tcg.example.com", wait=migration_calls.MAX_STATUS_WAIT)
        assert done.status == migration.STATUS_COMPLETED
        assert done.stats is not None and done.stats.total_ms == 7
    finally:
        domain.moved.set()
        outgoing.finish("tcg.example.com")


class _NoVersionConnection(_Connection):
    """A connection whose getVersion must not be asked (the node keeps the version)."""

    def getVersion(self) -> int:
        raise AssertionError("libvirt's getVersion asked during the migration's start")


@pytest.mark.parametrize(("domain_type", "version", "live", "asked"), [
    ("qemu", 7_002_022, False, 1), ("qemu", 10_000_002, True, 1), ("kvm", 7_002_022, True, 0)])
def test_the_hazard_check_uses_the_version_the_node_keeps(
        domain_type: str, version: int, live: bool, asked: int) -> None:
    """noded gives the migration the hypervisor version it keeps (libvirt's getVersion probes
    its default emulator the first time: seconds inside migrate_instance); a KVM guest, which
    has no TCG hazard, asks for none."""
    import libvirt

    calls: list[int] = []

    def kept() -> int:
        calls.append(version)
        return version

    domain = _RecordingDomain(domain_type)
    outgoing = migration.LiveMigration(
        _NoVersionConnection(domain, 0), domain.name(),  # type: ignore[arg-type]
        "qemu+tls://target/system", migration.MigrationSettings(), hypervisor_version=kept)
    outgoing.start()
    result = outgoing.wait(10)
    assert bool(domain.flags[0] & libvirt.VIR_MIGRATE_LIVE) == live == result.live
    assert len(calls) == asked
