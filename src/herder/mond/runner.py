"""Running one collector once, isolated, and rendering its report. Shared by the daemon and
`herder collect`, so stand-alone output equals the daemon's report for the same input."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from herder.mond import report
from herder.mond.collector import Collector, CollectorError


@dataclass(frozen=True, slots=True)
class Sample:
    """One run of a collector: its full data, when, how long it took, and whether it failed."""

    data: Any
    timestamp: int  # ns since the epoch
    duration: float  # seconds
    failed: bool = False


def describe(err: BaseException) -> str:
    if isinstance(err, CollectorError):
        return str(err)
    return f"collector crashed: {type(err).__name__}: {err}"


def collect_once(collector: Collector) -> Sample:
    """Run `collect()`; any exception becomes a failure sample naming the reason."""
    started = time.monotonic()
    stamp = report.now_ns()
    try:
        data = collector.collect()
        failed = False
    except Exception as err:  # isolation: one collector's bug is its own report's problem
        data = report.failure_data(collector.kind, describe(err))
        failed = True
    return Sample(data, stamp, time.monotonic() - started, failed)


def render(collector: Collector, sample: Sample, *, verbose: bool) -> dict[str, Any]:
    data = sample.data if verbose or sample.failed else collector.summary(sample.data)
    built = report.build(
        name=collector.name, category=collector.category, kind=collector.kind, data=data,
        timestamp=sample.timestamp, version=collector.version,
        format_version=collector.format_version,
    )
    built.update(collector.extra_fields(sample.data, sample.timestamp))
    return built
