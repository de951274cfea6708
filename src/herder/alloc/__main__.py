"""``python -m herder.alloc FILE|-``: the iallocator entry point without the full herder CLI.

Same options and behaviour as ``herder alloc``; it skips loading the rest of herder, so it
starts faster when Ganeti runs it for every allocation.
"""

from __future__ import annotations

from herder.cli.alloc import alloc

if __name__ == "__main__":
    alloc(prog_name="herder-alloc")
