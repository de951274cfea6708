"""`core.heap`: masterd's glibc heap settings (figures: bench/scale.py, docs/scale.md)."""

from __future__ import annotations

import ctypes
import gc

import pytest

from herder.core import heap


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mapped_bytes() -> int:
    """glibc's bytes in blocks that are their own mappings (mallinfo2's hblkhd)."""
    libc = heap._glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        pytest.skip("not glibc 2.33 or later")
    libc.mallinfo2.restype = _MallInfo2
    return int(libc.mallinfo2().hblkhd)


def test_a_big_block_stays_its_own_mapping_after_a_bigger_one_was_freed() -> None:
    """glibc's default raises the mmap threshold to each big block freed: a 1 MiB buffer after
    an 8 MiB one was freed would come from (and fragment) the arenas."""
    _mapped_bytes()
    heap.limit_arenas()
    bigger = bytearray(8 << 20)
    del bigger
    before = _mapped_bytes()
    block = bytearray(1 << 20)
    assert _mapped_bytes() >= before + (1 << 20)
    del block
    assert _mapped_bytes() < before + (1 << 20)  # and goes back when freed


def test_freeze_takes_the_live_objects_out_of_the_collectors_reach() -> None:
    gc.unfreeze()
    try:
        kept = [[n] for n in range(1000)]
        assert heap.freeze()
        assert gc.get_freeze_count() >= len(kept)
        assert not heap.freeze(grown=True)  # nothing grew since
    finally:
        gc.unfreeze()
