"""`herder daemon-util` on this node, for the role RPCs (`herder.noded.rpc.role`): as Ganeti's
backend runs its `daemon-util` and master-IP setup script, the node daemon never starts daemons
itself (systemd where it runs herder's units, else the supervisor); restarts of daemons
(noded's own included) from a process of their own session.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from herder.core.master_daemons import RoleFailure, daemon_util

log = logging.getLogger("herder.noded")
# After node_adopt, what serves the old cluster stops and what reads the cluster's secrets
# restarts (noded itself last: the RPC's answer goes out first).
ADOPT_STOP = ("maintd", "masterd")
ADOPT_RESTART = ("mond", "instmon", "noded")
ADOPT_DELAY = 1.0


def restart_running(daemons: tuple[str, ...], delay: float = ADOPT_DELAY) -> list[str]:
    """`restart_later` of those of `daemons` that run here (daemon-util check); their names."""
    running = []
    for name in daemons:
        try:
            daemon_util("check", name, timeout=30)
        except RoleFailure:
            continue
        running.append(name)
    if running:
        restart_later(tuple(running), delay)
    return running


def restart_later(daemons: tuple[str, ...], delay: float = ADOPT_DELAY) -> None:
    """Restart `daemons` through daemon-util after `delay` seconds, from a process of its own
    session (restarting noded ends noded's process group)."""
    herder = f"{sys.executable} -m herder.cli.main daemon-util"
    names = " ".join(daemons)
    script = f"sleep {delay:g}; {herder} stop {names}; {herder} start {names}"
    subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True, cwd="/",
                     env={**os.environ})
    log.info("restarting %s in %gs", names, delay)
