"""The chaos run's properties, checked on its history (pure: no I/O).

- every acknowledged job is final (success, error or canceled) once the run has settled;
- `cluster verify` is clean once the nodes are back;
- no instance ran twice: its guests' acknowledged records never interleave between boots
  (two boots acknowledging records alternately, or the same record, wrote at once), the disk
  shows each boot as one run of records, and at the end at most one node runs it;
- every disk holds every record its guests acknowledged, as they acknowledged it;
- no orphan volume: every instance volume on the nodes belongs to an instance of the config.

A failure's report names the seed and lists the operations and nemesis events in time order.
"""

from __future__ import annotations

import time
from collections import defaultdict

import msgspec

from herder.sim import guest
from tests.chaos.history import FINAL_JOB_STATUSES, GuestState, History


class Violation(msgspec.Struct, frozen=True):
    prop: str  # final, verify, two-writers, lost-write, runs-twice, orphan
    detail: str


def unfinished_jobs(history: History) -> list[Violation]:
    found = []
    for op in history.operations:
        if op.job_id is None:
            continue
        status = history.final.jobs.get(op.job_id, "missing")
        if status not in FINAL_JOB_STATUSES:
            found.append(Violation("final", f"job {op.job_id} ({op.kind} {op.instance}) is "
                                            f"{status}"))
    return found


def verify_errors(history: History) -> list[Violation]:
    return [Violation("verify", line) for line in history.final.verify]


def interleaved_boots(state: GuestState) -> list[Violation]:
    """Boots whose acknowledged records are not one run each: a record acknowledged by two
    boots, or one boot's records on both sides of another's."""
    found = []
    spans: dict[str, tuple[int, int]] = {}
    owner: dict[int, str] = {}
    for beat in state.beats:
        if owner.setdefault(beat.seq, beat.boot_id) != beat.boot_id:
            found.append(Violation("two-writers", f"{state.instance}: record {beat.seq} "
                                   f"acknowledged by boots {owner[beat.seq]} and {beat.boot_id}"))
        low, high = spans.get(beat.boot_id, (beat.seq, beat.seq))
        spans[beat.boot_id] = (min(low, beat.seq), max(high, beat.seq))
    reach: tuple[str, int] | None = None  # the boot reaching furthest so far, and how far
    for boot, (low, high) in sorted(spans.items(), key=lambda item: item[1]):
        if reach is not None and low <= reach[1]:
            found.append(Violation("two-writers", f"{state.instance}: boots {reach[0]} and "
                                   f"{boot} acknowledged interleaved records"))
        if reach is None or high > reach[1]:
            reach = (boot, high)
    return found


def guest_violations(state: GuestState) -> list[Violation]:
    """Two writers, lost writes and a double run of one instance."""
    beats = [guest.Heartbeat(b.boot_id, 0.0, "none", b.seq) for b in state.beats]
    check = guest.check_records(state.records, beats)
    found = interleaved_boots(state)
    if not check.one_writer_at_a_time:
        found.append(Violation("two-writers", f"{state.instance}: the disk's records alternate "
                                              f"between writers {check.writers}"))
    for boot, number in check.lost:
        found.append(Violation("lost-write", f"{state.instance}: record {number} acknowledged "
                                             f"by boot {boot} is not on its disk"))
    if len(state.running_on) > 1:
        found.append(Violation("runs-twice", f"{state.instance} runs on "
                                             f"{', '.join(sorted(state.running_on))}"))
    return found


def orphan_volumes(history: History) -> list[Violation]:
    owned = set(history.final.owned)
    return [Violation("orphan", f"{v.node or 'shared storage'}: {v.name} belongs to no instance")
            for v in history.final.volumes if v not in owned]


def check(history: History) -> list[Violation]:
    """Every violation of the run's properties (empty: the run held)."""
    found = unfinished_jobs(history) + verify_errors(history) + orphan_volumes(history)
    for state in history.final.guests:
        found.extend(guest_violations(state))
    return found


def _clock(at: float, began: float) -> str:
    return f"{time.strftime('%H:%M:%S', time.gmtime(at))} (+{at - began:6.1f} s)"


def timeline(history: History) -> list[str]:
    """The operations and the nemesis events, in time order, one line each."""
    entries: list[tuple[float, str]] = []
    for op in history.operations:
        answer = (f"job {op.job_id} {op.status or 'unknown'}" if op.job_id is not None
                  else f"refused: {op.refused}")
        extra = f" ({op.detail})" if op.detail else ""
        entries.append((op.started, f"op {op.kind} {op.instance}{extra}: {answer} after "
                                    f"{op.ended - op.started:.1f} s"))
    for event in history.events:
        extra = f" ({event.detail})" if event.detail else ""
        entries.append((event.at, f"nemesis {event.kind} {event.node}{extra}"))
    if not entries:
        return []
    began = min(at for at, _ in entries)
    return [f"{_clock(at, began)} {text}" for at, text in sorted(entries, key=lambda e: e[0])]


def report(history: History, violations: list[Violation]) -> str:
    """The seed, the violations and the history: what a failure prints."""
    counts: defaultdict[str, int] = defaultdict(int)
    for event in history.events:
        counts[event.kind] += 1
    lines = [f"chaos seed {history.seed}: {len(history.operations)} operations, "
             f"{len(history.events)} nemesis events "
             f"({', '.join(f'{k} {n}' for k, n in sorted(counts.items())) or 'none'}), "
             f"{len(violations)} violations"]
    lines += [f"VIOLATION {v.prop}: {v.detail}" for v in violations]
    for state in history.final.guests:
        boots = {b.boot_id for b in state.beats}
        lines.append(f"guest {state.instance}: {len(state.beats)} acknowledged records of "
                     f"{len(boots)} boots, {len(state.records)} on its disk, running on "
                     f"{', '.join(state.running_on) or 'no node'}")
    lines += ["history:", *timeline(history)]
    return "\n".join(lines)
