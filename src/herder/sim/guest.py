"""The simulated cluster's guest: a Debian kernel and a busybox initramfs, built on this machine.

Inputs are Debian's `linux-image-amd64` (the newest `/boot/vmlinuz-*` and its modules) and
`busybox-static` (`/bin/busybox`); nothing is downloaded. The result is cached under
`/var/cache/herder/guest/<key>/` (`vmlinux` or `vmlinuz`, `initrd.img`), where the key hashes
the inputs' paths, sizes and times and the init script, so a new kernel or a changed script
builds anew.

The kernel is booted uncompressed (`vmlinux`, the ELF inside Debian's bzImage, through its PVH
entry point, which QEMU's `-kernel` takes): under emulation (TCG: the simulated nodes have no
working KVM) unpacking the xz-compressed bzImage took 8.7 of a boot's 15.3 CPU seconds to the
first heartbeat, the uncompressed one boots in 6.0 (bench/guest_boot.py). A kernel without a
PVH entry, or compressed in a way Python cannot unpack, is booted as the bzImage it is.

The guest's `/init` loads the few modules its disks need (virtio-blk, IDE/SATA through
ata_piix, virtio-scsi), ACPI power-button handling (so libvirt's clean shutdown works) and the
balloon driver, then prints one heartbeat line a second on its console:

    herder-guest boot_id=<the kernel's random boot id> uptime=<s> disk=<sha256 of 1st MiB>
        [seq=<N>] blk=<dev>:<sectors>,... net=<interface>=<MAC>,...

`disk=none` when the guest has no disk; `seq` acknowledges a record of the write sequence
(below); `blk` lists the block devices of `/sys/block` with their sizes and `net` the network
interfaces of `/sys/class/net` with their MACs (`none` when there are none), so a hotplugged
disk or NIC and a grown disk show without a reboot. The boot id is the kernel's own
(`/proc/sys/kernel/random/boot_id`): fixed for one boot, different after any reboot, carried
along by a live migration (the memory travels).
"""

from __future__ import annotations

import bz2
import fcntl
import gzip
import hashlib
import io
import lzma
import os
import re
import shutil
import stat
import struct
import tempfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from herder.core.errors import HerderError

CACHE_DIR = Path("/var/cache/herder/guest")
BUSYBOX = Path("/bin/busybox")
BOOT_DIR = Path("/boot")
MODULES_DIR = Path("/lib/modules")
BUILDER_VERSION = "2"  # 2: the kernel uncompressed (vmlinux)

# What the guest needs beyond the kernel's built-ins (Debian builds these as modules).
GUEST_MODULES = (
    "virtio_pci", "virtio_blk", "virtio_scsi", "virtio_balloon",  # paravirtual disks, balloon
    "ata_piix", "sd_mod",  # IDE/SATA disks (disk_type=ide) and SCSI disks
    "button", "evdev",  # the ACPI power button, as an input device busybox's acpid reads
    "virtio_net",  # paravirtual NICs (PCI hotplug itself is built into Debian's kernel)
)

# The kernel command line the guest needs (Ganeti's serial_console adds console=ttyS0,<speed>).
# no_timer_check: the kernel's check that the timer interrupt ticks through the IO-APIC waits
# a few ticks; under emulation on a loaded machine they come late, the check fails ("MP-BIOS
# bug: 8254 timer not connected to IO-APIC") and the guest got no further in 120 s (seen with
# the compressed and the uncompressed kernel at a load of 15-30). Virtual machines' kernels
# commonly skip that check.
GUEST_KERNEL_ARGS = "quiet panic=-1 no_timer_check"

HEARTBEAT_RE = re.compile(
    r"herder-guest boot_id=(?P<boot_id>[0-9a-f-]+) uptime=(?P<uptime>[0-9.]+) "
    r"disk=(?P<disk>[0-9a-f]{64}|none)(?: seq=(?P<seq>[0-9]+))?"
    r"(?: blk=(?P<blk>none|[a-z0-9]+:[0-9]+(?:,[a-z0-9]+:[0-9]+)*))?"
    r"(?: net=(?P<net>none|[a-z0-9]+=[0-9a-f:]{17}(?:,[a-z0-9]+=[0-9a-f:]{17})*))?")
SEQUENCE_SECTOR = 2048  # the write sequence's counter (records follow, one per sector)
RECORD_RE = re.compile(rb"herder-seq boot_id=([0-9a-f-]+) n=([0-9]+)\n")

