"""Does hardware KVM work on this node? Find out by running a guest, not by looking at /dev/kvm.

On some machines /dev/kvm exists and answers ioctls, yet a Linux guest under KVM never gets
past the BIOS's "Booting from ROM" (the -kernel loader; a plain boot sector does run there,
so probing with one says nothing). So the probe boots the node's own kernel (/boot) under
`-accel kvm` with its console on QEMU's stdout: KVM works when the kernel's decompressor
(64-bit code) speaks on the serial port (earlyprintk) before the deadline, and QEMU is stopped
right there. Anything else (a hang, an abort, no /dev/kvm, no kernel) means: no KVM here,
domains are `type='qemu'` (Ganeti's kvm_flag disabled), and the reason is one line for the
node's info and job logs.

A positive answer is cached in `/var/cache/herder/kvm-probe.json`, keyed by the kernel
release, the QEMU binary (path, size, time) and /dev/kvm's presence, so a node probes once per
change. A negative one is never kept on disk (one slow start of a loaded machine must not pin
the node to emulation): noded probes again after a restart, and a running noded after
`REPROBE_AFTER` seconds (herder.noded.hypervisor).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import select
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from herder.core.livefigures import KvmVerdict

CACHE_FILE = Path("/var/cache/herder/kvm-probe.json")
DEFAULT_QEMU = "qemu-system-x86_64"
# Working KVM reaches the decompressor in a fraction of a second, TCG in about 0.5 s; the KVM
# of the machines this was written on (nested, 100 % system CPU) needs 7 s and never boots a
# guest in useful time. Slower than this deadline counts as not working.
PROBE_TIMEOUT = 3.0
# a running noded probes again this long after a negative answer (a slow start under load)
REPROBE_AFTER = 300.0
BOOT_DIR = Path("/boot")
# What the kernel's decompressor prints with earlyprintk (it runs in 64-bit mode, so the CPU
# got through real and protected mode), or its banner. Under TCG these come within a second;
# the kernel proper takes far longer to decompress there, so it is not waited for.
KERNEL_BANNERS = (b"KASLR", b"Decompressing Linux", b"Linux version")


@dataclass(frozen=True)
class KvmProbe:
    usable: bool
    reason: str  # one line for the node's info and the job log
    seconds: float
    accel: str = "kvm"

    @property
    def domain_type(self) -> str:
        return "kvm" if self.usable else "qemu"

    def verdict(self) -> KvmVerdict:
        """The verdict as the node's RPCs answer it."""
        return KvmVerdict(usable=self.usable, reason=self.reason, seconds=self.seconds)


def _qemu_path(qemu: str) -> str | None:
    if "/" in qemu:
        return qemu if os.access(qemu, os.X_OK) else None
    return shutil.which(qemu)


def probe_kernel(boot_dir: Path = BOOT_DIR) -> Path | None:
    """The running kernel's image, else any kernel in /boot."""
    running = boot_dir / f"vmlinuz-{platform.release()}"
    if running.exists():
        return running
    kernels = sorted(boot_dir.glob("vmlinuz-*"))
    return kernels[-1] if kernels else None


def _wait_for_banner(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    assert proc.stdout is not None
    seen = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            return False
        seen = (seen + chunk)[-4096:]
        if any(banner in seen for banner in KERNEL_BANNERS):
            return True
    return False


def run_probe(qemu: str = DEFAULT_QEMU, timeout: float = PROBE_TIMEOUT, accel: str = "kvm",
              kernel: Path | None = None) -> KvmProbe:
    """Boot a kernel under `accel` (tests use "tcg" to check the probe itself)."""
    started = time.monotonic()
    name = accel.upper()
    binary = _qemu_path(qemu)
    if binary is None:
        return KvmProbe(False, f"{qemu} is not installed", 0.0, accel)
    if accel == "kvm" and not os.path.exists("/dev/kvm"):
        return KvmProbe(False, "/dev/kvm is missing: plain QEMU emulation (TCG) is used", 0.0,
                        accel)
    kernel = kernel or probe_kernel()
    if kernel is None:
        return KvmProbe(False, f"no kernel in {BOOT_DIR} to probe {name} with: plain QEMU "
                        "emulation (TCG) is used", 0.0, accel)
    argv = [binary, "-accel", accel, "-machine", "pc", "-m", "128", "-nodefaults",
            "-no-user-config", "-display", "none", "-monitor", "none", "-serial", "stdio",
            "-no-reboot", "-kernel", str(kernel), "-append",
            "earlyprintk=serial,ttyS0 console=ttyS0 panic=-1"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        booted = _wait_for_banner(proc, started + timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    seconds = round(time.monotonic() - started, 3)
    if booted:
        return KvmProbe(True, f"a {name} guest reached its kernel in {seconds:g}s", seconds,
                        accel)
    return KvmProbe(False, f"a {name} guest did not reach its kernel within {timeout:g}s: "
                    "plain QEMU emulation (TCG) is used", seconds, accel)


def _cache_key(qemu: str) -> str:
    binary = _qemu_path(qemu) or qemu
    stamp = ""
    with contextlib.suppress(OSError):
        info = os.stat(binary)
        stamp = f"{info.st_size}:{info.st_mtime_ns}"
    return (f"{platform.release()}|{binary}|{stamp}|"
            f"{'kvm' if os.path.exists('/dev/kvm') else 'nokvm'}")


def kvm_probe(cache_file: Path = CACHE_FILE, qemu: str = DEFAULT_QEMU,
              timeout: float = PROBE_TIMEOUT, refresh: bool = False) -> KvmProbe:
    """The node's answer: a positive one from the cache when its inputs did not change, else
    a new probe (only a positive answer is cached; a negative one removes the cache)."""
    key = _cache_key(qemu)
    if not refresh:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            cached = json.loads(cache_file.read_text())
            if cached["key"] == key and cached["probe"]["usable"] is True:
                return KvmProbe(**cached["probe"])
    probe = run_probe(qemu, timeout)
    if not probe.usable:
        with contextlib.suppress(OSError):
            cache_file.unlink(missing_ok=True)
        return probe
    with contextlib.suppress(OSError):
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        partial = cache_file.with_suffix(".tmp")
        partial.write_text(json.dumps({"key": key, "probe": asdict(probe)}))
        os.replace(partial, cache_file)
    return probe
