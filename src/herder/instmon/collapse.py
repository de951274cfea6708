"""Collapsing the several events one failure produces into one notification (pure; the clock
is passed in).

One I/O error makes libvirt's QEMU driver emit IO_ERROR and IO_ERROR_REASON, plus
LIFECYCLE.SUSPENDED.IOERROR when the policy pauses the guest; a guest shutdown is
SHUTDOWN.FINISHED then STOPPED.SHUTDOWN; a watchdog that pauses is WATCHDOG.PAUSE plus
SUSPENDED.WATCHDOG. masakari sends each as its own notification. Here events of one domain and
one family are held `delay` seconds; the most telling one (highest rank) is sent, the others
are counted into it. After a notification, events of the same family and no higher rank are
suppressed for `window` seconds, unless the domain started or resumed in between (then the
next stop is a new failure, never swallowed).
"""

from __future__ import annotations

from dataclasses import dataclass

from herder.instmon.events import RawEvent

# key prefix -> (family, rank); the first matching prefix wins
FAMILIES: tuple[tuple[str, str, int], ...] = (
    ("IO_ERROR.REPORT", "io", 50), ("IO_ERROR.PAUSE", "io", 40), ("IO_ERROR.NONE", "io", 30),
    ("LIFECYCLE.SUSPENDED.IOERROR", "io", 20), ("IO_ERROR_REASON", "io", 10),
    ("WATCHDOG", "watchdog", 30), ("LIFECYCLE.SUSPENDED.WATCHDOG", "watchdog", 20),
    ("LIFECYCLE.STOPPED.FAILED", "stop", 60), ("LIFECYCLE.STOPPED.CRASHED", "stop", 55),
    ("LIFECYCLE.CRASHED", "stop", 50), ("LIFECYCLE.STOPPED.DESTROYED", "stop", 40),
    ("LIFECYCLE.STOPPED.SHUTDOWN", "stop", 30), ("LIFECYCLE.SHUTDOWN", "stop", 20),
)


def family(event: RawEvent) -> tuple[str, int]:
    key = event.key
    for prefix, fam, rank in FAMILIES:
        if key == prefix or key.startswith(prefix + "."):
            return fam, rank
    return key, 0


@dataclass
class Held:
    due: float
    event: RawEvent
    when: float  # when the first event of the group arrived (the notification's time)
    rank: int
    merged: int = 0  # events collapsed into it


class Collapser:
    def __init__(self, delay: float = 0.1, window: float = 2.0) -> None:
        self.delay = delay
        self.window = window
        self.held: dict[tuple[str, str], Held] = {}
        self.sealed: list[Held] = []  # held groups closed by a start: nothing merges into them
        self.recent: dict[tuple[str, str], tuple[float, int]] = {}  # -> (sent at, rank)
        self.collapsed = 0

    def reset(self, uuid: str) -> None:
        """The domain started or resumed: later events are a new failure."""
        for key in [k for k in self.held if k[0] == uuid]:
            self.sealed.append(self.held.pop(key))
        for key in [k for k in self.recent if k[0] == uuid]:
            del self.recent[key]

    def add(self, event: RawEvent, now: float, when: float | None = None) -> bool:
        """Hold a notifiable event; False when it was collapsed into another."""
        fam, rank = family(event)
        key = (event.uuid, fam)
        sent = self.recent.get(key)
        if sent is not None and now - sent[0] < self.window and rank <= sent[1]:
            self.collapsed += 1
            return False
        held = self.held.get(key)
        if held is not None:
            if rank > held.rank:
                held.event, held.rank = event, rank
            held.merged += 1
            self.collapsed += 1
            return False
        self.held[key] = Held(now + self.delay, event, now if when is None else when, rank)
        return True

    def due(self, now: float) -> list[Held]:
        """The groups whose hold time is over, oldest first."""
        out = [h for h in self.sealed if h.due <= now]
        self.sealed = [h for h in self.sealed if h.due > now]
        for key, held in list(self.held.items()):
            if held.due <= now:
                out.append(self.held.pop(key))
                self.recent[key] = (now, held.rank)
        for key, (sent, _rank) in list(self.recent.items()):
            if now - sent >= self.window:
                del self.recent[key]
        out.sort(key=lambda h: h.when)
        return out

    def next_due(self) -> float | None:
        times = [h.due for h in self.held.values()] + [h.due for h in self.sealed]
        return min(times) if times else None
