"""The registry of built-in collectors: every `COLLECTORS` list in `herder.mond.collectors.*`.

Order in lists and `/1/report/all` follows Ganeti's agent for the collectors it has, then
herder's own in name order.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from herder.mond import collectors as collectors_pkg
from herder.mond.collector import Collector

# Ganeti's order first (cpu-avg-load, diskstats, drbd, inst-status, lv, diagnose).
ORDER = ("cpu-avg-load", "diskstats", "drbd", "inst-status", "lv", "diagnose")


@cache
def builtin_collectors() -> dict[str, type[Collector]]:
    """name -> collector class, in report order. Refuses duplicate names."""
    found: dict[str, type[Collector]] = {}
    for info in sorted(pkgutil.iter_modules(collectors_pkg.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{collectors_pkg.__name__}.{info.name}")
        for cls in getattr(module, "COLLECTORS", ()):
            if cls.name in found:
                raise RuntimeError(f"two built-in collectors are named {cls.name!r}")
            found[cls.name] = cls

    def rank(name: str) -> tuple[int, str]:
        return (ORDER.index(name) if name in ORDER else len(ORDER), name)

    return {name: found[name] for name in sorted(found, key=rank)}


def get(name: str) -> type[Collector]:
    collectors = builtin_collectors()
    try:
        return collectors[name]
    except KeyError:
        known = ", ".join(collectors)
        raise KeyError(f"no collector named {name!r} (known: {known})") from None
