"""Scheduled backups (issue 30 item 6; Ganeti has none, Proxmox VE's backup jobs are the
model): a schedule names the instances it exports (one by name, or all carrying a tag), when
(`daily HH:MM` in UTC, or `every N hours|minutes`), the node the exports go to and how many
exports of an instance to keep. The schedules live in the cluster config's maintenance
section (`backupSchedules`), so a master failover keeps them; maintd runs them
(herder.maintd.backups) and records each run (`BackupRun`) in its state. Pure: no I/O."""

from __future__ import annotations

import re
import time
from typing import Literal

import msgspec

from herder.core import names

_DAILY = re.compile(r"daily\s+([01]?\d|2[0-3]):([0-5]\d)")
_EVERY = re.compile(r"every\s+([1-9]\d{0,3})\s*(hours?|h|minutes?|min|m)")
DAY = 86400.0
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


def interval_of(when: str) -> tuple[float, float]:
    """`when` as (period in seconds, offset from midnight UTC): `daily 02:00` is (86400,
    7200); `every 6 hours` (21600, 0) counted from the epoch, so 00:00, 06:00, ... UTC."""
    text = " ".join(when.lower().split())
    daily = _DAILY.fullmatch(text)
    if daily:
        return DAY, int(daily.group(1)) * 3600.0 + int(daily.group(2)) * 60.0
    every = _EVERY.fullmatch(text)
    if every:
        count, unit = int(every.group(1)), every.group(2)
        period = count * (3600.0 if unit.startswith("h") else 60.0)
        if period < 300 or period > 7 * DAY:
            raise BadSchedule(f"schedule {when!r}: between every 5 minutes and every 168 hours")
        return period, 0.0
    raise BadSchedule(f"schedule {when!r}: give 'daily HH:MM' (UTC) or 'every N hours' or "
                      "'every N minutes'")


def last_due(when: str, now: float) -> float:
    """The newest time at or before `now` (seconds since the epoch) the schedule names."""
    period, offset = interval_of(when)
    return (now - offset) // period * period + offset


def next_due(when: str, after: float) -> float:
    """The first time after `after` the schedule names."""
    period, _ = interval_of(when)
    return last_due(when, after) + period


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
        interval_of(self.when)
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