INIT_SCRIPT = r"""#!/bin/busybox sh
# herder-guest: the simulated cluster's tiny guest (built by herder.sim.guest)
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r module; do insmod "/lib/modules/$module" 2>/dev/null; done < /etc/modules.order
# A clean shutdown (libvirt's virDomainShutdown = ACPI power button) powers the guest off.
# (acpid needs its log and pid file's directories, or it exits at once)
mkdir -p /etc/acpi/PWRF /var/log /var/run
printf '#!/bin/sh\nsync\npoweroff -f\n' > /etc/acpi/PWRF/00000080
chmod +x /etc/acpi/PWRF/00000080
acpid -c /etc/acpi 2>/dev/null
boot_id=$(cat /proc/sys/kernel/random/boot_id)
disk=""
for attempt in 1 2 3 4 5 6 7 8 9 10; do
  for candidate in /dev/vda /dev/sda /dev/hda; do
    if [ -b "$candidate" ]; then disk=$candidate; break 2; fi
  done
  sleep 0.2
done
# The write sequence: past the first MiB (its hash is the heartbeat's), sector 2048 holds the
# next record's number, sectors 2049.. one record each. A record is written and synced, then
# the counter; only then is its number printed (acknowledged). A boot goes on from the counter.
seq=""
slots=0
if [ -n "$disk" ]; then
  sectors=$(cat "/sys/block/${disk#/dev/}/size" 2>/dev/null || echo 0)
  slots=$((sectors - 2049))
  seq=$(dd if="$disk" bs=512 skip=2048 count=1 2>/dev/null | tr -d '\000' \
        | sed -n 's/^herder-seq-next \([0-9][0-9]*\)$/\1/p')
  [ -n "$seq" ] || seq=0
fi
while true; do
  acked=""
  if [ -n "$disk" ] && [ "$seq" -lt "$slots" ]; then
    printf 'herder-seq boot_id=%s n=%d\n' "$boot_id" "$seq" \
      | dd of="$disk" bs=512 seek=$((2049 + seq)) conv=notrunc,sync,fsync 2>/dev/null \
    && printf 'herder-seq-next %d\n' $((seq + 1)) \
      | dd of="$disk" bs=512 seek=2048 conv=notrunc,sync,fsync 2>/dev/null \
    && acked=" seq=$seq" && seq=$((seq + 1))
  fi
  if [ -n "$disk" ]; then
    hash=$(dd if="$disk" bs=1048576 count=1 iflag=direct 2>/dev/null | sha256sum)
    hash=${hash%% *}
  else
    hash=none
  fi
  # the block devices (name:512-byte sectors) and network interfaces (name=MAC) it has now
  blk=""
  for dev in /sys/block/*; do
    case ${dev##*/} in loop*|ram*|sr*|fd*|\*) continue ;; esac
    blk="$blk${blk:+,}${dev##*/}:$(cat "$dev/size")"
  done
  net=""
  for dev in /sys/class/net/*; do
    case ${dev##*/} in lo|\*) continue ;; esac
    net="$net${net:+,}${dev##*/}=$(cat "$dev/address")"
  done
  read -r uptime idle < /proc/uptime
  echo "herder-guest boot_id=$boot_id uptime=$uptime disk=$hash$acked" \
       "blk=${blk:-none} net=${net:-none}"
  sleep 1
done
"""


class GuestBuildError(HerderError):
    """The guest cannot be built on this machine (what is missing is in the message)."""


@dataclass(frozen=True)
class GuestImage:
    """A built guest: pass `kernel`, `initrd` and `kernel_args` to the domain."""

    kernel: Path
    initrd: Path
    kernel_args: str = GUEST_KERNEL_ARGS


@dataclass(frozen=True)
class Heartbeat:
    boot_id: str
    uptime: float
    disk: str  # hex sha256 of the first MiB of the first disk, or "none"
    seq: int | None = None  # the record of the write sequence this line acknowledges
    # block device -> its size in 512-byte sectors (/sys/block), network interface -> its MAC
    # (/sys/class/net); None from a guest that does not report them
    blocks: dict[str, int] | None = None
    nics: dict[str, str] | None = None


def _pairs(text: str | None, separator: str) -> list[tuple[str, str]] | None:
    if text is None:
        return None
    if text == "none":
        return []
    pairs = []
    for item in text.split(","):
        key, _, value = item.partition(separator)
        pairs.append((key, value))
    return pairs


def parse_heartbeats(text: str) -> list[Heartbeat]:
    """Every heartbeat line in a serial log, in order."""
    beats = []
    for m in HEARTBEAT_RE.finditer(text):
        blocks, nics = _pairs(m["blk"], ":"), _pairs(m["net"], "=")
        beats.append(Heartbeat(m["boot_id"], float(m["uptime"]), m["disk"],
                               int(m["seq"]) if m["seq"] is not None else None,
                               None if blocks is None else {k: int(v) for k, v in blocks},
                               None if nics is None else dict(nics)))
    return beats


