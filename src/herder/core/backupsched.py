"""Scheduled backups (issue 30 item 6; Ganeti has none, Proxmox VE's backup jobs are the
model): a schedule names the instances it exports (one by name, or all carrying a tag), when
(`daily HH:MM` in UTC, `every N hours|minutes`, or a cron expression in UTC: five fields or a
nickname, stepped by croniter), the node the exports go to and how many exports of an
instance to keep. The schedules live in the cluster config's maintenance section
(`backupSchedules`), so a master failover keeps them; maintd runs them
(herder.maintd.backups) and records each run (`BackupRun`) in its state. Pure: no I/O."""

from __future__ import annotations

import functools
import itertools
import re
import time
from typing import Literal

import msgspec
from croniter import croniter

from herder.core import names

_DAILY = re.compile(r"daily\s+([01]?\d|2[0-3]):([0-5]\d)")
_EVERY = re.compile(r"every\s+([1-9]\d{0,3})\s*(hours?|h|minutes?|min|m)")
DAY = 86400.0
MIN_PERIOD = 300.0  # seconds between two runs at least (`every 5 minutes`)
# cron's nicknames, also without their `@` (`weekly`: Sunday 00:00 UTC, as cron's)
_NICKNAMES = ("hourly", "daily", "weekly", "monthly", "yearly", "annually", "midnight")
_CRON_FIELD = re.compile(r"[0-9A-Za-z*/,-]+")
# the runs a cron expression's spacing is checked over, from a fixed time (a Monday)
_CRON_CHECKED = 400
_CRON_FROM = 1_704_067_200.0  # 2024-01-01 00:00 UTC
# the runs kept in maintd's state (the newest; older ones are dropped)
RUNS_KEPT = 50
KEEP_MAX = 100  # exports of one instance a node keeps at most (herder's retention)

BackupRunStatus = Literal["pending", "running", "success", "failed"]


def keep_count(keep: int | None, what: str = "keep") -> None:
    """How many exports of an instance a node keeps (an export's `keep`): None (Ganeti's:
    the newest replaces the one of its name, older kept ones are left alone) or 1 to
    KEEP_MAX."""
    if keep is not None and not 1 <= keep <= KEEP_MAX:
        raise ValueError(f"{what} {keep}: 1 to {KEEP_MAX} exports of an instance")


class BadSchedule(ValueError):
    """A schedule that cannot be run (one line for the operator)."""


def _cron_of(when: str) -> str | None:
    """`when` as a cron expression for croniter (a nickname with its `@`), or None when it is
    none of the forms taken by cron (five fields, or a nickname)."""
    text = " ".join(when.lower().split())
    if text.removeprefix("@") in _NICKNAMES:
        return "@" + text.removeprefix("@")
    fields = text.split(" ")
    if len(fields) == 5 and all(_CRON_FIELD.fullmatch(field) for field in fields):
        return text
    return None


@functools.lru_cache(maxsize=256)  # maintd reads the schedules again every tick
def _check_cron(when: str, expression: str) -> None:
    """A cron expression croniter steps, no two of its runs closer than MIN_PERIOD (checked
    over _CRON_CHECKED runs from a fixed time, so always the same answer)."""
    try:
        steps = croniter(expression, _CRON_FROM)
        times = [steps.get_next(float) for _ in range(_CRON_CHECKED)]
    except (ValueError, KeyError, TypeError) as err:  # croniter's errors are ValueErrors
        raise BadSchedule(f"schedule {when!r}: not a cron expression croniter takes: "
                          f"{str(err).splitlines()[0]}") from None
    if min(b - a for a, b in itertools.pairwise(times)) < MIN_PERIOD:
        raise BadSchedule(f"schedule {when!r}: runs closer than every 5 minutes")


