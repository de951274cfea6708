from __future__ import annotations

import pytest

from herder.maintd import harep

P = harep.PREFIX


def test_policy_of_one_object() -> None:
    assert harep.policy_of([]) == harep.DISABLED
    assert harep.policy_of([P + "failover", P + "migrate"]) == harep.Policy("enabled", "migrate")
    assert harep.policy_of([P + "reinstall", P + "suspend"]).kind == "suspended"
    assert harep.policy_of([P + "reinstall", P + "suspend:200"], now=100) == harep.Policy(
        "suspended", until=200)
    assert harep.policy_of([P + "reinstall", P + "suspend:50"], now=100) == harep.Policy(
        "enabled", "reinstall")
    assert harep.policy_of([P + "bogus", "other", P + "suspend:x"]) == harep.DISABLED


def test_resolve_instance_then_group_then_cluster() -> None:
    assert harep.resolve([], [], [P + "failover"]) == harep.Policy("enabled", "failover")
    assert harep.resolve([], [P + "fix-storage"], [P + "failover"]).max_type == "fix-storage"
    assert harep.resolve([P + "reinstall"], [P + "fix-storage"], []).max_type == "reinstall"
    assert harep.resolve([P + "suspend"], [P + "reinstall"], []).kind == "suspended"


@pytest.mark.parametrize(("template", "p", "s", "want"), [
    ("drbd", True, True, "reinstall"), ("drbd", True, False, "failover"),
    ("drbd", False, True, "fix-storage"), ("drbd", False, False, None),
    ("plain", True, False, "reinstall"), ("plain", False, False, None),
    ("sharedfile", True, False, None),
])
def test_detect(template: str, p: bool, s: bool, want: str | None) -> None:
    offline = {"a": p, "b": s}
    snodes = ("b",) if template == "drbd" else ()
    assert harep.detect(template, "a", snodes, offline) == want


def test_allowed() -> None:
    pol = harep.Policy("enabled", "failover")
    assert harep.allowed(pol, "fix-storage") and harep.allowed(pol, "failover")
    assert not harep.allowed(pol, "reinstall")
    assert not harep.allowed(harep.Policy("suspended"), "fix-storage")


def test_repair_ops() -> None:
    (op,) = harep.repair_ops("i1", "fix-storage", "node4")
    assert op["mode"] == "replace_new_secondary" and op["remote_node"] == "node4"
    assert harep.repair_ops("i1", "failover")[0]["OP_ID"] == "OP_INSTANCE_FAILOVER"
    assert harep.repair_ops("i1", "reinstall")[0]["OP_ID"] == "OP_INSTANCE_REINSTALL"
    with pytest.raises(ValueError):
        harep.repair_ops("i1", "nope")


def test_state_tags_round_trip_and_state() -> None:
    pend = harep.pending_tag("failover", "u1", 100, [5, 6])
    assert pend == P + "pending:failover:u1:100:5+6"
    parsed = harep.parse_state_tag(pend)
    assert parsed is not None and parsed.jobs == (5, 6) and parsed.kind == "pending"
    ok = harep.result_tag("failover", "u1", 110, "success", [5, 6])
    fail = harep.result_tag("fix-storage", "u0", 90, "failure", [3])
    assert harep.repair_state([]) == ("healthy", None)
    assert harep.repair_state([pend])[0] == "pending"
    assert harep.repair_state([pend, ok])[0] == "healthy"
    assert harep.repair_state([fail, ok])[0] == "failed"
    enoperm = harep.result_tag("reinstall", "u2", 1, "enoperm", [])
    assert harep.repair_state([enoperm])[0] == "healthy"
    assert harep.parse_state_tag(P + "pending:bogus:u:1:2") is None
    assert harep.parse_state_tag(P + "result:failover:u:x:success:") is None
