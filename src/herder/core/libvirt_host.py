"""Reaching this host's libvirtd: the one way noded, mond, instmon and the simulator open a
connection, keep it, open it again after libvirtd restarted, and read libvirt's errors.

- `open_connection`: read-only or not; libvirt's printing of every error on stderr silenced
  (herder reports errors itself); keepalive (`KEEPALIVE`) where asked and the driver has it (a
  local driver has none; the pings need the caller's event loop, as instmon's); a libvirtd that
  cannot be reached is `Unreachable`, one line naming the URI.
- `Connection`: one kept connection, opened on first use and again when it died, with
  `on_open` run on each fresh one (noded re-defines its domains there); `call` runs a function
  on it and once more on a fresh connection when the first one was lost.
- The errors: `is_no_domain` (the only error that means a domain is gone), `connection_lost`
  (libvirtd restarted or the link broke: a fresh connection may succeed), `message`.

libvirt-python is a pinned dependency; where it is missing (`AVAILABLE` false) opening says so
and the rest of a daemon still runs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from herder.core.errors import HerderError

try:
    import libvirt
except ImportError:  # pragma: no cover - only where the binding is missing
    libvirt = None

log = logging.getLogger("herder.libvirt")
T = TypeVar("T")
AVAILABLE = libvirt is not None

# Client keepalive: a ping every 5 s, the connection closed after 3 unanswered (a hung libvirtd
# is noticed in about 15-20 s, a dead one at once).
KEEPALIVE = (5, 3)

# virDomainState: libvirt's stable ABI values (libvirt-domain.h) and their names.
DOMAIN_STATES: dict[int, str] = {
    0: "nostate", 1: "running", 2: "blocked", 3: "paused",
    4: "shutdown", 5: "shutoff", 6: "crashed", 7: "pmsuspended",
}

# Errors of a connection that broke (libvirtd restarted: "client socket is closed" is an
# internal error) rather than of the call: a fresh connection may succeed.
_LOST_CODES: frozenset[int] = frozenset(() if libvirt is None else (
    libvirt.VIR_ERR_NO_CONNECT, libvirt.VIR_ERR_RPC, libvirt.VIR_ERR_SYSTEM_ERROR,
    libvirt.VIR_ERR_INVALID_CONN, libvirt.VIR_ERR_INTERNAL_ERROR))


class Unreachable(HerderError):
    """No connection to libvirtd could be opened."""


class ConnectionLost(HerderError):
    """The connection broke, and again on a fresh one."""


def _ignore_error(_ctx: object, _err: object) -> None:
    """libvirt prints every error to stderr by default; herder reports them itself."""


_quiet_lock = threading.Lock()
_quiet = False


def quiet() -> None:
    """Silence libvirt's own printing of errors (once per process)."""
    global _quiet
    with _quiet_lock:
        if libvirt is not None and not _quiet:
            libvirt.registerErrorHandler(_ignore_error, None)
            _quiet = True


def client_version() -> int | None:
    """libvirt's client library version (major * 1,000,000 + minor * 1,000 + release)."""
    return int(libvirt.getVersion()) if libvirt is not None else None


def describe(uri: str | None) -> str:
    return uri if uri else "libvirt's default URI"


def message(err: BaseException) -> str:
    """libvirt's own message for an error, without the Python wrapper's noise."""
    if libvirt is not None and isinstance(err, libvirt.libvirtError):
        text = err.get_error_message()
        if text:
            return str(text)
    return str(err) or type(err).__name__


def is_libvirt_error(err: BaseException) -> bool:
    return libvirt is not None and isinstance(err, libvirt.libvirtError)


def error_code(err: BaseException) -> int | None:
    """libvirt's virErrorNumber of an error (None: not libvirt's, or none given)."""
    if libvirt is None or not isinstance(err, libvirt.libvirtError):
        return None
    code = err.get_error_code()
    return int(code) if code is not None else None


def is_no_domain(err: BaseException) -> bool:
    """The domain does not exist (VIR_ERR_NO_DOMAIN): the one error that means it is gone."""
    return libvirt is not None and error_code(err) == libvirt.VIR_ERR_NO_DOMAIN


def alive(conn: Any) -> bool:
    """Whether a connection still works (False also when asking fails)."""
    try:
        return bool(conn.isAlive() == 1)
    except Exception:
        return False


def connection_lost(conn: Any, err: BaseException) -> bool:
    """Whether `err`, raised by a call on `conn`, means the connection broke."""
    return error_code(err) in _LOST_CODES or not alive(conn)


def open_connection(uri: str | None, *, read_only: bool = False,
                    keepalive: bool = False) -> Any:
    """A new connection to `uri` (None: libvirt's default for this host); Unreachable."""
    if libvirt is None:
        raise Unreachable("libvirt-python is not installed")
    quiet()
    try:
        conn = libvirt.openReadOnly(uri) if read_only else libvirt.open(uri)
    except libvirt.libvirtError as err:
        raise Unreachable(f"libvirt unreachable at {describe(uri)}: {message(err)}") from None
    if conn is None:  # old bindings returned None instead of raising
        raise Unreachable(f"libvirt unreachable at {describe(uri)}")
    if keepalive:
        try:
            conn.setKeepAlive(*KEEPALIVE)
        except libvirt.libvirtError as err:  # local drivers have no keepalive
            log.debug("no keepalive on %s: %s", describe(uri), message(err))
    return conn


def close_quietly(conn: Any) -> None:
    with contextlib.suppress(Exception):  # a dead connection may refuse even to close
        conn.close()


class Connection:
    """One kept connection to `uri`; thread-safe. Opened on first use and again when it died
    or the URI changed; `on_open(conn)` runs on every fresh connection before it is used."""

    def __init__(self, uri: str | None, *, read_only: bool = False, keepalive: bool = False,
                 on_open: Callable[[Any], None] | None = None) -> None:
        self._uri = uri
        self.read_only = read_only
        self.keepalive = keepalive
        self.on_open = on_open
        self._lock = threading.Lock()
        self._conn: Any = None

    @property
    def uri(self) -> str | None:
        return self._uri

    def set_uri(self, uri: str | None) -> None:
        """Talk to another libvirtd from the next call on."""
        with self._lock:
            if uri != self._uri:
                self._drop_locked()
                self._uri = uri

    def get(self) -> Any:
        """The open connection, opening (or reopening) it as needed; Unreachable."""
        with self._lock:
            if self._conn is not None and alive(self._conn):
                return self._conn
            self._drop_locked()
            conn = open_connection(self._uri, read_only=self.read_only,
                                   keepalive=self.keepalive)
            if self.on_open is not None:
                try:
                    self.on_open(conn)
                except BaseException:
                    close_quietly(conn)
                    raise
            self._conn = conn
            return conn

    def reset(self) -> None:
        """Forget the connection (it died, or may have)."""
        with self._lock:
            self._drop_locked()

    close = reset

    def _drop_locked(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            close_quietly(conn)

    def call(self, fn: Callable[[Any], T]) -> T:
        """`fn(connection)`; when the connection broke under it, once more on a fresh one
        (ConnectionLost when that breaks too). Other errors, libvirt's included, pass."""
        for attempt in (1, 2):
            conn = self.get()
            try:
                return fn(conn)
            except Exception as err:
                if not is_libvirt_error(err) or not connection_lost(conn, err):
                    raise
                self.reset()
                if attempt == 2:
                    raise ConnectionLost(f"libvirt connection to {describe(self._uri)} lost: "
                                         f"{message(err)}") from None
        raise AssertionError("unreachable")  # pragma: no cover
