"""inst-status: the state of this node's instances as libvirt sees them (category instance, kind 1).

With the cluster's view (the node's config copy, else confd's answer for this node's primary
instances) it reports every instance this node is primary for, matched to a libvirt domain by
UUID (a domain defined with the instance's UUID) or else by name; without either it reports every
libvirt domain. Per instance:

- `name`, `uuid` (herder's instance UUID; the domain's UUID without a config);
- `admin_state`: up/down/offline from the config (null without one);
- `actual_state`: `up` (running or blocked; also while it shuts down), `down` (no domain, shut
  off, crashed), `hung` (running, but its CPU time did not advance between two collections at
  least `hung_after` seconds apart), `paused` (paused or suspended to RAM: it holds its memory but
  does not run — neither up nor down), `unknown` (libvirt reports no state, or asking failed;
  or, on a local QEMU node, no domain while a QEMU outside libvirt runs the instance: a guest
  Ganeti started, still running after `import-ganeti` — never `down`, which maintd's watcher
  would start a second time); `domain_state`/`domain_state_reason` are libvirt's words
  ("absent" when there is no domain, "foreign" for such a QEMU);
- `uptime`: whole seconds the domain has been running (null unless it is active — up, hung or
  paused). libvirt reports no boot time: for local QEMU domains it is the age of the QEMU
  process (its pid file under `qemu_pid_dir`), `uptime_source` "process"; otherwise it counts
  from when this collector first saw the domain active — a lower bound — `uptime_source`
  "observed";
- `last_change`: epoch seconds (float) of the last known change of the state: when this
  collector saw `actual_state`/`domain_state` change; before it saw one, the latest of the
  instance's config mtime and the QEMU process start, or else the first sighting;
- `reason`: the reason trail (`[[source, reason, timestamp_ns], ...]`) the node daemon recorded
  in `<run_dir>/instance-reason/<name>` when present (Ganeti's place for it); otherwise, after an
  observed change, `[["herder:mond", "observed OLD -> NEW", timestamp_ns]]`; else `[]`;
- `config_version`: the instance's serial number in the config (null without one);
- `status` {code, message}: 0 when the actual state is what the admin state asks (offline
  instances must not run); 4 when it differs, or the domain is hung, or paused by an I/O error,
  a watchdog or a crash; 1 while a pause is part of a migration, save, dump, snapshot or start,
  or while an instance that should be down shuts down; 2 when the state is unknown. Without a
  config only faults count (hung, faulty pause, unknown).

- `instmon`: what this node's instance monitor saw of the domain — `last_event` and
  `last_failure` (`{event, detail, key, time, generated_time, ...}`: the last notification it
  sent, e.g. LIFECYCLE/STOPPED_FAILED) — or null when instmon does not run or never saw it.

`other_domains` lists active domains that match no instance this node is primary for, each
with `name`, `uuid`, `domain_state`, `instance` (the name of the cluster's instance it is a copy
of, matched by UUID, else name; null for a domain no instance owns), `primary_node` (that
instance's primary) and `status`: 4 for a copy of an instance whose primary is another node
("web1 runs here, but its primary node is node2": a stray left by a failed or interrupted move,
Ganeti's "instance should not run on node"), 1 while such a copy is paused for an incoming
migration, 0 for a domain no instance owns. The collector's status merges the instances' and
the other domains' (0 only if every one is 0; the message names the bad ones).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlparse

from herder.core import confd, model, paths, qemu_procs
from herder.core.libvirt_host import alive as conn_alive
from herder.core.libvirt_host import is_no_domain
from herder.core.libvirt_host import message as error_text
from herder.mond.collector import CollectContext, Collector, CollectorError
from herder.mond.libvirt_conn import LibvirtConnection, reason_name, state_name
from herder.mond.report import Kind, Status, merge_statuses, status

UP, DOWN, HUNG, PAUSED, UNKNOWN = "up", "down", "hung", "paused", "unknown"
ABSENT = "absent"  # domain_state when libvirt has no domain for the instance
# domain_state when libvirt has no domain but a QEMU outside libvirt runs the instance
FOREIGN = "foreign"
INSTMON_STATE = "instmon.json"  # instmon's state file in the run dir

# virDomainState -> actual state (before the hung check).
_BASE_STATE = {0: UNKNOWN, 1: UP, 2: UP, 3: PAUSED, 4: UP, 5: DOWN, 6: DOWN, 7: PAUSED}
_RUNNING_STATES = frozenset({1, 2})  # whose CPU time must advance
# Pause reasons that libvirt itself ends (migration, save, dump, snapshot, start-up): code 1.
TRANSIENT_PAUSES = frozenset(
    {"migration", "save", "dump", "snapshot", "starting_up", "postcopy", "shutting_down"}
)
# Pause reasons that are faults whatever the admin wants: code 4.
FAULT_PAUSES = frozenset({"ioerror", "watchdog", "crashed", "postcopy_failed"})

OBSERVER = "herder:mond"


@dataclass(frozen=True, slots=True)
class DomainSnapshot:
    """What one collection learnt about one libvirt domain."""

    name: str
    uuid: str
    id: int  # -1 when not active
    state: int | None  # virDomainState; None when asking failed
    reason: int = 0
    cpu_time: int | None = None  # ns
    error: str | None = None

    @property
    def active(self) -> bool:
        return self.id >= 0 and self.state not in (None, 5)


def cpu_time(dom: Any) -> int:
    """A domain's CPU time in ns (virDomainGetInfo). Tests replace it to fake a hung domain."""
    return int(dom.info()[4])


