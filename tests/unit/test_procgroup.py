"""sim.procgroup.signal_group: a child's process group is signalled while its pid is its own,
a member that outlived its reaped leader too, and never a process that got the number since."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from herder.sim.procgroup import signal_group


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":  # killed, not yet reaped by its parent (init here)
            return True
        time.sleep(0.05)
    return False


def test_a_running_childs_group_is_signalled() -> None:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    assert signal_group(proc, signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL


def test_a_member_that_outlived_its_reaped_leader_is_signalled() -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
                            start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    member = int(proc.stdout.readline())
    proc.wait(10)  # the leader reaped; its group lives on in the sleep
    assert os.getpgid(member) == proc.pid
    assert signal_group(proc, signal.SIGKILL)
    assert _gone(member)


def test_a_recycled_pid_is_left_alone() -> None:
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait(10)
    # what a recycled pid looks like: the reaped child's number now names a living process
    # that leads a group of its own (a daemon another test started in its own session)
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        proc.pid = other.pid
        assert not signal_group(proc, signal.SIGKILL)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait(10)
