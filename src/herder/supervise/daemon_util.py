"""`herder daemon-util`: start, stop and check herder's daemons on this host (Ganeti's
`daemon-util` verbs), through systemd where it runs herder's units, else through the
supervisor (`herder supervise`, control socket `/run/herder/supervise.sock`).

As Ganeti's, systemd counts only when it is PID 1 (`/run/systemd/system` exists) and knows
herder (`herder.target` is loaded); units are `herder-<daemon>.service` (contrib/systemd;
libvirtd's is Debian's `libvirtd.service`).
The master role is masterd and maintd: `start-master` starts them in that order, `stop-master`
stops them in the reverse one.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from herder.core import supervise_control
from herder.core.errors import HerderError
from herder.supervise.masterip import Runner, run_command
from herder.supervise.settings import DEFAULT_SOCKET, MASTER_DAEMONS, NAME, control_socket

SYSTEMD_RUNTIME = Path("/run/systemd/system")
TARGET = "herder.target"
# Daemons that are not herder's own keep their distribution's unit (Debian's libvirtd).
FOREIGN_UNITS = {"libvirtd": "libvirtd.service"}


def unit(daemon: str) -> str:
    """The systemd unit of a daemon: herder's (contrib/systemd) or a foreign one's."""
    return FOREIGN_UNITS.get(daemon, f"herder-{daemon}.service")


def check_names(daemons: Sequence[str]) -> list[str]:
    """Daemon names as given (`noded` or `herder-noded`), checked; at least one."""
    if not daemons:
        raise HerderError("name at least one daemon")
    names = [d.removeprefix("herder-").removesuffix(".service") for d in daemons]
    for name in names:
        if not NAME.fullmatch(name):
            raise HerderError(f"{name!r} is not a daemon name")
    return names


class Backend(Protocol):
    name: str

    def start(self, daemons: Sequence[str]) -> None: ...

    def stop(self, daemons: Sequence[str]) -> None: ...

    def state(self, daemon: str) -> str:
        """`running` or another word saying why not."""
        ...


class Systemd:
    name = "systemd"

    def __init__(self, run: Runner = run_command) -> None:
        self.run = run

    def _systemctl(self, *args: str) -> str:
        done = self.run(["systemctl", *args])
        if done.returncode != 0:
            raise HerderError(f"systemctl {' '.join(args)} failed: "
                              f"{(done.stderr or done.stdout).strip()}")
        return done.stdout

    def start(self, daemons: Sequence[str]) -> None:
        self._systemctl("start", *(unit(d) for d in daemons))

    def stop(self, daemons: Sequence[str]) -> None:
        self._systemctl("stop", *(unit(d) for d in daemons))

    def state(self, daemon: str) -> str:
        out = self._systemctl("show", "--property=ActiveState", unit(daemon)).strip()
        state = out.removeprefix("ActiveState=")
        return supervise_control.RUNNING if state == "active" else state


class Supervisor:
    name = "supervisor"

    def __init__(self, socket: Path = DEFAULT_SOCKET) -> None:
        self.socket = socket

    def start(self, daemons: Sequence[str]) -> None:
        supervise_control.request(self.socket, "start", daemons)

    def stop(self, daemons: Sequence[str]) -> None:
        supervise_control.request(self.socket, "stop", daemons)

    def state(self, daemon: str) -> str:
        reply = supervise_control.request(self.socket, "status", [daemon])
        return reply.daemons[0].state


def systemd_runs_herder(run: Runner = run_command) -> bool:
    if not SYSTEMD_RUNTIME.is_dir() or shutil.which("systemctl") is None:
        return False
    try:
        done = run(["systemctl", "show", "--property=LoadState", TARGET])
    except (HerderError, OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and done.stdout.strip() == "LoadState=loaded"


def backend(socket: Path | None = None, run: Runner = run_command) -> Backend:
    """systemd where it runs herder's units, else the supervisor at `socket` (default: the
    one /etc/herder/node.toml names)."""
    if systemd_runs_herder(run):
        return Systemd(run)
    return Supervisor(socket if socket is not None else control_socket())


def start_master(target: Backend) -> None:
    target.start(MASTER_DAEMONS)


def stop_master(target: Backend) -> None:
    target.stop(tuple(reversed(MASTER_DAEMONS)))
