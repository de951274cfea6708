"""This host's master daemons (masterd, maintd) started and stopped through `herder
daemon-util` (systemd where it runs herder's units, else the supervisor).

One path for both ways a node becomes the master: a master-failover asks the new master's
noded (`node_start_master_daemons`, `herder.noded.rpc.role`), and on the etcd backend the
masterd that wins the election starts its node's maintd itself (`herder.masterd.etcd_master`,
docs/ha.md); a masterd that loses the lease stops it.
"""

from __future__ import annotations

import subprocess
import sys

from herder.core.errors import HerderError

DAEMON_UTIL_TIMEOUT = 120.0


class RoleFailure(HerderError):
    """A daemon-util call (a role RPC, the master's daemons) could not be carried out."""


def daemon_util(*args: str, timeout: float = DAEMON_UTIL_TIMEOUT) -> str:
    """`herder daemon-util ARGS` on this host; its output, RoleFailure when it fails."""
    argv = [sys.executable, "-m", "herder.cli.main", "daemon-util", *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RoleFailure(f"daemon-util {' '.join(args)} did not finish within "
                          f"{timeout:g}s") from None
    if done.returncode != 0:
        raise RoleFailure(f"daemon-util {' '.join(args)} failed: "
                          f"{(done.stderr or done.stdout).strip()[-300:]}")
    return done.stdout.strip()


def start_master_daemons(timeout: float = DAEMON_UTIL_TIMEOUT) -> str:
    """Start masterd and maintd here (Ganeti: `daemon-util start-master`); a running one
    stays as it is."""
    return daemon_util("start-master", timeout=timeout) or "master daemons started"


def stop_maintd(timeout: float = DAEMON_UTIL_TIMEOUT) -> str:
    """Stop this host's maintd only (masterd stops itself)."""
    return daemon_util("stop", "maintd", timeout=timeout) or "maintd stopped"
