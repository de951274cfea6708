"""The instance monitor's pipeline: event source -> herder's own orders -> filter -> collapse ->
spool -> sender, plus the state file mond reads and a local control socket.

Threads: libvirt's event loop and the source's supervisor (`libvirt_source`) put events on a
queue; one processor thread handles them in order (so notifications keep the events' order)
and holds collapsible ones for `collapse_delay` seconds; the sender thread delivers the spool.
No thread per event, nothing unbounded: the queue is drained continuously and the spool has a
cap.

Per event the processor:
1. updates the domain's record (last event, and last failure when it notifies);
2. drops it when herder ordered the operation on that domain (`herder.core.ordered` marker
   written by noded) — "ordered by herder (migrate)" in the record;
3. applies the filter (notify/drop), then collapses (`collapse`), then spools a masakari-format
   notification whose `generated_time` is when the event arrived.

`<run_dir>/instmon.json` (atomic, at most every `state_interval` seconds) holds the connection
state, counters, the sender's stats and per domain: name, active, last event, last failure; mond's
inst-status collector reports the latter per instance. `<run_dir>/instmon.sock` takes one JSON
line per connection: `{"inject": "IO_ERROR.REPORT", "domain": NAME|UUID}` replays an event
through the same filter (libvirt's test driver cannot produce I/O errors or watchdogs), and
`{"status": true}` answers the state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from herder.core import notification, ordered, serve, untrusted
from herder.core.store import atomic_write
from herder.instmon import events
from herder.instmon.collapse import Collapser
from herder.instmon.config import Settings

log = logging.getLogger("herder.instmon")

STATE_FILE = "instmon.json"
SOCKET_FILE = "instmon.sock"
RESET_TYPES = (events.STARTED, events.RESUMED)


class InstanceMonitor:
    def __init__(self, settings: Settings, source: Any = None) -> None:
        from herder.instmon.sender import Sender
        from herder.instmon.spool import Spool

        self.settings = settings
        self.queue: queue.Queue[tuple[float, events.RawEvent] | None] = queue.Queue()
        self.collapser = Collapser(settings.collapse_delay, settings.collapse_window)
        self.spool = Spool(settings.spool_dir, max_entries=settings.spool_max_entries,
                           max_bytes=settings.spool_max_bytes)
        self.sender = Sender(self.spool, settings.notify_url, token=settings.token,
                             ca_file=settings.ca_file, check_hostname=settings.check_hostname,
                             client_cert=settings.client_cert,
                             backoff_base=settings.backoff_base,
                             backoff_max=settings.backoff_max)
        self.domains: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()  # domains: the processor writes, the control socket reads
        self.counts = {"events": 0, "notified": 0, "dropped": 0, "ordered": 0, "collapsed": 0,
                       "synthetic": 0, "injected": 0}
        self.started = time.time()
        self._dirty = True
        self._state_written = 0.0
        self._signature: tuple[Any, ...] = ()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server: socketserver.BaseServer | None = None
        known = self._load_known()
        if source is None:
            from herder.instmon.libvirt_source import LibvirtSource

            source = LibvirtSource(settings.libvirt_uri, self.submit, known=known,
                                   on_connect=lambda up: self._touch())
        self.source = source

    # --- input ---------------------------------------------------------------------------------

    def submit(self, event: events.RawEvent) -> None:
        """Hand an event over (any thread): the moment it arrives is its notification time."""
        self.queue.put((time.time(), event))

    def inject(self, key: str, domain: str) -> events.RawEvent:
        """Replay an event through the same filter (ValueError/FilterError when unusable)."""
        eid, etype, detail = events.parse_key(key)
        found = self.source.lookup(domain) if hasattr(self.source, "lookup") else None
        if found is None:
            raise ValueError(f"no domain {domain!r} on this node")
        event = events.RawEvent(eid, etype, detail, found[0], found[1], {"injected": True})
        self.counts["injected"] += 1
        note = getattr(self.source, "note", None)
        if note is not None:
            note(event)
        self.submit(event)
        return event

    # --- the processor -------------------------------------------------------------------------

    def _record(self, event: events.RawEvent, when: float, verdict: str) -> None:
        last = {"key": event.key, "event": event.masakari[0], "detail": event.masakari[1],
                "time": when, "verdict": verdict}
        if event.synthetic:
            last["synthetic"] = event.synthetic
        with self.lock:
            rec = self.domains.setdefault(event.uuid, {"name": event.name})
            if event.name:
                rec["name"] = event.name
            rec["last_event"] = last
        self._dirty = True

    def handle(self, when: float, event: events.RawEvent) -> str:
        """One event; returns its verdict (ordered:OP, drop, notify, collapsed)."""
        self.counts["events"] += 1
        if event.synthetic:
            self.counts["synthetic"] += 1
        if event.event_id == events.LIFECYCLE and event.type in RESET_TYPES:
            self.collapser.reset(event.uuid)
        # only lifecycle events can be herder's doing; an I/O error or a watchdog never is
        op = ordered.ordered(self.settings.run_dir, event.name, when) \
            if event.name and event.event_id == events.LIFECYCLE else None
        if op is not None:
            self.counts["ordered"] += 1
            self._record(event, when, f"ordered:{op}")
            log.info("%s on %s: ordered by herder (%s), not reported", event.key, event.name,
                     op)
            return f"ordered:{op}"
        if not self.settings.filter.notifies(event):
            self.counts["dropped"] += 1
            self._record(event, when, "drop")
            return "drop"
        held = self.collapser.add(event, when, when)
        verdict = "notify" if held else "collapsed"
        if not held:
            self.counts["collapsed"] += 1
        self._record(event, when, verdict)
        return verdict

    def flush(self, now: float) -> int:
        """Spool every collapsed group whose hold time is over; returns how many."""
        sent = 0
        for held in self.collapser.due(now):
            ev = held.event
            event_name, detail = ev.masakari
            note = notification.vm_notification(self.settings.hostname, ev.uuid, event_name, detail,
                                                _utc(held.when))
            self.spool.put(note)
            sent += 1
            self.counts["notified"] += 1
            failure = {"event": event_name, "detail": detail, "key": ev.key, "time": held.when,
                       "generated_time": note.generated_time, "merged": held.merged,
                       **({"synthetic": ev.synthetic} if ev.synthetic else {})}
            with self.lock:
                self.domains.setdefault(ev.uuid, {"name": ev.name})["last_failure"] = failure
            log.info("notify: %s %s of %s (%s)%s", event_name, detail, ev.name, ev.uuid,
                     f" [{ev.synthetic}]" if ev.synthetic else "")
        if sent:
            self._dirty = True
            self.sender.wake()
        return sent

    def _process(self) -> None:
        while True:
            due = self.collapser.next_due()
            timeout = self.settings.state_interval if due is None else \
                max(0.0, min(due - time.time(), self.settings.state_interval))
            try:
                item = self.queue.get(timeout=timeout)
            except queue.Empty:
                item = None
            else:
                if item is None:  # stop
                    self.flush(float("inf"))
                    self.write_state(force=True)
                    return
            try:
                if item is not None:
                    self.handle(*item)
                self.flush(time.time())
                self.write_state()
            except Exception:  # one bad event must not stop the monitor
                log.exception("processing %r failed", item)

    # --- state ---------------------------------------------------------------------------------

    def _touch(self) -> None:
        self._dirty = True

    def _load_known(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads((self.settings.run_dir / STATE_FILE).read_text())
        except (OSError, ValueError):
            return {}
        domains = data.get("domains") if isinstance(data, dict) else None
        if not isinstance(domains, dict):
            return {}
        for uuid, rec in domains.items():
            if isinstance(rec, dict):
                self.domains[uuid] = {k: v for k, v in rec.items() if k != "active"}
        return {u: {"name": r.get("name", ""), "active": bool(r.get("active"))}
                for u, r in domains.items() if isinstance(r, dict)}

    def state(self) -> dict[str, Any]:
        known = self.source.snapshot() if hasattr(self.source, "snapshot") else {}
        with self.lock:
            mine = {u: dict(r) for u, r in self.domains.items()}
        domains: dict[str, dict[str, Any]] = {}
        for uuid in sorted(set(known) | set(mine)):
            rec = mine.get(uuid, {})
            if uuid in known:
                rec["name"] = known[uuid].get("name") or rec.get("name", "")
                rec["active"] = bool(known[uuid].get("active"))
            domains[uuid] = rec
        return {"version": 1, "hostname": self.settings.hostname, "pid": os.getpid(),
                "updated": time.time(), "started": self.started,
                "libvirt_uri": self.settings.libvirt_uri,
                "connected": bool(getattr(self.source, "connected", False)),
                "connects": getattr(self.source, "connects", 0),
                "libvirt_error": getattr(self.source, "last_error", ""),
                "notify_url": self.settings.notify_url, "counts": dict(self.counts),
                "collapsed": self.collapser.collapsed,
                "spool": {"entries": len(self.spool), "bytes": self.spool.size_bytes,
                          "dropped": self.spool.dropped,
                          "max_entries": self.settings.spool_max_entries,
                          "max_bytes": self.settings.spool_max_bytes},
                "sender": self.sender.stats(), "domains": domains}

    def write_state(self, force: bool = False) -> None:
        stats = self.sender.stats()
        signature = (len(self.spool), stats.get("sent"), stats.get("last_error"),
                     getattr(self.source, "connected", None))
        if signature != self._signature:  # the sender or the connection moved on
            self._signature = signature
            self._dirty = True
        now = time.monotonic()
        if not force and (not self._dirty or now - self._state_written
                          < self.settings.state_interval):
            return
        self._dirty = False
        self._state_written = now
        with contextlib.suppress(OSError):
            atomic_write(self.settings.run_dir / STATE_FILE,
                         json.dumps(self.state(), default=str).encode(), 0o644)

    # --- control socket ------------------------------------------------------------------------

    def _serve_control(self) -> None:
        path = self.settings.run_dir / SOCKET_FILE
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        monitor = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline(65536)
                try:
                    request = untrusted.loads(line, what="request")
                    if not isinstance(request, dict):
                        raise ValueError("send one JSON object")
                    if "inject" in request:
                        ev = monitor.inject(str(request["inject"]),
                                            str(request.get("domain", "")))
                        answer: dict[str, Any] = {"ok": True, "key": ev.key, "uuid": ev.uuid,
                                                  "name": ev.name}
                    elif request.get("status"):
                        answer = {"ok": True, "state": monitor.state()}
                    else:
                        raise ValueError("unknown request: use inject or status")
                except (ValueError, events.FilterError) as err:
                    answer = {"ok": False, "error": str(err)}
                self.wfile.write(json.dumps(answer, default=str).encode() + b"\n")

        server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
        server.daemon_threads = True
        os.chmod(path, 0o600)  # injecting events is for root (or the daemon's user) only
        self._server = server
        server.serve_forever(poll_interval=0.5)

    # --- life cycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self.settings.run_dir.mkdir(parents=True, exist_ok=True)
        self.sender.start()
        proc = threading.Thread(target=self._process, name="instmon-process", daemon=True)
        proc.start()
        self._threads.append(proc)
        if self.settings.control_socket:
            ctl = threading.Thread(target=self._serve_control, name="instmon-control",
                                   daemon=True)
            ctl.start()
            self._threads.append(ctl)
        self.source.start()
        log.info("watching %s for %s; notifying %s", self.settings.libvirt_uri,
                 self.settings.hostname, self.settings.notify_url)

    def stop(self) -> None:
        self.source.stop()
        self.queue.put(None)
        for thread in self._threads:
            if thread.name == "instmon-process":
                thread.join(5.0)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            with contextlib.suppress(OSError):
                (self.settings.run_dir / SOCKET_FILE).unlink()
        self.sender.stop(5.0)


def _utc(epoch: float) -> Any:
    import datetime

    return datetime.datetime.fromtimestamp(epoch, datetime.UTC)


def control(run_dir: Path, request: Mapping[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """Send one request to a running instmon's control socket."""
    path = Path(run_dir) / SOCKET_FILE
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(json.dumps(dict(request)).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    answer = untrusted.loads(data, what="instmon's answer")
    if not isinstance(answer, dict):
        raise ValueError("instmon answered something that is not an object")
    return answer


def run(settings: Settings, say: Callable[[str], None]) -> None:
    """Run the monitor until SIGTERM/SIGINT (`core.serve`: the pid file, the signals); `say`
    prints the line that tells it runs."""
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    monitor = InstanceMonitor(settings)

    def ready(_bound: list[serve.Address]) -> None:
        say(f"herder instmon: watching {settings.libvirt_uri} as {settings.hostname}; "
            f"notifying {settings.notify_url}")

    serve.run(lambda stop: serve.serve(
        "instmon", settings.run_dir, on_start=[monitor.start],
        on_stop=[lambda: asyncio.to_thread(monitor.stop)], ready=ready, stop=stop))
