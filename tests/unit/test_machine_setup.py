"""Machine setup the tests share is done once before the workers start and is idempotent and
safe when processes run it at once (issue 33: two workers raced on `useradd`, exit 9)."""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
import sys
import time
import uuid

import pytest

from tests import machine_setup

RACE = """
import sys, time
from herder.sim.libvirtd import ensure_system_accounts
time.sleep(max(0.0, float(sys.argv[3]) - time.time()))  # all start at the same moment
ensure_system_accounts(sys.argv[1], sys.argv[2], (sys.argv[2],))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="creating system accounts needs root")
@pytest.mark.parametrize("round_", range(3))
def test_accounts_created_by_many_processes_at_once(round_: int) -> None:
    """Ten processes at the same moment (without the lock about a third of the rounds saw
    `useradd` exit 9)."""
    tag = uuid.uuid4().hex[:8]
    user, group = f"hrdu{tag}", f"hrdg{tag}"
    try:
        start = str(time.time() + 2)
        racers = [subprocess.Popen([sys.executable, "-c", RACE, user, group, start],
                                   stderr=subprocess.PIPE, text=True) for _ in range(10)]
        errors = [r.communicate(timeout=120)[1] for r in racers]
        assert [r.returncode for r in racers] == [0] * 10, errors
        assert pwd.getpwnam(user).pw_gid == grp.getgrnam(group).gr_gid
    finally:
        subprocess.run(["userdel", user], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="creating system accounts needs root")
def test_prepare_is_idempotent() -> None:
    machine_setup.prepare()
    machine_setup.prepare()
    assert pwd.getpwnam("libvirt-qemu").pw_gid == grp.getgrnam("kvm").gr_gid
    grp.getgrnam("libvirt-qemu")
