"""The event filter, collapsing and the monitor's pipeline, without libvirt: masakari's own
vectors (../shared/reference/masakari.md §3.4) replayed through the same filter and pipeline
the libvirt source feeds, into a real HTTP receiver."""

from __future__ import annotations

import json
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from herder.core import ordered
from herder.instmon import events
from herder.instmon.collapse import Collapser
from herder.instmon.daemon import InstanceMonitor, Settings, control
from tests.instmon.receiver import Receiver

# (eventID, eventType, detail) -> (payload.event, payload.vir_domain_event) | None (dropped)
MASAKARI_VECTORS: list[tuple[tuple[int, int, int], tuple[str, str] | None]] = [
    ((0, 3, 2), ("LIFECYCLE", "SUSPENDED_IOERROR")),
    ((0, 3, 3), ("LIFECYCLE", "SUSPENDED_WATCHDOG")),
    ((0, 3, 6), ("LIFECYCLE", "SUSPENDED_API_ERROR")),
    ((0, 5, 0), ("LIFECYCLE", "STOPPED_SHUTDOWN")),
    ((0, 5, 1), ("LIFECYCLE", "STOPPED_DESTROYED")),
    ((0, 5, 5), ("LIFECYCLE", "STOPPED_FAILED")),
    ((0, 6, 0), ("LIFECYCLE", "SHUTDOWN_FINISHED")),
    ((1, -1, -1), ("REBOOT", "UNKNOWN")),
    ((3, 0, -1), ("WATCHDOG", "WATCHDOG_NONE")),
    ((3, 1, -1), ("WATCHDOG", "WATCHDOG_PAUSE")),
    ((3, 2, -1), ("WATCHDOG", "WATCHDOG_RESET")),
    ((3, 3, -1), ("WATCHDOG", "WATCHDOG_POWEROFF")),
    ((3, 4, -1), ("WATCHDOG", "WATCHDOG_SHUTDOWN")),
    ((3, 5, -1), ("WATCHDOG", "WATCHDOG_DEBUG")),
    ((4, 0, -1), ("IO_ERROR", "IO_ERROR_NONE")),
    ((4, 1, -1), ("IO_ERROR", "IO_ERROR_PAUSE")),
    ((4, 2, -1), ("IO_ERROR", "IO_ERROR_REPORT")),
    ((6, -1, -1), ("IO_ERROR_REASON", "UNKNOWN")),
    ((7, -1, -1), ("CONTROL_ERROR", "UNKNOWN")),
    ((0, 5, 2), None),  # STOPPED_CRASHED
    ((0, 0, 0), None),  # DEFINED
    ((0, 8, 0), None),  # CRASHED_PANICKED
    ((0, 6, 1), None),  # SHUTDOWN_GUEST
    ((2, -1, -1), None),  # RTC_CHANGE
    ((5, -1, 0), None),  # GRAPHICS connect
    ((9, -1, -1), None),  # DISK_CHANGE
    ((3, 6, -1), None),  # WATCHDOG_INJECTNMI
]


def ev(vector: tuple[int, int, int], uuid: str = "u1", name: str = "vm1") -> events.RawEvent:
    return events.RawEvent(*vector, uuid=uuid, name=name)


@pytest.mark.parametrize(("vector", "expected"), MASAKARI_VECTORS)
def test_the_masakari_preset_is_masakaris_table(vector: tuple[int, int, int],
                                                expected: tuple[str, str] | None) -> None:
    filt = events.EventFilter.preset("masakari")
    event = ev(vector)
    assert filt.notifies(event) == (expected is not None)
    if expected is not None:
        assert event.masakari == expected


def test_keys_round_trip_and_name_every_lifecycle_event() -> None:
    for t, (tname, details) in events.LIFECYCLE_TYPES.items():
        for d, dname in enumerate(details):
            event = ev((0, t, d))
            assert event.key == f"LIFECYCLE.{tname}.{dname}"
            assert events.parse_key(event.key) == (0, t, d)
    assert ev((3, 1, -1)).key == "WATCHDOG.PAUSE"
    assert ev((6, 2, -1)).key == "IO_ERROR_REASON.REPORT"
    assert events.parse_key("IO_ERROR.REPORT") == (4, 2, -1)
    assert events.parse_key("reboot") == (1, -1, -1)
    with pytest.raises(events.FilterError, match="unknown lifecycle"):
        events.parse_key("LIFECYCLE.STOPPED.NOPE")
    with pytest.raises(events.FilterError, match="unknown libvirt event"):
        events.parse_key("EXPLODED")


