"""`cpu-avg-load`: average CPU load over a sliding window of /proc/stat samples (category null,
kind 0, stateful), in Ganeti's data format:

    {"cpu_number": N, "cpus": [load of cpu0, ..., cpuN-1], "cpu_total": load of all CPUs}

A load is busy ticks / elapsed ticks, so each `cpus` value is 0..1 and `cpu_total` 0..N (the
node's load in CPUs, which Ganeti's balancer reads). Busy = user + nice + system + iowait + irq
+ softirq + steal (everything but idle; iowait counts as busy, as in Ganeti). Unlike Ganeti,
guest and guest_nice are not added again: the kernel already counts them in user and nice, so
Ganeti's sum counts a guest's time twice.

Every `collect()` takes one sample (clock from `ctx.clock`) and keeps at most 151 samples
(Ganeti's buffer); the report averages between the newest sample and the oldest one less than
600 s old (Ganeti's window). With a single sample in the window (the first run, and every
stand-alone `herder collect` run), the load is the average since boot (busy / all ticks of each
line). When the set of CPUs changes (hotplug), the older history is dropped.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from typing import Any

from herder.mond.collector import CollectContext, Collector, CollectorError
from herder.mond.report import Kind

BUFFER_SIZE = 151  # samples kept (Ganeti: the newest plus 150)
WINDOW = 600.0  # seconds averaged over

IDLE = 3  # index of idle among user nice system idle iowait irq softirq steal guest guest_nice
COUNTED = 8  # user .. steal; guest and guest_nice are included in user and nice already


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """One /proc/stat `cpu` line, reduced to busy and total ticks."""

    name: str
    busy: int
    total: int


@dataclass(frozen=True, slots=True)
class StatSample:
    time: float  # seconds (ctx.clock)
    cpus: tuple[CpuTimes, ...]  # the aggregate "cpu" line first, then cpu0, cpu1, ...

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cpus)


def parse_proc_stat(text: str) -> tuple[CpuTimes, ...]:
    """The `cpu` and `cpuN` lines of /proc/stat (at least user nice system idle each)."""
    result: list[CpuTimes] = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or not words[0].startswith("cpu"):
            continue
        name, values = words[0], words[1:]
        if name != "cpu" and not name[3:].isdigit():
            raise CollectorError(f"/proc/stat line {number}: unexpected name {name!r}")
        try:
            ticks = [int(v) for v in values[:10]]
        except ValueError:
            raise CollectorError(
                f"/proc/stat line {number} has a non-numeric field: {line[:80]!r}") from None
        if len(ticks) < 4 or any(t < 0 for t in ticks):
            raise CollectorError(f"/proc/stat line {number} is not a cpu line: {line[:80]!r}")
        counted = ticks[:COUNTED]
        total = sum(counted)
        result.append(CpuTimes(name, total - counted[IDLE], total))
    if not result or result[0].name != "cpu":
        raise CollectorError("/proc/stat has no aggregate cpu line")
    if len(result) < 2:
        raise CollectorError("/proc/stat lists no individual cpus")
    return tuple(result)


def loads_since_boot(sample: StatSample) -> list[float]:
    loads = [c.busy / c.total if c.total > 0 else 0.0 for c in sample.cpus]
    loads[0] *= len(sample.cpus) - 1  # the aggregate line: in CPUs, as the windowed value
    return loads


def loads_between(newest: StatSample, oldest: StatSample, ticks_per_second: float) -> list[float]:
    elapsed = (newest.time - oldest.time) * ticks_per_second
    return [max(0, new.busy - old.busy) / elapsed
            for new, old in zip(newest.cpus, oldest.cpus, strict=True)]


def window(samples: deque[StatSample], now: float, size: float = WINDOW) -> list[StatSample]:
    """The leading run of samples (newest first) taken less than `size` seconds before now."""
    result = []
    for sample in samples:
        if sample.time <= now - size:
            break
        result.append(sample)
    return result


def average(samples: deque[StatSample], now: float, ticks_per_second: float) -> dict[str, Any]:
    """Ganeti's data from the buffered samples (newest first)."""
    current = window(samples, now)
    if not current:
        raise CollectorError("no /proc/stat sample in the window")
    newest, oldest = current[0], current[-1]
    if newest.time > oldest.time:
        loads = loads_between(newest, oldest, ticks_per_second)
    else:
        loads = loads_since_boot(newest)
    return {"cpu_number": len(loads) - 1, "cpus": loads[1:], "cpu_total": loads[0]}


def clock_ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100.0


class CpuAvgLoadCollector(Collector):
    name = "cpu-avg-load"
    category = None
    kind = Kind.PERFORMANCE
    inputs = {"proc_stat": "/proc/stat"}

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx)
        self.samples: deque[StatSample] = deque(maxlen=BUFFER_SIZE)  # newest first
        self.ticks_per_second = clock_ticks()

    def add_sample(self, sample: StatSample) -> None:
        if self.samples and self.samples[0].names != sample.names:
            self.samples.clear()  # CPUs came or went: old samples do not compare
        if self.samples and sample.time < self.samples[0].time:
            self.samples.clear()  # the clock went back
        self.samples.appendleft(sample)

    def collect(self) -> dict[str, Any]:
        text = self.ctx.read_input("proc_stat", "/proc/stat")
        now = self.ctx.clock()
        self.add_sample(StatSample(now, parse_proc_stat(text)))
        return average(self.samples, now, self.ticks_per_second)


COLLECTORS = [CpuAvgLoadCollector]
