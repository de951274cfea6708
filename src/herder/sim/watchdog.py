"""Each simulated host's watchdog device (the keeper serves them: `herder.sim.keeper`).

A host's device is a FIFO at `DEVICE` inside it (`<host>/root/run/watchdog` on the machine:
its private /run), the path the simulated cluster gives the node parameter `watchdog_device`.
noded opens it and writes to it as it would to /dev/watchdog (`noded.fence.Watchdog`); the keeper
holds its other end. Like Linux's watchdog drivers: the first write arms it, every write pets
it, a `V` as the last byte written disarms it (the magic close); when it is armed and not
petted within the timeout, the host is reset: its PID 1 is killed at once (no grace, as a
hardware reset) and, since the simulator still wants it powered, the keeper boots it again.

What differs from a real device (docs/compat.md N5): the timeout is the node parameter
`watchdog_timeout` as the host's ssconf has it, read here, where a real device gets it from
noded's WDIOC_SETTIMEOUT; a FIFO has no per-open state, so the magic close is "`V` written
last" rather than "`V` written, then close"; and closing without `V` changes nothing here (the
device keeps counting, as with `nowayout`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from herder.core import ssconf
from herder.sim import hoststate

log = logging.getLogger("herder.sim.watchdog")
DEVICE = "/run/watchdog"  # inside each host
DEFAULT_TIMEOUT = 10.0


@dataclass
class Device:
    """The keeper's end of one host's device."""

    path: Path
    read_fd: int
    write_fd: int  # held so that reads see "empty", never end-of-file
    armed: bool = False
    last: float = 0.0
    fired: list[float] = field(default_factory=list)


class Watchdogs:
    """Every host's device: `check` once per keeper round."""

    def __init__(self) -> None:
        self._devices: dict[str, Device] = {}

    def _device(self, host: hoststate.HostRecord) -> Device | None:
        path = device_path(host)
        known = self._devices.get(host.name)
        if known is not None and known.path == path and _is_fifo(path):
            return known
        if known is not None:
            self._close(host.name)
        if not path.parent.is_dir():
            return None
        if not _is_fifo(path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            os.mkfifo(path, 0o600)
        read_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        write_fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        device = Device(path, read_fd, write_fd)
        self._devices[host.name] = device
        return device

    def _close(self, name: str) -> None:
        device = self._devices.pop(name, None)
        if device is not None:
            for fd in (device.read_fd, device.write_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def check(self, record: hoststate.SimRecord, now: float | None = None) -> list[str]:
        """Read every device; reset the hosts whose armed device was not petted in time.
        Returns the hosts reset."""
        now = time.monotonic() if now is None else now
        reset = []
        for name, host in sorted(record.hosts.items()):
            device = self._device(host)
            if device is None:
                continue
            written = _drain(device.read_fd)
            running = host.powered and hoststate.alive(host.init)
            if not running:
                device.armed = False  # off: nothing counts (a boot starts disarmed)
                continue
            if written:
                device.last = now
                if written.endswith(b"V"):
                    if device.armed:
                        log.info("%s: watchdog disarmed (magic close)", name)
                    device.armed = False
                elif not device.armed:
                    device.armed = True
                    log.info("%s: watchdog armed", name)
            if device.armed and now - device.last > timeout_of(host):
                log.warning("%s: watchdog not petted for %.1f s (timeout %g s): resetting the "
                            "host", name, now - device.last, timeout_of(host))
                hoststate.end_process(host.init, 0)
                device.armed = False
                device.fired.append(now)
                reset.append(name)
        for gone in set(self._devices) - set(record.hosts):
            self._close(gone)
        return reset


def device_path(host: hoststate.HostRecord) -> Path:
    """Where the machine sees a host's device: in its /run (`<host>/root/run/watchdog`); a
    Debian host's /run is a tmpfs of systemd-nspawn's, so there it is `<host>/watchdog`,
    bound over /run/watchdog in the container."""
    if host.kind == "debian":
        return Path(host.directory) / "watchdog"
    return Path(host.directory) / "root" / DEVICE.lstrip("/")


def timeout_of(host: hoststate.HostRecord) -> float:
    """The node parameter `watchdog_timeout` in the host's ssconf (its default without)."""
    data_dir = Path(host.directory) / "root" / "var" / "lib" / "herder"
    values = ssconf.node_params(host.name, data_dir) or {}
    value = values.get("watchdog_timeout")
    return float(value) if isinstance(value, (int, float)) and value > 0 else DEFAULT_TIMEOUT


def _is_fifo(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(path.lstat().st_mode)
    except OSError:
        return False


def _drain(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return data
        if not chunk:
            return data
        data += chunk
