"""The lock stress run (tests/lockstress.py), short: a few seconds of 64 threads over a
LockManager must end without deadlock, errors, idle threads, or a wait beyond its bound. The
long form (30 s) is a benchmark: `python bench/locks.py --stress 30`.

HERDER_LOCK_STRESS_SECONDS sets the duration (default 4).
"""

from __future__ import annotations

import os

import pytest

from tests.lockstress import problems, report, run_stress

DURATION = float(os.environ.get("HERDER_LOCK_STRESS_SECONDS", "4"))


@pytest.mark.slow
def test_stress_no_deadlock_and_bounded_waits() -> None:
    result = run_stress(DURATION)
    print("\n" + report(result))
    found = problems(result)
    assert not found, "\n".join(found)