@dataclass(frozen=True)
class SequenceCheck:
    """The write sequence on a guest's disk against what the guests acknowledged."""

    records: list[tuple[str, int]]  # (boot id, number) in disk order, up to the first gap
    writers: list[str]  # boot ids in the order they wrote, each once if one wrote at a time
    lost: list[tuple[str, int]]  # acknowledged, but not on the disk as acknowledged

    @property
    def one_writer_at_a_time(self) -> bool:
        return len(self.writers) == len(set(self.writers))


def read_sequence(disk: bytes) -> list[tuple[str, int]]:
    """The records of the write sequence in a disk's bytes, up to the first empty sector."""
    records = []
    sector = SEQUENCE_SECTOR + 1
    while (sector + 1) * 512 <= len(disk):
        found = RECORD_RE.match(disk, sector * 512)
        if found is None:
            break
        records.append((found[1].decode(), int(found[2])))
        sector += 1
    return records


def check_sequence(disk: bytes, acknowledged: Iterable[Heartbeat]) -> SequenceCheck:
    """Whether one writer wrote at a time (each boot id one run of records, every record at
    its own number) and no acknowledged record is missing or overwritten."""
    return check_records(read_sequence(disk), acknowledged)


def check_records(records: list[tuple[str, int]],
                  acknowledged: Iterable[Heartbeat]) -> SequenceCheck:
    """`check_sequence` on records already read from a disk (`read_sequence`)."""
    writers: list[str] = []
    for index, (boot, number) in enumerate(records):
        if number != index:
            writers.append(f"misplaced:{boot}:{number}")
        if not writers or writers[-1] != boot:
            writers.append(boot)
    on_disk = set(records)
    lost = sorted({(b.boot_id, b.seq) for b in acknowledged if b.seq is not None}
                  - on_disk)
    return SequenceCheck(records, writers, lost)


def last_heartbeat(log: Path) -> Heartbeat | None:
    try:
        beats = parse_heartbeats(log.read_text(errors="replace"))
    except FileNotFoundError:
        return None
    return beats[-1] if beats else None


def _kernel_version(vmlinuz: Path) -> str:
    return vmlinuz.name.removeprefix("vmlinuz-")


def find_kernel(boot_dir: Path = BOOT_DIR, modules_dir: Path = MODULES_DIR) -> Path:
    """The newest Debian kernel that has its modules installed."""
    def version_key(path: Path) -> list[int | str]:
        return [int(part) if part.isdigit() else part
                for part in re.split(r"[.-]", _kernel_version(path))]

    kernels = sorted((path for path in boot_dir.glob("vmlinuz-*")
                      if (modules_dir / _kernel_version(path) / "modules.dep").exists()),
                     key=version_key)
    if not kernels:
        raise GuestBuildError(f"no kernel with modules in {boot_dir} (apt-get install "
                              "linux-image-amd64)")
    return kernels[-1]


def module_load_order(modules_dep: Path, wanted: Iterable[str]) -> list[str]:
    """Module files (relative to the modules directory) to load, dependencies first."""
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in modules_dep.read_text().splitlines():
        if ":" not in line:
            continue
        module, _, rest = line.partition(":")
        deps[module] = rest.split()
        name = Path(module).name.split(".ko")[0].replace("-", "_")
        by_name[name] = module
    order: list[str] = []

    def visit(module: str) -> None:
        if module in order:
            return
        # modules.dep lists every transitive dependency; each has its own line to recurse on.
        for dependency in deps.get(module, []):
            visit(dependency)
        order.append(module)

    for name in wanted:
        wanted_module = by_name.get(name.replace("-", "_"))
        if wanted_module is not None:  # else built into this kernel: nothing to load
            visit(wanted_module)
    return order


# The bzImage's setup header (the kernel's boot protocol, Documentation/x86/boot.rst): the
# number of setup sectors, the "HdrS" magic, the protocol version, and where the compressed
# kernel (payload) lies in the protected-mode part (protocol 2.08 and later).
SETUP_SECTS, HEADER_MAGIC, HEADER_VERSION, PAYLOAD_FIELDS = 0x1F1, 0x202, 0x206, 0x248
# ELF note of the PVH entry point (Xen's XEN_ELFNOTE_PHYS32_ENTRY) QEMU boots an ELF kernel by
PVH_NOTE = (b"Xen\0", 18)
PT_NOTE = 4


