"""The agent: schedules every collector and plugin, and keeps the cache requests are served from.

All cache updates happen on the event loop's thread; collectors run in a thread pool, so a
request never waits on a collector. A collector that raises or prints garbage gets a status-4
report of its own; one that hangs past `collector_timeout` is reported as hung (and not started
again until it returns). Every other report is unaffected.

Report bodies are serialised once per collection, and `/1/report/all` is the concatenation of
the cached bodies, so serving a request costs no JSON encoding.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from herder.core import model
from herder.mond import plugins, registry, report
from herder.mond.collector import CollectContext, Collector
from herder.mond.report import Kind
from herder.mond.runner import Sample, collect_once, render
from herder.mond.scheduler import Schedule

log = logging.getLogger("herder.mond")
_encode = msgspec.json.Encoder().encode
PLUGIN_INTERVAL = 60.0


@dataclass
class CachedReport:
    name: str
    category: str | None
    kind: int
    verbose: bytes
    summary: bytes
    data: Any  # the full data, for /metrics

    @property
    def path_category(self) -> str:
        return self.category or report.DEFAULT_CATEGORY


@dataclass
class Unit:
    """One scheduled source of reports: a built-in collector or a plugin file."""

    key: str
    schedule: Schedule
    collector: Collector | None = None
    plugin: Path | None = None
    running: Future[Any] | None = None
    started: float = 0.0
    hung_reported: bool = False
    digest: bytes = b""
    reports: list[CachedReport] = field(default_factory=list)
    runs: int = 0
    failures: int = 0
    last_duration: float = 0.0


def _settings_for(ctx: CollectContext, name: str,
                  default_interval: float) -> model.CollectorSettings:
    """The config's data_collectors entry, else confd's (on a node without the config), else
    the defaults. Never blocks on a stale confd answer (it is refreshed in the background)."""
    return ctx.collector_settings(name, default_interval, wait=False)


def _placeholder(collector: Collector) -> CachedReport:
    """What is served before a collector's first run ends."""
    reason = "not collected yet"
    data: dict[str, Any] = (
        {"status": report.status(report.Status.UNKNOWN, reason)}
        if collector.kind == Kind.STATUS else {"error": reason}
    )
    body = _encode(report.build(name=collector.name, category=collector.category,
                                kind=collector.kind, data=data, version=collector.version,
                                format_version=collector.format_version))
    return CachedReport(collector.name, collector.category, int(collector.kind), body, body, data)


