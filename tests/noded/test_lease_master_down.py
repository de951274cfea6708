"""noded's lease keeper while the master does not answer (noded.fence): the rounds must stay
shorter than the lease. Asked one after the other, a dead master's timeout and then a dead
candidate's (the master is one) made a round last about twice CALL_TIMEOUT, longer than the
lease's slack (LEASE_TIME - RENEW_PERIOD): in the simulated cluster every node's lease ran out
between two rounds and destroyed its guests whenever the master died or was cut off
("lease: not renewed within 6 s" right after "renewed by 2 of 3 master candidates"). Now a
round after a missed heartbeat asks the master and the candidates at once, and a majority of
candidates renews without waiting for a dead one.

The dead master and the dead candidate here are calls that hang until the test ends (a
powered-off host answers nothing); the candidates are named in the node's ssconf."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from herder.noded import fence

ME, ALIVE, DEAD = "node2.example.com", "node3.example.com", "node1.example.com"
IPS = {ME: "192.0.2.2", ALIVE: "192.0.2.3", DEAD: "192.0.2.1"}
DEADLINE = 30.0  # a round that waits for a hanging call never returns before the test ends


class Keeper(fence.LeaseKeeper):
    """The lease keeper with the network replaced: the master's answers in order (None: no
    answer; "hang": it never answers), the candidates by IP (True answers, False refuses,
    None hangs)."""

    def __init__(self, data_dir: Path, hang: threading.Event) -> None:
        daemon = SimpleNamespace(hv=SimpleNamespace(list_domains=dict), data_dir=data_dir,
                                 node_params=lambda: {"watchdog_device": ""})
        super().__init__(daemon)  # type: ignore[arg-type]
        self.hang = hang
        self.master_answers: list[str | None] = []
        self.candidates: dict[str, bool | None] = {}
        self.master_calls = 0

    @property
    def name(self) -> str:
        return ME

    @property
    def data_dir(self) -> Path:
        return Path(self.daemon.data_dir)

    def participates(self) -> bool:
        return True

    def _ask_master(self) -> str | None:
        self.master_calls += 1
        answer = self.master_answers.pop(0)
        if answer == "hang":
            self.hang.wait()
            return None
        return answer

    def _ask_candidate(self, ip: str) -> bool:
        answer = self.candidates[ip]
        if answer is None:
            self.hang.wait()
            return False
        return answer


@pytest.fixture
def lease(tmp_path: Path) -> Iterator[Keeper]:
    (tmp_path / "ssconf_master_candidates").write_text(f"{DEAD}\n{ME}\n{ALIVE}\n")
    (tmp_path / "ssconf_node_primary_ips").write_text(
        "".join(f"{name} {ip}\n" for name, ip in IPS.items()))
    hang = threading.Event()
    try:
        yield Keeper(tmp_path, hang)
    finally:
        hang.set()  # the hanging calls end


def round_of(lease: Keeper) -> None:
    """One renewal; it must not wait for a call that hangs."""
    thread = threading.Thread(target=lease.renew_once, daemon=True)
    thread.start()
    thread.join(DEADLINE)
    assert not thread.is_alive(), "the round waited for a call that never answers"


def test_a_dead_master_and_a_dead_candidate_do_not_hold_up_a_round(lease: Keeper) -> None:
    lease.master_answers = ["renewed by the master", None, "hang", "hang"]
    lease.candidates = {IPS[DEAD]: None, IPS[ALIVE]: True}
    round_of(lease)
    assert lease.holding and lease.last_renewal == "renewed by the master"
    # the master dies: no answer, then the candidates (this node and node3 of three)
    round_of(lease)
    assert lease.holding and lease.last_renewal == "renewed by 2 of 3 master candidates"
    assert lease.master_missed
    # from now on the master and the candidates are asked at once: the master hangs, the
    # dead candidate hangs, and still the round renews
    for _ in range(2):
        round_of(lease)
        assert lease.holding and not lease.fenced
        assert lease.last_renewal == "renewed by 2 of 3 master candidates"
    assert lease.master_calls == 4  # asked in every round


def test_the_master_back_is_asked_alone_again(lease: Keeper) -> None:
    lease.master_answers = [None, "renewed by the master", "renewed by the master"]
    lease.candidates = {IPS[DEAD]: True, IPS[ALIVE]: True}
    round_of(lease)
    assert lease.master_missed and lease.last_renewal == "renewed by 2 of 3 master candidates"
    round_of(lease)  # both at once: either renewal holds the lease
    assert lease.holding
    # the master answered: the next round asks only it
    lease.candidates = {IPS[DEAD]: False, IPS[ALIVE]: False}
    round_of(lease)
    assert not lease.master_missed and lease.last_renewal == "renewed by the master"


def test_the_masters_refusal_is_its_word(lease: Keeper) -> None:
    """Asked at once with the candidates (which renew nothing here), a master that answers
    has the last word: this node is offline, it stands down."""
    lease.master_answers = [None, fence.OFFLINE_ANSWER]
    lease.candidates = {IPS[DEAD]: False, IPS[ALIVE]: False}
    round_of(lease)
    assert not lease.holding
    round_of(lease)
    assert lease.last_renewal == fence.OFFLINE_ANSWER and not lease.holding


def test_no_majority_is_no_renewal(lease: Keeper) -> None:
    lease.master_answers = [None, None]
    lease.candidates = {IPS[DEAD]: False, IPS[ALIVE]: False}
    round_of(lease)
    round_of(lease)
    assert not lease.holding and lease.last_renewal == ""