def _decompress(payload: bytes) -> bytes | None:
    """A bzImage's payload unpacked, by its magic (None: a compression Python cannot unpack,
    such as zstd or lz4)."""
    try:
        if payload.startswith(b"\xfd7zXZ\x00"):
            return lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(payload)
        if payload.startswith(b"\x5d\x00\x00"):
            return lzma.LZMADecompressor(lzma.FORMAT_ALONE).decompress(payload)
        if payload.startswith(b"\x1f\x8b"):
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(payload)
        if payload.startswith(b"BZh"):
            return bz2.BZ2Decompressor().decompress(payload)
    except (lzma.LZMAError, zlib.error, OSError, EOFError):
        return None
    return None


def _has_pvh_entry(elf: bytes) -> bool:
    """Whether a 64-bit little-endian ELF kernel has the PVH entry note."""
    if not elf.startswith(b"\x7fELF\x02\x01"):
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for index in range(phnum):
        kind, _, offset, _, _, size = struct.unpack_from("<IIQQQQ", elf, phoff + index * phentsize)
        if kind != PT_NOTE:
            continue
        position, end = offset, offset + size
        while position + 12 <= end:
            namesz, descsz, note_type = struct.unpack_from("<III", elf, position)
            name = elf[position + 12:position + 12 + namesz]
            if (name, note_type) == PVH_NOTE:
                return True
            position += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def boot_kernel(bzimage: bytes) -> tuple[str, bytes]:
    """The kernel file the guest boots, as (file name, content): the uncompressed ELF inside
    the bzImage when it has a PVH entry (no unpacking under emulation at every boot), else
    the bzImage itself."""
    if len(bzimage) < PAYLOAD_FIELDS + 8 or bzimage[HEADER_MAGIC:HEADER_MAGIC + 4] != b"HdrS" \
            or struct.unpack_from("<H", bzimage, HEADER_VERSION)[0] < 0x208:
        return "vmlinuz", bzimage
    protected_mode = ((bzimage[SETUP_SECTS] or 4) + 1) * 512
    offset, length = struct.unpack_from("<II", bzimage, PAYLOAD_FIELDS)
    start = protected_mode + offset
    elf = _decompress(bzimage[start:start + length])
    if elf is None or not _has_pvh_entry(elf):
        return "vmlinuz", bzimage
    return "vmlinux", elf