def read_domains(conn: Any) -> list[DomainSnapshot]:
    """Every domain libvirt knows (active and defined), one failing domain not hiding others."""
    result: list[DomainSnapshot] = []
    for dom in conn.listAllDomains(0):
        try:
            name, uuid = dom.name(), dom.UUIDString()
        except Exception as err:
            if is_no_domain(err):
                continue
            raise
        try:
            state, reason = dom.state()
            ident = dom.ID()
            cpu = cpu_time(dom) if state in _RUNNING_STATES else None
            result.append(DomainSnapshot(name, uuid, int(ident), int(state), int(reason),
                                         cpu))
        except Exception as err:
            if is_no_domain(err):
                continue  # undefined since the listing: as if absent
            if not conn_alive(conn):
                raise  # the connection died: let the caller reconnect
            result.append(DomainSnapshot(name, uuid, -1, None, error=error_text(err)))
    return result


def is_local_qemu(uri: str, hv_type: str) -> bool:
    """A QEMU driver on this host (qemu:///system), whose pid files we can read."""
    return hv_type.upper() == "QEMU" and urlparse(uri).netloc == "" and "system" in uri


def process_start(pid_file: Path) -> float | None:
    """Start time (epoch seconds) of the process named in a pid file, or None."""
    import psutil  # local: only QEMU nodes need it

    try:
        pid = int(pid_file.read_text().split()[0])
        return float(psutil.Process(pid).create_time())
    except (OSError, ValueError, IndexError, psutil.Error):
        return None


def _child_or_none(directory: Path, name: str, suffix: str = "") -> Path | None:
    """The file of a domain or instance `name` in `directory`; None for a name that is no
    plain file name (nothing to read for it)."""
    try:
        return paths.child(directory, name, suffix=suffix, what="domain name")
    except paths.UnsafeName:
        return None