def test_a_config_changes_the_filter_without_code(tmp_path: Path) -> None:
    import tomllib

    text = """
[filter]
preset = "masakari"
[filter.rules]
"LIFECYCLE.CRASHED.*" = "notify"
"REBOOT" = "drop"
"WATCHDOG.*" = "drop"
"WATCHDOG.POWEROFF" = "notify"
"""
    filt = events.EventFilter.from_config(tomllib.loads(text)["filter"])
    assert filt.notifies(ev((0, 8, 0)))  # a guest kernel panic, which masakari drops
    assert not filt.notifies(ev((1, -1, -1)))
    assert not filt.notifies(ev((3, 1, -1)))
    assert filt.notifies(ev((3, 3, -1)))  # the exact rule beats the wildcard
    assert filt.notifies(ev((0, 5, 5)))  # the preset's rows stay
    everything = events.EventFilter.from_config({"preset": "none", "default": "notify"})
    assert everything.notifies(ev((9, -1, -1)))
    recovery = events.EventFilter.from_config({"preset": "recovery"})
    assert [v for v, _ in MASAKARI_VECTORS if recovery.notifies(ev(v))] == \
        [(0, 5, 5), (4, 2, -1)]


@pytest.mark.parametrize(("section", "message"), [
    ({"preset": "nova"}, "unknown filter preset"),
    ({"default": "maybe"}, "notify or drop"),
    ({"rules": {"LIFECYCLE.STOPPED.FAILED": "yes"}}, "use notify or drop"),
    ({"rules": {"BOGUS.*": "notify"}}, "unknown libvirt event"),
    ({"rules": {"LIFECYCLE.*.FAILED": "notify"}}, "may only end"),
    ({"rules": {"LIFECYCLE.STOPPED.WHATEVER": "notify"}}, "unknown lifecycle"),
    ({"colour": "blue"}, "unknown keys"),
])
def test_bad_filter_configs_are_refused_with_the_reason(section: dict[str, Any],
                                                        message: str) -> None:
    with pytest.raises(events.FilterError, match=message):
        events.EventFilter.from_config(section)


def test_one_io_error_is_one_notification_with_the_most_telling_event() -> None:
    c = Collapser(delay=0.2, window=2.0)
    assert c.add(ev((6, 1, -1)), 0.0)  # IO_ERROR_REASON first
    assert not c.add(ev((0, 3, 2)), 0.01)  # SUSPENDED_IOERROR
    assert not c.add(ev((4, 2, -1)), 0.02)  # IO_ERROR REPORT
    assert c.due(0.1) == []
    [held] = c.due(0.25)
    assert held.event.masakari == ("IO_ERROR", "IO_ERROR_REPORT")
    assert held.merged == 2 and held.when == 0.0
    # the same failure repeating within the window is suppressed ...
    assert not c.add(ev((4, 2, -1)), 1.0)
    # ... but another domain's is its own
    assert c.add(ev((4, 2, -1), uuid="u2"), 1.0)


def test_a_start_in_between_makes_the_next_stop_a_new_failure() -> None:
    c = Collapser(delay=0.2, window=10.0)
    assert c.add(ev((0, 5, 1)), 0.0)
    c.reset("u1")  # STARTED before the hold ended: the first stop is sealed
    assert c.add(ev((0, 5, 1)), 0.05)
    held = c.due(0.3)
    assert [h.event.key for h in held] == ["LIFECYCLE.STOPPED.DESTROYED"] * 2
    c.reset("u1")
    assert c.add(ev((0, 5, 1)), 1.0)  # not suppressed by the window
    # a guest shutdown (FINISHED, then STOPPED SHUTDOWN) is one notification
    c2 = Collapser()
    assert c2.add(ev((0, 6, 0)), 0.0)
    assert not c2.add(ev((0, 5, 0)), 0.01)
    [h] = c2.due(1.0)
    assert h.event.masakari == ("LIFECYCLE", "STOPPED_SHUTDOWN")


class ReplaySource:
    """An injectable event source: what a test hands it goes through the same pipeline."""

    def __init__(self) -> None:
        self.connected = True
        self.connects = 1
        self.sink: Any = None
        self.known: dict[str, dict[str, Any]] = {}

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def lookup(self, domain: str) -> tuple[str, str] | None:
        for uuid, d in self.known.items():
            if domain in (uuid, d["name"]):
                return uuid, d["name"]
        return None

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return dict(self.known)


