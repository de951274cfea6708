"""True live migration between two private libvirtds (QEMU driver, TLS only, certificates of
a test cluster CA), with one real guest: the heartbeat goes on on the target with the same boot
id and the same disk. (A target libvirtd killed during a migration is tested through herder's
own path, on namespaced nodes: tests/system/test_real_guests_sim.py. Here, with both libvirtds
in the machine's namespace, libvirt's job-status call on the source could block for minutes
after the kill.)"""

from __future__ import annotations

import os
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
    settings = migration.MigrationSettings.from_hvparams(
        {**cluster["hvparams"], "migration_bandwidth": 0})
    assert settings.live
    result = migration.migrate(source, NAME, tls_uri(pair.target.address, pki=pair.source.pki),
                               settings, timeout=300)
    assert _active_names(source) == [] and _active_names(target) == [NAME]
    assert result.total_ms > 0 and result.downtime_ms is not None
    assert result.data_total and result.data_total >= 128 << 20  # the guest's RAM moved
    after = _wait_for_beat_after(log, before.uptime, 30)
    assert after.boot_id == before.boot_id  # the same boot: memory travelled, no restart
    assert after.disk == before.disk == guest.disk_pattern_hash(NAME)
    assert after.uptime > before.uptime
