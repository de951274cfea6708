"""The QEMU processes of this host that libvirt does not manage, by the name they run.

Ganeti's KVM hypervisor starts QEMU itself with `-name NAME` (hv_kvm's command line); libvirt
always writes `-name guest=NAME,...`. After `import-ganeti` a guest Ganeti started runs on in
its own QEMU, unknown to libvirt: noded must not start the instance a second time on its disks
(`noded.kvm.preflight`), and mond must not report it down, which would make maintd's watcher
restart it (`mond.collectors.inst_status`)."""

from __future__ import annotations

import contextlib
import os

import psutil


def foreign_qemus() -> dict[str, list[int]]:
    """Every `-name NAME` of a QEMU process outside libvirt -> its pids (sorted)."""
    found: dict[str, list[int]] = {}
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            argv = proc.info["cmdline"] or []
            program = os.path.basename(argv[0]) if argv else str(proc.info["name"] or "")
            if not program.startswith(("qemu", "kvm")):
                continue
            for index, arg in enumerate(argv[:-1]):
                name = argv[index + 1]
                if arg == "-name" and not name.startswith("guest="):
                    found.setdefault(name, []).append(int(proc.info["pid"]))
    return {name: sorted(pids) for name, pids in found.items()}


def foreign_qemu(name: str) -> list[int]:
    """The pids of QEMU processes outside libvirt that run `name`."""
    return foreign_qemus().get(name, [])
