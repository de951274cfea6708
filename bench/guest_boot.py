"""The simulated cluster's test guest: how long it takes to its first heartbeat under plain
QEMU emulation (TCG, as the simulated nodes run it without KVM), with the guest's kernel
(uncompressed, `herder.sim.guest.boot_kernel`) and kernel arguments
(`herder.sim.guest.GUEST_KERNEL_ARGS`) against another kernel file and other arguments.

    sudo .venv/bin/python bench/guest_boot.py [--runs 3] [--parallel 2] \
        [--other-kernel /boot/vmlinuz-...] [--other "quiet panic=-1 mitigations=off"]

Per run each variant boots once (`--parallel` guests at a time) with the cached guest image;
QEMU's CPU seconds (user + system, to the first heartbeat on its serial port) say what a boot
costs whatever the machine's load; the wall seconds are what a test waits on an idle machine.
Prints the medians of both and the ratio of the other variant to the guest's. By default the
other variant is Debian's compressed kernel (/boot's bzImage) with the guest's arguments.

Measured 2026-11-29, one boot each, two at once: 15.9 CPU s with the guest's arguments and 15.8
with "quiet panic=-1 mitigations=off rodata=off nokaslr no_timer_check" at a load of 27 (409
and 410 s of wall time); 15.8 and 15.5 at a load of 22 (54 and 49 s; ratio 0.98): no gain
worth a change, so the guest keeps its arguments. The compressed bzImage spent 8.7 of its 15.3
CPU s before the kernel's first line (unpacking xz under TCG), so the guest boots the
uncompressed kernel: `--runs 3` at a load of 13-18 (two helpers' simulated clusters beside
it): 7.8 CPU s and 46 s of wall time with the guest's uncompressed kernel, 15.3 CPU s and 69 s
with the bzImage (ratio 1.95).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from herder.sim import guest  # noqa: E402

QEMU = "/usr/bin/qemu-system-x86_64"
TIMEOUT = 900.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def boot(image: guest.GuestImage, kernel: Path, kernel_args: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) from QEMU's start to the guest's first heartbeat."""
    with tempfile.TemporaryDirectory(prefix="guest-boot-") as work:
        log = Path(work) / "serial.log"
        started = time.monotonic()
        qemu = subprocess.Popen(
            [QEMU, "-accel", "tcg", "-machine", "pc", "-m", "128", "-nodefaults",
             "-no-user-config", "-display", "none", "-monitor", "none", "-serial",
             f"file:{log}", "-no-reboot", "-kernel", str(kernel), "-initrd",
             str(image.initrd), "-append", f"console=ttyS0 {kernel_args}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while time.monotonic() - started < TIMEOUT:
                if log.exists() and guest.HEARTBEAT_RE.search(log.read_text(errors="replace")):
                    return cpu_seconds(qemu.pid), time.monotonic() - started
                if qemu.poll() is not None:
                    raise SystemExit(f"QEMU exited ({qemu.returncode}) before a heartbeat")
                time.sleep(0.1)
            raise SystemExit(f"no heartbeat within {TIMEOUT:g} s ({kernel_args!r})")
        finally:
            qemu.kill()
            qemu.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--other-kernel", type=Path, default=None,
                        help="kernel file to compare (default: /boot's compressed one)")
    parser.add_argument("--other", default=guest.GUEST_KERNEL_ARGS,
                        help="kernel arguments to compare")
    args = parser.parse_args()
    image = guest.ensure_guest()
    other_kernel = args.other_kernel or guest.find_kernel()
    variants = {"guest's": (image.kernel, image.kernel_args), "other": (other_kernel, args.other)}
    # the variants alternate, so that a change of the machine's load falls on both
    jobs = [(name, kernel, kernel_args) for _ in range(args.runs)
            for name, (kernel, kernel_args) in variants.items()]
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda job: (job[0], boot(image, job[1], job[2])), jobs))
    load = os.getloadavg()[0]
    print(f"guest boot to its first heartbeat under TCG, median of {args.runs} "
          f"(load {load:.1f} at the end):")
    medians = {}
    for name, (kernel, kernel_args) in variants.items():
        cpu = statistics.median(r[0] for n, r in results if n == name)
        wall = statistics.median(r[1] for n, r in results if n == name)
        medians[name] = cpu
        print(f"  {name:9} {cpu:6.1f} CPU s {wall:6.1f} s wall  ({kernel}: {kernel_args})")
    ratio = medians["other"] / medians["guest's"]
    print(f"  ratio of the other variant to the guest's (CPU s): {ratio:.2f}")

if __name__ == "__main__":
    main()
