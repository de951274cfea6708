"""Test collectors with scripted behaviour: fine, raising, hanging, garbage, changing."""

from __future__ import annotations

import threading
from typing import Any

from herder.mond.collector import Collector, CollectorError
from herder.mond.report import Kind, status


class Steady(Collector):
    name = "steady"
    category = "storage"
    kind = Kind.STATUS
    default_interval = 0.05

    def collect(self) -> dict[str, Any]:
        return {"status": status(0), "free": 10, "used": 5, "total": 15}


class Perf(Collector):
    name = "perf"
    category = None
    kind = Kind.PERFORMANCE
    default_interval = 0.05

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.count = 0

    def collect(self) -> dict[str, Any]:
        self.count += 1
        return {"count": self.count}


class Raising(Collector):
    name = "raising"
    category = "storage"
    kind = Kind.STATUS
    default_interval = 0.05

    def collect(self) -> Any:
        raise RuntimeError("disk on fire")


class Refusing(Collector):
    name = "refusing"
    category = None
    kind = Kind.PERFORMANCE
    default_interval = 0.05

    def collect(self) -> Any:
        raise CollectorError("backend pv unavailable")


RELEASE = threading.Event()


class Hanging(Collector):
    name = "hanging"
    category = "daemon"
    kind = Kind.STATUS
    default_interval = 0.05

    def collect(self) -> Any:
        RELEASE.wait(30)
        return {"status": status(0)}


class Unavailable(Collector):
    name = "unavailable"
    category = "storage"
    kind = Kind.STATUS

    def available(self) -> bool:
        return False

    def collect(self) -> Any:
        raise AssertionError("never runs")


ALL = {c.name: c for c in (Steady, Perf, Raising, Refusing, Hanging, Unavailable)}
