"""The chaos checker on hand-written histories: a sound one passes, and each history that breaks
one property is caught as that property (and only it)."""

from __future__ import annotations

import msgspec

from tests.chaos import checker
from tests.chaos.history import (
    Beat,
    Final,
    GuestState,
    History,
    NemesisEvent,
    Operation,
    Volume,
)

N1, N2 = "node1.sim.herder.test", "node2.sim.herder.test"
A, B = "boot-a", "boot-b"
DISK = "/srv/herder/shared-file-storage/web1/disk0"


def sound() -> History:
    """web1 ran as boot A on node1 (records 0-2, A's beats seen on both nodes: it migrated),
    was powered off with node2, came back as boot B (records 3-4; B wrote 5 unacknowledged);
    two jobs, both final; one disk, owned."""
    beats = [Beat(A, 0, N1), Beat(A, 1, N1), Beat(A, 2, N2), Beat(B, 3, N1), Beat(B, 4, N1)]
    records = [(A, 0), (A, 1), (A, 2), (B, 3), (B, 4), (B, 5)]
    return History(
        seed=42,
        operations=[Operation("migrate", "web1", 100.0, 110.0, 7, status="success"),
                    Operation("failover", "web1", 120.0, 125.0, 8, status="error"),
                    Operation("tags", "web1", 121.0, 121.5, refused="connection refused")],
        events=[NemesisEvent("power-off", N2, 115.0), NemesisEvent("power-on", N2, 130.0)],
        final=Final(jobs={7: "success", 8: "error"}, verify=[],
                    guests=[GuestState("web1", beats, records, [N1])],
                    volumes=[Volume("", DISK)], owned=[Volume("", DISK)]))


def props(history: History) -> list[str]:
    return sorted({v.prop for v in checker.check(history)})


def with_guest(history: History, **changes: object) -> History:
    (state,) = history.final.guests
    final = msgspec.structs.replace(history.final,
                                    guests=[msgspec.structs.replace(state, **changes)])
    return msgspec.structs.replace(history, final=final)


def test_a_sound_history_has_no_violation() -> None:
    assert checker.check(sound()) == []


def test_an_acknowledged_job_still_running_is_caught() -> None:
    history = sound()
    final = msgspec.structs.replace(history.final, jobs={7: "success", 8: "running"})
    found = checker.check(msgspec.structs.replace(history, final=final))
    assert [v.prop for v in found] == ["final"]
    assert "job 8 (failover web1) is running" in found[0].detail


def test_an_acknowledged_job_missing_from_the_queue_is_caught() -> None:
    history = sound()
    final = msgspec.structs.replace(history.final, jobs={7: "success"})
    assert props(msgspec.structs.replace(history, final=final)) == ["final"]


def test_an_error_of_cluster_verify_is_caught() -> None:
    history = sound()
    final = msgspec.structs.replace(
        history.final, verify=[f"web1: instance is running on {N2}, not its primary"])
    assert props(msgspec.structs.replace(history, final=final)) == ["verify"]


def test_two_boots_acknowledging_alternately_are_two_writers() -> None:
    """B acknowledged record 2 while A went on to 3: both ran at once (the disk, written last
    by A at 3, would look like one writer per run apart from the misplaced record)."""
    beats = [Beat(A, 0, N1), Beat(A, 1, N1), Beat(B, 2, N2), Beat(A, 3, N1)]
    records = [(A, 0), (A, 1), (B, 2), (A, 3)]
    history = with_guest(sound(), beats=beats, records=records)
    found = checker.check(history)
    assert {v.prop for v in found} == {"two-writers"}
    assert any("interleaved" in v.detail for v in found)


def test_one_record_acknowledged_by_two_boots_is_two_writers() -> None:
    beats = [Beat(A, 0, N1), Beat(A, 1, N1), Beat(B, 1, N2)]
    records = [(A, 0), (B, 1)]
    found = checker.check(with_guest(sound(), beats=beats, records=records))
    assert "two-writers" in {v.prop for v in found}
    assert any("record 1 acknowledged by boots boot-a and boot-b" in v.detail for v in found)


def test_a_disk_whose_records_alternate_between_boots_is_two_writers() -> None:
    """Unacknowledged writes only (the heartbeats lost), yet the disk shows A, B, A."""
    records = [(A, 0), (B, 1), (A, 2)]
    found = checker.check(with_guest(sound(), beats=[], records=records))
    assert [v.prop for v in found] == ["two-writers"]
    assert "alternate" in found[0].detail


def test_an_acknowledged_record_missing_from_the_disk_is_a_lost_write() -> None:
    history = with_guest(sound(), records=[(A, 0), (A, 1), (A, 2), (B, 3)])
    found = checker.check(history)
    assert [v.prop for v in found] == ["lost-write"]
    assert "record 4 acknowledged by boot boot-b" in found[0].detail


def test_an_acknowledged_record_overwritten_by_a_later_boot_is_a_lost_write() -> None:
    """A's record 2 was acknowledged, then B (starting from a stale counter) wrote over it."""
    beats = [Beat(A, 0, N1), Beat(A, 1, N1), Beat(A, 2, N1), Beat(B, 3, N2)]
    records = [(A, 0), (A, 1), (B, 2), (B, 3)]
    found = checker.check(with_guest(sound(), beats=beats, records=records))
    assert [v.prop for v in found] == ["lost-write"]
    assert "record 2 acknowledged by boot boot-a" in found[0].detail


def test_an_instance_running_on_two_nodes_is_caught() -> None:
    assert props(with_guest(sound(), running_on=[N1, N2])) == ["runs-twice"]


def test_a_volume_of_no_instance_is_an_orphan() -> None:
    history = sound()
    left = Volume(N2, "/srv/herder/file-storage/gone1/disk0")
    final = msgspec.structs.replace(history.final, volumes=[*history.final.volumes, left])
    found = checker.check(msgspec.structs.replace(history, final=final))
    assert [v.prop for v in found] == ["orphan"]
    assert found[0].detail == f"{N2}: {left.name} belongs to no instance"


def test_a_volume_on_another_node_than_its_instance_is_an_orphan() -> None:
    """A file disk left on the source of a move: same path, the wrong node."""
    history = sound()
    owned = Volume(N1, "/srv/herder/file-storage/f1/disk0")
    final = msgspec.structs.replace(history.final, owned=[*history.final.owned, owned],
                                    volumes=[*history.final.volumes, owned,
                                             Volume(N2, owned.name)])
    assert props(msgspec.structs.replace(history, final=final)) == ["orphan"]


def test_the_report_names_the_seed_and_the_history_in_time_order() -> None:
    history = with_guest(sound(), running_on=[N1, N2])
    text = checker.report(history, checker.check(history))
    lines = text.splitlines()
    assert lines[0].startswith("chaos seed 42: 3 operations, 2 nemesis events")
    assert "VIOLATION runs-twice: web1 runs on" in text
    entries = lines[lines.index("history:") + 1:]
    assert [e.partition(" s) ")[2].replace(":", "").split()[1:3] for e in entries] == [
        ["migrate", "web1"], ["power-off", N2], ["failover", "web1"], ["tags", "web1"],
        ["power-on", N2]]
    assert "00:01:40 (+   0.0 s) op migrate web1: job 7 success after 10.0 s" in entries[0]
    assert "refused: connection refused" in entries[3]
