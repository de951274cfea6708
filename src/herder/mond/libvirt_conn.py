"""A read-only libvirt connection shared by the collectors that watch the hypervisor.

Each collector instance keeps one `LibvirtConnection` (over `core.libvirt_host.Connection`): it
opens `settings.libvirt_uri` (None = libvirt's default for this host) read-only on first use,
keeps it, and opens a new one when the URI changes or the old one died (libvirtd restarted).
When libvirt cannot be reached the caller gets a `CollectorError` naming the URI and libvirt's
own message.

Also here: the pure tables and helpers both collectors use (state names, libvirt version
numbers, the devices in a domain's XML).
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

from herder.core import libvirt_host
from herder.core.libvirt_host import DOMAIN_STATES
from herder.mond.collector import CollectorError

# The reasons libvirt gives for each state (virDomain<State>Reason).
STATE_REASONS: dict[int, dict[int, str]] = {
    1: {0: "unknown", 1: "booted", 2: "migrated", 3: "restored", 4: "from_snapshot",
        5: "unpaused", 6: "migration_canceled", 7: "save_canceled", 8: "wakeup", 9: "crashed",
        10: "postcopy", 11: "postcopy_failed"},
    2: {0: "unknown"},
    3: {0: "unknown", 1: "user", 2: "migration", 3: "save", 4: "dump", 5: "ioerror",
        6: "watchdog", 7: "from_snapshot", 8: "shutting_down", 9: "snapshot", 10: "crashed",
        11: "starting_up", 12: "postcopy", 13: "postcopy_failed"},
    4: {0: "unknown", 1: "user"},
    5: {0: "unknown", 1: "shutdown", 2: "destroyed", 3: "crashed", 4: "migrated", 5: "saved",
        6: "failed", 7: "from_snapshot", 8: "daemon"},
    6: {0: "unknown", 1: "panicked"},
    7: {0: "unknown"},
}

# Seconds a result of `available()` is reused.
AVAILABLE_TTL = 30.0


def state_name(state: int) -> str:
    return DOMAIN_STATES.get(state, f"state-{state}")


def reason_name(state: int, reason: int) -> str:
    return STATE_REASONS.get(state, {}).get(reason, f"reason-{reason}")


def version_string(number: int) -> str:
    """libvirt's version encoding major * 1,000,000 + minor * 1,000 + release, as "M.m.r"."""
    if number < 0:
        return str(number)
    return f"{number // 1_000_000}.{number // 1_000 % 1_000}.{number % 1_000}"


def parse_domain_devices(xml: str) -> dict[str, list[dict[str, str | None]]]:
    """The disks and NICs of a domain's XML description: what the stats calls take as names.

    disks: {target, device, source} (source = file, block device, volume or network name);
    nics: {target, mac, type, source} (target = host-side device, absent when the domain is off).
    A description that is not XML raises CollectorError.
    """
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as err:
        raise CollectorError(f"unparsable domain XML: {err}") from None
    disks: list[dict[str, str | None]] = []
    nics: list[dict[str, str | None]] = []
    devices = root.find("devices")
    if devices is None:
        return {"disks": disks, "nics": nics}
    for disk in devices.findall("disk"):
        target = disk.find("target")
        source = disk.find("source")
        src = None
        if source is not None:
            src = next((source.get(k) for k in ("file", "dev", "volume", "name", "dir")
                        if source.get(k)), None)
        disks.append({
            "target": target.get("dev") if target is not None else None,
            "device": disk.get("device", "disk"),
            "source": src,
        })
    for nic in devices.findall("interface"):
        target = nic.find("target")
        mac = nic.find("mac")
        source = nic.find("source")
        src = None
        if source is not None:
            src = next((source.get(k) for k in ("bridge", "network", "dev") if source.get(k)),
                       None)
        nics.append({
            "target": target.get("dev") if target is not None else None,
            "mac": mac.get("address") if mac is not None else None,
            "type": nic.get("type"),
            "source": src,
        })
    return {"disks": disks, "nics": nics}


class LibvirtConnection:
    """One kept read-only connection (`core.libvirt_host`); thread-safe; reopens on a URI
    change or a dead link; libvirt's failures as CollectorError."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._connection = libvirt_host.Connection(None, read_only=True)
        self._available: tuple[str | None, float, bool] | None = None  # uri, when, result

    def get(self, uri: str | None) -> Any:
        """The open connection to `uri`, opening (or reopening) it as needed."""
        self._connection.set_uri(uri)
        try:
            return self._connection.get()
        except libvirt_host.Unreachable as err:
            raise CollectorError(str(err)) from None

    def reset(self) -> None:
        """Forget the connection (after an error that may mean it died)."""
        self._connection.reset()

    def call(self, uri: str | None, fn: Callable[[Any], Any]) -> Any:
        """`fn(connection)`; if it fails because the connection died (libvirtd restarted), once
        more on a fresh connection. Other libvirt errors become CollectorError."""
        self._connection.set_uri(uri)
        try:
            return self._connection.call(fn)
        except (libvirt_host.Unreachable, libvirt_host.ConnectionLost) as err:
            raise CollectorError(str(err)) from None
        except Exception as err:
            if not libvirt_host.is_libvirt_error(err):
                raise
            raise CollectorError(f"libvirt error: {libvirt_host.message(err)}") from None

    def available(self, uri: str | None, ttl: float = AVAILABLE_TTL) -> bool:
        """Whether a connection can be opened; the answer is reused for `ttl` seconds."""
        now = self._clock()
        cached = self._available
        if cached is not None and cached[0] == uri and now - cached[1] < ttl:
            return cached[2]
        try:
            self.get(uri)
            result = True
        except CollectorError:
            result = False
        self._available = (uri, now, result)
        return result
