"""Live migration of a 128 MiB guest between two private libvirtds (QEMU driver, TCG, TLS with
a test cluster CA, p2p tunnelled): total time and downtime from libvirt's job statistics,
through herder's `noded.kvm.migration.migrate` and by hand with `virsh migrate --live` (the
limit), alternating directions.

    PYTHONPATH=src python bench/migrate.py [--rounds 3] [--bandwidth 0]

Needs root, qemu-system-x86, libvirt-daemon, libvirt-clients, linux-image-amd64 and
busybox-static (scripts/sysdeps.sh). The overhead of herder's job + RPC path over the bare call
is measured once the lead wires migration into noded and masterd.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import libvirt

from herder.core import params
from herder.core.libvirtd_conf import tls_uri
from herder.noded.kvm import migration
from herder.noded.kvm.domain import DiskSpec, InstanceSpec, domain_xml
from herder.sim import guest
from herder.sim.qemu_libvirtd import QemuLibvirtd, start_pair

NAME = "bench-mover.example.com"


def _completed_stats(conn: libvirt.virConnect) -> dict[str, Any]:
    return conn.lookupByName(NAME).jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)


def _wait_for_beat(log: Path, after: float, deadline: float = 120.0) -> guest.Heartbeat:
    started = time.monotonic()
    while time.monotonic() - started < deadline:
        beat = guest.last_heartbeat(log)
        if beat is not None and beat.uptime > after:
            return beat
        time.sleep(0.25)
    raise SystemExit(f"no heartbeat in {log} within {deadline:g}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="migrations per method")
    parser.add_argument("--bandwidth", type=int, default=0,
                        help="migration_bandwidth in MiB/s (0: unlimited)")
    args = parser.parse_args()
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    image = guest.ensure_guest()
    pair = start_pair(("127.0.0.67", "127.0.0.68"))
    try:
        disk = pair.root / "disk0"
        disk.write_bytes(b"\0" * (4 << 20))
        os_dir = guest.install_os_definition(pair.root / "os")
        subprocess.run([str(os_dir / "create")], check=True,
                       env={"PATH": os.environ["PATH"], "DISK_COUNT": "1",
                            "DISK_0_PATH": str(disk), "INSTANCE_NAME": NAME})
        hvparams = params.hv_family("kvm").defaults()
        hvparams.update(kernel_path=str(image.kernel), initrd_path=str(image.initrd),
                        root_path="", kernel_args=image.kernel_args,
                        kvm_path="/usr/bin/qemu-system-x86_64")
        log = pair.root / "serial.log"
        spec = InstanceSpec(NAME, "3e2d1c0b-9a8f-4e7d-b6c5-a4b3c2d1e0f9", 128, 1, hvparams,
                            disks=(DiskSpec(str(disk), "sharedfile"),), serial_log=str(log),
                            kvm_usable=False)
        conns = {daemon.name: libvirt.open(daemon.uri) for daemon in (pair.source, pair.target)}
        conns[pair.source.name].createXML(domain_xml(spec), 0)
        started = time.monotonic()
        first = _wait_for_beat(log, -1.0)
        print(f"boot to first heartbeat: {time.monotonic() - started:.1f} s "
              f"(boot_id {first.boot_id})")
        settings = migration.MigrationSettings(live=True, bandwidth_mib_s=args.bandwidth,
                                               downtime_ms=int(hvparams["migration_downtime"]))
        here, there = pair.source, pair.target
        results: dict[str, list[tuple[float, int, int]]] = {"herder": [], "virsh": []}

        def hop(method: str, src: QemuLibvirtd, dst: QemuLibvirtd) -> None:
            uri = tls_uri(dst.address, pki=src.pki)
            wall = time.monotonic()
            if method == "herder":
                result = migration.migrate(conns[src.name], NAME, uri, settings, timeout=600)
                total, downtime = result.total_ms, result.downtime_ms or 0
            else:
                # as `virsh migrate-setmaxdowntime` (virsh migrate has no downtime option)
                conns[src.name].lookupByName(NAME).migrateSetMaxDowntime(settings.downtime_ms)
                argv = ["virsh", "-c", src.uri, "migrate", "--live", "--p2p", "--tunnelled",
                        "--unsafe", NAME, uri]
                if args.bandwidth:
                    argv += ["--bandwidth", str(args.bandwidth)]
                done = subprocess.run(argv, capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"virsh migrate failed: {done.stderr.strip()}")
                stats = _completed_stats(conns[dst.name])
                total, downtime = int(stats["time_elapsed"]), int(stats.get("downtime", 0))
            results[method].append((time.monotonic() - wall, total, downtime))

        for _ in range(args.rounds):
            for method in ("herder", "virsh"):
                before = guest.last_heartbeat(log)
                hop(method, here, there)
                here, there = there, here
                after = _wait_for_beat(log, before.uptime if before else -1.0)
                if after.boot_id != first.boot_id:
                    raise SystemExit("the guest rebooted during a migration")
        print(f"{'method':8} {'n':>2} {'wall s':>8} {'total ms':>9} {'downtime ms':>12}")
        for method, rows in results.items():
            print(f"{method:8} {len(rows):>2} {statistics.median(r[0] for r in rows):>8.2f} "
                  f"{statistics.median(r[1] for r in rows):>9.0f} "
                  f"{statistics.median(r[2] for r in rows):>12.0f}")
        print("(medians; libvirt's job statistics: time_elapsed and downtime; "
              f"bandwidth {args.bandwidth or 'unlimited'} MiB/s, TCG guest of 128 MiB)")
        for conn in conns.values():
            conn.close()
    finally:
        pair.stop()


if __name__ == "__main__":
    main()
