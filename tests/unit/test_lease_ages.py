"""masterd's lease ages (masterd.leases.Leases): what maintd's node-failure detection reads."""

from __future__ import annotations

from herder.masterd.leases import Leases


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_new_masterd_suspects_nobody_at_first() -> None:
    clock = Clock()
    leases = Leases(lambda: [b"k"], clock=clock)
    clock.now += 3
    leases.renewed("a")
    clock.now += 2
    assert leases.ages(["a", "b"]) == {"a": 2.0, "b": 0.0}
    clock.now += 20
    assert leases.ages(["a", "b"]) == {"a": 22.0, "b": 20.0}


def test_a_node_added_later_counts_from_when_masterd_first_saw_it() -> None:
    """A node added (or merged in) an hour after masterd started has had no chance to send a
    heartbeat yet: its age starts at 0, not at masterd's uptime."""
    clock = Clock()
    leases = Leases(lambda: [b"k"], clock=clock)
    assert leases.ages(["old"]) == {"old": 0.0}  # maintd polls from the start
    clock.now += 3600
    assert leases.ages(["old"]) == {"old": 3600.0}
    assert leases.ages(["old", "new"])["new"] == 0.0
    clock.now += 5
    assert leases.ages(["old", "new"]) == {"old": 3605.0, "new": 5.0}
    leases.renewed("new")
    clock.now += 1
    assert leases.ages(["new"]) == {"new": 1.0}


def test_a_node_removed_and_added_again_starts_afresh() -> None:
    clock = Clock()
    leases = Leases(lambda: [b"k"], clock=clock)
    clock.now += 10
    leases.ages(["x"])
    clock.now += 50
    assert leases.ages([]) == {}  # x left the config
    clock.now += 5
    assert leases.ages(["x"]) == {"x": 0.0}


def test_a_takeover_counts_every_node_from_the_takeover() -> None:
    """An etcd standby elected after an hour (it heard no heartbeat as a standby): every node,
    the dead old master among them, is unknown at the takeover and suspect only once it missed
    a whole failure time under the new master; never dead at once, never forgotten."""
    clock = Clock()
    leases = Leases(lambda: [b"k"], clock=clock)
    clock.now += 3600  # a standby for an hour
    leases.ages(["old-master"])  # asked about before (a first_seen record): no head start
    clock.now += 10
    leases.start_afresh()
    assert leases.ages(["old-master", "n2"]) == {"old-master": 0.0, "n2": 0.0}
    clock.now += 13
    leases.renewed("n2")
    clock.now += 1
    assert leases.ages(["old-master", "n2"]) == {"old-master": 14.0, "n2": 1.0}
