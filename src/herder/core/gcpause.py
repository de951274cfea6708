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