def make_monitor(tmp_path: Path, url: str, **kw: Any) -> tuple[InstanceMonitor, ReplaySource]:
    src = ReplaySource()
    settings = Settings(hostname="node1.test", libvirt_uri="test:///default", notify_url=url,
                        run_dir=tmp_path / "run", spool_dir=tmp_path / "spool",
                        backoff_base=0.05, backoff_max=0.2, **kw)
    mon = InstanceMonitor(settings, source=src)
    src.sink = mon.submit
    return mon, src


def test_masakari_vectors_replayed_through_the_pipeline_reach_the_receiver(
        tmp_path: Path) -> None:
    receiver = Receiver().start()
    mon, src = make_monitor(tmp_path, receiver.url, collapse_delay=0.05)
    mon.start()
    try:
        uuids = {}
        for vector, _expected in MASAKARI_VECTORS:
            uuid = str(uuidlib.uuid4())  # one domain per vector: nothing collapses
            uuids[uuid] = vector
            src.sink(ev(vector, uuid=uuid, name=f"vm-{uuid[:8]}"))
        wanted = {u: exp for u, (v, exp) in zip(uuids, MASAKARI_VECTORS, strict=True) if exp}
        notes = receiver.wait_for(len(wanted), timeout=10)
        time.sleep(0.3)
        got = {n["payload"]["instance_uuid"]: (n["payload"]["event"],
                                               n["payload"]["vir_domain_event"])
               for n in receiver.notes()}
        assert got == wanted
        assert len(receiver.notes()) == len(wanted) == 19
        assert all(n["hostname"] == "node1.test" and n["type"] == "VM" for n in notes)
    finally:
        mon.stop()
        receiver.stop()


def test_events_of_an_operation_herder_ordered_are_not_reported(tmp_path: Path) -> None:
    receiver = Receiver().start()
    mon, src = make_monitor(tmp_path, receiver.url, collapse_delay=0.05)
    mon.start()
    try:
        ordered.mark(tmp_path / "run", "vm1", "migrate", 30)
        src.sink(ev((0, 5, 1), uuid="11111111-1111-1111-1111-111111111111", name="vm1"))
        src.sink(ev((0, 5, 1), uuid="22222222-2222-2222-2222-222222222222", name="vm2"))
        notes = receiver.wait_for(1, timeout=5)
        time.sleep(0.5)
        assert [n["payload"]["instance_uuid"] for n in receiver.notes()] == \
            ["22222222-2222-2222-2222-222222222222"]
        assert notes
        mon.write_state(force=True)
        state = json.loads((tmp_path / "run" / "instmon.json").read_text())
        rec = state["domains"]["11111111-1111-1111-1111-111111111111"]
        assert rec["last_event"]["verdict"] == "ordered:migrate"
        assert "last_failure" not in rec
        assert state["counts"]["ordered"] == 1
    finally:
        mon.stop()
        receiver.stop()


def test_the_control_socket_injects_through_the_filter_and_refuses_nonsense(
        tmp_path: Path) -> None:
    receiver = Receiver().start()
    mon, src = make_monitor(tmp_path, receiver.url, collapse_delay=0.05)
    uuid = "33333333-3333-3333-3333-333333333333"
    src.known[uuid] = {"name": "vm3", "active": True}
    mon.start()
    try:
        deadline = time.monotonic() + 5
        while not (tmp_path / "run" / "instmon.sock").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        answer = control(tmp_path / "run", {"inject": "IO_ERROR.REPORT", "domain": "vm3"})
        assert answer == {"ok": True, "key": "IO_ERROR.REPORT", "uuid": uuid, "name": "vm3"}
        [note] = receiver.wait_for(1, timeout=5)
        assert note["payload"]["vir_domain_event"] == "IO_ERROR_REPORT"
        bad = control(tmp_path / "run", {"inject": "IO_ERROR.SMOKE", "domain": "vm3"})
        assert not bad["ok"] and "IO_ERROR" in bad["error"]
        missing = control(tmp_path / "run", {"inject": "REBOOT", "domain": "nope"})
        assert not missing["ok"] and "no domain" in missing["error"]
        dropped = control(tmp_path / "run", {"inject": "LIFECYCLE.CRASHED.PANICKED",
                                             "domain": uuid})
        assert dropped["ok"]  # accepted, but the masakari preset drops it
        time.sleep(0.4)
        assert len(receiver.notes()) == 1
    finally:
        mon.stop()
        receiver.stop()
