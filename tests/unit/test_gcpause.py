"""core.gcpause: the collector paused around big builds; objects left to the OS at exit."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

from herder.core import gcpause


def test_paused_restores_the_collector_as_it_was() -> None:
    assert gc.isenabled()
    with gcpause.paused():
        assert not gc.isenabled()
        with gcpause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def _exit_prints(body: str) -> str:
    script = textwrap.dedent("""
        from herder.core import gcpause

        class Loud:
            def __init__(self, name):
                self.name = name
                self.peer = self  # cyclic: only a collection frees it
            def __del__(self):
                print("freed", self.name, flush=True)
        """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def test_left_at_exit_is_not_freed_by_the_interpreter() -> None:
    out = _exit_prints("""
        kept = Loud("kept")
        gcpause.left_at_exit(kept)
        del kept
        print("end", flush=True)
        """)
    assert out == "end\n"


def test_without_it_the_same_object_is_freed_at_exit() -> None:
    # the control: the interpreter's last collection does free such an object
    out = _exit_prints("""
        dropped = Loud("dropped")
        del dropped
        print("end", flush=True)
        """)
    assert out == "end\nfreed dropped\n"
