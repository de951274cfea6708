"""libvirt domain events by name, and the configurable event filter (pure: no libvirt needed).

An event as libvirt delivers it is (event id, type, detail) plus the domain; masakari's monitor
calls these (eventID, eventType, detail) and uses -1 where a callback has no such argument.
Here every event also has a symbolic key, `ID[.TYPE[.DETAIL]]`, e.g. `LIFECYCLE.STOPPED.FAILED`,
`WATCHDOG.PAUSE`, `IO_ERROR.REPORT`, `REBOOT`, which the filter's rules use, and masakari's
payload strings (`event`, `vir_domain_event`: `LIFECYCLE`/`STOPPED_FAILED`).

The filter maps keys to `notify` or `drop`. A rule names a key or a prefix with `*`
(`LIFECYCLE.STOPPED.*`, `WATCHDOG.*`, `*`); the most specific rule wins (full key, then
`ID.TYPE.*`, `ID.*`, `ID`, `*`), else the default. A rule from the file replaces the
preset's rows it covers (`"WATCHDOG.*" = "drop"` drops every watchdog event). The
`masakari` preset is masakari's monitor table (its 19 rows, ../shared/reference/masakari.md
§1.3); `recovery` is only what masakari's engine acts on; `none` starts empty. A TOML file
changes it without code:

    [filter]
    preset = "masakari"        # masakari | recovery | none
    default = "drop"
    [filter.rules]
    "LIFECYCLE.CRASHED.*" = "notify"   # a guest kernel panic (masakari drops it)
    "REBOOT" = "drop"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DUMMY = -1  # masakari's "no sub-code"

# libvirt's VIR_DOMAIN_EVENT_ID_* (stable ABI values)
EVENT_IDS: dict[int, str] = {
    0: "LIFECYCLE", 1: "REBOOT", 2: "RTC_CHANGE", 3: "WATCHDOG", 4: "IO_ERROR",
    5: "GRAPHICS", 6: "IO_ERROR_REASON", 7: "CONTROL_ERROR", 8: "BLOCK_JOB", 9: "DISK_CHANGE",
    10: "TRAY_CHANGE", 11: "PMWAKEUP", 12: "PMSUSPEND", 13: "BALLOON_CHANGE",
    14: "PMSUSPEND_DISK", 15: "DEVICE_REMOVED", 16: "BLOCK_JOB_2", 17: "TUNABLE",
    18: "AGENT_LIFECYCLE", 19: "DEVICE_ADDED", 20: "MIGRATION_ITERATION", 21: "JOB_COMPLETED",
    22: "DEVICE_REMOVAL_FAILED", 23: "METADATA_CHANGE", 24: "BLOCK_THRESHOLD",
    25: "MEMORY_FAILURE", 26: "MEMORY_DEVICE_SIZE_CHANGE", 27: "NIC_MAC_CHANGE",
}
ID_BY_NAME = {v: k for k, v in EVENT_IDS.items()}
LIFECYCLE, REBOOT, WATCHDOG, IO_ERROR, GRAPHICS, IO_ERROR_REASON, CONTROL_ERROR = (
    0, 1, 3, 4, 5, 6, 7)

# VIR_DOMAIN_EVENT_<TYPE> and their VIR_DOMAIN_EVENT_<TYPE>_<DETAIL>
LIFECYCLE_TYPES: dict[int, tuple[str, tuple[str, ...]]] = {
    0: ("DEFINED", ("ADDED", "UPDATED", "RENAMED", "FROM_SNAPSHOT")),
    1: ("UNDEFINED", ("REMOVED", "RENAMED")),
    2: ("STARTED", ("BOOTED", "MIGRATED", "RESTORED", "FROM_SNAPSHOT", "WAKEUP", "RECREATED")),
    3: ("SUSPENDED", ("PAUSED", "MIGRATED", "IOERROR", "WATCHDOG", "RESTORED",
                      "FROM_SNAPSHOT", "API_ERROR", "POSTCOPY", "POSTCOPY_FAILED")),
    4: ("RESUMED", ("UNPAUSED", "MIGRATED", "FROM_SNAPSHOT", "POSTCOPY", "POSTCOPY_FAILED")),
    5: ("STOPPED", ("SHUTDOWN", "DESTROYED", "CRASHED", "MIGRATED", "SAVED", "FAILED",
                    "FROM_SNAPSHOT", "RECREATED")),
    6: ("SHUTDOWN", ("FINISHED", "GUEST", "HOST")),
    7: ("PMSUSPENDED", ("MEMORY", "DISK")),
    8: ("CRASHED", ("PANICKED", "CRASHLOADED")),
}
STARTED, SUSPENDED, RESUMED, STOPPED = 2, 3, 4, 5
STOPPED_DESTROYED, STOPPED_FAILED = 1, 5
# the "type" of a watchdog / I/O error event is its action (masakari's shaping)
ACTIONS: dict[int, tuple[str, ...]] = {
    WATCHDOG: ("NONE", "PAUSE", "RESET", "POWEROFF", "SHUTDOWN", "DEBUG", "INJECTNMI"),
    IO_ERROR: ("NONE", "PAUSE", "REPORT"),
    IO_ERROR_REASON: ("NONE", "PAUSE", "REPORT"),
}
GRAPHICS_PHASES = ("CONNECT", "INITIALIZE", "DISCONNECT")

NOTIFY, DROP = "notify", "drop"

# masakari's monitor table (eventfilter_table.py), as keys
MASAKARI_KEYS = (
    "LIFECYCLE.SUSPENDED.IOERROR", "LIFECYCLE.SUSPENDED.WATCHDOG",
    "LIFECYCLE.SUSPENDED.API_ERROR", "LIFECYCLE.STOPPED.SHUTDOWN",
    "LIFECYCLE.STOPPED.DESTROYED", "LIFECYCLE.STOPPED.FAILED", "LIFECYCLE.SHUTDOWN.FINISHED",
    "REBOOT", "WATCHDOG.NONE", "WATCHDOG.PAUSE", "WATCHDOG.RESET", "WATCHDOG.POWEROFF",
    "WATCHDOG.SHUTDOWN", "WATCHDOG.DEBUG", "IO_ERROR.NONE", "IO_ERROR.PAUSE", "IO_ERROR.REPORT",
    "IO_ERROR_REASON", "CONTROL_ERROR",
)
PRESETS: dict[str, tuple[str, ...]] = {
    "masakari": MASAKARI_KEYS,
    # what masakari's engine recovers (instance_events.INSTANCE_EVENTS)
    "recovery": ("LIFECYCLE.STOPPED.FAILED", "IO_ERROR.REPORT"),
    "none": (),
}


class FilterError(ValueError):
    """A filter configuration that cannot be used (the message says why)."""


@dataclass(frozen=True)
class RawEvent:
    """One domain event as the monitor saw it (`type`/`detail` -1 when not applicable)."""

    event_id: int
    type: int
    detail: int
    uuid: str
    name: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)  # e.g. I/O error path and reason
    synthetic: str = ""  # why the monitor made it up ("resync: running -> absent"), else ""

    @property
    def id_name(self) -> str:
        return EVENT_IDS.get(self.event_id, f"EVENT_{self.event_id}")

    @property
    def type_name(self) -> str | None:
        if self.event_id == LIFECYCLE:
            entry = LIFECYCLE_TYPES.get(self.type)
            return entry[0] if entry else f"TYPE_{self.type}"
        names = ACTIONS.get(self.event_id)
        if names is not None and self.type != DUMMY:
            return names[self.type] if 0 <= self.type < len(names) else f"ACTION_{self.type}"
        return None

    @property
    def detail_name(self) -> str | None:
        if self.event_id == LIFECYCLE:
            entry = LIFECYCLE_TYPES.get(self.type)
            if entry is None:
                return f"DETAIL_{self.detail}"
            return entry[1][self.detail] if 0 <= self.detail < len(entry[1]) \
                else f"DETAIL_{self.detail}"
        if self.event_id == GRAPHICS and 0 <= self.detail < len(GRAPHICS_PHASES):
            return GRAPHICS_PHASES[self.detail]
        return None

    @property
    def key(self) -> str:
        return ".".join(p for p in (self.id_name, self.type_name, self.detail_name) if p)

    @property
    def masakari(self) -> tuple[str, str]:
        """(payload.event, payload.vir_domain_event) as masakari's monitor sends them."""
        if self.event_id == LIFECYCLE:
            return self.id_name, f"{self.type_name}_{self.detail_name}"
        if self.event_id in (WATCHDOG, IO_ERROR):
            return self.id_name, f"{self.id_name}_{self.type_name}"
        return self.id_name, "UNKNOWN"


