"""glibc's heap in a daemon that holds a big config (masterd at 10,000 instances).

Python returns freed small objects to glibc's malloc, which keeps the pages: after one bulk
answer of 10,000 instances or a burst of jobs in worker threads (each thread its own arena by
default) the process keeps hundreds of MB it no longer uses. Two arenas bound the per-thread
spread; `trim` gives the free pages back to the kernel (madvise). All of these are no-ops where
the C library is not glibc.

glibc also raises its mmap threshold, by default, to the size of each big block freed (up to
32 MiB): after the first 14 MB bulk answer, every buffer below that size (a signed ssconf of
470 KB, a whole config document of 16 MB, the 256 KiB TLS buffer of each RAPI connection) came
from the arenas, and the holes they left kept the heap's pages (measured at 10,000 instances:
60-110 MB free in the arenas after a burst of jobs, against 1-6 MB with a fixed threshold).
`limit_arenas` fixes the threshold at glibc's default start (128 KiB): a block of that size or
more that no free chunk of the arenas fits is its own mapping, back to the kernel when freed.

Python's cyclic GC walks every container object of its oldest generation on a full collection:
at 10,000 instances that is a few hundred thousand objects of the shared config (0.15-0.2 s a
pass, a pause in whatever job or answer triggers it). `freeze` takes the objects alive now out of
its reach (`gc.freeze`); they are still freed by reference counting when dropped (the config's
objects hold no reference cycles), only a cycle among them would stay.

Safety (issue 29: a masterd died of SIGSEGV once right after an etcd takeover; nothing here
was found to cause it, see docs/ha.md "Fatal signals"): glibc's `malloc_trim` locks each arena
while it trims it, so it is safe beside threads that allocate and free (ctypes releases the GIL
around the call, and the call touches no Python object). What is not safe is a call into
libc through ctypes once the interpreter tears down (the module's objects, ctypes' among them,
are being freed): `trim` does nothing once `stop` was called (masterd's way out) or the
interpreter is finalizing, and one call at a time runs (under the lock), so `stop` returns only
when no trim is in flight. `gc.freeze` and `gc.collect` run under the GIL, as any Python code.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
import threading
import time

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters
M_ARENA_MAX = -8
MMAP_THRESHOLD = 128 * 1024  # glibc's default start; setting it stops the dynamic raise

_libc: ctypes.CDLL | None = None
_lock = threading.Lock()
_last_trim = 0.0
_stopped = False
REFREEZE = 200_000  # objects in the oldest generation that make `freeze(grown=True)` act


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name or "libc.so.6")
            libc.malloc_trim  # noqa: B018  # only glibc has it
            libc.mallopt  # noqa: B018
        except (OSError, AttributeError):
            return None
        _libc = libc
    return _libc


def limit_arenas(count: int = 2, mmap_threshold: int = MMAP_THRESHOLD) -> None:
    """At most `count` malloc arenas, and blocks of `mmap_threshold` bytes or more in their own
    mappings whatever was freed before (call before the daemon starts its threads)."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(M_ARENA_MAX, count)
        libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold)


def trim(every: float = 0.0) -> bool:
    """Give free heap pages back to the kernel, at most once per `every` seconds; whether
    it ran."""
    global _last_trim
    libc = _glibc()
    if libc is None:
        return False
    with _lock:  # one at a time, and never after `stop`
        if _stopped or sys.is_finalizing():
            return False
        now = time.monotonic()
        if every and now - _last_trim < every:
            return False
        _last_trim = now
        libc.malloc_trim(0)
    return True


def stop() -> None:
    """No trim from now on; returns once a trim in flight (another thread's) has ended. Called
    on the daemon's way out, before the interpreter tears down."""
    global _stopped
    with _lock:
        _stopped = True


def freeze(*, grown: bool = False) -> bool:
    """Collect once, then move every object alive into the GC's permanent generation (call
    once a big config is loaded). With `grown`, only when the oldest generation holds more than
    REFREEZE objects again (a new whole config since); whether it ran."""
    if grown and len(gc.get_objects(generation=2)) <= REFREEZE:
        return False
    gc.collect()
    gc.freeze()
    return True
