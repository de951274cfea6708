"""maintd's node-failure decisions (herder.maintd.nodefail): who is suspect, the candidates'
majority, the fence's confirmation, and where the instances go (pure; docs/ha.md)."""

from __future__ import annotations

from herder.maintd import nodefail
from herder.maintd.rounds import Instance, Node

NODES = [Node("node1", "u1", master=True, group="g"), Node("node2", "u2", group="g"),
         Node("node3", "u3", group="g"), Node("node4", "u4", group="g"),
         Node("node5", "u5", group="g", offline=True),
         Node("node6", "u6", group="g", vm_capable=False)]


def test_only_online_vm_capable_non_master_nodes_past_the_failure_time_are_suspect() -> None:
    ages = {"node1": 99.0, "node2": 12.5, "node3": 11.9, "node4": 30.0, "node5": 99.0,
            "node6": 99.0}
    found = nodefail.suspects(NODES, ages, 12.0, busy={"u4"})
    assert [n.name for n in found] == ["node2"]


def answer(votes: dict[str, object], candidates: tuple[str, ...] = ("node1", "node2",
                                                                       "node3"),
           suspect: str = "node4") -> dict:
    return {"node": suspect, "master": "node1", "candidates": list(candidates),
            "votes": votes}


def test_a_majority_of_candidates_that_cannot_reach_the_node_fails_it() -> None:
    # node4 (no candidate) is suspect; the master and node2 cannot reach it: 2 of 3
    verdict = nodefail.decide(answer({
        "node2": {"reachable": False, "asked_age": None},
        "node3": {"reachable": True, "asked_age": None}}), 6.0)
    assert verdict.failed and verdict.cannot_reach == ["node1", "node2"]
    assert verdict.why == "2 of 3 other master candidates cannot reach it (node1, node2)"


def test_a_candidate_is_judged_by_the_other_candidates() -> None:
    # node3, a candidate, is suspect: the master and node2 decide (2 of 2) ...
    verdict = nodefail.decide(answer({"node2": {"reachable": False, "asked_age": None}},
                                     suspect="node3"), 6.0)
    assert verdict.failed and verdict.candidates == ["node1", "node2"]
    # ... one of the two is no majority
    verdict = nodefail.decide(answer({"node2": {"reachable": True, "asked_age": None}},
                                     suspect="node3"), 6.0)
    assert not verdict.failed
    # with one other candidate left (the master), the master decides alone
    verdict = nodefail.decide(answer({}, ("node1", "node2"), suspect="node2"), 6.0)
    assert verdict.failed and verdict.why == ("1 of 1 other master candidates cannot reach "
                                              "it (node1)")


def test_a_partitioned_master_has_no_majority() -> None:
    # the candidates do not answer the master: their silence is no vote
    verdict = nodefail.decide(answer({"node2": {"error": "no answer"},
                                      "node3": {"error": "no answer"}}), 6.0)
    assert not verdict.failed and verdict.cannot_reach == ["node1"]


def test_a_node_that_renewed_with_a_candidate_lately_is_not_failed() -> None:
    # node2 cannot open a connection to it, but it asked node2 for its lease 3 s ago (an
    # asymmetric cut): node2's vote does not count
    verdict = nodefail.decide(answer({
        "node2": {"reachable": False, "asked_age": 3.0},
        "node3": {"reachable": False, "asked_age": None}}, ("node1", "node2", "node3",
                                                            "node4", "node5")), 6.0)
    assert not verdict.failed and verdict.cannot_reach == ["node1", "node3"]
    assert verdict.last_asked == 3.0


def test_the_fence_is_confirmed_only_by_power_status_saying_unpowered() -> None:
    off = [[[0, "node3"], [0, None]]]
    assert nodefail.fence_confirmed([off, [[[0, "node3"], [0, {"powered": False}]]]])[0]
    for status in ([[[0, "node3"], [0, {"powered": True}]]],
                   [[[0, "node3"], [2, None]]], [[[0, "node3"], [0, "garbage"]]]):
        assert not nodefail.fence_confirmed([off, status])[0], status
    assert not nodefail.fence_confirmed([[[[0, "node3"], [2, None]]],
                                         [[[0, "node3"], [0, {"powered": False}]]]])[0]
    assert not nodefail.fence_confirmed(None)[0]


def inst(name: str, template: str = "sharedfile", memory: int = 512, priority: int = 0, *,
         snodes: tuple[str, ...] = (), admin_state: str = "up",
         auto_recover: bool = True) -> Instance:
    return Instance(name, "node2", snodes=snodes, disk_template=template, memory=memory,
                    ha_priority=priority, admin_state=admin_state, auto_recover=auto_recover)


def test_recovery_in_priority_order_within_the_memory_left() -> None:
    instances = [inst("low", priority=-5), inst("high", priority=50, memory=1024),
                 inst("mid", memory=1024), inst("local", "plain"), inst("file", "file"),
                 inst("down", admin_state="down"), inst("optout", auto_recover=False),
                 inst("mirror", "drbd", snodes=("node4",), memory=256),
                 Instance("elsewhere", "node3", disk_template="sharedfile")]
    free = {"node1": 1024, "node3": 1536, "node4": 512, "node5": 9999, "node6": 9999}
    plan = nodefail.plan_recovery("node2", NODES, instances, free)
    assert [(i.name, t) for i, t in plan.moves] == [
        ("high", "node3"), ("mid", "node1"), ("mirror", "node4"), ("low", "node3")]
    assert plan.lost == ["file", "local"]
    assert plan.skipped == ["down", "optout"]
    assert plan.unfit == []
    tight = nodefail.plan_recovery("node2", NODES, instances, {"node1": 600, "node3": 600,
                                                                "node4": 100})
    assert [(i.name, t) for i, t in tight.moves] == [("low", "node3")]  # ties: by name
    assert tight.unfit == ["high", "mid", "mirror"]  # reported, not forced


def test_job_priority_follows_ha_priority_within_ganetis_range() -> None:
    assert [nodefail.job_priority(p) for p in (100, 5, 0, -7, -100)] == [-20, -5, 0, 7, 19]
