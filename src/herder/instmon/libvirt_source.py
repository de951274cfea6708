"""The libvirt event source: a read-only connection with keepalive, every domain event libvirt
offers, automatic reconnect, and a resync after every (re)connect.

libvirt's default event loop runs in one daemon thread (`virEventRunDefaultImpl`); all domain
callbacks run there and only hand a `RawEvent` to the sink. A supervisor thread opens the
connection (read-only, with keepalive: `core.libvirt_host`; a hung libvirtd is noticed in about
15-20 s, a dead one at once by the close callback), registers the callbacks, and waits. When
the connection closes it deregisters, reconnects with exponential backoff (a libvirtd that is
down at reconnect time is retried forever, not fatal as in masakari) and resyncs.

Resync (masakari has none, ../shared/reference/masakari.md §3.2): libvirt does not replay
events, so after every connect the source lists all domains and compares them with the states
it knew (also those saved before a restart of instmon): a domain that was active and now is
not — shut off, crashed, or gone — died unseen, and is reported as LIFECYCLE.STOPPED.FAILED,
marked synthetic with what was seen. Only libvirt's VIR_ERR_NO_DOMAIN means a domain is gone;
any other error while reading the domains (the connection dropped in the middle) leaves the known
states as they were, closes the connection and resyncs after the reconnect: a failed read is no
evidence that a VM died.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from herder.core import libvirt_host
from herder.instmon import events

log = logging.getLogger("herder.instmon.libvirt")

# virDomainState values counted as active (running, blocked, paused, shutting down, pmsuspended)
ACTIVE_STATES = {1, 2, 3, 4, 7}
BACKOFF_MAX = 10.0

_loop_lock = threading.Lock()
_loop_started = False


def start_event_loop() -> None:
    """Register libvirt's default event implementation and run it in a daemon thread (once
    per process; must happen before the first connection)."""
    global _loop_started
    import libvirt


    with _loop_lock:
        if _loop_started:
            return
        libvirt_host.quiet()
        libvirt.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                libvirt.virEventRunDefaultImpl()

        threading.Thread(target=run, name="libvirt-event-loop", daemon=True).start()
        _loop_started = True


class ResyncIncomplete(Exception):
    """Reading the domains failed (not because one is gone): nothing was concluded."""


def state_after(event: events.RawEvent) -> str | None:
    """The domain state an event implies ("active"/"inactive"/"absent"), None if none."""
    if event.event_id != events.LIFECYCLE:
        return None
    if event.type in (events.STARTED, events.RESUMED, events.SUSPENDED, 7):
        return "active"
    if event.type in (events.STOPPED, 8):
        return "inactive"
    if event.type == 1:
        return "absent"
    if event.type == 0:
        return "inactive" if event.detail == 0 else None
    return None


class LibvirtSource:
    """Feeds `sink` with every domain event of `uri`'s hypervisor, across reconnects."""

    def __init__(self, uri: str, sink: Callable[[events.RawEvent], None],
                 known: Mapping[str, Mapping[str, Any]] | None = None,
                 on_connect: Callable[[bool], None] | None = None) -> None:
        self.uri = uri
        self.sink = sink
        self.on_connect = on_connect or (lambda up: None)
        # domain uuid -> {"name", "active"}: what the source knows (resync compares with it)
        self.known: dict[str, dict[str, Any]] = {u: dict(v) for u, v in (known or {}).items()}
        self.lock = threading.Lock()
        self.connected = False
        self.connects = 0
        self.last_error = ""
        self.registered: list[int] = []
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Any = None

    # --- callbacks (libvirt's event-loop thread) ------------------------------------------------

    def _emit(self, dom: Any, event_id: int, etype: int, detail: int,
              extra: Mapping[str, Any] | None = None) -> None:
        try:
            uuid, name = dom.UUIDString(), dom.name()
        except Exception:  # the domain went away under us: still report what we have
            uuid, name = "", ""
        event = events.RawEvent(event_id, etype, detail, uuid, name, dict(extra or {}))
        self.note(event)
        self.sink(event)

    def note(self, event: events.RawEvent) -> None:
        """Keep the known state in step with an event (also for injected ones)."""
        state = state_after(event)
        if state is None or not event.uuid:
            return
        with self.lock:
            if state == "absent":
                self.known.pop(event.uuid, None)
            else:
                self.known[event.uuid] = {"name": event.name, "active": state == "active"}

    def _callbacks(self) -> dict[int, Callable[..., None]]:
        emit = self._emit

        def generic(eid: int) -> Callable[..., None]:
            return lambda conn, dom, *rest: emit(dom, eid, events.DUMMY, events.DUMMY)

        cbs: dict[int, Callable[..., None]] = {eid: generic(eid) for eid in events.EVENT_IDS}
        cbs[events.LIFECYCLE] = lambda conn, dom, event, detail, opaque: emit(
            dom, events.LIFECYCLE, event, detail)
        cbs[events.WATCHDOG] = lambda conn, dom, action, opaque: emit(
            dom, events.WATCHDOG, action, events.DUMMY)
        cbs[events.IO_ERROR] = lambda conn, dom, src, alias, action, opaque: emit(
            dom, events.IO_ERROR, action, events.DUMMY, {"path": src, "device": alias})
        cbs[events.IO_ERROR_REASON] = lambda conn, dom, src, alias, action, reason, opaque: emit(
            dom, events.IO_ERROR_REASON, action, events.DUMMY,
            {"path": src, "device": alias, "reason": reason})
        cbs[events.GRAPHICS] = lambda conn, dom, phase, *rest: emit(
            dom, events.GRAPHICS, events.DUMMY, phase)
        return cbs

    def _on_close(self, conn: Any, reason: int, opaque: Any) -> None:
        self._closed.set()

    # --- the supervisor thread ----------------------------------------------------------------

    def start(self) -> None:
        start_event_loop()
        self._thread = threading.Thread(target=self._run, name="instmon-libvirt", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _connect(self) -> Any:
        import libvirt

        conn = libvirt_host.open_connection(self.uri, read_only=True, keepalive=True)
        self._closed.clear()
        with contextlib.suppress(libvirt.libvirtError):
            conn.registerCloseCallback(self._on_close, None)
        self.registered = []
        for eid, cb in self._callbacks().items():
            try:
                self.registered.append(conn.domainEventRegisterAny(None, eid, cb, None))
            except (libvirt.libvirtError, AttributeError, TypeError) as err:
                log.debug("event %s not offered: %s", events.EVENT_IDS.get(eid), err)
        return conn

    def _disconnect(self, conn: Any) -> None:
        for cb_id in self.registered:
            with contextlib.suppress(Exception):
                conn.domainEventDeregisterAny(cb_id)
        self.registered = []
        with contextlib.suppress(Exception):
            conn.unregisterCloseCallback()
        with contextlib.suppress(Exception):
            conn.close()

    def _alive(self, conn: Any) -> bool:

        return libvirt_host.alive(conn)

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                conn = self._connect()
            except Exception as err:
                self.last_error = f"cannot connect to {self.uri}: {_text(err)}"
                if attempt == 0:
                    log.error("%s; retrying", self.last_error)
                delay = min(BACKOFF_MAX, 0.25 * 2 ** attempt)
                attempt += 1
                self._stop.wait(delay)
                continue
            self._conn = conn
            self.connected = True
            self.connects += 1
            self.last_error = ""
            if attempt or self.connects > 1:
                log.warning("reconnected to %s", self.uri)
            else:
                log.info("connected to %s (read-only), %d event types registered", self.uri,
                         len(self.registered))
            attempt = 0
            self.on_connect(True)
            try:
                self.resync(conn)
            except Exception as err:
                # Nothing concluded: reconnect and resync then (a dropped connection is no
                # evidence that a domain died).
                self.last_error = f"resync with {self.uri} failed: {_text(err)}"
                log.error("%s; reconnecting to resync", self.last_error)
                self._closed.set()
            while not self._stop.is_set() and not self._closed.is_set():
                if not self._alive(conn):
                    break
                self._closed.wait(1.0)
            self.connected = False
            self._conn = None
            if not self._stop.is_set():
                log.warning("lost the connection to %s; reconnecting", self.uri)
                self.on_connect(False)
            self._disconnect(conn)
            if not self._stop.is_set():
                self._stop.wait(0.25)

    def resync(self, conn: Any) -> list[events.RawEvent]:
        """Compare libvirt's domains with the known states; report the ones that died unseen.

        Raises ResyncIncomplete (the known states untouched, nothing reported) when a domain's
        state cannot be read for any reason but its absence."""

        now: dict[str, dict[str, Any]] = {}
        for dom in conn.listAllDomains():
            try:
                state = dom.state()[0]
                now[dom.UUIDString()] = {
                    "name": dom.name(), "active": state in ACTIVE_STATES,
                    "state": libvirt_host.DOMAIN_STATES.get(state, "nostate")}
            except Exception as err:
                if libvirt_host.is_no_domain(err):  # undefined since the listing: absent
                    continue
                if not self._alive(conn):
                    raise ResyncIncomplete(f"cannot read the state of a domain: "
                                           f"{_text(err)}") from None
                # the domain exists but would not say its state: keep what was known of it
                uuid = self._uuid_of(dom)
                with self.lock:
                    before = self.known.get(uuid) if uuid else None
                if before is not None:
                    now[uuid] = {**before, "state": "unknown"}
                log.warning("cannot read the state of domain %s: %s", uuid or "?", _text(err))
        died = []
        with self.lock:
            for uuid, before in self.known.items():
                if not before.get("active"):
                    continue
                after = now.get(uuid)
                if after is not None and after["active"]:
                    continue
                seen = after["state"] if after is not None else "absent"
                name = str(before.get("name") or (after or {}).get("name", ""))
                died.append(events.RawEvent(events.LIFECYCLE, events.STOPPED,
                                            events.STOPPED_FAILED, uuid, name, {"seen": seen},
                                            synthetic=f"resync: active -> {seen}"))
            self.known = {u: {"name": d["name"], "active": d["active"]} for u, d in now.items()}
        for event in died:
            log.warning("domain %s (%s) died while unobserved (now %s)", event.name, event.uuid,
                        event.extra.get("seen"))
            self.sink(event)
        return died

    @staticmethod
    def _uuid_of(dom: Any) -> str:
        try:
            return str(dom.UUIDString())
        except Exception:
            return ""

    def lookup(self, domain: str) -> tuple[str, str] | None:
        """(uuid, name) of a known domain by name or uuid."""
        with self.lock:
            for uuid, d in self.known.items():
                if domain in (uuid, d.get("name")):
                    return uuid, str(d.get("name") or "")
        conn = self._conn
        if conn is None:
            return None
        try:
            dom = conn.lookupByName(domain)
            return dom.UUIDString(), dom.name()
        except Exception:
            try:
                dom = conn.lookupByUUIDString(domain)
                return dom.UUIDString(), dom.name()
            except Exception:
                return None

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return {u: dict(d) for u, d in self.known.items()}


def _text(err: Exception) -> str:
    return libvirt_host.message(err)