def parse_key(key: str) -> tuple[int, int, int]:
    """(event id, type, detail) of a full symbolic key (FilterError when unknown)."""
    parts = key.strip().upper().split(".")
    if parts[0] not in ID_BY_NAME:
        raise FilterError(f"unknown libvirt event {parts[0]!r} in {key!r}")
    eid = ID_BY_NAME[parts[0]]
    if eid == LIFECYCLE:
        if len(parts) != 3:
            raise FilterError(f"{key!r}: a lifecycle event is LIFECYCLE.TYPE.DETAIL")
        for t, (tname, details) in LIFECYCLE_TYPES.items():
            if tname == parts[1] and parts[2] in details:
                return eid, t, details.index(parts[2])
        raise FilterError(f"unknown lifecycle event {key!r}")
    if eid == IO_ERROR_REASON and len(parts) == 1:
        return eid, DUMMY, DUMMY
    if eid in ACTIONS:
        if len(parts) != 2 or parts[1] not in ACTIONS[eid]:
            raise FilterError(f"{key!r}: expected {parts[0]}.<{'|'.join(ACTIONS[eid])}>")
        return eid, ACTIONS[eid].index(parts[1]), DUMMY
    if len(parts) != 1:
        raise FilterError(f"{key!r}: {parts[0]} has no type or detail")
    return eid, DUMMY, DUMMY