def _inputs_key(kernel: Path, busybox: Path, modules: list[Path]) -> str:
    digest = hashlib.sha256(f"{BUILDER_VERSION}\n{INIT_SCRIPT}\n{GUEST_MODULES}".encode())
    for path in (kernel, busybox, *modules):
        info = path.stat()
        digest.update(f"{path}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


class _Newc:
    """A cpio archive in the "newc" format the kernel unpacks as its initramfs."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.inode = 1

    def _entry(self, name: str, mode: int, data: bytes = b"") -> None:
        encoded = name.encode() + b"\0"
        fields = (self.inode, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
        self.inode += 1
        header = b"070701" + b"".join(b"%08X" % value for value in fields)
        self.out.write(header + encoded)
        self.out.write(b"\0" * (-(len(header) + len(encoded)) % 4))
        self.out.write(data)
        self.out.write(b"\0" * (-len(data) % 4))

    def directory(self, name: str) -> None:
        self._entry(name, stat.S_IFDIR | 0o755)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | mode, data)

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        return self.out.getvalue()


def build_initramfs(busybox: Path, modules_root: Path, modules: list[str]) -> bytes:
    """The gzip-compressed initramfs: busybox, /init, the modules and their load order."""
    archive = _Newc()
    for directory in ("bin", "dev", "proc", "sys", "etc", "tmp", "lib", "lib/modules"):
        archive.directory(directory)
    archive.file("bin/busybox", busybox.read_bytes(), 0o755)
    archive.file("init", INIT_SCRIPT.encode(), 0o755)
    names = []
    for module in modules:
        name = Path(module).name
        archive.file(f"lib/modules/{name}", (modules_root / module).read_bytes())
        names.append(name)
    archive.file("etc/modules.order", "".join(f"{name}\n" for name in names).encode())
    return gzip.compress(archive.finish(), compresslevel=6, mtime=0)


def ensure_guest(cache_dir: Path = CACHE_DIR, boot_dir: Path = BOOT_DIR,
                 modules_dir: Path = MODULES_DIR, busybox: Path = BUSYBOX) -> GuestImage:
    """The cached guest, built first when missing or when an input changed."""
    if not busybox.exists():
        raise GuestBuildError(f"{busybox} is missing (apt-get install busybox-static)")
    kernel = find_kernel(boot_dir, modules_dir)
    modules_root = modules_dir / _kernel_version(kernel)
    modules = module_load_order(modules_root / "modules.dep", GUEST_MODULES)
    key = _inputs_key(kernel, busybox, [modules_root / module for module in modules])
    target = cache_dir / key
    if (target / "initrd.img").exists():
        return _built(target)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; the others find it built
        if (target / "initrd.img").exists():
            return _built(target)
        staging = Path(tempfile.mkdtemp(prefix=".build-", dir=cache_dir))
        try:
            kernel_name, kernel_file = boot_kernel(kernel.read_bytes())
            (staging / kernel_name).write_bytes(kernel_file)
            (staging / "initrd.img").write_bytes(build_initramfs(busybox, modules_root, modules))
            (staging / "inputs").write_text(f"kernel {kernel}\nbusybox {busybox}\n")
            for path in staging.iterdir():
                os.chmod(path, 0o644)
            os.chmod(staging, 0o755)
            os.rename(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        # Builds of other inputs stay: a running cluster's kernel_path may name one (another
        # checkout of herder builds another init script), and each is tens of MiB.
    return _built(target)


def _built(target: Path) -> GuestImage:
    """The guest built in `target` (its kernel uncompressed or not: `boot_kernel`)."""
    uncompressed = target / "vmlinux"
    return GuestImage(uncompressed if uncompressed.exists() else target / "vmlinuz",
                      target / "initrd.img")


# --- the OS definition `herder-guest` (Ganeti OS API 20) ---------------------------------------

OS_NAME = "herder-guest"
PATTERN_BLOCKS = 1024  # 1 MiB of 1 KiB blocks: what the heartbeat hashes

_OS_CREATE = r"""#!/bin/bash
# herder-guest: write a recognizable pattern over the first MiB of the first disk; the guest's
# kernel and initramfs come from the hvparams kernel_path/initrd_path (herder.sim.guest).
set -euo pipefail
[ "${DISK_COUNT:-0}" -ge 1 ] || { echo "herder-guest: the instance has no disk" >&2; exit 1; }
for ((block = 0; block < 1024; block++)); do
  printf '%-1024s' "herder-guest $INSTANCE_NAME block $block"
done | dd of="$DISK_0_PATH" bs=1M count=1 iflag=fullblock conv=notrunc,fsync status=none
"""

_OS_IMPORT = r"""#!/bin/bash
# herder-guest: one disk's content arrives on stdin (Ganeti's OS API: once per disk, the disk
# being $IMPORT_DEVICE). A disk without a device on the node (a userspace rbd image) is a pipe
# here (herder's /dev/stdout, read by `rbd import`): nothing to sync, and fsync(2) of a pipe fails
set -euo pipefail
if [ -p "$IMPORT_DEVICE" ]; then
  exec dd of="$IMPORT_DEVICE" bs=1M status=none
fi
dd of="$IMPORT_DEVICE" bs=1M conv=notrunc,fsync status=none
"""

_OS_EXPORT = r"""#!/bin/bash
# herder-guest: one disk's content ($EXPORT_DEVICE) to stdout
set -euo pipefail
dd if="$EXPORT_DEVICE" bs=1M status=none
"""

_OS_SCRIPTS = {
    "create": _OS_CREATE,
    "import": _OS_IMPORT,
    "export": _OS_EXPORT,
    "rename": "#!/bin/sh\n# herder-guest: nothing in the guest knows its name\nexit 0\n",
    "verify": "#!/bin/sh\n# herder-guest: no OS parameters to check\nexit 0\n",
}


def disk_pattern(instance_name: str) -> bytes:
    """What `create` writes over the first MiB of the first disk."""
    return b"".join(f"herder-guest {instance_name} block {block}".ljust(1024).encode()
                    for block in range(PATTERN_BLOCKS))


def disk_pattern_hash(instance_name: str) -> str:
    """The `disk=` a freshly created guest's heartbeat shows."""
    return hashlib.sha256(disk_pattern(instance_name)).hexdigest()


def install_os_definition(search_dir: Path) -> Path:
    """Write the `herder-guest` OS into an OS search directory (e.g. /srv/herder/os)."""
    target = search_dir / OS_NAME
    target.mkdir(parents=True, exist_ok=True)
    (target / "ganeti_api_version").write_text("20\n")
    (target / "parameters.list").write_text("")
    for name, text in _OS_SCRIPTS.items():
        path = target / name
        path.write_text(text)
        os.chmod(path, 0o755)
    return target
