"""bench/etcd_ttl_soak.py's counting: which masterd lines are lease events, which changes of the
etcd master key are elections, how long the RAPI was away and when the run is stable. The bench
itself (an hour on a simulated cluster) stays out of the suite; what it concludes is checked
here on recorded lines."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from bench.etcd_ttl_soak import (
    KeySample,
    MasterdEvent,
    elections,
    keyless_seconds,
    parse_masterd_line,
    parse_watcher_line,
    rapi_gaps,
    verdict,
)

from herder.masterd import etcd_master, lease

N1, N2 = "node1.sim.herder.test", "node2.sim.herder.test"
STAMP = "2026-11-29 13:40:01,123"


@pytest.mark.parametrize(("line", "kind"), [
    (f"{STAMP} herder.masterd.lease INFO master lease: {N2} is master (epoch 41)", "elected"),
    (f"{STAMP} herder.masterd INFO master on etcd: {N2} took over at epoch 41 (lease epoch 41); "
     "jobs {}", "took-over"),
    (f"{STAMP} herder.masterd.lease WARNING master lease: {N1} lost mastership (epoch 7): "
     "could not renew the lease within its TTL (2 s)", "lost"),
    (f"{STAMP} herder.masterd INFO master on etcd: {N1} deposed: maintd stopped", "deposed"),
    (f"{STAMP} herder.masterd INFO master on etcd: {N1} is a standby candidate (lease ttl 2 s)",
     "standby"),
    (f"{STAMP} herder.masterd INFO master on etcd: {N1}: standby, not campaigning: no",
     "standby"),
    (f"{STAMP} herder.masterd.lease WARNING master lease ({N1}): timed out", "lease-error"),
])
def test_masterd_lease_lines_are_recognised(line: str, kind: str) -> None:
    event = parse_masterd_line(N1, line)
    assert event is not None and event.kind == kind and event.stamp == STAMP
    assert event.node == N1 and event.text == line


def test_other_lines_are_not_events() -> None:
    assert parse_masterd_line(N1, f"{STAMP} herder.masterd INFO job 12 done") is None
    assert parse_masterd_line(N1, "") is None


def test_the_patterns_match_what_masterd_logs(caplog: pytest.LogCaptureFixture) -> None:
    """The lines come from herder's own format strings: a reworded message fails here, not
    silently in an hour-long run that counts nothing."""
    caplog.set_level(logging.INFO)
    lease.log.info("master lease: %s is master (epoch %d)", N2, 41)
    etcd_master.log.info("master on etcd: %s is a standby candidate (lease ttl %d s)", N1, 2)
    kinds = [e.kind for r in caplog.records if (e := parse_masterd_line(N1, r.getMessage()))]
    assert kinds == ["elected", "standby"]
    source = (lease.__file__, etcd_master.__file__)
    text = "".join(Path(path).read_text() for path in source)
    for needle in ('"master lease: %s is master (epoch %d)"', "took over at epoch %d",
                   "lost mastership (epoch %d): %s", "master on etcd: %s deposed: %s",
                   "is a standby candidate (lease ttl %d s)", '"master lease (%s): %s"'):
        assert needle in text, needle


def test_watcher_lines() -> None:
    sample = parse_watcher_line('{"t": 5.5, "holder": "n1", "revision": 9, "lease": 3, '
                                '"error": null}')
    assert sample == KeySample(5.5, "n1", 9, None)
    assert parse_watcher_line("Traceback (most recent call last):") is None
    assert parse_watcher_line('{"t": 1}') is None


def key(t: float, holder: str | None, revision: int, error: str | None = None) -> KeySample:
    return KeySample(t, holder, revision, error)


def test_each_new_epoch_is_one_election() -> None:
    samples = [key(0, N1, 10), key(1, N1, 10, "timed out"), key(2, None, 0), key(4, N1, 15),
               key(5, N2, 20), key(6, N1, 15)]  # a stale read of an old epoch is no election
    assert [(e.holder, e.revision) for e in elections(samples)] == [
        (N1, 10), (N1, 15), (N2, 20)]  # the same node elected again is an election


def test_keyless_spans() -> None:
    samples = [key(0, N1, 10), key(2, None, 0), key(3, None, 0, "x"), key(4.5, N2, 12),
               key(9, None, 0)]
    assert keyless_seconds(samples, end=10) == [(2, 2.5), (9, 1)]
    assert keyless_seconds([key(0, N1, 1)], end=5) == []


def test_rapi_gaps() -> None:
    polls = [(0.0, True), (1.0, False), (2.0, False), (3.5, True), (4.0, True), (5.0, False)]
    assert rapi_gaps(polls) == [(1.0, 2.5), (5.0, 0.0)]
    assert rapi_gaps([]) == []


def test_a_quiet_hour_is_stable() -> None:
    figures = verdict([key(0, N1, 10)], [], [(0, True), (1, True)], [3.0, 9.5, 4.0], end=3600)
    assert figures.stable and figures.elections == 1 and figures.spurious == 0
    assert figures.longest_gap == 0 and figures.load == (3.0, 9.5) and figures.notes == []


def test_a_second_election_is_spurious() -> None:
    lost = MasterdEvent(N1, "lost", STAMP, "master lease: n1 lost mastership (epoch 10): ttl")
    figures = verdict([key(0, N1, 10), key(100, None, 0), key(103, N2, 11)], [lost],
                      [(99, True), (100, False), (101, False), (104, True)], [20.0], end=3600)
    assert not figures.stable
    assert (figures.elections, figures.spurious, figures.masters_lost) == (2, 1, 1)
    assert figures.keyless == 3 and figures.longest_gap == 4 and figures.failed_polls == 2
    assert any("epoch 11" in note for note in figures.notes)


def test_a_lost_lease_without_a_new_key_is_not_stable() -> None:
    """The master lost its lease and the key went; the run ended before anyone won."""
    figures = verdict([key(0, N1, 10), key(50, None, 0)], [], [], [], end=60)
    assert figures.spurious == 0 and figures.keyless == 10 and not figures.stable
