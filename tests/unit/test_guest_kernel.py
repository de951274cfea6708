"""The simulated cluster's guest boots its kernel uncompressed (herder.sim.guest.boot_kernel):
the ELF inside the bzImage when it has a PVH entry QEMU's `-kernel` can boot, else the bzImage
as it is. On bzImages built here with each compression the kernel uses, and on this machine's
Debian kernel (the one the simulated guests boot)."""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct

import pytest

from herder.sim import guest

ELF_HEADER = 64
PROGRAM_HEADER = 56


def elf_kernel(note: tuple[bytes, int] | None) -> bytes:
    """A 64-bit ELF with one PT_NOTE segment holding `note` (name, type), or none."""
    notes = b""
    if note is not None:
        name, kind = note
        notes = struct.pack("<III", len(name), 4, kind) + name.ljust(-(-len(name) // 4) * 4, b"\0")
        notes += b"\x00\x10\x00\x01"  # the entry address the note gives
    header = b"\x7fELF\x02\x01\x01".ljust(16, b"\0") + struct.pack(
        "<HHIQQQIHHHHHH", 2, 0x3E, 1, 0x1000000, ELF_HEADER, 0, 0, ELF_HEADER, PROGRAM_HEADER,
        1, 64, 0, 0)
    segment = struct.pack("<IIQQQQQQ", 4, 4, ELF_HEADER + PROGRAM_HEADER, 0, 0, len(notes),
                          len(notes), 4)
    return header + segment + notes + b"kernel text" * 100


def bzimage(payload: bytes, version: int = 0x20F, setup_sects: int = 3) -> bytes:
    """A bzImage around `payload` as the kernel's build writes one (boot protocol header)."""
    setup = bytearray((setup_sects + 1) * 512)
    setup[guest.SETUP_SECTS] = setup_sects
    setup[guest.HEADER_MAGIC:guest.HEADER_MAGIC + 4] = b"HdrS"
    struct.pack_into("<H", setup, guest.HEADER_VERSION, version)
    decompressor = b"\x90" * 300  # the protected-mode code before the payload
    struct.pack_into("<II", setup, guest.PAYLOAD_FIELDS, len(decompressor), len(payload))
    # the build appends the uncompressed size after the payload
    return bytes(setup) + decompressor + payload + struct.pack("<I", 123456)


PVH_ELF = elf_kernel(guest.PVH_NOTE)
COMPRESSIONS = {
    "xz": lambda data: lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32),
    "lzma": lambda data: lzma.compress(data, format=lzma.FORMAT_ALONE),
    "gzip": lambda data: gzip.compress(data, mtime=0),
    "bzip2": bz2.compress,
}


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
def test_a_pvh_kernel_is_booted_uncompressed(compression: str) -> None:
    image = bzimage(COMPRESSIONS[compression](PVH_ELF))
    assert guest.boot_kernel(image) == ("vmlinux", PVH_ELF)


@pytest.mark.parametrize("image", [
    bzimage(lzma.compress(elf_kernel(None))),  # no PVH entry: QEMU could not boot the ELF
    bzimage(lzma.compress(elf_kernel((b"Linux\0", 18)))),  # a note of another name
    bzimage(b"\x28\xb5\x2f\xfd" + b"zstd frame"),  # zstd: Python cannot unpack it
    bzimage(b"\xfd7zXZ\x00" + b"broken"),  # a damaged payload
    bzimage(lzma.compress(PVH_ELF), version=0x206),  # a protocol without payload fields
    b"MZ" + b"\0" * 2000,  # no setup header at all
], ids=["no-pvh", "other-note", "zstd", "damaged", "old-protocol", "no-header"])
def test_any_other_kernel_is_booted_as_it_is(image: bytes) -> None:
    assert guest.boot_kernel(image) == ("vmlinuz", image)


def test_debians_kernel_boots_uncompressed() -> None:
    kernel = guest.find_kernel()
    name, elf = guest.boot_kernel(kernel.read_bytes())
    assert name == "vmlinux"
    assert elf.startswith(b"\x7fELF\x02\x01") and len(elf) > kernel.stat().st_size