class Agent:
    def __init__(self, ctx: CollectContext, *, workers: int = 4,
                 clock: Callable[[], float] = time.monotonic,
                 collectors: Mapping[str, type[Collector]] | None = None) -> None:
        self.ctx = ctx
        # The built-in collectors (tests pass their own).
        self.collectors = collectors if collectors is not None else registry.builtin_collectors()
        self.clock = clock
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="collector")
        self.units: dict[str, Unit] = {}
        self._config_seen: object = object()
        self._builtins_checked = -1e9
        self._plugins_checked = -1e9
        self.generation = 0  # bumps whenever any cached report changes
        self.by_path: dict[tuple[str, str], CachedReport] = {}
        self.all_summary = b"[]"
        self.all_verbose = b"[]"
        self.listing = b"[]"
        self.started_at = time.time()

    # --- which units exist ----------------------------------------------------------------------

    def refresh_units(self, now: float) -> None:
        config = self.ctx.config()
        # Re-check now and then too: a collector unavailable at start (no DRBD module yet,
        # libvirt down) appears once its subject does.
        if config is not self._config_seen or now - self._builtins_checked >= 60.0:
            self._config_seen = config
            self._builtins_checked = now
            self._sync_builtins(config)
        if now - self._plugins_checked >= 30.0:
            self._plugins_checked = now
            self._sync_plugins()

    def _sync_builtins(self, config: model.ConfigData | None) -> None:
        changed = False
        if config is None and self.ctx.cluster_source() == "confd":
            # confd's answers may change without a config change: look again once the cache
            # has aged (instead of after 60 s).
            ttl = max(1.0, self.ctx.settings.confd_cache_seconds)
            self._builtins_checked -= max(0.0, 60.0 - ttl)
        for name, cls in self.collectors.items():
            settings = _settings_for(self.ctx, name, cls.interval_default())
            unit = self.units.get(name)
            if not settings.active:
                if unit is not None:
                    del self.units[name]
                    changed = True
                continue
            assert settings.min_interval is not None and settings.max_interval is not None
            if unit is None:
                collector = cls(self.ctx)
                try:
                    available = collector.available()
                except Exception:  # an availability probe must not take the agent down
                    log.exception("collector %s: availability check failed", name)
                    available = False
                if not available:
                    continue
                unit = Unit(name, Schedule(settings.interval, settings.min_interval,
                                           settings.max_interval, cls.adaptive),
                            collector=collector)
                unit.reports = [_placeholder(collector)]
                self.units[name] = unit
                changed = True
            else:
                unit.schedule.retune(settings.interval, settings.min_interval,
                                     settings.max_interval, cls.adaptive)
        if changed:
            self._rebuild()

    def _sync_plugins(self) -> None:
        present = {str(p): p for p in plugins.discover(self.ctx.settings.plugin_dir)}
        changed = False
        for key in [k for k, u in self.units.items() if u.plugin is not None]:
            if key not in present:
                del self.units[key]
                changed = True
        for key, path in present.items():
            if key not in self.units:
                self.units[key] = Unit(key, Schedule(PLUGIN_INTERVAL, PLUGIN_INTERVAL / 2,
                                                     PLUGIN_INTERVAL * 4), plugin=path)
                changed = True
        if changed:
            self._rebuild()

    # --- running ----------------------------------------------------------------------------

    def due_units(self, now: float) -> list[Unit]:
        return [u for u in self.units.values() if u.running is None and u.schedule.next_due <= now]

    def start(self, unit: Unit, now: float) -> Future[Any]:
        unit.started = now
        unit.hung_reported = False
        future: Future[Any]
        if unit.collector is not None:
            future = self.executor.submit(collect_once, unit.collector)
        else:
            assert unit.plugin is not None
            reserved = list(self.collectors)
            future = self.executor.submit(plugins.run_plugin, unit.plugin,
                                          self.ctx.settings.plugin_timeout, reserved)
        unit.running = future
        return future

    def finish(self, unit: Unit, result: Any, now: float) -> None:
        """Store a finished run's reports and schedule the next one (event-loop thread)."""
        if self.units.get(unit.key) is not unit:
            return  # removed meanwhile (deactivated)
        unit.running = None
        duration = now - unit.started
        unit.last_duration = duration
        if unit.collector is not None:
            sample: Sample = result
            unit.failures += sample.failed
            reports = [self._cache_collector(unit.collector, sample)]
            digest = hashlib.blake2b(_encode(sample.data), digest_size=16).digest()
        else:
            reports = [CachedReport(r["name"], r["category"], r["kind"], _encode(r), _encode(r),
                                    r["data"]) for r in result]
            digest = hashlib.blake2b(b"".join(r.verbose for r in reports),
                                     digest_size=16).digest()
        changed = digest != unit.digest
        unit.digest = digest
        unit.reports = reports
        unit.schedule.after_run(now, changed=changed, duration=duration)
        self._rebuild()
        unit.runs += 1  # last: observers see a run only once its reports are served

    def _cache_collector(self, collector: Collector, sample: Sample) -> CachedReport:
        verbose = render(collector, sample, verbose=True)
        summary = render(collector, sample, verbose=False)
        verbose_body = _encode(verbose)
        summary_body = verbose_body if summary == verbose else _encode(summary)
        return CachedReport(collector.name, collector.category, int(collector.kind),
                            verbose_body, summary_body, sample.data)

    def check_hung(self, now: float) -> None:
        limit = self.ctx.settings.collector_timeout
        for unit in self.units.values():
            if unit.running is None or unit.hung_reported or now - unit.started < limit:
                continue
            unit.hung_reported = True
            reason = f"did not finish within {limit:g}s (hung); results will follow if it ends"
            if unit.collector is not None:
                c = unit.collector
                data = report.failure_data(c.kind, reason)
                sample = Sample(data, report.now_ns(), now - unit.started, failed=True)
                unit.reports = [self._cache_collector(c, sample)]
            else:
                assert unit.plugin is not None
                rep = plugins.problem_report(unit.plugin, reason)
                body = _encode(rep)
                unit.reports = [CachedReport(rep["name"], None, 1, body, body, rep["data"])]
            self._rebuild()

    def next_wakeup(self, now: float) -> float:
        dues = [u.schedule.next_due for u in self.units.values() if u.running is None]
        return max(0.0, min([*dues, now + 1.0]) - now)

    # --- the cache ----------------------------------------------------------------------------

    def _ordered_reports(self) -> list[CachedReport]:
        builtins = [u for u in self.units.values() if u.collector is not None]
        plugin_units = sorted((u for u in self.units.values() if u.plugin is not None),
                              key=lambda u: u.key)
        return [r for u in [*builtins, *plugin_units] for r in u.reports]

    def _rebuild(self) -> None:
        reports = self._ordered_reports()
        by_path: dict[tuple[str, str], CachedReport] = {}
        for rep in reports:
            by_path.setdefault((rep.path_category, rep.name), rep)  # built-ins win
        kept = [r for r in reports if by_path[(r.path_category, r.name)] is r]
        self.by_path = by_path
        self.all_summary = b"[" + b",".join(r.summary for r in kept) + b"]"
        self.all_verbose = b"[" + b",".join(r.verbose for r in kept) + b"]"
        self.listing = _encode([[r.name, r.path_category, r.kind] for r in kept])
        self.generation += 1

    # --- the loop ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        loop = asyncio.get_running_loop()
        stop = stop or asyncio.Event()
        while not stop.is_set():
            now = self.clock()
            try:
                self.refresh_units(now)
                self.check_hung(now)
                for unit in self.due_units(now):
                    future = self.start(unit, now)
                    future.add_done_callback(functools.partial(self._call_soon, loop, unit))
            except Exception:  # the scheduler must survive anything a unit does
                log.exception("mond scheduling round failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(0.05, self.next_wakeup(now)))

    def _call_soon(self, loop: asyncio.AbstractEventLoop, unit: Unit,
                   future: Future[Any]) -> None:
        """From a collector thread: hand the result to the loop (gone when shutting down)."""
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._done, unit, future)

    def _done(self, unit: Unit, future: Future[Any]) -> None:
        try:
            result = future.result()
        except Exception as err:  # collect_once and run_plugin do not raise; be safe anyway
            log.exception("unit %s failed", unit.key)
            if unit.collector is not None:
                result = Sample(report.failure_data(unit.collector.kind, str(err)),
                                report.now_ns(), 0.0, failed=True)
            else:
                assert unit.plugin is not None
                result = [plugins.problem_report(unit.plugin, str(err))]
        self.finish(unit, result, self.clock())

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
