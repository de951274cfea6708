"""True live migration between two private libvirtds (QEMU driver, TLS only, certificates of
a test cluster CA), with one real guest: the heartbeat goes on on the target with the same boot
id and the same disk; a receiving libvirtd killed half way through a migration back ends it
within bounds (every job-status query bounded, the stalled job aborted), the guest never stops.
(herder's own path through the job, on namespaced nodes: tests/system/test_real_guests_sim.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.core import params
from herder.core.libvirtd_conf import tls_uri
from herder.noded.kvm import migration
from herder.noded.kvm.domain import DiskSpec, InstanceSpec, domain_xml
from herder.sim import guest
from herder.sim.libvirtd import LibvirtdUnavailable

pytestmark = [pytest.mark.slow, pytest.mark.guests]

NAME = "mover.example.com"
BOOT_DEADLINE = 120.0


def _active_names(conn: Any) -> list[str]:
    return [domain.name() for domain in conn.listAllDomains() if domain.isActive()]


def _wait_for_beat_after(log: Path, uptime: float, deadline: float) -> guest.Heartbeat:
    started = time.monotonic()
    while True:
        beat = guest.last_heartbeat(log)
        if beat is not None and beat.uptime > uptime:
            return beat
        assert time.monotonic() - started < deadline, log.read_text()[-1000:]
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    libvirt = pytest.importorskip("libvirt")
    from herder.sim.qemu_libvirtd import start_pair

    try:
        image = guest.ensure_guest()
    except guest.GuestBuildError as err:
        pytest.skip(str(err))
    try:
        pair = start_pair(("127.0.0.32", "127.0.0.33"))
    except LibvirtdUnavailable as err:
        pytest.skip(str(err))
    try:
        # The disk is a file both libvirtds reach (the shared-file-storage stand-in).
        disk = pair.root / "disk0"
        disk.write_bytes(b"\0" * (4 << 20))
        os_dir = guest.install_os_definition(pair.root / "os")
        subprocess.run([str(os_dir / "create")], check=True, timeout=60,
                       env={"PATH": os.environ["PATH"], "DISK_COUNT": "1",
                            "DISK_0_PATH": str(disk), "INSTANCE_NAME": NAME})
        hvparams = params.hv_family("kvm").defaults()
        hvparams.update(kernel_path=str(image.kernel), initrd_path=str(image.initrd),
                        root_path="", kernel_args=image.kernel_args,
                        kvm_path="/usr/bin/qemu-system-x86_64")
        log = pair.root / "mover.serial.log"
        spec = InstanceSpec(NAME, "9b1e3c2a-7d4f-4e8b-a1c3-5f6e7d8c9b0a", 128, 1, hvparams,
                            disks=(DiskSpec(str(disk), "sharedfile"),), serial_log=str(log),
                            kvm_usable=False)
        source = libvirt.open(pair.source.uri)
        target = libvirt.open(pair.target.uri)
        source.createXML(domain_xml(spec), 0)
        first = _wait_for_beat_after(log, -1.0, BOOT_DEADLINE)
        yield {"pair": pair, "source": source, "target": target, "log": log, "first": first,
               "hvparams": hvparams, "libvirt": libvirt}
        source.close()
        target.close()
    finally:
        pair.stop()


def test_live_migration_keeps_the_guest_running(cluster: dict[str, Any]) -> None:
    pair, source, target, log = (cluster[key] for key in ("pair", "source", "target", "log"))
    before = _wait_for_beat_after(log, cluster["first"].uptime, 30)
    # with Ganeti's migration_caps (libvirt's compression and auto-convergence flags)
    settings = migration.MigrationSettings.from_hvparams(
        {**cluster["hvparams"], "migration_bandwidth": 0, "migration_caps": "xbzrle:auto-converge"})
    assert settings.live and settings.caps == {"xbzrle", "auto-converge"}
    result = migration.migrate(source, NAME, tls_uri(pair.target.address, pki=pair.source.pki),
                               settings, timeout=300)
    assert _active_names(source) == [] and _active_names(target) == [NAME]
    assert result.total_ms > 0 and result.downtime_ms is not None
    assert result.data_total and result.data_total >= 128 << 20  # the guest's RAM moved
    # live, not paused: this machine's QEMU (>= 9.0, scripts/sysdeps.sh) keeps a TCG guest's
    # writes during a live migration (kvm.migration.tcg_live_migration_hazard)
    assert result.live
    # a few seconds on: a page the move lost would have crashed the guest's kernel by then
    after = _wait_for_beat_after(log, before.uptime + 3, 30)
    assert after.boot_id == before.boot_id  # the same boot: memory travelled, no restart
    assert after.disk == before.disk == guest.disk_pattern_hash(NAME)
    assert after.uptime > before.uptime


def test_a_killed_target_libvirtd_fails_the_migration_within_bounds(
        cluster: dict[str, Any]) -> None:
    """The guest (on the second libvirtd since the test above) goes back at 1 MiB/s and the
    receiving libvirtd is killed half way: every status query answers within its bound, the
    stalled job is aborted and reported failed, the guest never stops where it runs, and once
    the killed libvirtd is back exactly one copy runs."""
    libvirt, pair, log = cluster["libvirt"], cluster["pair"], cluster["log"]
    sender_uri = pair.target.uri
    if _active_names(cluster["target"]) != [NAME]:
        pytest.skip("the live migration above did not leave the guest on the second node")
    before = _wait_for_beat_after(log, -1.0, 30)
    calls, monitor = libvirt.open(sender_uri), libvirt.open(sender_uri)
    stall = 20.0
    back = migration.LiveMigration(
        calls, NAME, tls_uri(pair.source.address, pki=pair.target.pki),
        migration.MigrationSettings(live=True, bandwidth_mib_s=1, downtime_ms=30),
        monitor=monitor, stall_timeout=stall)
    bound = migration.STATUS_CALL_TIMEOUT + migration.ABORT_CALL_TIMEOUT + 10  # loaded machine

    def timed_status() -> migration.MigrationStatus:
        asked = time.monotonic()
        status = back.status()
        assert time.monotonic() - asked < bound, "a status query was not bounded"
        return status

    back.start()
    deadline = time.monotonic() + 120
    while (status := timed_status()).transferred_ram == 0:
        assert status.status == migration.STATUS_ACTIVE, status
        assert time.monotonic() < deadline, "the memory transfer never began"
        time.sleep(0.5)
    pair.source.kill()  # the receiving libvirtd dies; its incoming QEMU stays, as on a host
    killed = time.monotonic()
    while (status := timed_status()).status == migration.STATUS_ACTIVE:
        assert time.monotonic() - killed < stall + 2 * bound + 60, "the migration never ended"
        time.sleep(1)
    assert status.status == migration.STATUS_FAILED and status.error, status
    with pytest.raises(migration.MigrationError):
        back.wait(migration.ABORT_CALL_TIMEOUT + 30)
    # the guest never stopped on the sender: the same boot goes on there
    assert _active_names(cluster["target"]) == [NAME]
    after = _wait_for_beat_after(log, before.uptime, 60)
    assert after.boot_id == before.boot_id
    # the killed libvirtd comes back; afterwards exactly one copy runs (the sender's)
    pair.source.start()
    receiver = libvirt.open(pair.source.uri)
    try:
        assert migration.cleanup(cluster["target"], receiver, NAME) == "source"
        assert _active_names(receiver) == [] and _active_names(cluster["target"]) == [NAME]
    finally:
        receiver.close()
        for conn in (calls, monitor):
            conn.close()


def test_a_frozen_target_is_a_stall_aborted_within_bounds(cluster: dict[str, Any]) -> None:
    """The receiving libvirtd stops answering without closing anything (SIGSTOP: a host that
    vanished from the network): the transfer stalls, herder aborts the job after the stall
    timeout (before libvirt's own keepalive would), the guest goes on where it runs."""
    libvirt, pair, log = cluster["libvirt"], cluster["pair"], cluster["log"]
    sender = cluster["target"]
    if _active_names(sender) != [NAME]:
        pytest.skip("the guest is not on the second libvirtd")
    before = _wait_for_beat_after(log, -1.0, 30)
    calls, monitor = libvirt.open(pair.target.uri), libvirt.open(pair.target.uri)
    stall = 6.0
    back = migration.LiveMigration(
        calls, NAME, tls_uri(pair.source.address, pki=pair.target.pki),
        migration.MigrationSettings(live=True, bandwidth_mib_s=1, downtime_ms=30),
        monitor=monitor, stall_timeout=stall)
    bound = migration.STATUS_CALL_TIMEOUT + migration.ABORT_CALL_TIMEOUT + 10  # loaded machine
    frozen = pair.source.proc
    assert frozen is not None
    try:
        back.start()
        deadline = time.monotonic() + 120
        while back.status().transferred_ram == 0:
            assert time.monotonic() < deadline, "the memory transfer never began"
            time.sleep(0.5)
        os.killpg(frozen.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        while True:
            asked = time.monotonic()
            status = back.status()
            assert time.monotonic() - asked < bound, "a status query was not bounded"
            if status.status != migration.STATUS_ACTIVE:
                break
            assert time.monotonic() - stopped < stall + 2 * bound + 60, "never aborted"
            time.sleep(1)
        assert status.status == migration.STATUS_FAILED
        assert "no progress of the migration" in status.error and "aborted" in status.error
        assert _active_names(sender) == [NAME]
        after = _wait_for_beat_after(log, before.uptime, 60)
        assert after.boot_id == before.boot_id
    finally:
        os.killpg(frozen.pid, signal.SIGCONT)
    with pytest.raises(migration.MigrationError):
        back.wait(migration.ABORT_CALL_TIMEOUT + 60)
    receiver = libvirt.open(pair.source.uri)
    try:
        assert migration.cleanup(sender, receiver, NAME) == "source"
        assert _active_names(receiver) == [] and _active_names(sender) == [NAME]
    finally:
        receiver.close()
        for conn in (calls, monitor):
            conn.close()


def test_balloon_sets_the_running_guests_memory(cluster: dict[str, Any], tmp_path: Path) -> None:
    """noded's instance_balloon_memory (a migration to a node with less free memory): the
    running guest's memory goes down to what was asked, its maximum stays."""
    from herder.noded.hypervisor import Hypervisor, HypervisorError

    pair, sender = cluster["pair"], cluster["target"]
    if _active_names(sender) != [NAME]:
        pytest.skip("the guest is not on the second libvirtd")
    hv = Hypervisor(pair.target.uri, tmp_path / "noded")
    try:
        hv.balloon(NAME, 100)
        # the guest's balloon driver gives the memory back (libvirt reports QEMU's "actual")
        deadline = time.monotonic() + 60
        while (info := sender.lookupByName(NAME).info())[2] > 100 * 1024:
            assert time.monotonic() < deadline, f"the guest still has {info[2]} KiB"
            time.sleep(0.5)
        assert info[1] == 128 * 1024  # its maximum stays
        with pytest.raises(HypervisorError, match="not running"):
            hv.balloon("absent.example.com", 100)
    finally:
        hv.close()
