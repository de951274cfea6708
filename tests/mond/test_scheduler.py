"""The adaptive scheduler, with an injected clock (no sleeping)."""

from __future__ import annotations

import pytest

from herder.mond.scheduler import Schedule


def run(schedule: Schedule, rounds: int, *, changed: bool, duration: float = 0.01) -> list[float]:
    now = 0.0
    intervals = []
    for _ in range(rounds):
        now = schedule.after_run(now, changed=changed, duration=duration)
        intervals.append(schedule.current)
    return intervals


def test_unchanging_data_drifts_to_the_maximum() -> None:
    schedule = Schedule(interval=5.0, min_interval=2.0, max_interval=60.0)
    intervals = run(schedule, 12, changed=False)
    assert intervals[0] == 7.5
    assert intervals == sorted(intervals)
    assert intervals[-1] == 60.0
    assert run(schedule, 3, changed=False) == [60.0, 60.0, 60.0]  # and stays there


def test_data_changing_every_run_stays_at_the_minimum() -> None:
    schedule = Schedule(interval=5.0, min_interval=2.0, max_interval=60.0)
    intervals = run(schedule, 10, changed=True)
    assert intervals[:2] == [2.5, 2.0]
    assert set(intervals[1:]) == {2.0}


def test_change_after_a_quiet_period_speeds_up_again() -> None:
    schedule = Schedule(interval=5.0, min_interval=1.0, max_interval=40.0)
    run(schedule, 10, changed=False)
    assert schedule.current == 40.0
    assert run(schedule, 6, changed=True) == [20.0, 10.0, 5.0, 2.5, 1.25, 1.0]


def test_next_due_follows_the_injected_clock() -> None:
    schedule = Schedule(interval=10.0, min_interval=5.0, max_interval=20.0)
    assert schedule.after_run(1000.0, changed=True, duration=0.1) == 1005.0
    assert schedule.after_run(1005.0, changed=False, duration=0.1) == 1005.0 + 7.5


def test_slow_collectors_are_not_run_back_to_back() -> None:
    schedule = Schedule(interval=5.0, min_interval=1.0, max_interval=60.0)
    assert run(schedule, 5, changed=True, duration=3.0)[-1] == 12.0  # 4x its run time
    assert run(schedule, 1, changed=True, duration=100.0) == [60.0]  # but never past max


def test_non_adaptive_keeps_its_interval() -> None:
    schedule = Schedule(interval=30.0, min_interval=15.0, max_interval=120.0, adaptive=False)
    assert set(run(schedule, 5, changed=False)) == {30.0}
    assert set(run(schedule, 5, changed=True)) == {30.0}


def test_retune_keeps_current_within_new_bounds() -> None:
    schedule = Schedule(interval=5.0, min_interval=2.0, max_interval=60.0)
    run(schedule, 12, changed=False)
    schedule.retune(5.0, 2.0, 20.0, True)
    assert schedule.current == 20.0


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        Schedule(interval=1.0, min_interval=2.0, max_interval=3.0)