def _check_pattern(pattern: str) -> str:
    parts = pattern.split(".")
    if pattern == "*":
        return pattern
    if parts[0] not in ID_BY_NAME:
        raise FilterError(f"unknown libvirt event {parts[0]!r} in rule {pattern!r}")
    if "*" in parts[:-1] or (parts[-1] == "*" and len(parts) > 3) or len(parts) > 3:
        raise FilterError(f"rule {pattern!r}: '*' may only end a rule")
    if "*" not in parts and len(parts) > 1:
        parse_key(pattern)  # a bare ID ("WATCHDOG") matches all its events
    return pattern


def _specificity(pattern: str) -> tuple[int, int]:
    parts = pattern.split(".")
    return (0, 0) if pattern == "*" else (len(parts) - (parts[-1] == "*"), parts[-1] != "*")


def _covers(pattern: str, key: str) -> bool:
    """Whether a rule `pattern` matches every event a rule `key` matches."""
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        return key.startswith(pattern[:-1])
    return key == pattern or ("." not in pattern and key.startswith(pattern + "."))


@dataclass
class EventFilter:
    rules: dict[str, str] = field(default_factory=dict)
    default: str = DROP

    @classmethod
    def preset(cls, name: str = "masakari") -> EventFilter:
        if name not in PRESETS:
            raise FilterError(f"unknown filter preset {name!r} (use {', '.join(PRESETS)})")
        return cls({k: NOTIFY for k in PRESETS[name]})

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None) -> EventFilter:
        """From a config file's `[filter]` table (None: the masakari preset)."""
        section = dict(section or {})
        unknown = set(section) - {"preset", "default", "rules"}
        if unknown:
            raise FilterError(f"[filter]: unknown keys {', '.join(sorted(unknown))}")
        filt = cls.preset(str(section.get("preset", "masakari")))
        default = section.get("default", DROP)
        if default not in (NOTIFY, DROP):
            raise FilterError(f"[filter] default must be notify or drop, not {default!r}")
        filt.default = default
        rules = section.get("rules", {})
        if not isinstance(rules, Mapping):
            raise FilterError("[filter.rules] must be a table of \"KEY\" = notify|drop")
        checked = []
        for pattern, verdict in rules.items():
            if verdict not in (NOTIFY, DROP):
                raise FilterError(f"rule {pattern!r} = {verdict!r}: use notify or drop")
            checked.append((_check_pattern(str(pattern).upper()), verdict))
        # broad rules first; a rule of the file replaces the preset's rows it covers
        for pattern, verdict in sorted(checked, key=lambda pv: _specificity(pv[0])):
            for key in [k for k in filt.rules if _covers(pattern, k)]:
                del filt.rules[key]
            filt.rules[pattern] = verdict
        return filt

    def verdict(self, event: RawEvent) -> str:
        parts = event.key.split(".")
        candidates = [event.key] + [".".join(parts[:n]) + ".*"
                                    for n in range(len(parts) - 1, 0, -1)]
        candidates += [parts[0], "*"]
        for cand in candidates:
            if cand in self.rules:
                return self.rules[cand]
        return self.default

    def notifies(self, event: RawEvent) -> bool:
        return self.verdict(event) == NOTIFY
