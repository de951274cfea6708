"""The simulated cluster's guest, for real: the OS definition formats a disk, the guest built
from this machine's kernel and busybox boots in a private libvirtd (QEMU driver, TCG) and its
heartbeat shows the boot id, uptime and the disk's hash. One guest for the module."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.noded import osdef
from herder.sim import guest
from herder.sim.libvirtd import LibvirtdUnavailable

pytestmark = [pytest.mark.slow, pytest.mark.guests]
BOOT_DEADLINE = 120.0  # ~10 s alone; a loaded 2-core machine may take several times that


def test_os_definition_create_writes_the_pattern(tmp_path: Path) -> None:
    os_dir = guest.install_os_definition(tmp_path / "os")
    definition = osdef.find_os(guest.OS_NAME, [os_dir.parent])  # herder's own loader accepts it
    assert definition.name == guest.OS_NAME and 20 in definition.api_versions
    disk = tmp_path / "disk0"
    disk.write_bytes(b"\xff" * (2 << 20))
    env = {"PATH": os.environ["PATH"], "DISK_COUNT": "1", "DISK_0_PATH": str(disk),
           "INSTANCE_NAME": "web1.example.com"}
    subprocess.run([str(os_dir / "create")], env=env, check=True, timeout=60)
    data = disk.read_bytes()
    assert hashlib.sha256(data[: 1 << 20]).hexdigest() == \
        guest.disk_pattern_hash("web1.example.com")
    assert data[1 << 20:] == b"\xff" * (1 << 20)  # only the first MiB is written
    env["DISK_COUNT"] = "0"
    failed = subprocess.run([str(os_dir / "create")], env=env, capture_output=True, text=True)
    assert failed.returncode != 0 and "no disk" in failed.stderr


def test_module_load_order_puts_dependencies_first(tmp_path: Path) -> None:
    dep = tmp_path / "modules.dep"
    dep.write_text("kernel/a/virtio_blk.ko: kernel/v/virtio.ko kernel/v/virtio_ring.ko\n"
                   "kernel/v/virtio_ring.ko: kernel/v/virtio.ko\nkernel/v/virtio.ko:\n")
    assert guest.module_load_order(dep, ["virtio_blk", "built_in"]) == [
        "kernel/v/virtio.ko", "kernel/v/virtio_ring.ko", "kernel/a/virtio_blk.ko"]


@pytest.fixture(scope="module")
def booted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    libvirt = pytest.importorskip("libvirt")
    from herder.noded.kvm.domain import DiskSpec, InstanceSpec, domain_xml
    from herder.sim.qemu_libvirtd import start_pair

    try:
        image = guest.ensure_guest()
    except guest.GuestBuildError as err:
        pytest.skip(str(err))
    try:
        pair = start_pair(("127.0.0.30", "127.0.0.31"))
    except LibvirtdUnavailable as err:
        pytest.skip(str(err))
    try:
        os_dir = guest.install_os_definition(pair.root / "os")
        disk = pair.root / "disk0"
        disk.write_bytes(b"\0" * (4 << 20))
        env = {"PATH": os.environ["PATH"], "DISK_COUNT": "1", "DISK_0_PATH": str(disk),
               "INSTANCE_NAME": "guest1.example.com"}
        subprocess.run([str(os_dir / "create")], env=env, check=True, timeout=60)
        from herder.core import params

        hvparams = params.hv_family("kvm").defaults()
        hvparams.update(kernel_path=str(image.kernel), initrd_path=str(image.initrd),
                        root_path="", kernel_args=image.kernel_args,
                        kvm_path="/usr/bin/qemu-system-x86_64")
        log = pair.root / "guest1.serial.log"
        spec = InstanceSpec("guest1.example.com", "0c7d1b52-8f1e-4a8e-9d54-3f0e9f3b1a11", 128,
                            1, hvparams, disks=(DiskSpec(str(disk), "sharedfile"),),
                            serial_log=str(log), kvm_usable=False)
        conn = libvirt.open(pair.source.uri)
        started = time.monotonic()
        conn.createXML(domain_xml(spec), 0)
        while guest.last_heartbeat(log) is None:
            assert time.monotonic() - started < BOOT_DEADLINE, log.read_text()[-2000:]
            time.sleep(0.5)
        yield {"pair": pair, "conn": conn, "log": log, "spec": spec,
               "boot_seconds": time.monotonic() - started}
        conn.close()
    finally:
        pair.stop()


def test_guest_boots_and_beats(booted: dict[str, Any]) -> None:
    log: Path = booted["log"]
    first = guest.last_heartbeat(log)
    assert first is not None
    assert first.disk == guest.disk_pattern_hash("guest1.example.com")
    deadline = time.monotonic() + 30
    while (latest := guest.last_heartbeat(log)) is not None and latest.uptime <= first.uptime:
        assert time.monotonic() < deadline, "the heartbeat stopped"
        time.sleep(0.5)
    assert latest is not None and latest.boot_id == first.boot_id

