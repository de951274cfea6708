"""The agent's cached data in Prometheus text format (prometheus-client).

Per collector: its status code (status collectors), last run time, run duration, current
interval and failures; and every numeric value of its data as
`herder_mond_value{collector, category, path}`, where `path` is the dotted path inside `data`
(list items by index, or by their `name`/`minor` when they have one). The exposition is cached
until a collector's report changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from herder.mond.agent import Agent

MAX_VALUES_PER_COLLECTOR = 5000  # bound the exposition of huge reports


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """(dotted path, number) for every numeric leaf; booleans count as 0/1."""
    if isinstance(value, int | float):  # bool is an int: 0/1
        yield prefix, float(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            label: object = index
            if isinstance(item, dict):
                label = item.get("name", item.get("minor", index))
            yield from flatten(item, f"{prefix}.{label}" if prefix else str(label))


class _AgentCollector:
    """A prometheus-client custom collector over the agent's cache."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        status = GaugeMetricFamily("herder_mond_collector_status",
                                   "Status code of a status collector (0 ok, 1, 2, 4 bad)",
                                   labels=["collector", "category"])
        duration = GaugeMetricFamily("herder_mond_collector_duration_seconds",
                                     "How long the last run took", labels=["collector"])
        interval = GaugeMetricFamily("herder_mond_collector_interval_seconds",
                                     "Current (adaptive) collection interval",
                                     labels=["collector"])
        runs = CounterMetricFamily("herder_mond_collector_runs", "Runs so far",
                                   labels=["collector"])
        failures = CounterMetricFamily("herder_mond_collector_failures",
                                       "Runs that failed", labels=["collector"])
        values = GaugeMetricFamily("herder_mond_value",
                                   "A numeric value from a collector's data",
                                   labels=["collector", "category", "path"])
        for unit in self.agent.units.values():
            duration.add_metric([unit.key], unit.last_duration)
            interval.add_metric([unit.key], unit.schedule.current)
            runs.add_metric([unit.key], unit.runs)
            failures.add_metric([unit.key], unit.failures)
            for rep in unit.reports:
                data = rep.data
                if isinstance(data, dict) and isinstance(data.get("status"), dict):
                    code = data["status"].get("code")
                    if isinstance(code, int):
                        status.add_metric([rep.name, rep.path_category], code)
                for count, (path, number) in enumerate(flatten(data)):
                    if count >= MAX_VALUES_PER_COLLECTOR:
                        break
                    values.add_metric([rep.name, rep.path_category, path], number)
        uptime = GaugeMetricFamily("herder_mond_start_time_seconds",
                                   "When the agent started (unix time)")
        uptime.add_metric([], self.agent.started_at)
        yield from (status, duration, interval, runs, failures, values, uptime)


_cache: dict[int, tuple[int, bytes]] = {}


def exposition(agent: Agent) -> bytes:
    # prometheus-client is imported on the first scrape only: agents nobody scrapes stay small.
    from prometheus_client import CollectorRegistry, generate_latest

    cached = _cache.get(id(agent))
    if cached is not None and cached[0] == agent.generation:
        return cached[1]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_AgentCollector(agent))
    body = generate_latest(registry)
    _cache[id(agent)] = (agent.generation, body)
    return body
