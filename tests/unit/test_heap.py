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


TRIM_BESIDE_THREADS = """
import sys, threading, time
from herder.masterd import heap
from herder.core import faults

faults.enable()
heap.limit_arenas()
end = time.monotonic() + 3
trims = 0

def churn():  # allocate and free, small and big, as job workers do
    while time.monotonic() < end:
        kept = [bytearray(n % 300_000 + 1) for n in range(0, 3_000_000, 7919)]
        del kept

def trimmer():
    global trims
    while time.monotonic() < end:
        trims += heap.trim()

workers = [threading.Thread(target=churn) for _ in range(4)]
workers += [threading.Thread(target=trimmer) for _ in range(2)]
for w in workers:
    w.start()
for w in workers:
    w.join()
assert trims > 10, trims
heap.stop()
assert not heap.trim()  # never again once stopped
print("ok", trims)
"""


def test_trims_beside_allocating_threads_and_none_after_stop() -> None:
    """malloc_trim through ctypes (the GIL released) from two threads at once while four
    threads allocate and free: no crash (a segfault would print its traceback: core.faults),
    and none after `stop` (masterd's way out, before the interpreter tears down)."""
    import subprocess
    import sys

    if heap._glibc() is None:
        pytest.skip("not glibc")
    done = subprocess.run([sys.executable, "-c", TRIM_BESIDE_THREADS], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")
