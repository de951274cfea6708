"""`masterd.heap`: masterd's glibc heap settings (figures: bench/scale.py, docs/scale.md)."""

from __future__ import annotations

import ctypes
import gc

import pytest

from herder.masterd import heap


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo() -> _MallInfo2:
    libc = heap._glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        pytest.skip("not glibc 2.33 or later")
    libc.mallinfo2.restype = _MallInfo2
    info: _MallInfo2 = libc.mallinfo2()
    return info


def test_a_big_block_stays_its_own_mapping_after_a_bigger_one_was_freed() -> None:
    """glibc's default raises the mmap threshold to each big block freed: a block after a
    bigger one was freed would come from (and fragment) the arenas. The block is bigger than
    everything free in the arenas, which glibc would otherwise reuse for it."""
    heap.limit_arenas()
    size = int(_mallinfo().fordblks) + (1 << 20)
    bigger = bytearray(8 * size)
    del bigger
    before = int(_mallinfo().hblkhd)  # bytes in blocks that are their own mappings
    block = bytearray(size)
    assert _mallinfo().hblkhd >= before + size
    del block
    assert _mallinfo().hblkhd < before + size  # and goes back when freed


def test_freeze_takes_the_live_objects_out_of_the_collectors_reach() -> None:
    gc.unfreeze()
    try:
        kept = [[n] for n in range(1000)]
        assert heap.freeze()
        assert gc.get_freeze_count() >= len(kept)
        assert not heap.freeze(grown=True)  # nothing grew since
    finally:
        gc.unfreeze()
