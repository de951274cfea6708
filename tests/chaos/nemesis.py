"""The nemesis: faults injected into a simulated cluster, chosen at random from a seed, each
healed before the next (so the run ends with every node back). A fault is one of

- kill: `kill -9` of one daemon of a node (libvirtd, noded, confd, mond, instmon, and masterd
  or maintd on the master): on a namespace host the PID its supervisor reports, which
  restarts it; on a Debian host its unit's main PID (`systemctl show -p MainPID`), as an
  operator's host sees it, and systemd's `Restart=` must bring it back (the event says when,
  or "not restarted": a unit that stays down is a finding, tests/chaos/test_chaos_sim.py);
- power: the node's BMC switches it off (`simulate --power-off`: no grace), later on again;
- cut: the node's network goes down inside its namespace (`ip link set eth0 down`), later up;
- fill: the node's file storage filled to the last byte (`fallocate`), later freed.

Power and cut spare the master (node1): its loss needs an operator's master-failover
(docs/ha.md), which the chaos run does not do. Every event is recorded with its wall time.
While a fault holds a node (`held`), the operator's round (tests/chaos/run.py) leaves it alone."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

from herder.core.errors import HerderError
from herder.sim import cluster
from herder.sim.host import FILE_STORAGE, SimHost
from herder.supervise import daemon_util
from herder.supervise.settings import KNOWN_DAEMONS, MASTER_DAEMONS
from tests.chaos.history import NemesisEvent

FAULTS = ("kill", "power", "cut", "fill")
FILL = f"{FILE_STORAGE}/chaos-fill"
# A killed unit is back within its RestartSec= (5 s for herder's, 100 ms for libvirtd's) and a
# start; 60 s on a loaded machine, then it counts as not restarted
RESTART_TIMEOUT = 60.0
NOT_RESTARTED = "not restarted"


class Nemesis:
    def __init__(self, state: cluster.SimState, rng: random.Random, *,
                 cut_seconds: tuple[float, float] = (2.0, 25.0),
                 down_seconds: tuple[float, float] = (5.0, 30.0)) -> None:
        self.state = state
        self.rng = rng
        self.cut_seconds = cut_seconds
        self.down_seconds = down_seconds
        self.events: list[NemesisEvent] = []
        self._lock = threading.Lock()
        self._held: set[str] = set()  # nodes a fault keeps off or cut until it heals them
        names = [n.name for n in state.nodes]
        self.master, self.others = names[0], names[1:]

    def record(self, kind: str, node: str, detail: str = "") -> None:
        with self._lock:
            self.events.append(NemesisEvent(kind, node, time.time(), detail))

    def held(self) -> set[str]:
        """The nodes a fault keeps off or cut now (the operator leaves them alone)."""
        with self._lock:
            return set(self._held)

    def _hold(self, node: str, holding: bool) -> None:
        with self._lock:
            (self._held.add if holding else self._held.discard)(node)

    def _attempt(self, kind: str, node: str, action: Callable[[], str]) -> bool:
        """Run one injection or healing; a failure is recorded, not raised."""
        try:
            detail = action()
        except Exception as exc:  # a fault that failed to inject is history, not an error
            self.record(kind, node, f"failed: {str(exc).splitlines()[0] if str(exc) else exc!r}")
            return False
        self.record(kind, node, detail)
        return True

    def kill(self, node: str, daemon: str) -> str:
        host = self.state.host(node)
        if host.debian:
            return kill_unit(host, daemon)
        reply = host.supervisor("status", [daemon], timeout=30)
        pid = str(next((d.pid for d in reply.daemons if d.name == daemon and d.pid), ""))
        if not pid:
            return f"{daemon} not running"
        host.run(["kill", "-9", pid], timeout=30, check=True)
        return f"{daemon} pid {pid}"

    def power(self, node: str, on: bool) -> str:
        return cluster.power(Path(self.state.directory), node, on)

    def link(self, node: str, up: bool) -> str:
        self.state.host(node).run(["ip", "link", "set", "eth0", "up" if up else "down"],
                                  timeout=30, check=True)
        return "eth0 up" if up else "eth0 down"

    def fill(self, node: str) -> str:
        """Allocate all but 4 MiB (ext4 keeps some blocks back from an exact fallocate), then
        write zeros until the file system is full: nothing is left but a few blocks of
        metadata, and the machine's disk gets only those 4 MiB of data (the rest is
        allocated unwritten). A failure leaves no fill file behind."""
        host = self.state.host(node)
        free = host.run(["df", "--output=avail", "-B1", FILE_STORAGE], timeout=30, check=True)
        size = max(0, int(free.stdout.split()[-1]) - (4 << 20))
        try:
            host.run(["fallocate", "-l", str(size), FILL], timeout=60, check=True)
            host.run(["sh", "-c", f"dd if=/dev/zero of={FILL} bs=64k oflag=append "
                                  "conv=notrunc 2>/dev/null; true"], timeout=120, check=True)
            left = host.run(["df", "--output=avail", "-B1", FILE_STORAGE], timeout=30,
                            check=True).stdout.split()[-1]
        except BaseException:
            host.run(["rm", "-f", FILL], timeout=30)
            raise
        return f"{size} bytes allocated, {left} left"

    def free(self, node: str) -> str:
        self.state.host(node).run(["rm", "-f", FILL], timeout=30, check=True)
        return FILL

    def free_leftovers(self) -> None:
        """Remove a fill whose freeing failed (its node was off then: maintd fenced it, or
        the nemesis had powered it off); run once every node is back."""
        for node in [self.master, *self.others]:
            if self.state.host(node).path(FILL).exists():
                self._attempt("free", node, lambda node=node: self.free(node))

    def one_fault(self, stop: threading.Event) -> None:
        """Inject one fault at random and heal it after a random while (sooner when `stop`
        is set: the run is ending)."""
        fault = self.rng.choice(FAULTS)
        if fault == "kill":
            daemon = self.rng.choice(KNOWN_DAEMONS)
            # masterd and maintd run on the master only (elsewhere they exit 11 at start)
            node = self.master if daemon in MASTER_DAEMONS else self.rng.choice(
                [self.master, *self.others])
            self._attempt("kill", node, lambda: self.kill(node, daemon))
            return
        if fault == "fill":
            node = self.rng.choice([self.master, *self.others])
            if self._attempt("fill", node, lambda: self.fill(node)):
                stop.wait(self.rng.uniform(*self.down_seconds))
                self._attempt("free", node, lambda: self.free(node))
            return
        node = self.rng.choice(self.others)
        self._hold(node, True)
        try:
            if fault == "power":
                if self._attempt("power-off", node, lambda: self.power(node, False)):
                    stop.wait(self.rng.uniform(*self.down_seconds))
                    self._attempt("power-on", node, lambda: self.power(node, True))
                return
            if self._attempt("cut", node, lambda: self.link(node, False)):
                stop.wait(self.rng.uniform(*self.cut_seconds))
                self._attempt("heal", node, lambda: self.link(node, True))
        finally:
            self._hold(node, False)

    def run(self, stop: threading.Event, *, events: int | None = None,
            pause: tuple[float, float] = (3.0, 15.0)) -> None:
        """Faults one after another until `stop` (or `events` faults), pausing between."""
        done = 0
        while not stop.is_set() and (events is None or done < events):
            if stop.wait(self.rng.uniform(*pause)):
                break
            self.one_fault(stop)
            done += 1


def _unit_state(host: SimHost, unit: str) -> dict[str, str]:
    shown = host.run(["systemctl", "show", "-p", "MainPID", "-p", "ActiveState", "-p",
                      "NRestarts", unit], timeout=30, check=True).stdout
    return dict(line.partition("=")[::2] for line in shown.splitlines() if "=" in line)


def kill_unit(host: SimHost, daemon: str) -> str:
    """`kill -9` of a daemon's unit's main PID on a Debian host, then until systemd started it
    again (a new main PID, the unit active): what happened, in a line."""
    unit = daemon_util.unit(daemon)
    before = _unit_state(host, unit)
    pid = before.get("MainPID", "0")
    if pid in ("", "0"):  # masterd, maintd off the master; libvirtd idle past its --timeout
        return f"{unit} not running ({before.get('ActiveState', '?')})"
    host.run(["kill", "-9", pid], timeout=30, check=True)
    began = time.monotonic()
    state = before
    while time.monotonic() - began < RESTART_TIMEOUT:
        time.sleep(0.5)
        try:
            state = _unit_state(host, unit)
        except (HerderError, OSError) as err:  # maintd fenced the node meanwhile
            return f"{unit} pid {pid} killed; restart not seen: {err}"
        if state.get("ActiveState") == "active" and state.get("MainPID", "0") not in ("0", pid):
            return (f"{unit} pid {pid} killed, restarted as pid {state['MainPID']} after "
                    f"{time.monotonic() - began:.1f} s (NRestarts {state.get('NRestarts', '?')})")
    return (f"{unit} pid {pid} killed, {NOT_RESTARTED} within {RESTART_TIMEOUT:.0f} s "
            f"({state.get('ActiveState', '?')}, MainPID {state.get('MainPID', '?')})")
