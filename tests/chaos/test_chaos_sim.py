"""The chaos test's short form (issue 35 item 17): on one simulated cluster of three nodes with
real guests, two driver workers run jobs (create, migrate, failover, move, modify, remove,
tags) while the nemesis injects a fixed small number of faults (kill -9 of a daemon, a
power-off through the BMC, a network cut, a full file storage), chosen at random from the
printed seed (`CHAOS_SEED` repeats one). Then every node comes back and the checker's
properties must hold (tests/chaos/checker.py); a failure prints the seed and the history.
The long form is `bench/chaos.py --minutes N [--seed S]`.

The nodes are Debian 12 hosts (`hosts="debian"`, issue 34: systemd, Debian's libvirt, herder
from the wheel; docs/compat.md N5a). `kill` kills a unit's main PID as an operator's host sees
it (`systemctl show -p MainPID`) and waits for systemd's `Restart=` to bring the daemon back:
every kill must have been followed by a restart. `fill` fills the node's file storage, a file
system of its own there too (an ext4 image of the test bed's, bound onto
/srv/herder/file-storage), so a full file storage never fills the machine's disk."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from herder.sim import cluster
from tests import simaddresses
from tests.chaos import checker, nemesis, run
from tests.simhelpers import running_sim

pytestmark = [pytest.mark.slow, pytest.mark.guests]

# two faults end the run (45-80 s with the pauses); `seconds` only bounds it
SHORT = run.Limits(seconds=120, workers=2, operations=16, events=2, max_instances=3,
                   fault_pause=(2.0, 8.0), down_seconds=(5.0, 20.0), cut_seconds=(2.0, 20.0))


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.SimState]:
    pytest.importorskip("libvirt")
    yield from running_sim(tmp_path_factory.mktemp("chaos"), 3, guests="qemu", hosts="debian",
                           first_ip=simaddresses.first_ip("chaos"))


def test_jobs_under_faults_keep_every_property(sim: cluster.SimState) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or run.new_seed())
    history, violations = run.run(sim, seed, SHORT)
    text = checker.report(history, violations)
    print(text)
    assert not violations, text
    # the run did what it says: jobs acknowledged, the faults injected, guests that wrote
    assert any(op.job_id is not None for op in history.operations), text
    assert len([e for e in history.events if e.kind in ("kill", "power-off", "cut", "fill")]) \
        == SHORT.events, text
    assert any(state.beats for state in history.final.guests), text
    # systemd brought every killed daemon back (Restart= of its unit)
    assert not [e for e in history.events if e.kind == "kill"
                and nemesis.NOT_RESTARTED in e.detail], text
