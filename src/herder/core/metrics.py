"""Prometheus text exposition for herder's daemons (prometheus-client): each daemon's own
gauges and counters (`Family`), with the process's CPU, memory and open files
(prometheus-client's process collector) beside them. mond has its own (herder.mond.metrics)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Family:
    """One metric: its name, help, kind, and (labels, value) samples."""

    name: str
    help: str
    kind: Literal["gauge", "counter"] = "gauge"
    labels: tuple[str, ...] = ()
    samples: Sequence[tuple[Sequence[str], float]] = field(default_factory=list)


def counts(name: str, help_text: str, label: str, values: Iterable[str],
           every: Sequence[str] = ()) -> Family:
    """A gauge of how many of `values` there are per value (each of `every` shown, also 0)."""
    found: dict[str, int] = dict.fromkeys(every, 0)
    for value in values:
        found[value] = found.get(value, 0) + 1
    return Family(name, help_text, labels=(label,),
                  samples=[([key], float(n)) for key, n in sorted(found.items())])


class _Families:
    """A prometheus-client custom collector over the families of one scrape."""

    def __init__(self, families: Sequence[Family]) -> None:
        self.families = families

    def collect(self) -> Iterable[object]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for family in self.families:
            kind = CounterMetricFamily if family.kind == "counter" else GaugeMetricFamily
            metric = kind(family.name, family.help, labels=list(family.labels))
            for labels, value in family.samples:
                metric.add_metric(list(labels), value)
            yield metric


def exposition(families: Sequence[Family], *, process: bool = True) -> bytes:
    """The Prometheus text of `families` (and of this process, unless `process` is False)."""
    from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))  # type: ignore[arg-type]  # a Collector by protocol: prometheus-client types register() with its own Collector class
    if process:
        ProcessCollector(registry=registry)
    body: bytes = generate_latest(registry)
    return body