def read_reason_trail(path: Path) -> list[list[Any]] | None:
    """A recorded reason trail: a JSON list of [source, reason, timestamp]; None if absent or
    not in that shape."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(value, list):
        return None
    trail: list[list[Any]] = []
    for entry in value:
        if (not isinstance(entry, list) or len(entry) != 3 or not isinstance(entry[0], str)
                or not isinstance(entry[1], str)
                or not isinstance(entry[2], int | float) or isinstance(entry[2], bool)):
            return None
        trail.append(list(entry))
    return trail


def read_instmon(path: Path) -> dict[str, dict[str, Any]]:
    """Domain uuid -> what instmon saw of it (`last_event`, `last_failure`), from the state
    file instmon keeps in the run dir; empty when instmon does not run here."""
    try:
        data = json.loads(path.read_text())
        domains = data["domains"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(domains, dict):
        return {}
    return {str(u).lower(): {k: rec.get(k) for k in ("last_event", "last_failure")}
            for u, rec in domains.items() if isinstance(rec, dict)}


def actual_state(snap: DomainSnapshot | None, hung: bool) -> str:
    if snap is None:
        return DOWN
    if snap.state is None:
        return UNKNOWN
    if hung:
        return HUNG
    return _BASE_STATE.get(snap.state, UNKNOWN)


def instance_status(name: str, admin: str | None, actual: str, domain_state: str,
                    domain_reason: str | None, detail: str = "") -> dict[str, Any]:
    """The status of one instance from its admin and actual states (pure)."""
    what = domain_state if not domain_reason else f"{domain_state}: {domain_reason}"
    if actual == HUNG:
        return status(Status.BAD, f"{name} appears to be hung: {detail or 'CPU time stopped'}")
    if actual == UNKNOWN:
        return status(Status.UNKNOWN, f"{name}: state unknown ({detail or what})")
    if actual == PAUSED:
        if domain_reason in FAULT_PAUSES:
            return status(Status.BAD, f"{name} is paused ({what})")
        if domain_reason in TRANSIENT_PAUSES:
            return status(Status.TEMP_BAD, f"{name} is paused for a moment ({what})")
        if admin is None:
            return status(Status.OK)
        return status(Status.BAD, f"{name} is paused ({what}) but its admin state is {admin}")
    if admin is None:
        return status(Status.OK)
    if admin == "up":
        if actual == UP:
            return status(Status.OK)
        return status(Status.BAD, f"{name} is down ({what}) but its admin state is up")
    # admin down or offline: it must not run
    if actual == DOWN:
        return status(Status.OK)
    if domain_state == "shutdown":
        return status(Status.TEMP_BAD, f"{name} is shutting down (admin state {admin})")
    return status(Status.BAD, f"{name} is running ({what}) but its admin state is {admin}")


@dataclass(slots=True)
class _Seen:
    """What the collector remembers about one reported instance between collections."""

    label: tuple[str, str]  # (actual_state, domain_state)
    changed_at: float
    observed: list[Any] | None = None  # the reason entry of the last observed change
    dom_id: int = -1
    started: float | None = None
    uptime_source: str | None = None
    cpu: int | None = None
    cpu_since: float = 0.0


class InstanceTracker:
    """Per-instance memory: CPU time for the hung check, first sighting for uptime, state
    changes for last_change. Pure: time comes in as an argument."""

    def __init__(self, hung_after: float) -> None:
        self.hung_after = hung_after
        self.seen: dict[str, _Seen] = {}

    def hung(self, key: str, snap: DomainSnapshot | None, now: float) -> tuple[bool, float]:
        """(whether the domain's CPU time stood still, for how many seconds)."""
        entry = self.seen.get(key)
        if (snap is None or snap.state not in _RUNNING_STATES or snap.cpu_time is None
                or entry is None or entry.cpu is None or entry.dom_id != snap.id):
            return False, 0.0
        if snap.cpu_time != entry.cpu:
            return False, 0.0
        still = now - entry.cpu_since
        return still >= self.hung_after, still

    def observe(self, key: str, snap: DomainSnapshot | None, actual: str, domain_state: str,
                now: float, *, baseline: float | None,
                start_hint: Callable[[], float | None]) -> _Seen:
        """Record this collection; the entry holds uptime start, last change and reason."""
        label = (actual, domain_state)
        entry = self.seen.get(key)
        active = snap is not None and snap.active
        dom_id = snap.id if snap is not None else -1
        if entry is None:
            entry = _Seen(label=label, changed_at=now, dom_id=dom_id)
            started = start_hint() if active else None
            known = [t for t in (baseline, started) if t is not None]
            entry.changed_at = max(known) if known else now
            if active:
                entry.started, entry.uptime_source = (
                    (started, "process") if started is not None else (now, "observed"))
            self.seen[key] = entry
        else:
            if entry.label != label:
                old = f"{entry.label[0]} ({entry.label[1]})"
                new = f"{actual} ({domain_state})"
                entry.observed = [OBSERVER, f"observed {old} -> {new}", int(now * 1e9)]
                entry.label, entry.changed_at = label, now
            if not active:
                entry.started, entry.uptime_source = None, None
            elif entry.started is None or entry.dom_id != dom_id:
                started = start_hint()
                entry.started, entry.uptime_source = (
                    (started, "process") if started is not None else (now, "observed"))
            entry.dom_id = dom_id
        # CPU time baseline for the next hung check
        if snap is not None and snap.state in _RUNNING_STATES and snap.cpu_time is not None:
            if entry.cpu != snap.cpu_time:
                entry.cpu, entry.cpu_since = snap.cpu_time, now
        else:
            entry.cpu = None
        return entry

    def forget_others(self, keys: set[str]) -> None:
        for key in [k for k in self.seen if k not in keys]:
            del self.seen[key]


@dataclass(frozen=True)
class InstanceView:
    """What the report needs of an instance, from the config or a confd answer."""

    name: str
    uuid: str
    admin_state: str
    mtime: float
    serial_no: int

    @classmethod
    def of(cls, inst: model.Instance) -> InstanceView:
        return cls(inst.name, inst.uuid, inst.admin_state, inst.mtime, inst.serial_no)

    @classmethod
    def from_ganeti(cls, data: dict[str, Any]) -> InstanceView:
        """From a Ganeti instance object (confd's node_instances)."""
        return cls(str(data.get("name", "?")), str(data.get("uuid", "")),
                   str(data.get("admin_state", "down")), float(data.get("mtime") or 0.0),
                   int(data.get("serial_no") or 0))


class InstStatusCollector(Collector):
    name: ClassVar[str] = "inst-status"
    category: ClassVar[str | None] = "instance"
    kind: ClassVar[Kind] = Kind.STATUS
    # A running domain whose CPU time stands still this long (across two collections) is hung.
    hung_after: ClassVar[float] = 1.0
    qemu_pid_dir: ClassVar[Path] = Path("/run/libvirt/qemu")

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx)
        self.libvirt = LibvirtConnection()
        self.tracker = InstanceTracker(self.hung_after)
        self._local_qemu: tuple[Any, bool] | None = None  # (connection, whether local QEMU)

    def available(self) -> bool:
        return bool(self.libvirt.available(self.ctx.libvirt_uri()))

    def _read(self, conn: Any) -> tuple[list[DomainSnapshot], bool]:
        domains = read_domains(conn)
        if self._local_qemu is None or self._local_qemu[0] is not conn:  # once per connection
            try:
                local = is_local_qemu(conn.getURI(), conn.getType())
            except Exception:
                local = False
            self._local_qemu = (conn, local)
        return domains, self._local_qemu[1]

    def collect(self) -> dict[str, Any]:
        domains, local_qemu = self.libvirt.call(self.ctx.libvirt_uri(), self._read)
        now = self.ctx.clock()
        mine, owners = self._my_instances()
        # (instance or None, matching domain or None), in report order
        pairs: list[tuple[InstanceView | None, DomainSnapshot | None]]
        other_entries: list[dict[str, Any]] = []  # active domains not ours (with a config)
        if mine is None:
            pairs = [(None, d) for d in sorted(domains, key=lambda d: (d.name, d.uuid))]
        else:
            by_uuid = {d.uuid.lower(): d for d in domains}
            by_name = {d.name: d for d in domains}
            used: set[str] = set()
            pairs = []
            for own in mine:
                dom = by_uuid.get(own.uuid.lower()) or by_name.get(own.name)
                if dom is not None:
                    used.add(dom.uuid)
                pairs.append((own, dom))
            others = sorted((d for d in domains if d.uuid not in used and d.active),
                            key=lambda d: d.name)
            other_entries = [self._other(owners, d) for d in others]

        def start_hint(dom: DomainSnapshot | None) -> Callable[[], float | None]:
            if not local_qemu or dom is None:
                return lambda: None
            pid_file = _child_or_none(self.qemu_pid_dir, dom.name, ".pid")
            return (lambda: process_start(pid_file)) if pid_file else (lambda: None)

        instances: list[dict[str, Any]] = []
        keys: set[str] = set()
        seen = read_instmon(self.ctx.settings.run_dir / INSTMON_STATE)
        # a guest Ganeti started (still in its own QEMU after import-ganeti) is not "down"
        foreign = qemu_procs.foreign_qemus() if local_qemu and any(
            inst is not None and dom is None for inst, dom in pairs) else {}
        for inst, dom in pairs:
            key = inst.uuid if inst is not None else f"domain:{dom.uuid if dom else ''}"
            keys.add(key)
            outside = foreign.get(inst.name, []) if inst is not None and dom is None else []
            entry = self._report(key, inst, dom, now, start_hint(dom), outside)
            uuids = {u.lower() for u in (inst.uuid if inst else None, dom.uuid if dom else None)
                     if u}
            entry["instmon"] = next((seen[u] for u in uuids if u in seen), None)
            instances.append(entry)
        self.tracker.forget_others(keys)
        return {
            "status": merge_statuses([i["status"] for i in instances]
                                     + [o["status"] for o in other_entries]),
            "instances": instances,
            "other_domains": other_entries,
        }

    def _other(self, owners: dict[str, tuple[str, str]], dom: DomainSnapshot) -> dict[str, Any]:
        """An active domain this node is not the primary of: a stray copy of an instance whose
        primary is another node (code 4), or a domain no instance owns (code 0). `owners`:
        instance UUID (lower case) and name -> (instance name, its primary node)."""
        owner = owners.get(dom.uuid.lower()) or owners.get(dom.name)
        dstate = state_name(dom.state or 0)
        entry: dict[str, Any] = {"name": dom.name, "uuid": dom.uuid, "domain_state": dstate,
                                 "instance": None, "primary_node": None,
                                 "status": status(Status.OK)}
        if owner is None:
            return entry
        name, primary = owner
        entry.update(instance=name, primary_node=primary)
        if dom.state == 3 and reason_name(3, dom.reason) in TRANSIENT_PAUSES:
            entry["status"] = status(Status.TEMP_BAD, f"{name} is arriving here by a "
                                                      f"migration from {primary}")
        else:
            entry["status"] = status(Status.BAD, f"{name} runs here ({dstate}), but its "
                                                 f"primary node is {primary}")
        return entry

    def _my_instances(self) -> tuple[list[InstanceView] | None, dict[str, tuple[str, str]]]:
        """This node's primary instances (from the config copy, else from confd, type 8; None
        when neither is there) and the other instances it may find copies of, by UUID and name
        -> (name, primary node): every other instance with a config copy; without one, the
        instances this node is the secondary of (all confd tells a node about)."""
        config = self.ctx.config()
        if config is not None:
            node = self.ctx.this_node()
            if node is None:
                raise CollectorError(
                    f"node {self.ctx.node_name} is not in the cluster configuration")
            owners: dict[str, tuple[str, str]] = {}
            for inst in config.instances.values():
                if inst.primary_node != node.uuid:
                    owner = (inst.name, config.node_name(inst.primary_node))
                    owners[inst.uuid.lower()] = owners[inst.name] = owner
            return sorted((InstanceView.of(i) for i in config.instances.values()
                           if i.primary_node == node.uuid), key=lambda i: i.name), owners
        source = self.ctx.confd()
        if source is None:
            return None, {}
        try:
            primary, secondary = source.node_instances(self.ctx.node_name)
        except confd.ConfdError as err:
            raise CollectorError(f"this node's instances from confd: {err}") from None
        owners = {}
        for data in secondary:
            if isinstance(data, dict) and data.get("name"):
                owner = (str(data["name"]), str(data.get("primary_node") or "?"))
                owners[str(data.get("uuid", "")).lower()] = owners[owner[0]] = owner
        return sorted((InstanceView.from_ganeti(i) for i in primary if isinstance(i, dict)),
                      key=lambda i: i.name), owners

    def _report(self, key: str, inst: InstanceView | None, dom: DomainSnapshot | None,
                now: float, start_hint: Callable[[], float | None],
                outside: list[int]) -> dict[str, Any]:
        """One instance's entry; `outside`: pids of QEMUs outside libvirt that run it (its
        state is then unknown to herder: not down, so nothing starts it a second time)."""
        hung, still = self.tracker.hung(key, dom, now)
        actual = UNKNOWN if outside else actual_state(dom, hung)
        if outside:
            dstate, dreason = FOREIGN, None
        elif dom is None:
            dstate, dreason = ABSENT, None
        elif dom.state is None:
            dstate, dreason = UNKNOWN, None
        else:
            dstate, dreason = state_name(dom.state), reason_name(dom.state, dom.reason)
        entry = self.tracker.observe(
            key, dom, actual, dstate, now,
            baseline=inst.mtime if inst is not None else None, start_hint=start_hint)
        name = inst.name if inst is not None else (dom.name if dom else "?")
        detail = ""
        if outside:
            detail = (f"a QEMU that libvirt does not manage runs it (pid "
                      f"{', '.join(map(str, outside))}; a guest Ganeti started?)")
        elif actual == HUNG:
            detail = f"running, but its CPU time has not advanced for {still:.0f}s"
        elif dom is not None and dom.error:
            detail = dom.error
        admin: str | None = inst.admin_state if inst is not None else None
        active = actual in (UP, HUNG, PAUSED) and entry.started is not None
        trail_file = _child_or_none(self.ctx.settings.run_dir / "instance-reason", name)
        trail = read_reason_trail(trail_file) if trail_file else None
        if trail is None:
            trail = [entry.observed] if entry.observed is not None else []
        return {
            "name": name,
            "uuid": inst.uuid if inst is not None else (dom.uuid if dom else None),
            "admin_state": admin,
            "actual_state": actual,
            "domain_state": dstate,
            "domain_state_reason": dreason,
            "uptime": int(max(0.0, now - entry.started))
            if active and entry.started is not None else None,
            "uptime_source": entry.uptime_source if active else None,
            "last_change": entry.changed_at,
            "reason": trail,
            "config_version": inst.serial_no if inst is not None else None,
            "status": instance_status(name, admin, actual, dstate, dreason, detail),
        }


COLLECTORS: list[type[Collector]] = [InstStatusCollector]