def _interval_of(when: str) -> tuple[float, float] | None:
    """`daily HH:MM` or `every N ...` as (period in seconds, offset from midnight UTC), or
    None when `when` is neither."""
    text = " ".join(when.lower().split())
    daily = _DAILY.fullmatch(text)
    if daily:
        return DAY, int(daily.group(1)) * 3600.0 + int(daily.group(2)) * 60.0
    every = _EVERY.fullmatch(text)
    if every:
        count, unit = int(every.group(1)), every.group(2)
        period = count * (3600.0 if unit.startswith("h") else 60.0)
        if period < MIN_PERIOD or period > 7 * DAY:
            raise BadSchedule(f"schedule {when!r}: between every 5 minutes and every 168 hours")
        return period, 0.0
    return None


def check_when(when: str) -> None:
    """BadSchedule with one line unless `when` is a schedule's time: `daily HH:MM` (UTC),
    `every N hours|minutes` (counted from midnight UTC), or a cron expression in UTC (five
    fields, `0 2 * * mon-fri`, or a nickname, `@daily`/`daily`), runs 5 minutes apart at
    least."""
    if _interval_of(when) is not None:
        return
    expression = _cron_of(when)
    if expression is None:
        raise BadSchedule(f"schedule {when!r}: give 'daily HH:MM' (UTC), 'every N hours', "
                          "'every N minutes' or a cron expression ('0 2 * * mon-fri', "
                          "'@weekly'; UTC)")
    _check_cron(when, expression)


def last_due(when: str, now: float) -> float:
    """The newest time at or before `now` (seconds since the epoch) the schedule names."""
    interval = _interval_of(when)
    if interval is not None:
        period, offset = interval
        return (now - offset) // period * period + offset
    expression = _cron_of(when) or when
    before = croniter(expression, now).get_prev(float)
    at_now = croniter(expression, before).get_next(float)
    return at_now if at_now <= now else before


def next_due(when: str, after: float) -> float:
    """The first time after `after` the schedule names."""
    interval = _interval_of(when)
    if interval is not None:
        return last_due(when, after) + interval[0]
    return croniter(_cron_of(when) or when, after).get_next(float)


class BackupSchedule(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One scheduled backup job (config `maintenance.backupSchedules`)."""

    name: str
    when: str
    target_node: str = msgspec.field(name="targetNode")
    instance: str = ""  # exactly one of instance and tag
    tag: str = ""
    keep: int = 1  # exports of each instance kept on the target (the older ones dated)
    ctime: float = 0.0  # a schedule runs first at the first time it names after this

    def __post_init__(self) -> None:
        names.snapshot_name(self.name, "backup schedule name")
        check_when(self.when)
        names.hostname(self.target_node, "target node")
        if bool(self.instance) == bool(self.tag):
            raise BadSchedule(f"backup schedule {self.name}: give an instance or a tag "
                              "(one of them)")
        if self.instance:
            names.hostname(self.instance, "instance name")
        if not 1 <= self.keep <= KEEP_MAX:
            raise BadSchedule(f"backup schedule {self.name}: keep {self.keep}: 1 to "
                              f"{KEEP_MAX} exports of each instance")


class BackupRun(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One run of a schedule for one instance (shown like an incident): its export job, how
    it ended and when."""

    uuid: str
    schedule: str
    instance: str
    target_node: str = msgspec.field(name="targetNode")
    keep: int = 1  # the schedule's, when the run was planned
    due: float  # the scheduled time it runs for
    status: BackupRunStatus = "pending"
    jobs: list[int] = msgspec.field(default_factory=list)
    start: float = 0.0
    end: float = 0.0
    error: str = ""


def parse_schedule(raw: object) -> BackupSchedule:
    """A schedule from its JSON form, or BadSchedule with one line."""
    try:
        schedule = msgspec.convert(raw, BackupSchedule)
    except (msgspec.ValidationError, names.BadName) as err:
        raise BadSchedule(f"backup schedule: {err}") from None
    return schedule


def utc_text(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when)) if when else "-"

