"""Signals to the process group of a child the simulator (or a test) started with
`start_new_session=True`, safe against a recycled pid.

`os.killpg(proc.pid, ...)` after the child was reaped (a `poll()` or `wait()` that saw it end)
names whatever now holds that number as a process group: this machine's pid_max is 32,768 and
a test run starts tens of thousands of processes, so the number comes round within minutes, and
every daemon a test starts in a session of its own leads a group with its own pid as the
group's id. A killpg on a stale pid once stopped another test's masterd mid-answer (CI: "the
connection closed before a whole answer", then "connection refused" for the rest of its
module). The kernel keeps a pid from reuse while a group still uses it as its id, so:
- not reaped yet (`returncode` None): the leader or its zombie holds the number: signal;
- reaped, and a process with that pid exists: the number was given to another process (the
  group's members, which would have kept it, are gone): leave it alone;
- reaped, no such process: the group's members that outlived their leader, if any: signal.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Any


def signal_group(proc: subprocess.Popen[Any], signum: int) -> bool:
    """Send `signum` to `proc`'s process group unless its pid now names another process;
    whether a signal was sent (False also when the group is gone)."""
    if proc.returncode is not None and Path(f"/proc/{proc.pid}").exists():
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)
        return True
    return False
