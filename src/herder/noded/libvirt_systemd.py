"""libvirtd's sockets on a systemd host (Debian's `libvirt-daemon-system`), as herder needs them:
the second half of `herder node libvirt-tls` (the first is `noded.libvirt_tls.install`).

Debian's libvirtd is socket-activated: libvirtd.conf's listen settings and socket modes are not
used there (and `--listen` is refused: "--listen parameter not permitted with systemd activation
sockets"), the socket units decide. So herder writes drop-ins (`DROP_INS`): the TLS socket
(`libvirtd-tls.socket`, off by default) on the node's primary IP only, not on every address
(docs/security.md), and the read-write and read-only unix sockets root's alone (Debian's are 0666,
guarded by polkit; herder's libvirtd.conf has `auth_unix_rw = "none"`, so with Debian's mode any
local user could define a domain). Then the TLS socket is enabled and the sockets and libvirtd
are restarted in the one order that works (`restart`).

A host whose libvirtd herder's supervisor runs (the namespace hosts of the simulator) has no
such units: `applies` is false there and libvirtd.conf's settings are the ones used.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from herder.core.errors import HerderError
from herder.core.libvirtd_conf import LIBVIRT_TLS_PORT, tls_listen
from herder.core.store import atomic_write_if_changed

log = logging.getLogger("herder.noded")
SYSTEMD_RUNNING = Path("/run/systemd/system")  # sd_booted(3): systemd is PID 1
UNIT_DIRS = (Path("/etc/systemd/system"), Path("/lib/systemd/system"),
             Path("/usr/lib/systemd/system"))
DROP_IN_DIR = Path("/etc/systemd/system")
DROP_IN_NAME = "herder.conf"
TLS_SOCKET = "libvirtd-tls.socket"
SOCKETS = ("libvirtd.socket", "libvirtd-ro.socket", "libvirtd-admin.socket", TLS_SOCKET)
SERVICE = "libvirtd.service"
RESTART_TRIES = 3
RESTART_PAUSE = 2.0
SYSTEMCTL_TIMEOUT = 120.0
Run = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def applies(root: Path = Path("/")) -> bool:
    """Whether systemd runs this host and socket-activates libvirtd (Debian's packaging)."""
    running = root / SYSTEMD_RUNNING.relative_to("/")
    return running.is_dir() and any((root / d.relative_to("/") / "libvirtd.socket").exists()
                                    for d in UNIT_DIRS)


def drop_ins(address: str, port: int = LIBVIRT_TLS_PORT) -> dict[str, str]:
    """Unit name -> herder's drop-in for it. `ListenStream=` empty first: it clears the
    unit's own (every address, `[::]:16514`) instead of adding a second one."""
    root_only = "[Socket]\nSocketMode=0600\n"
    tls = f"[Socket]\nListenStream=\nListenStream={tls_listen(address, port)}\n"
    return {TLS_SOCKET: tls,
            "libvirtd.socket": root_only, "libvirtd-ro.socket": root_only}


def drop_in_path(unit: str, directory: Path = DROP_IN_DIR) -> Path:
    return directory / f"{unit}.d" / DROP_IN_NAME


def write_drop_ins(address: str, directory: Path = DROP_IN_DIR) -> list[str]:
    """The drop-ins, each written (atomically) only when it differs; the units changed."""
    return [unit for unit, text in drop_ins(address).items()
            if atomic_write_if_changed(drop_in_path(unit, directory), text.encode(), 0o644)]


def _systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True,
                          timeout=SYSTEMCTL_TIMEOUT, check=False)


def _checked(run: Run, argv: Sequence[str]) -> None:
    done = run(argv)
    if done.returncode != 0:
        raise HerderError(f"systemctl {' '.join(argv)}: "
                          f"{(done.stderr or done.stdout).strip()[-500:]}")


def restart(run: Run = lambda argv: _systemctl(*argv), tries: int = RESTART_TRIES,
            pause: float = RESTART_PAUSE) -> int:
    """The sockets and libvirtd restarted so that the drop-ins hold (running guests go on: QEMU
    is not libvirtd's child); the tries it took.

    A socket's settings change only while its service is stopped, so all of them stop first,
    the service with them in one job: a client (noded polls libvirt) would otherwise activate
    the service again between the two, and the sockets' start would fail. A client coming at
    the wrong moment can still make the start job fail (the service activated by a socket of
    the old configuration): then everything is stopped and started again."""
    units = [*SOCKETS, SERVICE]
    why = ""
    for attempt in range(1, tries + 1):
        run(["stop", *units])
        run(["reset-failed", *units])
        done = run(["start", *units])
        if done.returncode == 0:
            return attempt
        why = (done.stderr or done.stdout).strip()
        log.warning("libvirt's sockets did not start (try %d): %s", attempt, why)
        if attempt < tries:
            time.sleep(pause)
    raise HerderError(f"libvirt's sockets did not start after {tries} tries: {why[-500:]} "
                      f"(systemctl status {' '.join(units)})")


@dataclass(frozen=True)
class Configured:
    changed: list[str]  # the units whose drop-in was (re)written
    restarted: bool
    tries: int  # of the restart (0: none)


def configure(address: str, *, restart_needed: bool, directory: Path = DROP_IN_DIR,
              run: Run = lambda argv: _systemctl(*argv)) -> Configured:
    """Drop-ins, the TLS socket enabled, and the restart when a drop-in changed or
    `restart_needed` (libvirtd.conf or its certificates changed, or the running sockets are
    not what the drop-ins say)."""
    changed = write_drop_ins(address, directory)
    if changed:
        _checked(run, ["daemon-reload"])
    _checked(run, ["enable", TLS_SOCKET])
    if not (changed or restart_needed):
        return Configured(changed, False, 0)
    return Configured(changed, True, restart(run))
