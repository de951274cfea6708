"""A read-only libvirt connection shared by the collectors that watch the hypervisor.

Each collector instance keeps one `LibvirtConnection`: it opens `settings.libvirt_uri` (None =
libvirt's default for this host) read-only on first use, keeps it, and opens a new one when the
URI changes or the old one died (libvirtd restarted). When libvirt cannot be reached the caller
gets a `CollectorError` naming the URI and libvirt's own message.

Also here: the pure tables and helpers both collectors use (state names, libvirt version
numbers, the devices in a domain's XML).
"""

from __future__ import annotations

import contextlib
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

from herder.mond.collector import CollectorError

try:  # libvirt-python is a dependency, but a node without it must still run the other collectors
    import libvirt
except ImportError:  # pragma: no cover - exercised only where the binding is missing
    libvirt = None


# virDomainState: libvirt's stable ABI values (libvirt-domain.h).
DOMAIN_STATES: dict[int, str] = {
    0: "nostate", 1: "running", 2: "blocked", 3: "paused",
    4: "shutdown", 5: "shutoff", 6: "crashed", 7: "pmsuspended",
}
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


def error_text(err: BaseException) -> str:
    """libvirt's own message for an error, without the Python wrapper's noise."""
    if libvirt is not None and isinstance(err, libvirt.libvirtError):
        msg = err.get_error_message()
        if msg:
            return str(msg)
    return str(err) or type(err).__name__


def is_no_domain(err: BaseException) -> bool:
    """The domain vanished between listing and asking about it."""
    return (libvirt is not None and isinstance(err, libvirt.libvirtError)
            and err.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN)


def conn_alive(conn: Any) -> bool:
    """Whether a connection still works (False also when asking fails)."""
    try:
        return bool(conn.isAlive() == 1)
    except Exception:
        return False


def _ignore_error(_ctx: object, _err: object) -> None:
    """libvirt prints every error to stderr by default; mond reports them instead."""


_handler_installed = False


def _quiet_libvirt() -> None:
    global _handler_installed
    if libvirt is not None and not _handler_installed:
        libvirt.registerErrorHandler(_ignore_error, None)
        _handler_installed = True


def describe_uri(uri: str | None) -> str:
    return uri if uri else "libvirt's default URI"


class LibvirtConnection:
    """One cached read-only connection; thread-safe; reopens on URI change or a dead link."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._conn: Any = None
        self._uri: str | None = None
        self._available: tuple[str | None, float, bool] | None = None  # uri, when, result

    def get(self, uri: str | None) -> Any:
        """The open connection to `uri`, opening (or reopening) it as needed."""
        if libvirt is None:
            raise CollectorError("libvirt-python is not installed")
        with self._lock:
            conn = self._conn
            if conn is not None and self._uri == uri and conn_alive(conn):
                return conn
            self._drop_locked()
            _quiet_libvirt()
            try:
                conn = libvirt.openReadOnly(uri)
            except libvirt.libvirtError as err:
                raise CollectorError(
                    f"libvirt unreachable at {describe_uri(uri)}: {error_text(err)}"
                ) from None
            if conn is None:  # old bindings returned None instead of raising
                raise CollectorError(f"libvirt unreachable at {describe_uri(uri)}")
            self._conn, self._uri = conn, uri
            return conn

    def reset(self) -> None:
        """Forget the connection (after an error that may mean it died)."""
        with self._lock:
            self._drop_locked()

    def _drop_locked(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a dead connection may refuse even to close
                conn.close()

    def call(self, uri: str | None, fn: Callable[[Any], Any]) -> Any:
        """`fn(connection)`; if it fails because the connection died (libvirtd restarted), once
        more on a fresh connection. Other libvirt errors become CollectorError."""
        for attempt in (1, 2):
            conn = self.get(uri)
            try:
                return fn(conn)
            except CollectorError:
                raise
            except Exception as err:
                if libvirt is None or not isinstance(err, libvirt.libvirtError):
                    raise
                if conn_alive(conn) and err.get_error_code() not in _DEAD_LINK_CODES:
                    raise CollectorError(f"libvirt error: {error_text(err)}") from None
                self.reset()
                if attempt == 2:
                    raise CollectorError(
                        f"libvirt connection to {describe_uri(uri)} lost: {error_text(err)}"
                    ) from None
        raise AssertionError("unreachable")  # pragma: no cover

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


_DEAD_LINK_CODES: frozenset[int] = frozenset(
    () if libvirt is None else (
        libvirt.VIR_ERR_NO_CONNECT, libvirt.VIR_ERR_RPC, libvirt.VIR_ERR_SYSTEM_ERROR,
        libvirt.VIR_ERR_INVALID_CONN,
    )
)
