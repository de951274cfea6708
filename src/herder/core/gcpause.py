"""Pausing Python's cyclic garbage collector around work that makes many containers at once.

A collection walks every tracked container; code that builds hundreds of thousands of them (a
list of 10,000 rows, a decoded 14 MB answer, the allocator's model of 100,000 instances) makes
the collector run again and again over what it just built, none of which is cyclic garbage:
a third to half of that work's time. What is dropped meanwhile is still freed by reference
counting. Standard library only (the allocator uses it).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection inside; the collector as it was afterwards (a nested pause, or a
    process that turned it off, keeps it off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def left_at_exit(*objs: object) -> None:
    """Leave ``objs`` to the operating system: a command that ends right after its answer
    need not free a big model object by object (100,000 instances: ~0.1 s at exit). They are
    put in a reference cycle that ``gc.freeze`` moves out of every later collection, the one
    at the interpreter's end included, so nothing frees them before the process is gone. For
    a process's last step only: in a long-lived one this is a leak."""
    holder: list[object] = [*objs]
    holder.append(holder)
    gc.freeze()
